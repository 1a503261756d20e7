"""kvstash.cuda: GPU restore and paged-KV scatter/gather for engines whose KV caches are
CUDA tensors (the vLLM connector's CUDA path). Optional: present only when the package
was built with its CUDA module,

    pip install ./python -C cmake.define.KVSTASH_PYTHON_CUDA=ON     (needs nvcc)

otherwise importing this module raises ImportError saying so; once imported,
`device_available()` returns (True, "") or (False, the runtime's reason) without raising.

Tensors (torch CUDA tensors, or any DLPack CUDA array):
  chunk: C-contiguous [n_layers, 2, T, n_kv_heads, head_dim], a 16-bit dtype (bf16/f16
    bit patterns are moved, never converted);
  layers: one paged cache per attention layer, all of one shape and stride:
    layout "blocks_heads_slots" (default): [num_blocks, n_kv_heads, block_size,
      2 * head_dim], K in content dims [0, head_dim), V after: what vLLM 0.32's CUDA
      backends (flash_attn, flashinfer, triton_attn) register, in any physical stride
      order, the content dim with stride 1;
    "kv_first": [2, num_blocks, block_size, H, D]; "block_first": [num_blocks, 2,
      block_size, H, D] (older vLLM layouts, NHD or HND strides).
  Chunk token t is request token first_token + t, stored in block
  block_ids[(first_token + t) // block_size] at slot (first_token + t) % block_size.
Streams: `stream` is a cudaStream_t as an int (torch.cuda.current_stream().cuda_stream);
scatter_chunk/gather_chunk enqueue on it and return; DeviceDecoder.restore_chunks_into
synchronises it.
Errors: kvstash exceptions (InvalidArgumentError for shapes, strides, dtypes (a restore
target must have the codec's dtype or be int16/uint16), devices, block ids;
MismatchError/CorruptionError from the codecs; UnavailableError without a device); an
argument that is not a DLPack CUDA array at all (a NumPy array, a CPU tensor) is
refused by nanobind with TypeError before any of these checks.
Thread-safety: every function releases the GIL; a DeviceDecoder may be shared.
"""

from __future__ import annotations

from typing import Any, Sequence

from . import _native

_IMPORT_ERROR = ("kvstash was built without its CUDA module: reinstall with "
                 "`pip install ./python -C cmake.define.KVSTASH_PYTHON_CUDA=ON` (needs nvcc)")

try:
    _cuda = _native._cuda
except AttributeError as e:  # the default, CUDA-free build
    raise ImportError(_IMPORT_ERROR) from e

DeviceDecoder = _cuda.DeviceDecoder
"""DeviceDecoder(codec: PrefixCodec, stream: int = 0): restores the codec's payloads into
CUDA tensors. `where` is "gpu" (bf16 dckv without a correction net:
gpu::DeviceDckvDecoder, whose bytes reach the tensor only after the content checksum
verified them; spec: gpu::DeviceSpecDecoder against the predictor's K/V, computed on the
CPU as restore_chunks does, verified by the content checksum before the call returns)
or "cpu" (raw, f16 dckv, dckv with a correction net: decoded and verified by the codec
on the CPU, then copied).
restore_chunks_into(tokens, keys, payloads, outs, stream=0): outs[i] receives chain
chunk i (shape [n_layers, 2, keys[i].tokens, H, D]); raises like
PrefixCodec.restore_chunks. After an error, the failing chunk's tensor (and later ones)
must not be used: its contents are unspecified (the earlier ones hold verified chunks)."""

__all__ = ["DeviceDecoder", "device_available", "gather_chunk", "scatter_chunk"]


def device_available() -> tuple[bool, str]:
    """(True, "") when a CUDA device is usable; else (False, the CUDA runtime's reason)."""
    return _cuda.device_available()


def scatter_chunk(chunk: Any, layers: Sequence[Any], block_ids: Sequence[int], first_token: int,
                  block_size: int, t_begin: int = 0, t_end: int | None = None,
                  layout: str = "blocks_heads_slots", stream: int = 0) -> None:
    """Writes chunk tokens [t_begin, t_end) (default: all) into the paged caches `layers`."""
    _cuda.scatter_chunk(chunk, list(layers), [int(b) for b in block_ids], first_token, block_size,
                        t_begin, t_end, layout, stream)


def gather_chunk(layers: Sequence[Any], block_ids: Sequence[int], first_token: int, block_size: int,
                 chunk: Any, t_begin: int = 0, t_end: int | None = None,
                 layout: str = "blocks_heads_slots", stream: int = 0) -> None:
    """Reads chunk tokens [t_begin, t_end) (default: all) from the paged caches into `chunk`."""
    _cuda.gather_chunk(list(layers), [int(b) for b in block_ids], first_token, block_size, chunk,
                       t_begin, t_end, layout, stream)
