"""Scheduler side of KvstashConnector: what to load and what to save, per request.

Per request (first get_num_new_matched_tokens call):
  tokens   = the prompt's token ids; C = chunk_tokens (a whole number of vLLM blocks)
  chain    = keys of its n_full = len(tokens) // C full chunks (partial tails not kept)
  matched  = ONE kvstash LOOKUP of the chain (chunks stored from the start); a failed
             lookup counts as 0 (and in lookup_failures): vLLM computes everything.
  loadable = min(matched, (len(tokens) - 1) // C) chunks: never the last prompt token,
             whose logits vLLM needs; answered in whole chunks.
  decision = the restore cost model (kvstash.RestoreCostModel, restore_policy "cost"):
             the hit is loaded only when restoring its loadable chunks is estimated
             faster than vLLM prefilling the tokens it would load; otherwise it is
             declined (declined_hits, declined_tokens) and vLLM computes everything.
             Its rates come from the workers' stats (cost_* counters, read in
             update_connector_output): each step's forward time per scheduled token
             (prefill), each load's transfer and decode time, each save's encode time;
             and, until a load or save is measured, from a probe encode of one chunk
             run on a background thread at start. It declines until it knows both a
             prefill and a decode (or encode) rate: a declined hit costs a miss.
  save     = chunks [matched, n_full), emitted once the prefill has computed them, unless
             this process saved the same keys within the last SAVE_DEDUP_S seconds.
Loads are asynchronous by default (get_num_new_matched_tokens answers (n, True): vLLM
allocates the blocks, parks the request until the worker reports it in finished_recving);
async_load=false makes them synchronous (KV arrives in start_load_kv before the step's
forward; vLLM marks the step has_sync_kv_loads). A request whose async load failed
(its blocks came back in invalid_block_ids, seen in update_connector_output) is never
offered a load again: if vLLM re-queries it (a failed load with no valid prefix is freed
and rescheduled from zero) it computes everything.
request_finished never delays freeing (returns False): a save's worker copies its blocks
out in wait_for_save of the step that computed them, and a request finished while its
async load is in flight keeps its blocks because vLLM's finish_requests delays that free
itself until the load appears in finished_recving (worker: async_loads.py).
Thread-safety: called on vLLM's scheduler thread only.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

import kvstash

from .metadata import KvstashConnectorMetadata, LoadOp, SaveOp
from .namespace import NamespaceKey, UncacheableRequest, namespace_key, request_extra_keys
from .stats import Counters

log = logging.getLogger("kvstash_vllm")

SAVE_DEDUP_S = 30.0      # a chunk saved this recently by this process is not saved again
_DEDUP_MAX = 1 << 16


@dataclass
class _ReqState:
    tokens: list[int]
    ns: NamespaceKey | None            # None: not cacheable
    extra_keys: list[list[str]] | None
    stored_keys: list[bytes]
    matched: int                        # chunks found by the lookup
    local_computed: int = 0             # vLLM's own (block-aligned) prefix hit
    save: tuple[int, int] | None = None  # chunks [first, n) still to save
    load_failed: bool = False           # an async load of it failed: never load it again
    estimate: Any = None                # kvstash.RestoreEstimate of its hit (decided once)


class SchedulerSide:
    """Bookkeeping between vLLM's scheduler hooks. See the module docstring."""

    def __init__(self, cfg, codecs, client, block_size: int, chunk_tokens: int,
                 counters: Counters, load: bool, save: bool):
        self.cfg, self.codecs, self.client = cfg, codecs, client
        self.B, self.C = block_size, chunk_tokens
        self.counters = counters
        self.load_enabled, self.save_enabled = load, save
        self._reqs: dict[str, _ReqState] = {}
        self._need_load: dict[str, tuple[int, int]] = {}
        self._loading: dict[str, set[int]] = {}      # async loads in flight: their blocks
        self._recent: OrderedDict[bytes, float] = OrderedDict()
        self.kv_cache_manager = None
        self.cost = kvstash.RestoreCostModel(policy=cfg.restore_policy, margin=cfg.restore_margin)
        self.probe_done = threading.Event()
        if load and cfg.restore_policy == "cost":
            threading.Thread(target=self._probe, name="kvstash-cost-probe", daemon=True).start()
        else:
            self.probe_done.set()

    # ------------------------------------------------------------------ cost model
    def _probe(self) -> None:
        """One encode of a chunk of random KV with this connector's codec: the decode-rate
        sample of the cost model until a load or a save of this process is measured (a
        process that only loads has no other). Runs once, on a background thread. It
        builds the codec of the default namespace (no cache_salt, no adapter) through
        the CodecCache, which keeps it: the model and predictor it loads stay loaded for
        the requests (a codec dropped after the probe would free them)."""
        try:
            codec = self.codecs.get(NamespaceKey(), self.counters)
            lay = self.codecs.layout
            tokens = [1 + i % 1000 for i in range(self.C)]
            keys = [k for k in codec.chain_keys(tokens) if not k.partial][:1]
            rng = np.random.default_rng(0)
            x = rng.standard_normal((lay.n_layers, 2, self.C, lay.n_kv_heads, lay.head_dim), dtype=np.float32)
            chunk = (x.view(np.uint32) >> 16).astype(np.uint16) if lay.dtype == "bf16" else x.astype(np.float16)
            t0 = time.perf_counter()
            puts = codec.encode_chunks(tokens, keys, [chunk], 0)
            s = time.perf_counter() - t0
            self.cost.observe_encode(self.C, sum(p.payload_size for p in puts), s)
            self.counters.add(cost_probe_ms=s * 1e3)
        except Exception as e:  # no probe: hits wait for a measured save or load
            log.warning("kvstash: restore cost probe failed (%s: %s)", type(e).__name__, e)
        finally:
            self.probe_done.set()

    def _observe(self, data: dict) -> None:
        """Feeds the workers' samples of one interval (stats counters cost_*) to the model."""
        if data.get("cost_prefill_tokens"):
            self.cost.observe_prefill(int(data["cost_prefill_tokens"]), data.get("cost_prefill_ms", 0) / 1e3)
        if data.get("cost_restore_tokens"):
            self.cost.observe_restore(int(data["cost_restore_tokens"]), int(data.get("cost_restore_bytes", 0)),
                                      data.get("cost_transfer_ms", 0) / 1e3, data.get("cost_decode_ms", 0) / 1e3)
        if data.get("cost_encode_tokens"):
            self.cost.observe_encode(int(data["cost_encode_tokens"]), int(data.get("cost_encode_bytes", 0)),
                                     data.get("cost_encode_ms", 0) / 1e3)

    def _decide(self, rid: str, st: _ReqState, loadable: int, ext: int) -> bool:
        """Whether to load the request's hit (decided once per request)."""
        if st.estimate is None:
            e = st.estimate = self.cost.estimate(loadable * self.C, ext)
            if e.take:
                self.counters.add(taken_hits=1, restore_estimate_ms=e.restore_s * 1e3,
                                  recompute_estimate_ms=e.recompute_s * 1e3)
            else:
                self.counters.add(declined_hits=1, declined_tokens=ext,
                                  declined_restore_estimate_ms=e.restore_s * 1e3,
                                  declined_recompute_estimate_ms=e.recompute_s * 1e3)
                log.debug("kvstash: request %s: hit of %d tokens declined (%s)", rid, ext,
                          f"restore est {e.restore_s * 1e3:.0f} ms >= prefill est {e.recompute_s * 1e3:.0f} ms"
                          if e.informed else "no rates measured yet")
        return bool(st.estimate.take)

    # ------------------------------------------------------------------ state
    def _state(self, request: Any) -> _ReqState:
        rid = request.request_id
        st = self._reqs.get(rid)
        if st is not None:
            return st
        tokens = list(request.prompt_token_ids or [])
        n_full = len(tokens) // self.C
        st = _ReqState(tokens=tokens, ns=None, extra_keys=None, stored_keys=[], matched=0)
        self._reqs[rid] = st
        if n_full == 0:
            return st
        try:
            st.ns = namespace_key(request)
            st.extra_keys = request_extra_keys(request, n_full, self.C, self.cfg.cache_multimodal)
        except (UncacheableRequest, OSError) as e:
            st.ns = None
            self.counters.add(uncacheable_requests=1)
            log.debug("kvstash: request %s not cached: %s", rid, e)
            return st
        try:
            codec = self.codecs.get(st.ns, self.counters)
            keys = [k for k in codec.chain_keys(tokens[: n_full * self.C], extra_keys=st.extra_keys)
                    if not k.partial][:n_full]
        except Exception as e:  # a codec that cannot be built: nothing cached
            st.ns = None
            self.counters.add(codec_errors=1)
            log.warning("kvstash: no codec for request %s: %s", rid, e)
            return st
        st.stored_keys = [bytes(k.stored) for k in keys]
        if self.load_enabled:
            t0 = time.perf_counter()
            try:
                st.matched = int(self.client.lookup(keys, deadline_ms=self.cfg.lookup_deadline_ms).matched_chunks)
                self.counters.add(lookups=1)
            except Exception as e:
                st.matched = 0
                self.counters.add(lookups=1, lookup_failures=1)
                log.warning("kvstash: lookup failed for request %s (%s): computing it", rid, e)
            self.counters.add(lookup_ms=(time.perf_counter() - t0) * 1e3)
        if self.save_enabled and n_full > st.matched:
            st.save = (st.matched, n_full)
        return st

    # ------------------------------------------------------------------ hooks
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        st = self._state(request)
        st.local_computed = num_computed_tokens
        if st.ns is None or not self.load_enabled or st.load_failed \
                or request.request_id in self._loading:
            return 0, False
        loadable = min(st.matched, (len(st.tokens) - 1) // self.C)
        ext = loadable * self.C - num_computed_tokens
        if ext <= 0 or not self._decide(request.request_id, st, loadable, ext):
            return 0, False
        return ext, self.cfg.async_load

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens <= 0:
            return
        st = self._reqs[request.request_id]
        lo, hi = st.local_computed, st.local_computed + num_external_tokens
        if hi % self.C or lo % self.B:
            raise RuntimeError(f"kvstash: load range [{lo}, {hi}) is not chunk/block aligned")
        self._need_load[request.request_id] = (lo, hi)
        self.counters.add(matched_tokens=num_external_tokens)

    def _block_ids(self, req_id: str) -> list[int]:
        return list(self.kv_cache_manager.get_block_ids(req_id)[0])

    def _dedup_first(self, st: _ReqState, first: int, n: int) -> int:
        now = time.monotonic()
        while self._recent and next(iter(self._recent.values())) < now - SAVE_DEDUP_S:
            self._recent.popitem(last=False)
        while first < n and st.stored_keys[first] in self._recent:
            first += 1
        for k in st.stored_keys[first:n]:
            self._recent[k] = now
            self._recent.move_to_end(k)
        while len(self._recent) > _DEDUP_MAX:
            self._recent.popitem(last=False)
        return first

    def build_connector_meta(self, so: Any) -> KvstashConnectorMetadata:
        meta = KvstashConnectorMetadata()
        for rid, (lo, hi) in self._need_load.items():
            st = self._reqs[rid]
            blocks = self._block_ids(rid)[: hi // self.B]
            if self.cfg.async_load:
                self._loading[rid] = set(blocks[lo // self.B:])
            meta.loads.append(LoadOp(
                req_id=rid, tokens=st.tokens[:hi], ns=st.ns,
                extra_keys=st.extra_keys[: hi // self.C] if st.extra_keys else None,
                n_chunks=hi // self.C, block_ids=blocks, first_block=lo // self.B,
                estimate_ms=st.estimate.restore_s * 1e3 if st.estimate is not None else 0.0))
        self._need_load.clear()
        meta.step_tokens = int(getattr(so, "total_num_scheduled_tokens", 0) or 0)

        done_after: dict[str, int] = {}
        for nr in so.scheduled_new_reqs:
            done_after[nr.req_id] = nr.num_computed_tokens + so.num_scheduled_tokens.get(nr.req_id, 0)
        cr = so.scheduled_cached_reqs
        for i, rid in enumerate(cr.req_ids):
            done_after[rid] = cr.num_computed_tokens[i] + so.num_scheduled_tokens.get(rid, 0)
        for rid, done in done_after.items():
            st = self._reqs.get(rid)
            if st is None or st.save is None or st.ns is None:
                continue
            first, n = st.save
            if done < n * self.C:
                continue
            st.save = None
            first = self._dedup_first(st, first, n)
            if first >= n:
                continue
            bpc = self.C // self.B
            blocks = self._block_ids(rid)[first * bpc: n * bpc]
            meta.saves.append(SaveOp(
                req_id=rid, tokens=st.tokens[: n * self.C], ns=st.ns,
                extra_keys=st.extra_keys[:n] if st.extra_keys else None,
                first_chunk=first, n_chunks=n, block_ids=blocks))
        return meta

    def update_connector_output(self, out: Any) -> None:
        """Feeds the workers' cost samples to the cost model, marks requests whose async
        load failed (blocks in invalid_block_ids, reported no later than their
        finished_recving) and forgets the loads that finished."""
        stats = getattr(out, "kv_connector_stats", None)
        if stats is not None and getattr(stats, "data", None):
            self._observe(stats.data)
        bad = getattr(out, "invalid_block_ids", None) or set()
        if bad:
            for rid, blocks in self._loading.items():
                st = self._reqs.get(rid)
                if st is not None and blocks & bad:
                    st.load_failed = True
        for rid in getattr(out, "finished_recving", None) or ():
            self._loading.pop(rid, None)

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict | None]:
        """False: never delays the free (see the module docstring)."""
        self._reqs.pop(request.request_id, None)
        self._need_load.pop(request.request_id, None)
        return False, None
