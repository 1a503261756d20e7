"""Scheduler -> worker metadata of one engine step (plain data, picklable).

LoadOp: before this step's forward, restore chunks [0, n_chunks) of the request's chain
and write tokens [first_block * block_size, n_chunks * chunk_tokens) into its blocks
(block_ids[i] holds tokens [i * block_size, (i + 1) * block_size)).
SaveOp: after this step's forward, copy chunks [first_chunk, n_chunks) out of the
request's blocks (block_ids[i] holds tokens [(first_chunk * chunk_tokens / block_size
+ i) * block_size, ...)) and store them in the background.
step_tokens: the step's scheduled tokens; the worker times the step's forward and reports
(tokens, ms) as a prefill sample of the restore cost model (scheduler.py).
Thread-safety: built by the scheduler thread, read by the worker; never mutated after.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata

from .namespace import NamespaceKey

__all__ = ["LoadOp", "SaveOp", "KvstashConnectorMetadata"]


@dataclass
class LoadOp:
    req_id: str
    tokens: list[int]                 # the chain's tokens: n_chunks * chunk_tokens ids
    ns: NamespaceKey
    extra_keys: list[list[str]] | None
    n_chunks: int
    block_ids: list[int]              # blocks of tokens [0, n_chunks * chunk_tokens)
    first_block: int                  # blocks below are vLLM's own (local prefix hit)
    estimate_ms: float = 0.0          # the cost model's restore estimate (reported next to load_ms)


@dataclass
class SaveOp:
    req_id: str
    tokens: list[int]                 # n_chunks * chunk_tokens ids from the prompt start
    ns: NamespaceKey
    extra_keys: list[list[str]] | None
    first_chunk: int
    n_chunks: int
    block_ids: list[int]              # blocks of tokens [first_chunk * C, n_chunks * C)


@dataclass
class KvstashConnectorMetadata(KVConnectorMetadata):
    loads: list[LoadOp] = field(default_factory=list)
    saves: list[SaveOp] = field(default_factory=list)
    step_tokens: int = 0              # tokens vLLM computes in this step (prefill rate samples)
