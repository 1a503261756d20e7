"""Conversion between vLLM's paged CPU KV blocks and kvstash's canonical chunk layout.

Canonical layout (kvstash.KvLayout, docs/format/payload.md): one chunk of T tokens is a
tensor [n_layers, 2 (K, V), T, n_kv_heads, head_dim], K after RoPE, in the KV dtype
(bf16 or f16).

vLLM 0.32's CPU attention backend (vllm/v1/attention/backends/cpu_attn.py) allocates
one tensor per attention layer, shaped [num_blocks, n_kv_heads, block_size, 2*head_dim]
(the "LBHNC" layout); inside each (block, head) tile of 2 * block_size * head_dim
values the kernel `cpu_attn_reshape_and_cache` stores K then V, in an ISA-specific
order: for the "vec"/"vec16" kernels K is transposed (head_dim x block_size) and V is
token-major; for "amx" both are packed in pairs for the tile instructions. Rather than
hard-coding each order, `TileOrder.probe` runs that very kernel once on a scratch block
with a distinct bf16 bit pattern per (K/V, token, dim) and reads back where each value
landed: the resulting permutation is what gather/scatter use, so the conversion is
exact for whatever ISA the engine picked (and probe refuses a kernel that does not
write a permutation). The copies themselves are native (kvstash.paged_scatter /
paged_gather: ~memory speed; torch's index_select over the tile managed ~130 MB/s).

Thread-safety: TileOrder is immutable after construction; gather/scatter read/write
the given tensors and may run concurrently on disjoint blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import kvstash
import numpy as np
import torch

__all__ = ["TileOrder", "LayoutError", "probe_codes", "cpu_attention_isa", "as_u16_view"]


class LayoutError(RuntimeError):
    """The engine's KV cache tensors are not in a layout this module can convert."""


def probe_codes(n: int, offset: int = 0) -> torch.Tensor:
    """n distinct finite, normal bf16 bit patterns (int16), for probe indices offset..offset+n.

    Index i maps to sign (i // 32512), exponent 1 + (i % 32512) // 128 and mantissa
    i % 128: every pattern is a normal number (no zero, denormal, inf or NaN), so a pure
    copy kernel cannot canonicalise two of them into one. Supports n + offset <= 65024.
    """
    i = torch.arange(offset, offset + n, dtype=torch.int32)
    if offset + n > 65024:
        raise LayoutError("probe needs more than 65024 distinct bf16 codes")
    sign = (i // 32512) << 15
    j = i % 32512
    bits = sign | ((1 + j // 128) << 7) | (j % 128)
    return _to_int16(bits)


def _to_int16(bits: torch.Tensor) -> torch.Tensor:
    # two's-complement wrap of 16-bit patterns held in int32
    return torch.where(bits >= 32768, bits - 65536, bits).to(torch.int16)


def cpu_attention_isa(dtype: torch.dtype, block_size: int, head_size: int, kv_cache_dtype: str) -> str:
    """The ISA string vLLM's CPU backend picks for these settings (its own function)."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    return _get_attn_isa(dtype, block_size, head_size, kv_cache_dtype)


@dataclass(frozen=True)
class TileOrder:
    """Where each (K/V, token, dim) value of a block lives inside one (block, head) tile.

    src_of_pos[p] = canonical index s = kv * B * D + t * D + d of the value stored at
    flat tile position p (p in [0, 2 * B * D)); pos_of_src is its inverse. Both int64.
    """

    block_size: int
    head_dim: int
    isa: str
    src_of_pos: torch.Tensor
    pos_of_src: torch.Tensor

    @staticmethod
    def probe(block_size: int, head_dim: int, n_kv_heads: int, dtype: torch.dtype, isa: str) -> "TileOrder":
        """Runs vLLM's cpu_attn_reshape_and_cache on a scratch block and derives the order.

        Raises LayoutError when the kernel is missing, fails, or does not store a
        permutation of its inputs identically for every head.
        """
        if dtype not in (torch.bfloat16, torch.float16):
            raise LayoutError(f"KV dtype {dtype} is not supported (bf16 or f16)")
        try:
            import vllm._custom_ops as ops
        except Exception as e:  # pragma: no cover - vLLM always has it
            raise LayoutError(f"vLLM custom ops unavailable: {e}") from e
        B, D, H = block_size, head_dim, n_kv_heads
        n = 2 * B * D
        if n > 65024:
            raise LayoutError(f"block_size {B} x head_dim {D} too large for the layout probe")
        codes = probe_codes(n)  # int16 [2*B*D], index kv*B*D + t*D + d
        kv_codes = codes.view(2, B, D)
        key = kv_codes[0].unsqueeze(1).expand(B, H, D).contiguous().view(dtype)
        val = kv_codes[1].unsqueeze(1).expand(B, H, D).contiguous().view(dtype)
        cache = torch.zeros(1, H, B, 2 * D, dtype=dtype)
        view = cache.view(1, H, B * 2, D)
        kc, vc = view.chunk(2, dim=2)
        slots = torch.arange(B, dtype=torch.int64)
        try:
            ops.cpu_attn_reshape_and_cache(key, val, kc, vc, slots, isa)
        except Exception as e:
            raise LayoutError(f"cpu_attn_reshape_and_cache({isa}) failed in the probe: {e}") from e
        tile = cache.view(torch.int16).reshape(H, n).to(torch.int32)
        want = codes.to(torch.int32)
        # code (16-bit pattern) -> canonical index, through a 64 Ki-entry table
        table = torch.full((65536,), -1, dtype=torch.int64)
        table[(want & 0xFFFF).to(torch.int64)] = torch.arange(n, dtype=torch.int64)
        src = table[(tile & 0xFFFF).to(torch.int64)]  # [H, n]
        if (src < 0).any():
            raise LayoutError(f"{isa}: the probe found values in the tile that were never written")
        if not torch.equal(torch.sort(src[0]).values, torch.arange(n, dtype=torch.int64)):
            raise LayoutError(f"{isa}: the tile is not a permutation of the block's K and V")
        for h in range(1, H):
            if not torch.equal(src[h], src[0]):
                raise LayoutError(f"{isa}: head {h} is stored in another order than head 0")
        src_of_pos = src[0].contiguous()
        pos_of_src = torch.empty_like(src_of_pos)
        pos_of_src[src_of_pos] = torch.arange(n, dtype=torch.int64)
        return TileOrder(B, D, isa, src_of_pos, pos_of_src)

    def check_cache(self, kv: torch.Tensor, n_kv_heads: int) -> None:
        """Raises LayoutError unless kv is [num_blocks, n_kv_heads, B, 2*D] with dense tiles."""
        B, D = self.block_size, self.head_dim
        if kv.dim() != 4 or tuple(kv.shape[1:]) != (n_kv_heads, B, 2 * D):
            raise LayoutError(f"KV cache shape {tuple(kv.shape)} is not [blocks, {n_kv_heads}, {B}, {2 * D}]")
        if kv.stride(3) != 1 or kv.stride(2) != 2 * D or kv.stride(1) != 2 * B * D:
            raise LayoutError(f"KV cache strides {kv.stride()} are not dense (block, head) tiles")
        if kv.device.type != "cpu":
            raise LayoutError(f"KV cache on {kv.device}: this conversion is for the CPU backend")

    def copy_loops(self) -> str:
        """'amx' when this is vLLM's amx tile order, which the native scatter copies with
        its own (AVX2) loops; 'plan' for any other order (kvstash.paged_copy_loops)."""
        return kvstash.paged_copy_loops(self.src_of_pos.numpy(), self.block_size, self.head_dim)

    def gather(self, layers: list[np.ndarray], block_ids: list[int], out: np.ndarray) -> None:
        """Copies blocks `block_ids` of every layer into `out` [L, 2, n*B, H, D] (canonical).

        layers: uint16 views [num_blocks, H, B, 2*D] of the caches (as_u16_view);
        out: uint16, C-contiguous. Native (kvstash.paged_gather), GIL released.
        """
        kvstash.paged_gather(layers, list(block_ids), self.src_of_pos.numpy(), out)

    def scatter(
        self, chunk: np.ndarray, token_offset: int, layers: list[np.ndarray], block_ids: list[int]
    ) -> None:
        """Writes chunk tokens [token_offset, token_offset + n*B) of a canonical chunk
        [L, 2, T, H, D] (uint16, C-contiguous) into blocks `block_ids` of every layer.
        Native (kvstash.paged_scatter), GIL released."""
        kvstash.paged_scatter(chunk, token_offset, layers, list(block_ids), self.src_of_pos.numpy())


def as_u16_view(kv: torch.Tensor) -> np.ndarray:
    """A uint16 NumPy view of a 16-bit CPU cache tensor (same memory, same strides)."""
    return kv.view(torch.int16).numpy().view(np.uint16)
