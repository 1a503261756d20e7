"""Independent Python implementation of kvstash prefix keys (docs/format/keys.md).

Uses only hashlib. The C++ implementation (common/prefix_key.cc) and this one must
produce identical digests; tests/common/data/key_vectors.json holds vectors produced
here and checked by both.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Sequence

NAMESPACE_VERSION = b"kvstash-namespace-v1"
FULL_CHUNK = 0x01
PARTIAL_CHUNK = 0x02

DTYPE_NAMES = {"f32", "f16", "bf16", "fp8_e4m3"}


@dataclass
class Namespace:
    """Fields of a namespace; bytes fields are opaque, empty means none."""

    model_fingerprint: bytes = b""
    kv_dtype: str = "bf16"
    n_layers: int = 1
    n_kv_heads: int = 1
    head_dim: int = 1
    chunk_tokens: int = 256
    tp_rank: int = 0
    tp_size: int = 1
    adapter_name: bytes = b""
    adapter_id: bytes = b""
    adapter_digest: bytes = b""
    cache_salt: bytes = b""
    tenant: bytes = b""
    codec_id: bytes = b""
    codec_artifact_digest: bytes = b""


def _field(tag: int, value: bytes) -> bytes:
    return struct.pack("<BI", tag, len(value)) + value


def _u32s(*values: int) -> bytes:
    return b"".join(struct.pack("<I", v) for v in values)


def encode_namespace(ns: Namespace) -> bytes:
    """The exact bytes hashed into the namespace digest."""
    if ns.kv_dtype not in DTYPE_NAMES:
        raise ValueError(f"kv_dtype {ns.kv_dtype!r}")
    parts = [
        _field(0x00, NAMESPACE_VERSION),
        _field(0x01, ns.model_fingerprint),
        _field(0x02, ns.kv_dtype.encode()),
        _field(0x03, _u32s(ns.n_layers, ns.n_kv_heads, ns.head_dim)),
        _field(0x04, _u32s(ns.chunk_tokens)),
        _field(0x05, _u32s(ns.tp_rank, ns.tp_size)),
        _field(0x06, ns.adapter_name),
        _field(0x07, ns.adapter_id),
        _field(0x08, ns.adapter_digest),
        _field(0x09, ns.cache_salt),
        _field(0x0A, ns.tenant),
        _field(0x0B, ns.codec_id),
        _field(0x0C, ns.codec_artifact_digest),
    ]
    return b"".join(parts)


def namespace_digest(ns: Namespace) -> bytes:
    return hashlib.sha256(encode_namespace(ns)).digest()


@dataclass
class ChunkKey:
    digest: bytes  # 32 bytes
    tokens: int
    partial: bool

    @property
    def stored(self) -> bytes:
        return self.digest[:16]


def chunk_keys(
    ns_digest: bytes,
    tokens: Sequence[int],
    chunk_tokens: int,
    include_partial: bool,
    extra_keys: Sequence[Sequence[bytes]] | None = None,
) -> list[ChunkKey]:
    """Chained keys of the chunks of `tokens` (see docs/format/keys.md)."""
    if chunk_tokens <= 0:
        raise ValueError("chunk_tokens must be > 0")
    full = len(tokens) // chunk_tokens
    n_chunks = full + (1 if include_partial and len(tokens) % chunk_tokens else 0)
    if extra_keys is not None and len(extra_keys) != n_chunks:
        raise ValueError("one extra-key list per chunk")
    parent = ns_digest
    out = []
    for i in range(n_chunks):
        chunk = tokens[i * chunk_tokens : (i + 1) * chunk_tokens]
        partial = len(chunk) < chunk_tokens
        msg = bytearray()
        msg.append(PARTIAL_CHUNK if partial else FULL_CHUNK)
        msg += parent
        msg += struct.pack("<I", len(chunk))
        msg += struct.pack(f"<{len(chunk)}I", *chunk)
        extras = extra_keys[i] if extra_keys is not None else []
        msg += struct.pack("<I", len(extras))
        for e in extras:
            msg += struct.pack("<I", len(e)) + e
        digest = hashlib.sha256(bytes(msg)).digest()
        out.append(ChunkKey(digest, len(chunk), partial))
        parent = digest
    return out
