"""Loads into and saves out of vLLM's CUDA paged KV caches with kvstash's CUDA module.

vLLM 0.32's CUDA attention backends (flash_attn, flashinfer, triton_attn) register one
tensor per attention layer of logical shape [num_blocks, n_kv_heads, block_size,
2 * head_dim] (K in content dims [0, head_dim), V after; the physical stride order is
the KV cache group's KVCacheLayout), the same logical shape as the CPU backend but a
plain strided layout: kvstash.cuda's kernels (gpu_kernels/kv_blocks.h) read the strides
from the tensors. Supported: bf16/f16 caches of that shape whose content dim has stride
1. The tensors' block_size may be a kernel block size that divides the scheduler's
(vLLM's create_kv_cache_views splits each manager block into `ratio` dense kernel
blocks, manager block b = kernel blocks b * ratio .. b * ratio + ratio - 1): the block
tables are expanded accordingly (kernel_block_ids). Refused with LayoutError at register_kv_caches: quantized caches (fp8, nvfp4: another
dtype than the model's), MLA (3-D caches), anything else.

Load: the codec's payloads are restored into CUDA staging chunks by
kvstash.cuda.DeviceDecoder (dckv and spec decode on the GPU, spec's predictor on the
CPU; raw is verified on the CPU, then copied): every chunk is verified by its content
checksum before restore_chunks_into returns, and a load whose restore raised scatters
nothing, so only verified staging tensors reach the engine's blocks (one kernel per chunk, on the current
stream, synchronised before the load returns). Save: one gather kernel copies the
chunks' blocks of every layer into a canonical CUDA tensor, which is copied to host
memory (synchronously: the blocks may be freed once the step ends) for the background
encode and PUT.

Without the CUDA module (the default `pip install ./python`), register_kv_caches
raises LayoutError naming the build option: the connector does not fall back silently
to a slow CPU path (docs/engines/vllm.md).

Thread-safety: the hooks run on vLLM's worker thread; DeviceDecoders are cached per
codec under a lock (an LRU of max_decoders: the connector passes max_codecs, so a codec
the CodecCache evicted is not kept alive here), and restore/scatter may run from several
threads (disjoint blocks).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import torch

from .layout import LayoutError


def scatter_plan(first_block: int, n_chunks: int, chunk_tokens: int,
                 block_size: int) -> list[tuple[int, int, int]]:
    """(chain chunk j, its first request token j * C, first chunk token to write) for every
    chunk of a load that writes blocks [first_block, n_chunks * C / B): the blocks before
    first_block are already in the engine's cache (the same rule as WorkerSide._scatter)."""
    bpc = chunk_tokens // block_size
    plan = []
    for j in range(n_chunks):
        lo_blk = max(first_block, j * bpc)
        if lo_blk < (j + 1) * bpc:
            plan.append((j, j * chunk_tokens, (lo_blk - j * bpc) * block_size))
    return plan


def kernel_block_ids(block_ids: list[int], ratio: int) -> list[int]:
    """The kernel block table of a manager block table (each block -> `ratio` blocks)."""
    return [b * ratio + r for b in block_ids for r in range(ratio)]


def cuda_module():
    """kvstash.cuda, or LayoutError saying how to build it."""
    try:
        import kvstash.cuda as kc
    except ImportError as e:
        raise LayoutError(
            "vLLM's KV caches are CUDA tensors, and the installed kvstash package has no CUDA module: "
            "reinstall it with `pip install ./python -C cmake.define.KVSTASH_PYTHON_CUDA=ON` (needs "
            f"nvcc) to load and save on the GPU ({e})") from e
    return kc


class CudaPagedKv:
    """The CUDA layers of one worker. Construct through `create`, which checks them."""

    def __init__(self, kc: Any, layers: list[torch.Tensor], n_kv_heads: int, head_dim: int,
                 block_size: int, kernel_block_size: int, chunk_tokens: int, max_decoders: int = 64):
        self.kc, self.layers = kc, layers
        self.H, self.D, self.B, self.C = n_kv_heads, head_dim, block_size, chunk_tokens
        self.KB = kernel_block_size               # tokens per block of the tensors
        self.ratio = block_size // kernel_block_size
        self.device = layers[0].device
        self.dtype = layers[0].dtype
        self._decoders: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        self.max_decoders = max(1, int(max_decoders))
        self._lock = threading.Lock()

    @staticmethod
    def create(layers: list[torch.Tensor], block_size: int, chunk_tokens: int,
               model_dtype: torch.dtype, max_decoders: int = 64) -> "CudaPagedKv":
        """Checks that `layers` are CUDA caches this class can move KV of; LayoutError if not."""
        kc = cuda_module()
        first = layers[0]
        if first.dim() != 4 or first.shape[3] % 2:
            raise LayoutError(f"CUDA KV cache {tuple(first.shape)}: expected vLLM's [blocks, kv_heads, "
                              "block_size, 2 * head_dim] (MLA and other layouts are not supported)")
        _, H, KB, D2 = (int(s) for s in first.shape)
        if KB < 1 or block_size % KB:
            raise LayoutError(f"CUDA KV cache block size {KB} does not divide the scheduler block size {block_size}")
        if first.dtype not in (torch.bfloat16, torch.float16) or first.dtype != model_dtype:
            raise LayoutError(f"CUDA KV cache dtype {first.dtype}: only unquantized bf16/f16 caches of the "
                              f"model's dtype {model_dtype} are supported")
        for t in layers:
            if (t.device != first.device or t.dtype != first.dtype or tuple(t.shape) != tuple(first.shape)
                    or t.stride() != first.stride()):
                raise LayoutError("CUDA KV caches of one worker differ in device, dtype, shape or strides")
            if t.stride(3) != 1:
                raise LayoutError(f"CUDA KV cache strides {t.stride()}: the content dim must have stride 1")
        ok, why = kc.device_available()
        if not ok:
            raise LayoutError(f"CUDA KV caches but the kvstash CUDA module sees no device: {why}")
        return CudaPagedKv(kc, layers, H, D2 // 2, block_size, KB, chunk_tokens, max_decoders)

    def _stream(self) -> int:
        return torch.cuda.current_stream(self.device).cuda_stream

    def _decoder(self, codec: Any) -> Any:
        with self._lock:
            hit = self._decoders.get(id(codec))
            if hit is None or hit[0] is not codec:
                with torch.cuda.device(self.device):
                    hit = (codec, self.kc.DeviceDecoder(codec, self._stream()))
                self._decoders[id(codec)] = hit
                while len(self._decoders) > self.max_decoders:
                    self._decoders.popitem(last=False)
            self._decoders.move_to_end(id(codec))
            return hit[1]

    def load(self, codec: Any, tokens: Any, keys: list, payloads: list, block_ids: list[int],
             first_block: int, n_chunks: int) -> None:
        """Restores chain chunks [0, n_chunks) and writes blocks [first_block, ...) of them.

        Raises (kvstash errors, LayoutError) before any unverified byte reaches the cache;
        on success the blocks hold the chunks when this returns (stream synchronised).
        """
        L, H, D, B, C = len(self.layers), self.H, self.D, self.B, self.C
        bpc = C // B
        with torch.cuda.device(self.device):
            stream = self._stream()
            outs = [torch.empty((L, 2, k.tokens, H, D), dtype=self.dtype, device=self.device)
                    for k in keys[:len(payloads)]]
            for j, o in enumerate(outs):
                if o.shape[2] != C:
                    raise LayoutError(f"chain chunk {j} has {o.shape[2]} tokens, a load moves whole {C}-token chunks")
            if len(outs) != n_chunks:
                raise LayoutError(f"{len(outs)} payloads for a load of {n_chunks} chunks")
            self._decoder(codec).restore_chunks_into(tokens, keys, payloads, outs, stream)
            for j, first_token, t_begin in scatter_plan(first_block, n_chunks, C, B):
                table = kernel_block_ids(block_ids[:(j + 1) * bpc], self.ratio)
                self.kc.scatter_chunk(outs[j], self.layers, table, first_token, self.KB,
                                      t_begin=t_begin, stream=stream)
            torch.cuda.current_stream(self.device).synchronize()

    def gather(self, block_ids: list[int]) -> torch.Tensor:
        """The canonical KV [n_layers, 2, len(block_ids) * B, H, D] of these blocks, on the host."""
        T = len(block_ids) * self.B
        with torch.cuda.device(self.device):
            buf = torch.empty((len(self.layers), 2, T, self.H, self.D), dtype=self.dtype, device=self.device)
            self.kc.gather_chunk(self.layers, kernel_block_ids(block_ids, self.ratio), 0, self.KB, buf,
                                 stream=self._stream())
            return buf.cpu()  # synchronises the current stream
