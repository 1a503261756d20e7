"""vLLM's tokenizer (models/smollm2-135m-hf, written by tools/gguf_to_hf.py) against
kvstash's own BPE tokenizer (the GGUF's, via kvstash.ReferenceModel.tokenize) on the
demo's texts: every evaluation-split file the demo draws documents from, the three
system prompts with the chat template, and every question. Identical ids mean the
connector's keys (hashes of token ids) are the ones kvstash's runtime computes."""
import os

import kvstash
import pytest
from transformers import AutoTokenizer

from harness import EVAL_FILES, GGUF, MODEL, QUESTIONS, SYSTEM_PROMPTS


@pytest.fixture(scope="module")
def both():
    return AutoTokenizer.from_pretrained(MODEL), kvstash.ReferenceModel.load(GGUF, threads=1)


def test_demo_texts_tokenize_identically(both):
    hf, ours = both
    texts = [open(f, encoding="utf-8").read() for f in EVAL_FILES if os.path.exists(f)]
    texts += ["<|im_start|>system\n" + s + "<|im_end|>\n<|im_start|>user\nDocument:\n" for s in SYSTEM_PROMPTS]
    texts += ["\n\nQuestion: " + q + "<|im_end|>\n<|im_start|>assistant\n" for q in QUESTIONS]
    assert len(texts) >= 13 + 3 + 8
    total = 0
    for t in texts:
        a = hf.encode(t, add_special_tokens=False)
        b = list(ours.tokenize(t))
        assert a == b, f"tokenizers differ on {t[:50]!r}"
        total += len(a)
    assert total > 100000
