"""Bookkeeping of asynchronous loads (worker side): which requests are loading, which
finished, which failed, and which vLLM aborted meanwhile.

vLLM 0.32's contract for asynchronous loads (get_num_new_matched_tokens returned
(n, True)), as read in vllm/v1/core/sched/scheduler.py and .../kv_connector/v1/base.py:
  - the scheduler allocates the request's blocks, sets it WAITING_FOR_REMOTE_KVS and
    does not schedule it (no forward reads or writes its blocks; allocate_slots gets
    delay_cache_blocks=True, so they are not in the prefix cache yet, and
    skip_zeroing_group_ids, so vLLM does not zero them concurrently) until its id is in
    a step's finished_recving (KVConnectorOutput, from get_finished());
  - a failed load must still be reported in finished_recving, and its blocks in
    get_block_ids_with_load_errors no later than that same step (the scheduler then
    truncates num_computed_tokens at the first bad block and recomputes from there);
  - a request finished (aborted) while WAITING_FOR_REMOTE_KVS keeps its blocks:
    finish_requests passes delay_free_blocks=True unless its id already came in
    finished_recving, and _update_from_kv_xfer_finished frees them when it comes.
So every load is reported exactly once, only after its thread stopped touching the
blocks; an aborted request's load is cancelled (no decode or scatter after the abort is
seen) but still reported, which is what releases its blocks.
Thread-safety: every method takes the tracker's lock; begin/complete run on different
threads (engine worker thread / load threads).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["LoadJob", "LoadTracker"]


@dataclass
class LoadJob:
    """One request's load in flight. cancelled: vLLM finished the request meanwhile."""

    req_id: str
    cancelled: bool = False
    failed_blocks: set[int] = field(default_factory=set)


class LoadTracker:
    """In-flight and completed asynchronous loads (see the module docstring)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._inflight: dict[str, LoadJob] = {}
        self._done: list[LoadJob] = []

    def begin(self, req_id: str) -> LoadJob:
        """Registers a load. Raises RuntimeError if req_id already has one in flight."""
        with self._cv:
            if req_id in self._inflight:
                raise RuntimeError(f"kvstash: request {req_id} already has a load in flight")
            job = LoadJob(req_id)
            self._inflight[req_id] = job
            return job

    def complete(self, job: LoadJob, failed_blocks: set[int]) -> None:
        """The load thread is done with the request's blocks (failed_blocks empty: loaded)."""
        with self._cv:
            job.failed_blocks = set(failed_blocks)
            self._inflight.pop(job.req_id, None)
            self._done.append(job)
            self._cv.notify_all()

    def cancel(self, req_ids: set[str] | None) -> int:
        """Marks the loads of finished requests cancelled; returns how many were in flight."""
        n = 0
        with self._cv:
            for rid in req_ids or ():
                job = self._inflight.get(rid)
                if job is not None and not job.cancelled:
                    job.cancelled = True
                    n += 1
        return n

    def take_done(self, wait_s: float = 0.0) -> list[LoadJob]:
        """Completed loads since the last call. wait_s > 0: when none is done but some are
        in flight, waits up to wait_s for one (an engine step with nothing to compute)."""
        with self._cv:
            if wait_s > 0 and not self._done and self._inflight:
                self._cv.wait(wait_s)
            out, self._done = self._done, []
            return out

    def in_flight_ids(self) -> list[str]:
        with self._cv:
            return list(self._inflight)
