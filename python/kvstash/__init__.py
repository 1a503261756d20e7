"""kvstash: Python client of the kvstash prefix-KV store and its client-side codecs.

    import kvstash
    ns = kvstash.Namespace(fingerprint, n_layers=30, n_kv_heads=3, head_dim=64)
    keys = kvstash.chain_keys(ns.digest(), tokens, chunk_tokens=256)
    with kvstash.Client(["127.0.0.1:7470"], tenant="demo", credential="secret") as c:
        hit = c.lookup(keys)

Every failure is a `KvstashError` subclass carrying its Status `code` and `retryable`
flag (see kvstash._errors). The native part is kvstash._native (nanobind).
"""

from __future__ import annotations

from . import _native
from ._errors import (
    ERROR_CLASSES,
    CorruptionError,
    DeadlineExceededError,
    InternalError,
    InvalidArgumentError,
    KvstashError,
    MismatchError,
    NotFoundError,
    NotSupportedError,
    PermissionDeniedError,
    ResourceExhaustedError,
    StorageIOError,
    UnavailableError,
    error_from_status,
)

_native._set_error_factory(error_from_status)

from ._client import Client  # noqa: E402
from ._native import (  # noqa: E402
    ChunkKey,
    KvLayout,
    LookupResult,
    Namespace,
    PrefixCodec,
    PrefixCodecOptions,
    PutChunk,
    ReferenceModel,
    RestoreCostModel,
    RestoreEstimate,
    TlsOptions,
    chain_keys,
    paged_copy_loops,
    paged_gather,
    paged_scatter,
)

__version__ = "0.1.0"

__all__ = [
    "ChunkKey",
    "Client",
    "CorruptionError",
    "DeadlineExceededError",
    "ERROR_CLASSES",
    "InternalError",
    "InvalidArgumentError",
    "KvLayout",
    "KvstashError",
    "LookupResult",
    "MismatchError",
    "Namespace",
    "NotFoundError",
    "NotSupportedError",
    "PermissionDeniedError",
    "PrefixCodec",
    "PrefixCodecOptions",
    "PutChunk",
    "ReferenceModel",
    "ResourceExhaustedError",
    "RestoreCostModel",
    "RestoreEstimate",
    "StorageIOError",
    "TlsOptions",
    "UnavailableError",
    "chain_keys",
    "error_from_status",
    "paged_copy_loops",
    "paged_gather",
    "paged_scatter",
]
