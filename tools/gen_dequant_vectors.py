#!/usr/bin/env python3
"""Writes tests/model/data/dequant_vectors.json: ggml-quantised blocks and their fp32
values as gguf-py (the dequantiser Hugging Face transformers' GGUF loader uses)
computes them, an independent reference for model/formats/ggml_types.cc.

  .venv/bin/python tools/gen_dequant_vectors.py        (needs only gguf + numpy)

Blocks are seeded random bytes with the f16 scale fields replaced by sane values
(random f16 bits are often NaN/Inf), three blocks per type.
"""
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as Q, GGML_QUANT_SIZES
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "model", "data", "dequant_vectors.json")
# Byte offsets of f16 scale fields inside each block.
F16_FIELDS = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q4_K: [0, 2], Q.Q6_K: [208], Q.F16: None, Q.BF16: None}


def main():
    rng = np.random.default_rng(20261129)
    cases = []
    for t, fields in F16_FIELDS.items():
        elems, nbytes = GGML_QUANT_SIZES[t]
        n_blocks = 3 if elems > 1 else 40
        raw = bytearray(rng.integers(0, 256, size=n_blocks * nbytes, dtype=np.uint8).tobytes())
        if t == Q.F16:
            raw = bytearray(rng.normal(0, 2, n_blocks).astype("<f2").tobytes())
        elif t == Q.BF16:
            raw = bytearray((rng.normal(0, 2, n_blocks).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes())
        else:
            for b in range(n_blocks):
                for off in fields:
                    v = np.float16(rng.uniform(-0.05, 0.05))
                    raw[b * nbytes + off: b * nbytes + off + 2] = v.tobytes()
        data = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(1, -1)
        vals = dequantize(data, t).reshape(-1).astype(np.float32)
        cases.append({"type": t.name, "type_id": int(t), "bytes_hex": bytes(raw).hex(),
                      "values": [float(f"{v:.9g}") for v in vals]})
    with open(OUT, "w") as f:
        json.dump({"reference": "gguf-py dequantize", "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
