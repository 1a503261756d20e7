"""A small dckv artifact (version 3 byte layout of codec/dckv/dckv_artifact.h) written
from numpy for the trainer's tests: a weighted PCA of real rows, no token conditioning
(rank 0) unless reduced token embeddings and token maps are given, no context map, and
an EMPTY table section (the trainer does not read the
tables; the C++ parser would refuse the file, so it is for tools/train_dckv.py only)."""

import struct

import numpy as np
import xxhash


def pca_groups(rows_per_group, n_active, seed):
    """rows_per_group: list of numpy [R, dims] float32 rows. Returns group dicts (mean,
    encode_scale, basis, step) of a weighted PCA: weights w > 0 drawn from `seed`,
    basis_i = u_i / sqrt(w), encode_scale = w (dckv_artifact.h), steps 0.3 x the
    component's RMS coefficient."""
    rng = np.random.default_rng(seed)
    groups = []
    for x in rows_per_group:
        x = x.astype(np.float64)
        dims = x.shape[1]
        w = rng.uniform(0.5, 2.0, dims)
        mean = x.mean(0)
        xs = (x - mean) * np.sqrt(w)
        _, _, vt = np.linalg.svd(xs, full_matrices=False)
        u = vt[:n_active]
        basis = u / np.sqrt(w)[None, :]
        y = ((x - mean) * w) @ basis.T
        step = 0.3 * np.sqrt((y * y).mean(0)) + 1e-6
        groups.append(
            {
                "mean": mean.astype(np.float32),
                "encode_scale": w.astype(np.float32),
                "basis": basis.astype(np.float32),
                "step": step.astype(np.float32),
            }
        )
    return groups


def write_artifact(
    path, n_layers, n_kv_heads, head_dim, rope_theta, group_layers, raw_head, raw_tail, groups, embed=None
):
    """Writes groups (dicts mean [dims], encode_scale [dims] or None, basis [n, dims],
    step [n], optional token_map [rank + 1, n]) as a version 3 artifact; returns the
    bytes. embed: None (rank 0: each token map is a zero bias row) or the reduced token
    embeddings [vocab, rank] float32, stored as bf16 by truncation (give values that are
    bf16 already to read back the same)."""
    b = bytearray()
    b += struct.pack("<IHH", 0x414B4344, 3, 0)
    b += struct.pack(
        "<IIIfIIIf", n_layers, n_kv_heads, head_dim, rope_theta, group_layers, raw_head, raw_tail, 16.0
    )
    vocab, rank = (0, 0) if embed is None else embed.shape
    b += struct.pack("<II", vocab, rank)
    if embed is not None:
        b += (np.ascontiguousarray(embed, "<f4").view("<u4") >> 16).astype("<u2").tobytes()
    b += struct.pack("<I", len(groups))
    first = 0
    for g in groups:
        layers = min(group_layers, n_layers - first)
        dims = 2 * layers * n_kv_heads * head_dim
        n = g["basis"].shape[0]
        b += struct.pack("<IIII", first, layers, dims, n)
        b += g["mean"].astype("<f4").tobytes()
        if g["encode_scale"] is None:
            b += struct.pack("<I", 0)
        else:
            b += struct.pack("<I", 1) + g["encode_scale"].astype("<f4").tobytes()
        b += g["basis"].astype("<f4").tobytes() + g["step"].astype("<f4").tobytes()
        b += np.zeros(2 * n, "<u2").tobytes()  # table_index, odd_table_index
        token_map = g.get("token_map", np.zeros((rank + 1, n), np.float32))
        assert token_map.shape == (rank + 1, n)
        b += token_map.astype("<f4").tobytes()
        b += struct.pack("<I", 0)  # no context map
        first += layers
    b += struct.pack("<I", 0)  # table section (empty: not read by the trainer)
    b += struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(b)))
    with open(path, "wb") as f:
        f.write(b)
    return bytes(b)
