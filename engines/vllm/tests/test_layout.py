"""kvstash_vllm.layout on real vLLM tensors: vLLM's own cache-write kernel
(cpu_attn_reshape_and_cache) fills paged blocks; gather must return exactly the K/V it
was given, and scatter must reproduce the kernel's bytes (the copies are the kvstash
package's native paged_gather / paged_scatter).

Run: .venv-vllm/bin/python -m pytest -q engines/vllm/tests/test_layout.py  (~15 s)
"""

import numpy as np
import pytest
import torch

import vllm  # noqa: F401  (loads vLLM's custom ops)
import vllm._custom_ops as ops

from kvstash_vllm.layout import LayoutError, TileOrder, as_u16_view, cpu_attention_isa, probe_codes

ISAS = ["amx", "vec", "vec16"]


def _has_amx():
    return torch.cpu._is_amx_tile_supported()


def _write(kv, key, val, slots, isa):
    nb, h, b, _ = kv.shape
    kc, vc = kv.view(nb, h, 2 * b, -1).chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(key, val, kc, vc, slots, isa)


def test_probe_codes_distinct_and_normal():
    c = probe_codes(65024)
    assert torch.unique(c).numel() == 65024
    exp = (c.to(torch.int32) >> 7) & 0xFF
    assert int(exp.min()) >= 1 and int(exp.max()) <= 254  # no zero/denormal/inf/NaN
    with pytest.raises(LayoutError):
        probe_codes(65025)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gather_returns_kernel_input(isa, dtype):
    if isa == "amx" and (not _has_amx() or dtype != torch.bfloat16):
        pytest.skip("amx: bf16 on a CPU with AMX tiles only")
    H, D, B, NB = 3, 64, 128, 7
    order = TileOrder.probe(B, D, H, dtype, isa)
    # vLLM's amx tile takes the native scatter's own loops (python/src/paged_kv.cc)
    assert order.copy_loops() == ("amx" if isa == "amx" else "plan")
    g = torch.Generator().manual_seed(7)
    blocks = [5, 0, 3]
    T = len(blocks) * B
    key = torch.randn(T, H, D, generator=g).to(dtype)
    val = torch.randn(T, H, D, generator=g).to(dtype)
    slots = torch.cat([torch.arange(B) + b * B for b in blocks])
    kv = torch.zeros(NB, H, B, 2 * D, dtype=dtype)
    _write(kv, key, val, slots, isa)
    order.check_cache(kv, H)
    out = np.empty((1, 2, T, H, D), dtype=np.uint16)
    order.gather([as_u16_view(kv)], blocks, out)
    assert np.array_equal(out[0, 0], as_u16_view(key))
    assert np.array_equal(out[0, 1], as_u16_view(val))
    # scatter into a fresh cache reproduces the kernel's bytes, block for block
    kv2 = torch.full_like(kv, 3.0)
    order.scatter(out, 0, [as_u16_view(kv2)], blocks)
    for b in blocks:
        assert torch.equal(kv2[b].view(torch.int16), kv[b].view(torch.int16))
    untouched = [b for b in range(NB) if b not in blocks]
    assert bool((kv2[untouched] == 3.0).all())


def test_vec_layout_is_transposed_k_token_major_v():
    """The documented vec layout: K transposed (head_dim x block_size), then V token-major."""
    B, D = 32, 64
    order = TileOrder.probe(B, D, 2, torch.bfloat16, "vec")
    pos = order.pos_of_src
    # K of token t, dim d sits at d * B + t; V of token t, dim d at B * D + t * D + d
    for t, d in [(0, 0), (1, 0), (0, 1), (31, 63)]:
        assert int(pos[t * D + d]) == d * B + t
        assert int(pos[B * D + t * D + d]) == B * D + t * D + d


def test_engine_isa_choice_and_bad_caches():
    isa = cpu_attention_isa(torch.bfloat16, 128, 64, "auto")
    assert isa == ("amx" if _has_amx() else "vec")
    assert cpu_attention_isa(torch.bfloat16, 16, 48, "auto") == "vec16"
    order = TileOrder.probe(32, 64, 3, torch.bfloat16, "vec")
    with pytest.raises(LayoutError):
        order.check_cache(torch.zeros(4, 3, 32, 64, dtype=torch.bfloat16), 3)  # 2*D wrong
    with pytest.raises(LayoutError):
        order.check_cache(torch.zeros(4, 32, 3, 128, dtype=torch.bfloat16).transpose(1, 2), 3)
    with pytest.raises(LayoutError):
        TileOrder.probe(32, 64, 3, torch.float32, "vec")
