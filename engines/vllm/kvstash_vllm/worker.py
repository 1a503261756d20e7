"""Worker side of KvstashConnector: loads into and saves out of vLLM's paged KV blocks.

Load of one request (LoadOp): GET chunks [0, n) of the chain in parallel (each with
  get_deadline_ms; Client.get_array: the received bytes, not copied), restore them with
  the codec (which verifies every payload: a payload of another namespace, codec,
  artifact or model is MismatchError, a damaged one CorruptionError; raw chunks are
  verified in place and come back as views of their payloads), and scatter tokens from
  first_block on into the request's blocks, all layers (_scatter_chunk: the CPU layout
  code, in one place). The CPU raw path copies the KV once: payload -> the cache's tiles,
  and is pipelined: each chunk is verified and scattered as soon as its GET completes,
  while the later chunks are still arriving (_load_raw_cpu). ANY failure (connection,
  deadline, NotFound, checksum, mismatch, shape, an exception in our code) puts every
  block of the load into the set returned by get_block_ids_with_load_errors, so vLLM
  (kv_load_failure_policy="recompute") recomputes those blocks: KV that was not
  verified is never decoded from, and a failed load is never reported as loaded.
  - async_load (default): start_load_kv (called by vLLM after the step's forward) hands
    each load to a background thread (load_concurrency of them; GET, restore and the
    scatter release the GIL) and returns. vLLM keeps the request parked
    (WAITING_FOR_REMOTE_KVS) with its blocks reserved and unused by any forward until
    get_finished reports it in finished_recving; the failed blocks of a load are
    reported in the same step (async_loads.py has the contract, from vLLM's source).
    A request vLLM finishes (aborts) meanwhile is cancelled, still reported once its
    thread is done, and only then does vLLM free its blocks.
  - sync (async_load false): start_load_kv runs before the step's forward and the engine
    waits for it; failed blocks are reported in that step.
Save (wait_for_save, after the forward wrote the step's KV): copy the chunks' blocks
  of every layer into one canonical tensor (a memcpy-speed gather in the engine thread,
  so the blocks may be freed as soon as the step ends), then encode and PUT them on the
  background save thread. A full queue drops the save (saves_dropped) rather than
  stalling the engine; a failed PUT is counted (save_failures) and otherwise harmless.
CUDA caches: the same steps on the GPU (cuda_layout.CudaPagedKv, selected by
  register_kv_caches; docs/engines/vllm.md "GPU: CUDA KV caches"); in async mode its
  restore + scatter kernel runs on the load thread and is synchronised before the load
  counts as done, so finished_recving never precedes the KV.
Thread-safety: hooks run on vLLM's worker thread; load threads touch only their job's
blocks (reserved for it, see above), the client and codecs (thread-safe), the counters
and the tracker (locked); the save thread only its own job, the client and counters.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from .async_loads import LoadJob, LoadTracker
from .cuda_layout import CudaPagedKv
from .layout import LayoutError, TileOrder, as_u16_view, cpu_attention_isa
from .metadata import KvstashConnectorMetadata, LoadOp, SaveOp
from .stats import Counters, failure_reason

log = logging.getLogger("kvstash_vllm")

_LAYER_RE = re.compile(r"(\d+)")


def _layer_index(name: str) -> int:
    nums = _LAYER_RE.findall(name)
    if not nums:
        raise LayoutError(f"cannot order KV cache layer {name!r}: no layer number in its name")
    return int(nums[0])


def _as_numpy_u16(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


class WorkerSide:
    """The paged-cache side. register_kv_caches must run before any load or save."""

    def __init__(
        self,
        cfg,
        make_codecs,
        client,
        block_size: int,
        chunk_tokens: int,
        model_dtype: torch.dtype,
        kv_cache_dtype: str,
        counters: Counters,
    ):
        self.cfg, self.client = cfg, client
        self._make_codecs = make_codecs  # (n_layers, n_kv_heads, head_dim) -> CodecCache
        self.codecs = None
        self.B, self.C = block_size, chunk_tokens
        self.model_dtype, self.kv_cache_dtype = model_dtype, kv_cache_dtype
        self.counters = counters
        self.layers: list[torch.Tensor] = []
        self.layer_names: list[str] = []
        self.order: TileOrder | None = None
        self.cuda: CudaPagedKv | None = None  # set when the caches are CUDA tensors
        self.H = self.D = 0
        self._failed_blocks: set[int] = set()
        self._fwd_t0: float | None = None  # forward_began of the current step
        self._pool = ThreadPoolExecutor(max_workers=cfg.get_parallelism, thread_name_prefix="kvstash-get")
        self.async_load = bool(cfg.async_load)
        self.loads = LoadTracker()
        self._loader = (
            ThreadPoolExecutor(max_workers=cfg.load_concurrency, thread_name_prefix="kvstash-load")
            if self.async_load
            else None
        )
        self._failed_lock = threading.Lock()
        self._saves: queue.Queue = queue.Queue(maxsize=cfg.max_pending_saves)
        self._stop = False
        self._saver = threading.Thread(target=self._save_loop, name="kvstash-save", daemon=True)
        self._saver.start()

    # ------------------------------------------------------------------ layout
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        if not kv_caches:
            raise LayoutError("no KV cache tensors to register")
        names = sorted(kv_caches, key=_layer_index)
        first = kv_caches[names[0]]
        if first.device.type == "cuda":  # cuda_layout.py: GPU decode and kernel scatter/gather
            return self._register_cuda_kv_caches(names, kv_caches)
        if first.dim() != 4:
            raise LayoutError(
                f"KV cache of {names[0]} is {tuple(first.shape)}: expected the CPU "
                "backend's [blocks, kv_heads, block_size, 2 * head_dim]"
            )
        _, H, B, D2 = first.shape
        if B != self.B or D2 % 2:
            raise LayoutError(f"KV cache block size {B} != scheduler block size {self.B}")
        self.H, self.D = int(H), int(D2 // 2)
        if first.dtype != self.model_dtype:
            raise LayoutError(f"KV cache dtype {first.dtype} != model dtype {self.model_dtype}")
        isa = cpu_attention_isa(self.model_dtype, self.B, self.D, self.kv_cache_dtype)
        self.order = TileOrder.probe(self.B, self.D, self.H, first.dtype, isa)
        for n in names:
            self.order.check_cache(kv_caches[n], self.H)
        self.layers = [kv_caches[n] for n in names]
        # uint16 NumPy views sharing the caches' memory: kvstash.paged_scatter/gather
        # (native, GIL released) copy tiles through them.
        self._layers_u16 = [as_u16_view(kv) for kv in self.layers]
        self.layer_names = names
        self.codecs = self._make_codecs(len(names), self.H, self.D)
        log.info(
            "kvstash: %d KV layers, %d heads x %d dims, block %d, chunk %d, CPU isa %s " "(copy loops: %s)",
            len(names),
            self.H,
            self.D,
            self.B,
            self.C,
            isa,
            self.order.copy_loops(),
        )

    def _register_cuda_kv_caches(self, names: list[str], kv_caches: dict[str, torch.Tensor]) -> None:
        """CUDA caches: checked and moved by cuda_layout.CudaPagedKv (LayoutError if it cannot)."""
        self.layers = [kv_caches[n] for n in names]
        self.cuda = CudaPagedKv.create(
            self.layers, self.B, self.C, self.model_dtype, max_decoders=self.cfg.max_codecs
        )
        self.H, self.D = self.cuda.H, self.cuda.D
        self.layer_names = names
        self.codecs = self._make_codecs(len(names), self.H, self.D)
        log.info(
            "kvstash: %d KV layers, %d heads x %d dims, block %d (kernel block %d), chunk %d, CUDA %s",
            len(names),
            self.H,
            self.D,
            self.B,
            self.cuda.KB,
            self.C,
            self.layers[0].device,
        )

    # ------------------------------------------------------------------ step timing
    def forward_began(self) -> None:
        """The step's forward starts now (after the metadata is bound, and in sync mode
        after its loads)."""
        self._fwd_t0 = time.perf_counter()

    def forward_ended(self, meta: KvstashConnectorMetadata | None) -> None:
        """The step's forward has finished: its (tokens, ms) is a prefill sample for the
        scheduler's cost model (counters cost_prefill_tokens / cost_prefill_ms; steps of
        fewer than 64 tokens are dropped there). Counts each step once."""
        t0, self._fwd_t0 = self._fwd_t0, None
        if t0 is None or meta is None or meta.step_tokens <= 0:
            return
        self.counters.add(
            cost_prefill_tokens=meta.step_tokens, cost_prefill_ms=(time.perf_counter() - t0) * 1e3
        )

    # ------------------------------------------------------------------ load
    def start_load_kv(self, meta: KvstashConnectorMetadata) -> None:
        """Sync mode: loads every op now. Async mode: hands each op to a load thread."""
        for op in meta.loads:
            if self._loader is None:
                self._report_failed(self._load(op))
                continue
            job = self.loads.begin(op.req_id)
            self.counters.add(async_loads=1)
            try:
                self._loader.submit(self._load_job, op, job)
            except RuntimeError as e:  # executor shut down: report the load failed
                self._fail(op, e)
                self.loads.complete(job, set(op.block_ids[op.first_block :]))

    def _load_job(self, op: LoadOp, job: LoadJob) -> None:
        failed = set(op.block_ids[op.first_block :])
        try:
            failed = self._load(op, job)
        finally:
            self.loads.complete(job, failed)

    def get_finished(self, finished_req_ids: set[str], idle: bool) -> set[str]:
        """Async loads done since the last call (finished_recving); their failed blocks go
        to the load-error set in the same call, so vLLM sees both in one step. Loads of
        requests in finished_req_ids are cancelled. idle: the step ran no forward."""
        if self._loader is None:
            return set()
        self.loads.cancel(finished_req_ids)
        done = self.loads.take_done(self.cfg.idle_wait_ms / 1e3 if idle else 0.0)
        for job in done:
            self._report_failed(job.failed_blocks)
        return {job.req_id for job in done}

    def _keys(self, codec, tokens, extra_keys, n_chunks):
        keys = [k for k in codec.chain_keys(tokens, extra_keys=extra_keys) if not k.partial]
        if len(keys) < n_chunks:
            raise RuntimeError(f"chain has {len(keys)} full chunks, {n_chunks} expected")
        return keys[:n_chunks]

    def _fetch(self, op: LoadOp, codec: Any) -> tuple[list, list[np.ndarray]]:
        """GET the load's chunks (the network part): (keys, payloads), each payload
        a read-only uint8 array owning the received bytes (Client.get_array: no copy).
        Touches no engine state. Raises on any failure."""
        keys = self._keys(codec, op.tokens, op.extra_keys, op.n_chunks)
        route = keys[0].stored
        dl = self.cfg.get_deadline_ms
        payloads = list(
            self._pool.map(lambda k: self.client.get_array(route, k.stored, deadline_ms=dl), keys)
        )
        return keys, payloads

    def _restore_into_blocks(self, op: LoadOp, codec: Any, keys: list, payloads: list[np.ndarray]) -> None:
        """Verify + decode the payloads and write them into the request's blocks: the one
        place that depends on where the KV cache lives (CUDA: cuda_layout; CPU:
        restore_chunk_views + _scatter: a raw chunk is verified in place and scattered
        straight from its payload, nothing copied in between).
        Raises on any failure (then nothing may read the blocks: they are reported failed)."""
        if self.cuda is not None:  # restore on the GPU (verified), scatter with the kernel
            self.cuda.load(codec, op.tokens, keys, payloads, op.block_ids, op.first_block, op.n_chunks)
            return
        arrays = codec.restore_chunk_views(op.tokens, keys, payloads)
        if len(arrays) != op.n_chunks:
            raise RuntimeError(f"restore returned {len(arrays)} chunks, {op.n_chunks} expected")
        self._scatter(op, arrays)

    def _load(self, op: LoadOp, job: LoadJob | None = None) -> set[int]:
        """Fetches and restores one load; returns the blocks that failed (empty: loaded).
        A cancelled job (its request finished) is not decoded or scattered.
        A raw load into a CPU cache is pipelined (_load_raw_cpu); the others fetch every
        chunk, then restore them together."""
        t0 = time.perf_counter()
        try:
            if job is not None and job.cancelled:
                self.counters.add(loads_cancelled=1)
                return set()
            codec = self.codecs.get(op.ns, self.counters)
            if self.cuda is None and codec.kind == "raw":
                done = self._load_raw_cpu(op, job, codec)
                if done is None:
                    self.counters.add(loads_cancelled=1)
                    return set()
                nbytes, transfer_s, decode_s = done
            else:
                keys, payloads = self._fetch(op, codec)
                if job is not None and job.cancelled:
                    self.counters.add(loads_cancelled=1)
                    return set()
                t1 = time.perf_counter()
                self._restore_into_blocks(op, codec, keys, payloads)
                nbytes, transfer_s, decode_s = (
                    sum(len(p) for p in payloads),
                    t1 - t0,
                    time.perf_counter() - t1,
                )
        except Exception as e:
            return self._fail(op, e)
        finally:
            self.counters.add(load_ms=(time.perf_counter() - t0) * 1e3)
        loaded = (len(op.block_ids) - op.first_block) * self.B
        # A restore sample of the scheduler's cost model (scheduler.py): every chunk of
        # the chain is decoded, so the rate is per decoded token.
        self.counters.add(
            loads=1,
            loaded_tokens=loaded,
            load_bytes=nbytes,
            cost_restore_tokens=op.n_chunks * self.C,
            cost_restore_bytes=nbytes,
            cost_transfer_ms=transfer_s * 1e3,
            cost_decode_ms=decode_s * 1e3,
        )
        return set()

    def _load_raw_cpu(self, op: LoadOp, job: LoadJob | None, codec: Any) -> tuple[int, float, float] | None:
        """A raw load into the CPU cache, pipelined: every chunk GET is issued at once,
        and each chunk is verified (restore_chunk_views at its chain position) and
        scattered as soon as its GET completes, while the later ones are still arriving.
        Returns (payload bytes, seconds spent waiting on the GETs (keys included),
        seconds verifying and scattering), whose sum is the load's wall time; None when
        the job was cancelled (the GETs not yet started are dropped). Raises on any
        failure; chunks scattered before it are then reported failed with the rest."""
        t0 = time.perf_counter()
        keys = self._keys(codec, op.tokens, op.extra_keys, op.n_chunks)
        route, dl = keys[0].stored, self.cfg.get_deadline_ms
        gets = [self._pool.submit(self.client.get_array, route, k.stored, deadline_ms=dl) for k in keys]
        nbytes, wait_s, work_s = 0, time.perf_counter() - t0, 0.0
        try:
            for j, get in enumerate(gets):
                t1 = time.perf_counter()
                payload = get.result()
                t2 = time.perf_counter()
                wait_s += t2 - t1
                if job is not None and job.cancelled:
                    return None
                (chunk,) = codec.restore_chunk_views(op.tokens, keys, [payload], j)
                self._scatter_chunk(op, j, chunk)
                nbytes += len(payload)
                work_s += time.perf_counter() - t2
        finally:
            for get in gets:
                get.cancel()  # no-op for the GETs done or running
        return nbytes, wait_s, work_s

    def _fail(self, op: LoadOp, e: BaseException) -> set[int]:
        reason = failure_reason(e)
        bad = set(op.block_ids[op.first_block :])
        self.counters.add(load_failures=1, load_failed_blocks=len(bad), **{f"load_fail_{reason}": 1})
        log.warning(
            "kvstash: load of %d chunks for request %s failed (%s: %s); vLLM recomputes " "%d blocks",
            op.n_chunks,
            op.req_id,
            type(e).__name__,
            e,
            len(bad),
        )
        return bad

    def _report_failed(self, blocks: set[int]) -> None:
        if blocks:
            with self._failed_lock:
                self._failed_blocks.update(blocks)

    def _scatter(self, op: LoadOp, arrays: list) -> None:
        """Writes the restored chunks into the request's blocks from op.first_block on."""
        for j, a in enumerate(arrays):
            self._scatter_chunk(op, j, a)

    def _scatter_chunk(self, op: LoadOp, j: int, a: np.ndarray) -> None:
        """Writes restored chain chunk j into its blocks at or after op.first_block
        (TileOrder.scatter: every layer's tiles in the probed order, natively)."""
        L, H, D, C, B = len(self.layers), self.H, self.D, self.C, self.B
        bpc = C // B
        if a.shape != (L, 2, C, H, D):
            raise LayoutError(f"restored chunk {j} is {a.shape}, expected {(L, 2, C, H, D)}")
        lo_blk = max(op.first_block, j * bpc)
        hi_blk = (j + 1) * bpc
        if lo_blk < hi_blk:
            self.order.scatter(
                a.view(np.uint16), (lo_blk - j * bpc) * B, self._layers_u16, op.block_ids[lo_blk:hi_blk]
            )

    def take_failed_blocks(self) -> set[int]:
        with self._failed_lock:
            out, self._failed_blocks = self._failed_blocks, set()
        return out

    # ------------------------------------------------------------------ save
    def wait_for_save(self, meta: KvstashConnectorMetadata) -> None:
        for op in meta.saves:
            try:
                buf = self._gather(op.block_ids)
            except Exception as e:
                self.counters.add(save_failures=1)
                log.warning("kvstash: gather for request %s failed: %s", op.req_id, e)
                continue
            try:
                self._saves.put_nowait((op, buf))
            except queue.Full:
                self.counters.add(saves_dropped=1)

    def _gather(self, block_ids: list[int]) -> torch.Tensor:
        if self.cuda is not None:
            return self.cuda.gather(block_ids)
        T = len(block_ids) * self.B
        out = np.empty((len(self.layers), 2, T, self.H, self.D), dtype=np.uint16)
        self.order.gather(self._layers_u16, block_ids, out)
        return torch.from_numpy(out.view(np.int16)).view(self.layers[0].dtype)

    def _save_loop(self) -> None:
        while True:
            item = self._saves.get()
            try:
                if item is None:
                    return
                self._save(*item)
            finally:
                self._saves.task_done()

    def _save(self, op: SaveOp, buf: torch.Tensor) -> None:
        t0 = time.perf_counter()
        try:
            codec = self.codecs.get(op.ns, self.counters)
            keys = self._keys(codec, op.tokens, op.extra_keys, op.n_chunks)
            C = self.C
            chunks = [
                _as_numpy_u16(buf[:, :, j * C : (j + 1) * C]) for j in range(op.n_chunks - op.first_chunk)
            ]
            t_enc = time.perf_counter()
            puts = codec.encode_chunks(op.tokens, keys, chunks, op.first_chunk)
            encode_ms = (time.perf_counter() - t_enc) * 1e3
            self.client.put_chunks(puts, deadline_ms=self.cfg.put_deadline_ms)
            nbytes = sum(p.payload_size for p in puts)
            self.counters.add(
                saves=1,
                saved_chunks=len(puts),
                save_raw_bytes=int(buf.numel() * buf.element_size()),
                save_bytes=nbytes,
                cost_encode_tokens=len(puts) * C,
                cost_encode_bytes=nbytes,
                cost_encode_ms=encode_ms,
            )
        except Exception as e:
            self.counters.add(save_failures=1)
            log.warning(
                "kvstash: save of chunks [%d, %d) for request %s failed: %s: %s",
                op.first_chunk,
                op.n_chunks,
                op.req_id,
                type(e).__name__,
                e,
            )
        finally:
            self.counters.add(save_ms=(time.perf_counter() - t0) * 1e3)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Waits until every queued save has finished; False on timeout."""
        if timeout_s is None:
            self._saves.join()
            return True
        deadline = time.monotonic() + timeout_s
        while self._saves.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def shutdown(self, timeout_s: float = 30.0) -> None:
        if self._loader is not None:
            self.loads.cancel(set(self.loads.in_flight_ids()))
            self._loader.shutdown(wait=True, cancel_futures=False)
        self.flush(timeout_s)
        if self._saver.is_alive():
            try:
                self._saves.put(None, timeout=1.0)
            except queue.Full:
                pass
        self._pool.shutdown(wait=False, cancel_futures=True)
