#!/usr/bin/env python3
"""Writes the synthetic RWKV-7 fixture of tests/model/rwkv7 and its float64 golden logits.

tiny-synthetic-rwkv7.bin: an rwkv.cpp-format (ggmf v101, FP32) RWKV-7 model with
random weights (numpy seed 20250101): vocab 16, C 8, 2 heads of 4, 3 layers, ffn 32,
LoRA ranks w 4, a 3, v 2, g 5 (all different, so a transposed or swapped matrix
cannot pass). synthetic-rwkv7-logits.bin: the fp32-rounded logits after each token of
TOKENS (len(TOKENS) x 16 little-endian fp32), computed here in float64 with an
implementation written from BlinkDL's RWKV-v7/rwkv_v7_numpy.py, independent of the C++.

Run from anywhere: python3 tests/model/rwkv7/data/make_synthetic_rwkv7.py (needs numpy).
"""

import os
import struct

import numpy as np

V, C, H, N, L, F = 16, 8, 2, 4, 3, 32
DW, DA, DV, DG = 4, 3, 2, 5
TOKENS = [1, 5, 9, 3, 15, 0, 7, 7, 2, 11, 4, 4, 13]
HERE = os.path.dirname(os.path.abspath(__file__))


def make_weights(rng):
    """PyTorch-shaped weights (after rwkv.cpp's transposes of the LoRA matrices)."""
    n = lambda *shape, s=1.0: (rng.standard_normal(shape) * s)
    u = lambda lo, hi, *shape: rng.uniform(lo, hi, shape)
    w = {"emb.weight": n(V, C), "blocks.0.ln0.weight": 1 + n(C, s=0.1), "blocks.0.ln0.bias": n(C, s=0.1)}
    for l in range(L):
        p = f"blocks.{l}."
        w[p + "ln1.weight"] = 1 + n(C, s=0.1)
        w[p + "ln1.bias"] = n(C, s=0.1)
        w[p + "ln2.weight"] = 1 + n(C, s=0.1)
        w[p + "ln2.bias"] = n(C, s=0.1)
        w[p + "att.x_rwkvag"] = u(0, 1, 6, 1, C)
        w[p + "att.w0"] = u(-2, 1, 1, 1, C)
        w[p + "att.w1"] = n(DW, C, s=0.5 / C**0.5)  # stored transposed: [D][C]
        w[p + "att.w2"] = n(C, DW, s=0.5 / DW**0.5)  # [C][D]
        w[p + "att.a0"] = n(1, 1, C, s=0.5)
        w[p + "att.a1"] = n(DA, C, s=1 / C**0.5)
        w[p + "att.a2"] = n(C, DA, s=1 / DA**0.5)
        if l > 0:
            w[p + "att.v0"] = n(1, 1, C, s=0.5)
            w[p + "att.v1"] = n(DV, C, s=1 / C**0.5)
            w[p + "att.v2"] = n(C, DV, s=1 / DV**0.5)
        w[p + "att.g1"] = n(DG, C, s=1 / C**0.5)
        w[p + "att.g2"] = n(C, DG, s=1 / DG**0.5)
        w[p + "att.k_k"] = u(0.5, 1, 1, 1, C)
        w[p + "att.k_a"] = u(0.5, 1, 1, 1, C)
        w[p + "att.r_k"] = n(H, N, s=0.3)
        for m in ("receptance", "key", "value", "output"):
            w[p + f"att.{m}.weight"] = n(C, C, s=1 / C**0.5)
        w[p + "att.ln_x.weight"] = 0.3 + n(C, s=0.1)
        w[p + "att.ln_x.bias"] = n(C, s=0.05)
        w[p + "ffn.x_k"] = u(0, 1, 1, 1, C)
        w[p + "ffn.key.weight"] = n(F, C, s=1 / C**0.5)
        w[p + "ffn.value.weight"] = n(C, F, s=1 / F**0.5)
    w["ln_out.weight"] = 1 + n(C, s=0.1)
    w["ln_out.bias"] = n(C, s=0.1)
    w["head.weight"] = n(V, C, s=1 / C**0.5)
    return {k: v.astype(np.float32) for k, v in w.items()}


def write_file(path, w):
    out = bytearray(struct.pack("<6I", 0x67676D66, 101, V, C, L, 0))
    for name, t in w.items():
        dims = list(reversed(t.shape))  # ggml order
        key = name.encode()
        out += struct.pack("<3I", len(dims), len(key), 0)
        out += struct.pack(f"<{len(dims)}I", *dims)
        out += key + t.astype("<f4").tobytes()
    with open(path, "wb") as f:
        f.write(out)


def forward(w, tokens):
    W = {k: v.astype(np.float64) for k, v in w.items()}
    ln = lambda x, a, b, eps=1e-5: (x - x.mean()) / np.sqrt(x.var() + eps) * a + b
    sig = lambda x: 1 / (1 + np.exp(-x))
    vec = lambda name: W[name].reshape(-1)
    att = [np.zeros(C) for _ in range(L)]
    ffn = [np.zeros(C) for _ in range(L)]
    S = [np.zeros((H, N, N)) for _ in range(L)]
    out = []
    for tok in tokens:
        x = ln(W["emb.weight"][tok], W["blocks.0.ln0.weight"], W["blocks.0.ln0.bias"])
        v_first = None
        for l in range(L):
            p = f"blocks.{l}."
            xn = ln(x, W[p + "ln1.weight"], W[p + "ln1.bias"])
            last, att[l] = att[l], xn
            m = W[p + "att.x_rwkvag"].reshape(6, C)
            xr, xw, xk, xv, xa, xg = [xn + m[i] * (last - xn) for i in range(6)]
            r = W[p + "att.receptance.weight"] @ xr
            k = W[p + "att.key.weight"] @ xk
            v = W[p + "att.value.weight"] @ xv
            dec = W[p + "att.w2"] @ np.tanh(W[p + "att.w1"] @ xw)
            dec = np.exp(-sig(dec + vec(p + "att.w0")) / np.e**0.5)
            if l == 0:
                v_first = v
            else:
                gate = sig(W[p + "att.v2"] @ (W[p + "att.v1"] @ xv) + vec(p + "att.v0"))
                v = v + (v_first - v) * gate
            a = sig(W[p + "att.a2"] @ (W[p + "att.a1"] @ xa) + vec(p + "att.a0"))
            g = W[p + "att.g2"] @ sig(W[p + "att.g1"] @ xg)
            kk = (k * vec(p + "att.k_k")).reshape(H, N)
            kk = kk / np.maximum(np.linalg.norm(kk, axis=1, keepdims=True), 1e-12)
            k = k * (1 + (a - 1) * vec(p + "att.k_a"))
            y = np.zeros((H, N))
            for h in range(H):
                sl = slice(h * N, (h + 1) * N)
                s = S[l][h]
                s = s * dec[sl][None, :] - np.outer(s @ kk[h], kk[h] * a[sl]) + np.outer(v[sl], k[sl])
                S[l][h] = s
                y[h] = s @ r[sl]
            y = (y - y.mean(axis=1, keepdims=True)) / np.sqrt(y.var(axis=1, keepdims=True) + 64e-5)
            y = y.reshape(-1) * W[p + "att.ln_x.weight"] + W[p + "att.ln_x.bias"]
            bonus = (r * k * W[p + "att.r_k"].reshape(-1)).reshape(H, N).sum(axis=1)
            y = y + (bonus[:, None] * v.reshape(H, N)).reshape(-1)
            x = x + W[p + "att.output.weight"] @ (y * g)
            xn = ln(x, W[p + "ln2.weight"], W[p + "ln2.bias"])
            last, ffn[l] = ffn[l], xn
            kx = xn + vec(p + "ffn.x_k") * (last - xn)
            x = x + W[p + "ffn.value.weight"] @ (np.maximum(W[p + "ffn.key.weight"] @ kx, 0) ** 2)
        out.append(W["head.weight"] @ ln(x, W["ln_out.weight"], W["ln_out.bias"]))
    return np.array(out)


def main():
    w = make_weights(np.random.default_rng(20250101))
    write_file(os.path.join(HERE, "tiny-synthetic-rwkv7.bin"), w)
    logits = forward(w, TOKENS)
    with open(os.path.join(HERE, "synthetic-rwkv7-logits.bin"), "wb") as f:
        f.write(logits.astype("<f4").tobytes())
    print("tokens", TOKENS, "logit range", logits.min(), logits.max())


if __name__ == "__main__":
    main()
