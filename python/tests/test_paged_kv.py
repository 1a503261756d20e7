"""kvstash.paged_scatter / paged_gather against a NumPy reference of the same tile
permutation (python/src/paged_kv.cc)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import kvstash

L, H, B, D = 3, 2, 8, 4
N = 2 * B * D


def reference_tiles(chunk, token_offset, block_ids, src_of_pos, layers):
    """The canonical values of each written tile, in tile order (NumPy only)."""
    n_layers, _, _, n_heads, d_head = chunk.shape
    b_size = layers[0].shape[2]
    kv, t, d = src_of_pos // (b_size * d_head), (src_of_pos // d_head) % b_size, src_of_pos % d_head
    for l in range(n_layers):
        for j, bid in enumerate(block_ids):
            for h in range(n_heads):
                tok = token_offset + j * b_size + t
                layers[l][bid, h] = chunk[l, kv, tok, h, d].reshape(b_size, 2 * d_head)


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


def vllm_amx_order(b_size, d_head):
    """vLLM 0.32's amx CPU tile exactly (what TileOrder.probe reads from its kernel for
    block 128, head_dim 64): K per 16 tokens, rows of 16 (dim pair) words, one per token;
    V per 16 dims, rows of the 16 dims of tokens 2r, 2r + 1 interleaved. paged_kv.cc has
    its own copy loops for this order."""
    k = [
        (16 * g + i) * d_head + 2 * j + e
        for g in range(b_size // 16)
        for j in range(d_head // 2)
        for i in range(16)
        for e in range(2)
    ]
    v = [
        b_size * d_head + (2 * r + e) * d_head + 16 * b + q
        for b in range(d_head // 16)
        for r in range(b_size // 2)
        for q in range(16)
        for e in range(2)
    ]
    return np.array(k + v, dtype=np.int64)


@pytest.fixture(params=["random", "vec", "amx", "identity", "reversed"])
def setup(request):
    rng = np.random.default_rng(7)
    chunk = rng.integers(0, 65536, size=(L, 2, 3 * B, H, D), dtype=np.uint16)
    order = {
        "random": rng.permutation(N),
        "vec": vec_order(),
        "amx": amx_order(),
        "identity": np.arange(N),
        "reversed": np.arange(N)[::-1],
    }[request.param].astype(np.int64)
    return chunk, np.ascontiguousarray(order)


def test_scatter_matches_reference_and_gather_inverts_it(setup):
    chunk, order = setup
    layers = [np.zeros((6, H, B, 2 * D), np.uint16) for _ in range(L)]
    want = [x.copy() for x in layers]
    kvstash.paged_scatter(chunk, B, layers, [4, 1], order)  # tokens [B, 3B) into blocks 4, 1
    reference_tiles(chunk, B, [4, 1], order, want)
    for got, ref in zip(layers, want):
        np.testing.assert_array_equal(got, ref)
    out = np.zeros((L, 2, 2 * B, H, D), np.uint16)
    kvstash.paged_gather(layers, [4, 1], order, out)
    np.testing.assert_array_equal(out, chunk[:, :, B:])


_AMX_CASE = """
import numpy as np, kvstash, sys
sys.path.insert(0, {here!r})
from test_paged_kv import reference_tiles, vllm_amx_order
rng = np.random.default_rng(11)
for b_size, d_head in ((16, 16), (32, 32), (128, 64)):
    order = vllm_amx_order(b_size, d_head)
    assert kvstash.paged_copy_loops(order, b_size, d_head) == "amx"
    # an odd 16-bit offset: the chunk's rows are not 4-byte aligned (payload views)
    flat = rng.integers(0, 65536, size=2 * 2 * 3 * b_size * 3 * d_head + 1, dtype=np.uint16)
    chunk = flat[1:].reshape(2, 2, 3 * b_size, 3, d_head)
    layers = [np.zeros((5, 3, b_size, 2 * d_head), np.uint16) for _ in range(2)]
    want = [x.copy() for x in layers]
    kvstash.paged_scatter(chunk, b_size, layers, [3, 0], order)
    reference_tiles(chunk, b_size, [3, 0], order, want)
    for got, ref in zip(layers, want):
        np.testing.assert_array_equal(got, ref)
    out = np.zeros((2, 2, 2 * b_size, 3, d_head), np.uint16)
    kvstash.paged_gather(layers, [3, 0], order, out)
    np.testing.assert_array_equal(out, chunk[:, :, b_size:])
print("ok")
"""


@pytest.mark.parametrize("cpu_path", ["auto", "scalar"])
def test_vllm_amx_order_on_every_cpu_path(cpu_path):
    """vLLM's amx order (its own copy loops: AVX2, scalar) equals the reference; each CPU
    path in its own process (KVSTASH_CPU_PATH is read once)."""
    env = dict(os.environ, KVSTASH_CPU_PATH=cpu_path)
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run(
        [sys.executable, "-c", _AMX_CASE.format(here=here)], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_only_the_exact_amx_order_takes_its_loops():
    order = vllm_amx_order(32, 32)
    assert kvstash.paged_copy_loops(order, 32, 32) == "amx"
    swapped = order.copy()
    swapped[[5, 6]] = swapped[[6, 5]]
    assert kvstash.paged_copy_loops(swapped, 32, 32) == "plan"
    assert kvstash.paged_copy_loops(amx_order(), B, D) == "plan"  # pairs, but not vLLM's tile
    with pytest.raises(kvstash.InvalidArgumentError):
        kvstash.paged_copy_loops(order, 32, 16)
    for b_size in (2**61, 2**59):  # 2 * B * D wraps around 2^64, or reads past the array
        with pytest.raises(kvstash.InvalidArgumentError):
            kvstash.paged_copy_loops(np.zeros(0, np.int64), b_size, 16)


def test_strided_blocks(setup):
    """A cache whose block stride is larger than its tiles (a view of a wider tensor)."""
    chunk, order = setup
    wide = [np.zeros((5, H + 1, B, 2 * D), np.uint16) for _ in range(L)]
    layers = [w[:, :H] for w in wide]
    kvstash.paged_scatter(chunk, 0, layers, [0, 2, 3], order)
    out = np.zeros((L, 2, 3 * B, H, D), np.uint16)
    kvstash.paged_gather(layers, [0, 2, 3], order, out)
    np.testing.assert_array_equal(out, chunk)
    assert all(not w[:, H].any() for w in wide)  # the extra head is untouched


@pytest.mark.parametrize(
    "case",
    [
        "not_permutation",
        "block_out_of_range",
        "past_end",
        "layers",
        "dense",
        "int16_layers",
        "float16_chunk",
        "int32_order",
        "offset_wraps",
    ],
)
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
    elif case == "int16_layers":  # a converted copy would be written and dropped
        args["layers"] = [x.view(np.int16) for x in layers]
    elif case == "float16_chunk":  # values would be cast, not bit patterns copied
        args["chunk"] = chunk.view(np.float16)
    elif case == "int32_order":
        args["src_of_pos"] = order.astype(np.int32)
    else:  # token_offset + blocks * B wraps around 2^64
        args["token_offset"] = 2**64 - B
    with pytest.raises((kvstash.InvalidArgumentError, TypeError)):
        kvstash.paged_scatter(**args)
    assert all(not x.any() for x in layers)  # nothing written


def test_gather_refuses_an_out_it_cannot_fill(setup):
    chunk, order = setup
    layers = [np.zeros((6, H, B, 2 * D), np.uint16) for _ in range(L)]
    for out in (np.zeros((L, 2, B, H, D), np.int16), np.zeros((L, 2, 2 * B, H, D), np.uint16)[:, :, ::2]):
        with pytest.raises((kvstash.InvalidArgumentError, TypeError)):
            kvstash.paged_gather(layers, [0], order, out)
