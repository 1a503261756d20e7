#!/usr/bin/env python3
"""Writes smollm2_token_embd_bf16.bin: real model bytes for the entropy benchmarks.

Until the reference runtime produces real KV caches, the "empirical KV-byte
distribution" of `kvstash-bench entropy` uses the bf16 bytes of real trained weights:
rows 1000..1455 of SmolLM2-135M-Instruct's token embedding (models/ GGUF, Q8_0),
dequantised to fp32 by the gguf package and rounded to bf16 (round to nearest even),
stored row-major, little-endian: 456 x 576 values, 525,312 bytes.

Run from the repository root: .venv/bin/python benchmarks/data/gen_smollm2_bf16_sample.py
"""
import os

import gguf
import numpy as np
from gguf import quants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "benchmarks", "data", "smollm2_token_embd_bf16.bin")
FIRST_ROW, ROWS = 1000, 456


def to_bf16(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return rounded.astype(np.uint16)


def main():
    reader = gguf.GGUFReader(GGUF)
    t = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = quants.dequantize(t.data[FIRST_ROW:FIRST_ROW + ROWS], t.tensor_type)
    to_bf16(rows).astype("<u2").tofile(OUT)
    print(f"wrote {os.path.getsize(OUT)} bytes to {OUT}")


if __name__ == "__main__":
    main()
