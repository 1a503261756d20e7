"""Asynchronous-load bookkeeping of kvstash_vllm on its real objects (no engine):
the tracker, the worker's report of a failed load (its blocks in the load-error set
in the SAME get_finished pass that reports it finished, never as loaded) against a
real kvstash.Client whose server is down, and the scheduler side reading vLLM's real
KVConnectorOutput and Request.

Run: .venv-vllm/bin/python -m pytest -q engines/vllm/tests/test_async_loads.py  (~5 s)
"""
import socket
import threading
import time

import torch

import kvstash
from vllm import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import Request

from kvstash_vllm.async_loads import LoadTracker
from kvstash_vllm.config import ConnectorConfig
from kvstash_vllm.metadata import KvstashConnectorMetadata, LoadOp
from kvstash_vllm.namespace import CodecCache, NamespaceKey
from kvstash_vllm.scheduler import SchedulerSide
from kvstash_vllm.stats import Counters
from kvstash_vllm.worker import WorkerSide

C, B = 64, 32


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                   # nothing listens there any more
    return port


def test_tracker_reports_each_load_once_after_it_completes():
    t = LoadTracker()
    a, b = t.begin("a"), t.begin("b")
    assert t.take_done() == []
    assert t.cancel({"b", "zzz"}) == 1 and b.cancelled and not a.cancelled
    threading.Timer(0.05, lambda: t.complete(a, {7, 8})).start()
    t0 = time.monotonic()
    done = t.take_done(wait_s=5.0)               # an idle step waits for the completion ...
    assert time.monotonic() - t0 < 2.0           # ... and returns as soon as it comes
    assert [(j.req_id, j.failed_blocks) for j in done] == [("a", {7, 8})]
    assert t.in_flight_ids() == ["b"]
    t.complete(b, set())
    assert [j.req_id for j in t.take_done()] == ["b"] and t.take_done() == []
    t0 = time.monotonic()
    assert t.take_done(wait_s=5.0) == []         # nothing in flight: no wait
    assert time.monotonic() - t0 < 0.5


def _worker(cfg: ConnectorConfig, counters: Counters) -> WorkerSide:
    client = kvstash.Client(list(cfg.servers), cfg.tenant, "secret", None, cfg.get_deadline_ms)
    w = WorkerSide(cfg, None, client, B, C, torch.bfloat16, "auto", counters)
    w.codecs = CodecCache.shared(cfg, 30, 3, 64, "bf16", "ab" * 32, C, 0, 1)
    return w


def test_failed_async_load_reports_blocks_with_its_finish():
    cfg = ConnectorConfig.from_extra_config({"servers": [f"127.0.0.1:{_dead_port()}"],
                                             "get_deadline_ms": 500, "chunk_tokens": C})
    counters = Counters()
    w = _worker(cfg, counters)
    try:
        op = LoadOp(req_id="r1", tokens=list(range(2 * C)), ns=NamespaceKey(), extra_keys=None,
                    n_chunks=2, block_ids=[10, 11, 12, 13], first_block=1)
        w.start_load_kv(KvstashConnectorMetadata(loads=[op]))
        finished: set[str] = set()
        deadline = time.monotonic() + 30
        while not finished and time.monotonic() < deadline:
            assert w.take_failed_blocks() == set()       # nothing before its finish
            finished = w.get_finished(set(), idle=True)
        assert finished == {"r1"}
        assert w.take_failed_blocks() == {11, 12, 13}    # blocks below first_block are vLLM's
        assert w.take_failed_blocks() == set() and w.get_finished(set(), idle=False) == set()
        tot = counters.totals()
        assert tot["async_loads"] == 1 and tot["load_failures"] == 1 and tot.get("loads", 0) == 0
        assert tot["load_fail_unavailable"] == 1
    finally:
        w.shutdown(5)


def test_sync_mode_reports_in_the_step():
    cfg = ConnectorConfig.from_extra_config({"servers": [f"127.0.0.1:{_dead_port()}"], "async_load": False,
                                             "get_deadline_ms": 500, "chunk_tokens": C})
    counters = Counters()
    w = _worker(cfg, counters)
    try:
        op = LoadOp(req_id="r1", tokens=list(range(C)), ns=NamespaceKey(), extra_keys=None,
                    n_chunks=1, block_ids=[4, 5], first_block=0)
        w.start_load_kv(KvstashConnectorMetadata(loads=[op]))   # returns when done
        assert w.take_failed_blocks() == {4, 5}
        assert w.get_finished({"r1"}, idle=True) == set()       # nothing is async
        assert counters.totals().get("async_loads", 0) == 0
    finally:
        w.shutdown(5)


class _Blocks:
    """The one KVCacheManager method SchedulerSide uses (get_block_ids), over a dict."""

    def __init__(self, ids):
        self.ids = ids

    def get_block_ids(self, req_id):
        return (self.ids[req_id],)


def test_scheduler_never_reoffers_a_failed_async_load():
    """A Request whose async load failed and that vLLM re-queries from zero gets (0, False);
    one whose load succeeded is not marked. Real vLLM Request and KVConnectorOutput; the
    LOOKUP goes to a down server, so `matched` is set by hand (the lookup path has its
    own e2e tests). restore_policy "always": the cost model (which declines until it has
    measured rates, test_e2e tests it) must not decide these hits."""
    cfg = ConnectorConfig.from_extra_config({"servers": [f"127.0.0.1:{_dead_port()}"],
                                             "lookup_deadline_ms": 200, "chunk_tokens": C,
                                             "restore_policy": "always"})
    counters = Counters()
    client = kvstash.Client(list(cfg.servers), cfg.tenant, "secret", None, 200)
    codecs = CodecCache.shared(cfg, 30, 3, 64, "bf16", "ab" * 32, C, 0, 1)
    s = SchedulerSide(cfg, codecs, client, B, C, counters, load=True, save=False)
    reqs = [Request(f"q{i}", list(range(i, i + 3 * C + 5)), SamplingParams(max_tokens=1), None)
            for i in range(2)]
    for r in reqs:
        s._state(r).matched = 3                      # as if the LOOKUP found 3 chunks
        n, is_async = s.get_num_new_matched_tokens(r, 0)
        assert (n, is_async) == (3 * C, True)
        s.update_state_after_alloc(r, None, n)
    s.kv_cache_manager = _Blocks({"q0": [1, 2, 3, 4, 5, 6], "q1": [7, 8, 9, 10, 11, 12]})
    meta = s.build_connector_meta(SchedulerOutput.make_empty())
    assert sorted((o.req_id, tuple(o.block_ids)) for o in meta.loads) == [
        ("q0", (1, 2, 3, 4, 5, 6)), ("q1", (7, 8, 9, 10, 11, 12))]
    assert s.get_num_new_matched_tokens(reqs[0], 0) == (0, False)     # in flight: never twice
    s.update_connector_output(KVConnectorOutput(finished_recving={"q0", "q1"}, invalid_block_ids={3}))
    assert s.get_num_new_matched_tokens(reqs[0], 0) == (0, False)     # failed: computed
    assert s.get_num_new_matched_tokens(reqs[1], 0) == (3 * C, True)  # loaded: may load again
    assert s.request_finished(reqs[0], [1, 2, 3]) == (False, None)
