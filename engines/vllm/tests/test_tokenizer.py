"""vLLM's tokenizer (the converted model folder tools/gguf_to_hf.py wrote) against
kvstash's own BPE tokenizer (the GGUF's, via kvstash.ReferenceModel.tokenize) on the
demo's texts: every evaluation-split file the demo draws documents from, the three
system prompts with the chat template, and every question. Identical ids mean the
connector's keys (hashes of token ids) are the ones kvstash's runtime computes.
Per model: SmolLM2-135M (models/smollm2-135m-hf) and Qwen2.5-Coder-0.5B
(models/qwen2.5-coder-0.5b-hf; SKIPPED with the reason when it or its GGUF is absent)."""

import os

import kvstash
import pytest
from transformers import AutoTokenizer

from harness import (
    EVAL_FILES,
    GGUF,
    MODEL,
    QUESTIONS,
    QWEN2_GGUF,
    QWEN2_MODEL,
    SYSTEM_PROMPTS,
    qwen2_missing,
)


@pytest.fixture(scope="module", params=["smollm2", "qwen2"])
def both(request):
    if request.param == "qwen2":
        why = qwen2_missing()
        if why:
            pytest.skip(f"Qwen2.5-Coder-0.5B: {why}")
        return AutoTokenizer.from_pretrained(QWEN2_MODEL), kvstash.ReferenceModel.load(QWEN2_GGUF, threads=1)
    return AutoTokenizer.from_pretrained(MODEL), kvstash.ReferenceModel.load(GGUF, threads=1)


def test_demo_texts_tokenize_identically(both):
    hf, ours = both
    texts = [open(f, encoding="utf-8").read() for f in EVAL_FILES if os.path.exists(f)]
    texts += [
        "<|im_start|>system\n" + s + "<|im_end|>\n<|im_start|>user\nDocument:\n" for s in SYSTEM_PROMPTS
    ]
    texts += ["\n\nQuestion: " + q + "<|im_end|>\n<|im_start|>assistant\n" for q in QUESTIONS]
    assert len(texts) >= 13 + 3 + 8
    total = 0
    for t in texts:
        a = hf.encode(t, add_special_tokens=False)
        b = list(ours.tokenize(t))
        assert a == b, f"tokenizers differ on {t[:50]!r}"
        total += len(a)
    assert total > 100000
