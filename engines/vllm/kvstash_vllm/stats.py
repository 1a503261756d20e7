"""Connector counters, exported through vLLM's connector-stats hooks.

KvstashConnectorStats.data is a flat dict of integer counters (tokens, bytes, counts,
milliseconds) for one interval: vLLM's worker calls get_kv_connector_stats() every
step, the logger aggregates (sums) the intervals and logs `KV Transfer metrics: ...`.
Counter names:
  lookups, lookup_failures            scheduler LOOKUPs and those that failed
  matched_tokens                      tokens offered to vLLM from kvstash
  loads, loaded_tokens, load_bytes    successful loads (payload bytes received)
  load_failures, load_failed_blocks   failed loads (any reason) and the blocks reported
  load_fail_<reason>                  per reason: unavailable, deadline, corruption,
                                      mismatch, not_found, other
  async_loads, loads_cancelled        loads handed to a background thread; of those, the
                                      ones whose request vLLM finished (aborted) meanwhile
  saves, saved_chunks, save_raw_bytes, save_bytes, save_failures, saves_dropped
  load_ms, save_ms                    wall time of loads (the engine waits in sync mode
                                      only) / saves (background)
  codec_builds, codec_evictions       namespace codecs built (a new cache_salt / adapter,
                                      or one evicted before) and dropped by the
                                      max_codecs LRU bound (namespace.CodecCache)
  taken_hits, declined_hits, declined_tokens
                                      scheduler: LOOKUP hits the restore cost model let
                                      load, and those it declined (vLLM computed them)
  restore_estimate_ms, recompute_estimate_ms
                                      scheduler: the model's estimates for the taken hits
                                      (compare with the workers' load_ms)
  declined_restore_estimate_ms, declined_recompute_estimate_ms
                                      the same for the declined hits
  cost_prefill_tokens, cost_prefill_ms, cost_restore_tokens, cost_restore_bytes,
  cost_transfer_ms, cost_decode_ms, cost_encode_tokens, cost_encode_bytes, cost_encode_ms
                                      worker: the cost model's samples (steps' forwards,
                                      loads, saves), read by the scheduler
  cost_probe_ms                       scheduler: the start-up probe encode of one chunk
Gauges (GAUGES: a value, not a sum; aggregated as the maximum, so the scheduler's and
the workers' reports of one cache do not add up):
  codecs_cached                       codecs in the connector's CodecCache (<= max_codecs),
                                      reported in the intervals where it changed
Thread-safety: Counters is guarded by a lock (the save thread adds to it).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

__all__ = ["KvstashConnectorStats", "Counters", "failure_reason", "GAUGES"]

GAUGES = frozenset({"codecs_cached"})


@dataclass
class KvstashConnectorStats(KVConnectorStats):
    """Sums of the connector's counters over an interval (vLLM KVConnectorStats)."""

    data: dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> "KvstashConnectorStats":
        for k, v in (other.data or {}).items():
            if k in GAUGES:
                self.data[k] = max(self.data.get(k, v), v)
            else:
                self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        return dict(sorted(self.data.items()))

    def is_empty(self) -> bool:
        return not any(self.data.values())


def failure_reason(exc: BaseException) -> str:
    """Short reason of a failed load for the load_fail_<reason> counters."""
    import kvstash
    table = [("unavailable", "UnavailableError"), ("deadline", "DeadlineExceededError"),
             ("corruption", "CorruptionError"), ("mismatch", "MismatchError"),
             ("not_found", "NotFoundError")]
    for reason, name in table:
        cls = getattr(kvstash, name, None)
        if cls is not None and isinstance(exc, cls):
            return reason
    return "other"


class Counters:
    """Interval counters plus running totals (totals() is what tests and benches read);
    gauges (GAUGES) hold their latest value in both."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._interval: dict[str, int | float] = {}
        self._total: dict[str, int | float] = {}

    def add(self, **kv: int | float) -> None:
        with self._lock:
            for k, v in kv.items():
                self._interval[k] = self._interval.get(k, 0) + v
                self._total[k] = self._total.get(k, 0) + v

    def gauge(self, **kv: int | float) -> None:
        """Sets gauges (GAUGES): the interval and the totals hold the latest value."""
        with self._lock:
            for k, v in kv.items():
                self._interval[k] = v
                self._total[k] = v

    def take_interval(self) -> dict[str, int | float]:
        with self._lock:
            out, self._interval = self._interval, {}
            return out

    def totals(self) -> dict[str, int | float]:
        with self._lock:
            return dict(self._total)
