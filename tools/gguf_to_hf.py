#!/usr/bin/env python3
"""Convert the SmolLM2-135M-Instruct Q4_1 GGUF fixture into a Hugging Face model folder
that vLLM loads, so vLLM and kvstash's own runtime/predictor see the same weights.

  .venv-vllm/bin/python tools/gguf_to_hf.py [--models models] [--gguf NAME] [--out DIR]
                                            [--dtype bfloat16|float32] [--check]

Recipe (docs/platform-notes.md "GGUF -> Hugging Face folder"): transformers
`from_pretrained(dir, gguf_file=...)` dequantises the Q4_1 tensors (needs `accelerate`);
before `save_pretrained` the GGUF quantizer is dropped (`model.hf_quantizer = None`,
`config.quantization_config` deleted), else transformers refuses with "quantized with
GGUF and is not serializable".

Tokenizer: transformers' GGUF conversion gives SmolLM2 a plain ByteLevel pre-tokenizer,
while the model's own tokenizer (and llama.cpp's "smollm" pre-tokenizer, which kvstash's
BPE tokenizer follows) first isolates every \\p{N} character. The saved tokenizer gets the
Digits(individual_digits=True) step back (same fix as tools/gen_runtime_goldens.py), so
vLLM's token ids equal ours. `--check` compares vLLM-side tokenisation with the committed
golden ids of our tokenizer (tests/model/data/smollm2_tokenizer.json) and exits 1 on a mismatch.

The weights are written in `--dtype` (default bfloat16: what vLLM computes in on CPU;
Q4_1 values dequantised in float32 are rounded once to bf16). Writes into a temporary
folder and renames it, so an interrupted run leaves no half folder. Exit 0 on success,
1 on a failed check, 2 on bad arguments.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def fix_pre_tokenizer(tok):
    """Restore SmolLM2's digit splitting on a transformers fast tokenizer (in place)."""
    from tokenizers import pre_tokenizers
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    return tok


def check_tokenizer(out_dir, golden_path):
    """Tokenise every golden text with the saved tokenizer; return the mismatch count."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out_dir)
    with open(golden_path) as f:
        cases = json.load(f)["cases"]
    bad = 0
    for c in cases:
        ids = tok.encode(c["text"], add_special_tokens=False)
        if ids != c["ids"]:
            bad += 1
            print(f"tokenizer mismatch on {c['text'][:40]!r}: {ids[:8]} vs {c['ids'][:8]}",
                  file=sys.stderr)
    print(f"tokenizer check: {len(cases) - bad}/{len(cases)} golden texts identical")
    return bad


def convert(models, gguf, out_dir, dtype_name):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype_name]
    model = AutoModelForCausalLM.from_pretrained(models, gguf_file=gguf, dtype=dtype)
    tok = fix_pre_tokenizer(AutoTokenizer.from_pretrained(models, gguf_file=gguf))
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
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.chmod(tmp, 0o755)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), 0o644)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--gguf", default=GGUF)
    ap.add_argument("--out", default=None, help="default: <models>/smollm2-135m-hf")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--check", action="store_true", help="only check an existing folder's tokenizer")
    a = ap.parse_args(argv)
    out = a.out or os.path.join(a.models, "smollm2-135m-hf")
    golden = os.path.join(ROOT, "tests", "model", "data", "smollm2_tokenizer.json")
    if not a.check:
        if not os.path.isfile(os.path.join(a.models, a.gguf)):
            print(f"no GGUF at {os.path.join(a.models, a.gguf)} (run scripts/setup.sh)", file=sys.stderr)
            return 2
        convert(a.models, a.gguf, out, a.dtype)
        print(f"wrote {out}")
    elif not os.path.isfile(os.path.join(out, "config.json")):
        print(f"no converted model at {out}", file=sys.stderr)
        return 2
    if os.path.isfile(golden):
        return 1 if check_tokenizer(out, golden) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
