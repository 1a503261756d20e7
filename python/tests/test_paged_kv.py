"""kvstash.paged_scatter / paged_gather against a NumPy reference of the same tile
permutation (python/src/paged_kv.cc)."""

from __future__ import annotations

import numpy as np
import pytest

import kvstash

L, H, B, D = 3, 2, 8, 4
N = 2 * B * D


def reference_tiles(chunk, token_offset, block_ids, src_of_pos, layers):
    """The canonical values of each written tile, in tile order (NumPy only)."""
    kv, t, d = src_of_pos // (B * D), (src_of_pos // D) % B, src_of_pos % D
    for l in range(L):
        for j, bid in enumerate(block_ids):
            for h in range(H):
                tok = token_offset + j * B + t
                layers[l][bid, h] = chunk[l, kv, tok, h, d].reshape(B, 2 * D)


def vec_order():
    """vLLM's vec/vec16 CPU tile: K transposed (head_dim x block_size), then V token-major:
    strided runs of B values, then consecutive runs (memcpy)."""
    k = [t * D + d for d in range(D) for t in range(B)]
    v = [B * D + t * D + d for t in range(B) for d in range(D)]
    return np.array(k + v, dtype=np.int64)


def amx_order():
    """Like vLLM's amx CPU tile: K in pairs of adjacent dims per token (32-bit copies), V
    in pairs of tokens per dim (single values)."""
    k = [t * D + 2 * dp + e for dp in range(D // 2) for t in range(B) for e in range(2)]
    v = [B * D + (2 * tp + e) * D + d for tp in range(B // 2) for d in range(D) for e in range(2)]
    return np.array(k + v, dtype=np.int64)


@pytest.fixture(params=["random", "vec", "amx", "identity", "reversed"])
def setup(request):
    rng = np.random.default_rng(7)
    chunk = rng.integers(0, 65536, size=(L, 2, 3 * B, H, D), dtype=np.uint16)
    order = {"random": rng.permutation(N), "vec": vec_order(), "amx": amx_order(), "identity": np.arange(N),
             "reversed": np.arange(N)[::-1]}[request.param].astype(np.int64)
    return chunk, np.ascontiguousarray(order)


def test_scatter_matches_reference_and_gather_inverts_it(setup):
    chunk, order = setup
    layers = [np.zeros((6, H, B, 2 * D), np.uint16) for _ in range(L)]
    want = [x.copy() for x in layers]
    kvstash.paged_scatter(chunk, B, layers, [4, 1], order)    # tokens [B, 3B) into blocks 4, 1
    reference_tiles(chunk, B, [4, 1], order, want)
    for got, ref in zip(layers, want):
        np.testing.assert_array_equal(got, ref)
    out = np.zeros((L, 2, 2 * B, H, D), np.uint16)
    kvstash.paged_gather(layers, [4, 1], order, out)
    np.testing.assert_array_equal(out, chunk[:, :, B:])


def test_strided_blocks(setup):
    """A cache whose block stride is larger than its tiles (a view of a wider tensor)."""
    chunk, order = setup
    wide = [np.zeros((5, H + 1, B, 2 * D), np.uint16) for _ in range(L)]
    layers = [w[:, :H] for w in wide]
    kvstash.paged_scatter(chunk, 0, layers, [0, 2, 3], order)
    out = np.zeros((L, 2, 3 * B, H, D), np.uint16)
    kvstash.paged_gather(layers, [0, 2, 3], order, out)
    np.testing.assert_array_equal(out, chunk)
    assert all(not w[:, H].any() for w in wide)              # the extra head is untouched


@pytest.mark.parametrize("case", ["not_permutation", "block_out_of_range", "past_end", "layers", "dense",
                                  "int16_layers", "float16_chunk", "int32_order", "offset_wraps"])
def test_bad_arguments_are_refused(setup, case):
    chunk, order = setup
    layers = [np.zeros((6, H, B, 2 * D), np.uint16) for _ in range(L)]
    args = dict(chunk=chunk, token_offset=0, layers=layers, block_ids=[0], src_of_pos=order)
    if case == "not_permutation":
        bad = order.copy()
        bad[0] = bad[1]
        args["src_of_pos"] = bad
    elif case == "block_out_of_range":
        args["block_ids"] = [6]
    elif case == "past_end":
        args["token_offset"] = 2 * B + 1
    elif case == "layers":
        args["layers"] = layers[:2]
    elif case == "dense":
        args["layers"] = [np.zeros((6, H, 2 * D, B), np.uint16).transpose(0, 1, 3, 2) for _ in range(L)]
    elif case == "int16_layers":     # a converted copy would be written and dropped
        args["layers"] = [x.view(np.int16) for x in layers]
    elif case == "float16_chunk":    # values would be cast, not bit patterns copied
        args["chunk"] = chunk.view(np.float16)
    elif case == "int32_order":
        args["src_of_pos"] = order.astype(np.int32)
    else:                            # token_offset + blocks * B wraps around 2^64
        args["token_offset"] = 2**64 - B
    with pytest.raises((kvstash.InvalidArgumentError, TypeError)):
        kvstash.paged_scatter(**args)
    assert all(not x.any() for x in layers)                  # nothing written


def test_gather_refuses_an_out_it_cannot_fill(setup):
    chunk, order = setup
    layers = [np.zeros((6, H, B, 2 * D), np.uint16) for _ in range(L)]
    for out in (np.zeros((L, 2, B, H, D), np.int16), np.zeros((L, 2, 2 * B, H, D), np.uint16)[:, :, ::2]):
        with pytest.raises((kvstash.InvalidArgumentError, TypeError)):
            kvstash.paged_gather(layers, [0], order, out)
