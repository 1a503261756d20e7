#!/usr/bin/env python3
"""Convert a GGUF model of models/ into a Hugging Face model folder that vLLM loads, so
vLLM and kvstash's own runtime/predictor see the same weights. Two models are known:

  SmolLM2-135M-Instruct.Q4_1.gguf            -> models/smollm2-135m-hf (the default)
  qwen2.5-coder-0.5b-instruct-q4_k_m.gguf    -> models/qwen2.5-coder-0.5b-hf
                                                (scripts/fetch_qwen2.sh fetches the GGUF)

  .venv-vllm/bin/python tools/gguf_to_hf.py [--models models] [--gguf NAME] [--out DIR]
                                            [--dtype bfloat16|float32] [--check]

Recipe (docs/platform-notes.md "GGUF -> Hugging Face folder"): transformers
`from_pretrained(dir, gguf_file=...)` dequantises the GGUF's tensors (needs `accelerate`);
before `save_pretrained` the GGUF quantizer is dropped (`model.hf_quantizer = None`,
`config.quantization_config` deleted), else transformers refuses with "quantized with
GGUF and is not serializable".

Tokenizer, per model (the saved one must give the token ids of kvstash's BPE tokenizer,
which follows llama.cpp, because the connector's keys hash token ids):
- SmolLM2: transformers' GGUF conversion gives it a plain ByteLevel pre-tokenizer, while
  the model's own tokenizer (and llama.cpp's "smollm" pre-tokenizer) first isolates every
  \\p{N} character. The saved tokenizer gets the Digits(individual_digits=True) step back
  (same fix as tools/gen_runtime_goldens.py). Golden ids:
  tests/model/data/smollm2_tokenizer.json.
- Qwen2: transformers' conversion of `tokenizer.ggml.pre = qwen2` is already the qwen2
  split regex + ByteLevel, without a normalizer (no NFC, like llama.cpp); saved as is.
  Golden ids: tests/model/data/qwen2_coder_goldens.json (llama.cpp's ids of 8 texts and
  of 2 prompts, which kvstash's tokenizer also gives: tests/model/qwen2_test.cc).
`--check` compares an existing folder's tokenizer ids with the model's golden ids and exits
1 on a mismatch; a conversion runs the same check on the written folder before it takes its
name, so a tokenizer that fails it never lands in models/ (exit 1).

The weights are written in `--dtype` (default bfloat16: what vLLM computes in on CPU;
values dequantised in float32 are rounded once to bf16). Writes into a temporary folder
and renames it, so an interrupted run leaves no half folder. Exit 0 on success, 1 on a
failed check, 2 on bad arguments (an unknown GGUF name, a missing file).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DATA = os.path.join(ROOT, "tests", "model", "data")


def fix_pre_tokenizer(tok):
    """Restore SmolLM2's digit splitting on a transformers fast tokenizer (in place)."""
    from tokenizers import pre_tokenizers

    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    return tok


def smollm2_cases():
    """SmolLM2's golden (text, ids) pairs: kvstash's tokenizer on its test texts."""
    with open(os.path.join(DATA, "smollm2_tokenizer.json")) as f:
        return json.load(f)["cases"]


def qwen2_cases():
    """Qwen2.5-Coder's golden (text, ids) pairs: llama.cpp's ids of the tokenizer texts
    and of the greedy prompts (kvstash's tokenizer equals them: tests/model/qwen2_test.cc)."""
    with open(os.path.join(DATA, "qwen2_coder_goldens.json")) as f:
        g = json.load(f)
    return g["tokenizer_cases"] + [{"text": c["text"], "ids": c["prompt_ids"]} for c in g["greedy"]]


# GGUF file name -> default output folder, tokenizer fix (None: as converted), golden cases.
MODELS = {
    GGUF: {"out": "smollm2-135m-hf", "fix": fix_pre_tokenizer, "cases": smollm2_cases},
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": {
        "out": "qwen2.5-coder-0.5b-hf",
        "fix": None,
        "cases": qwen2_cases,
    },
}


def check_tokenizer(out_dir, cases):
    """Tokenise every golden text with the saved tokenizer; return the mismatch count."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    bad = 0
    for c in cases:
        ids = tok.encode(c["text"], add_special_tokens=False)
        if ids != c["ids"]:
            bad += 1
            print(f"tokenizer mismatch on {c['text'][:40]!r}: {ids[:8]} vs {c['ids'][:8]}", file=sys.stderr)
    print(f"tokenizer check: {len(cases) - bad}/{len(cases)} golden texts identical")
    return bad


def convert(models, gguf, out_dir, dtype_name, fix=None, cases=()):
    """Dequantise models/gguf with transformers and save it (and its tokenizer, after
    fix(tokenizer) when given) as a safetensors folder at out_dir, atomically. Returns the
    tokenizer mismatch count on `cases` (golden {"text", "ids"}); out_dir is written only
    when it is 0."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype_name]
    model = AutoModelForCausalLM.from_pretrained(models, gguf_file=gguf, dtype=dtype)
    tok = AutoTokenizer.from_pretrained(models, gguf_file=gguf)
    if fix is not None:
        tok = fix(tok)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".gguf_to_hf.", dir=parent)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        with open(os.path.join(tmp, "kvstash_source.json"), "w") as f:
            json.dump({"gguf": gguf, "dtype": dtype_name, "tool": "tools/gguf_to_hf.py"}, f)
        bad = check_tokenizer(tmp, cases)
        if bad:
            shutil.rmtree(tmp, ignore_errors=True)
            return bad
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.chmod(tmp, 0o755)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), 0o644)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--gguf", default=GGUF, help="file name in --models: " + ", ".join(MODELS))
    ap.add_argument("--out", default=None, help="default: <models>/ + the model's folder name above")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--check", action="store_true", help="only check an existing folder's tokenizer")
    a = ap.parse_args(argv)
    prof = MODELS.get(os.path.basename(a.gguf))
    if prof is None:
        print(f"unknown GGUF {a.gguf!r}: known are {', '.join(MODELS)}", file=sys.stderr)
        return 2
    out = a.out or os.path.join(a.models, prof["out"])
    if not a.check:
        if not os.path.isfile(os.path.join(a.models, a.gguf)):
            print(f"no GGUF at {os.path.join(a.models, a.gguf)} (run scripts/setup.sh)", file=sys.stderr)
            return 2
        if convert(a.models, a.gguf, out, a.dtype, prof["fix"], prof["cases"]()):
            print(f"not written: {out} (its tokenizer fails the golden ids)", file=sys.stderr)
            return 1
        print(f"wrote {out}")
        return 0
    if not os.path.isfile(os.path.join(out, "config.json")):
        print(f"no converted model at {out}", file=sys.stderr)
        return 2
    return 1 if check_tokenizer(out, prof["cases"]()) else 0


if __name__ == "__main__":
    sys.exit(main())
