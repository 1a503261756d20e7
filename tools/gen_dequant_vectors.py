#!/usr/bin/env python3
"""Writes tests/model/data/dequant_vectors.json and dequant_vectors_q5.json: ggml-quantised
blocks and their fp32 values as gguf-py (the dequantiser Hugging Face transformers' GGUF
loader uses) computes them, an independent reference for model/formats/ggml_types.cc.
The second file holds the types added for Qwen2.5 GGUFs (Q5_0, Q5_1, Q5_K), from its
own seed, so the first stays as it was.

  .venv/bin/python tools/gen_dequant_vectors.py        (needs only gguf + numpy)

Blocks are seeded random bytes with the f16 scale fields replaced by sane values
(random f16 bits are often NaN/Inf), three blocks per type.
"""

import json
import os
import sys
import types

import numpy as np

# gguf/__init__.py imports sentencepiece for its vocabulary helpers, which this script
# does not use; tools/requirements.txt does not install it.
try:
    import sentencepiece  # noqa: F401
except ModuleNotFoundError:
    sys.modules["sentencepiece"] = types.SimpleNamespace(SentencePieceProcessor=None)
from gguf import GGMLQuantizationType as Q, GGML_QUANT_SIZES  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "model", "data", "dequant_vectors.json")
OUT_Q5 = os.path.join(ROOT, "tests", "model", "data", "dequant_vectors_q5.json")
# Byte offsets of f16 scale fields inside each block.
F16_FIELDS = {
    Q.Q8_0: [0],
    Q.Q4_0: [0],
    Q.Q4_1: [0, 2],
    Q.Q4_K: [0, 2],
    Q.Q6_K: [208],
    Q.F16: None,
    Q.BF16: None,
}
F16_FIELDS_Q5 = {Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q5_K: [0, 2]}


def write(path, f16_fields, seed):
    rng = np.random.default_rng(seed)
    cases = []
    for t, fields in f16_fields.items():
        elems, nbytes = GGML_QUANT_SIZES[t]
        n_blocks = 3 if elems > 1 else 40
        raw = bytearray(rng.integers(0, 256, size=n_blocks * nbytes, dtype=np.uint8).tobytes())
        if t == Q.F16:
            raw = bytearray(rng.normal(0, 2, n_blocks).astype("<f2").tobytes())
        elif t == Q.BF16:
            raw = bytearray(
                (rng.normal(0, 2, n_blocks).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
            )
        else:
            for b in range(n_blocks):
                for off in fields:
                    v = np.float16(rng.uniform(-0.05, 0.05))
                    raw[b * nbytes + off : b * nbytes + off + 2] = v.tobytes()
        data = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(1, -1)
        vals = dequantize(data, t).reshape(-1).astype(np.float32)
        cases.append(
            {
                "type": t.name,
                "type_id": int(t),
                "bytes_hex": bytes(raw).hex(),
                "values": [float(f"{v:.9g}") for v in vals],
            }
        )
    with open(path, "w") as f:
        json.dump({"reference": "gguf-py dequantize", "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    write(OUT, F16_FIELDS, 20261129)
    write(OUT_Q5, F16_FIELDS_Q5, 20261207)


if __name__ == "__main__":
    main()
