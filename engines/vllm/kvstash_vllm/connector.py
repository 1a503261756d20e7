"""KvstashConnector: kvstash as a vLLM 0.32 KV connector (KVConnectorBase_V1).

Load it with
  kv_transfer_config={"kv_connector": "KvstashConnector",
                      "kv_connector_module_path": "kvstash_vllm",
                      "kv_role": "kv_both",
                      "kv_load_failure_policy": "recompute",
                      "kv_connector_extra_config": {"servers": ["127.0.0.1:7470"], ...}}
(docs/engines/vllm.md: every extra_config key, what is cached, the failure policy).

vLLM makes one instance per role: SCHEDULER (scheduler.SchedulerSide: one LOOKUP per
request, load/save planning) and WORKER (worker.WorkerSide: GET/restore/scatter and
gather/encode/PUT). Requirements checked here, each a ValueError naming the fix:
the CPU attention backend's paged layout (the worker probes it), one KV cache group,
a KV dtype of bf16 or f16 (kv_cache_dtype "auto"), kv_load_failure_policy "recompute",
hf_overrides that can be fingerprinted (a dict of JSON values, not a function; else set
model_fingerprint).
Loads are asynchronous by default (extra_config async_load): the request waits parked
in vLLM (WAITING_FOR_REMOTE_KVS) while a background thread loads it, and the engine
keeps stepping the other requests; async_load=false loads inside the step instead.
request_finished never delays a free: saves copy their blocks out in the step that
computed them, and the blocks of a request aborted while its load is in flight are held
by vLLM itself until get_finished reports that load (async_loads.py: the contract).
Thread-safety: vLLM calls each role's hooks from one thread; see the two sides.
"""
from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)

import kvstash

from .config import ConfigError, ConnectorConfig
from .metadata import KvstashConnectorMetadata
from .namespace import CodecCache, model_fingerprint
from .scheduler import SchedulerSide
from .stats import Counters, KvstashConnectorStats
from .worker import WorkerSide

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

log = logging.getLogger("kvstash_vllm")

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
_instances: "weakref.WeakSet[KvstashConnector]" = weakref.WeakSet()


def instances() -> list["KvstashConnector"]:
    """The live connectors of this process (both roles when vLLM runs in-process, e.g.
    VLLM_ENABLE_V1_MULTIPROCESSING=0): tests and benchmarks read totals() and flush()."""
    return list(_instances)


def _make_client(cfg: ConnectorConfig) -> "kvstash.Client":
    tls = None
    if cfg.tls:
        tls = kvstash.TlsOptions(enabled=True, ca_file=cfg.tls_ca_file, verify_peer=True,
                                 server_name=cfg.tls_server_name)
    return kvstash.Client(list(cfg.servers), cfg.tenant, cfg.resolved_credential(), tls,
                          cfg.get_deadline_ms, connect_timeout_ms=cfg.connect_timeout_ms,
                          max_attempts=cfg.max_attempts,
                          down_server_skip_ms=cfg.down_server_skip_ms,
                          unacked_timeout_ms=cfg.unacked_timeout_ms)


class KvstashConnector(KVConnectorBase_V1):
    """kvstash prefix-KV store connector (see the module docstring)."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig | None" = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        self.cfg = ConnectorConfig.from_extra_config(ktc.kv_connector_extra_config)
        if getattr(ktc, "kv_load_failure_policy", "recompute") != "recompute":
            raise ConfigError("KvstashConnector needs kv_transfer_config kv_load_failure_policy="
                              "'recompute' (a failed load must be recomputed, not fail the request)")
        if kv_cache_config is not None and len(kv_cache_config.kv_cache_groups) > 1:
            raise ConfigError("KvstashConnector supports models with one KV cache group "
                              f"(this one has {len(kv_cache_config.kv_cache_groups)})")
        cache = vllm_config.cache_config
        if cache.cache_dtype not in ("auto", None):
            raise ConfigError(f"kv_cache_dtype {cache.cache_dtype!r} is not supported: kvstash stores "
                              "bf16 or f16 KV (use kv_cache_dtype='auto')")
        mc = vllm_config.model_config
        self.model_dtype = mc.dtype
        if self.model_dtype not in _DTYPES:
            raise ConfigError(f"model dtype {self.model_dtype} is not supported (bfloat16 or float16)")
        self.kv_dtype = _DTYPES[self.model_dtype]
        self.block_size = int(cache.block_size)
        self.chunk_tokens = self.cfg.resolved_chunk_tokens(self.block_size)
        self.fingerprint = self.cfg.model_fingerprint.lower() or self._model_fingerprint(mc)
        pc = vllm_config.parallel_config
        self.tp_size = int(pc.tensor_parallel_size)
        self.tp_rank = 0
        if role == KVConnectorRole.WORKER and self.tp_size > 1:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            self.tp_rank = int(get_tensor_model_parallel_rank())
        self.load_enabled = self.cfg.load and ktc.is_kv_consumer
        self.save_enabled = self.cfg.save and ktc.is_kv_producer
        self.counters = Counters()
        self.client = _make_client(self.cfg)
        self._scheduler: SchedulerSide | None = None
        self._worker: WorkerSide | None = None
        self._idle_step = False          # the last start_load_kv came from a step with no forward
        if role == KVConnectorRole.SCHEDULER:
            codecs = self._codecs(mc.get_num_layers(pc), mc.get_num_kv_heads(pc), mc.get_head_size())
            self._scheduler = SchedulerSide(self.cfg, codecs, self.client, self.block_size,
                                            self.chunk_tokens, self.counters,
                                            self.load_enabled, self.save_enabled)
        else:
            self._worker = WorkerSide(self.cfg, self._codecs, self.client, self.block_size,
                                      self.chunk_tokens, self.model_dtype,
                                      cache.cache_dtype or "auto", self.counters)
        _instances.add(self)
        log.info("KvstashConnector %s: servers %s tenant %s codec %s chunk %d tokens (%d blocks) "
                 "model %s.. load %s save %s", role.name, ",".join(self.cfg.servers), self.cfg.tenant,
                 self.cfg.codec, self.chunk_tokens, self.chunk_tokens // self.block_size,
                 self.fingerprint[:12], self.load_enabled, self.save_enabled)

    @staticmethod
    def _model_fingerprint(mc: Any) -> str:
        """namespace.model_fingerprint of the served model: its weights files, config.json
        and the engine's hf_overrides. ConfigError for overrides it cannot fingerprint."""
        try:
            return model_fingerprint(mc.model, getattr(mc, "hf_overrides", None))
        except ValueError as e:
            raise ConfigError(f"KvstashConnector cannot fingerprint the model: {e}") from e

    def _codecs(self, n_layers: int, n_kv_heads: int, head_dim: int) -> CodecCache:
        return CodecCache.shared(self.cfg, int(n_layers), int(n_kv_heads), int(head_dim), self.kv_dtype,
                                 self.fingerprint, self.chunk_tokens, self.tp_rank, self.tp_size)

    # ============================================================== scheduler side
    def bind_kv_cache_manager(self, kv_cache_manager: Any) -> None:
        super().bind_kv_cache_manager(kv_cache_manager)
        if self._scheduler is not None:
            self._scheduler.kv_cache_manager = kv_cache_manager

    def get_num_new_matched_tokens(self, request: "Request", num_computed_tokens: int) -> tuple[int | None, bool]:
        """Tokens beyond num_computed_tokens that kvstash holds (whole chunks, never the
        last prompt token), from one LOOKUP per request; True: loaded asynchronously."""
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        return self._scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: Any) -> None:
        self._scheduler.update_connector_output(connector_output)

    def request_finished(self, request: "Request", block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        """Never delays the free (False): saves copy their blocks out in the step that
        computed them; a request aborted during its async load keeps its blocks because
        vLLM delays that free itself until the load is in finished_recving."""
        return self._scheduler.request_finished(request, block_ids)

    @property
    def requires_kv_delivery(self) -> bool:
        return False          # a best-effort cache: a dropped save is a future miss

    # ============================================================== worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._worker.register_kv_caches(kv_caches)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        """vLLM binds the step's metadata right before its forward (sync loads first)."""
        super().bind_connector_metadata(connector_metadata)
        if self._worker is not None:
            self._worker.forward_began()

    def _meta(self) -> KvstashConnectorMetadata | None:
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        return meta if isinstance(meta, KvstashConnectorMetadata) else None

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        """Sync mode: loads before the forward. Async mode (vLLM calls it after the
        forward): starts the loads on background threads."""
        self._idle_step = forward_context is None or getattr(forward_context, "attn_metadata", None) is None
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvstashConnectorMetadata)
        # vLLM calls this before the forward only for a step with sync loads.
        before_forward = not self.cfg.async_load and bool(meta.loads)
        if not before_forward:
            self._worker.forward_ended(meta)
        if meta.loads:
            self._worker.start_load_kv(meta)
        if before_forward:
            self._worker.forward_began()          # the forward follows the sync loads

    def wait_for_layer_load(self, layer_name: str) -> None:
        return    # sync: start_load_kv loaded every layer; async: loaded requests are not in the forward

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        return    # all layers are gathered at once in wait_for_save, after the forward

    def wait_for_save(self) -> None:
        meta = self._meta()
        if meta is None:
            return
        self._worker.forward_ended(meta)          # sync mode: the forward ends here
        if meta.saves:
            self._worker.wait_for_save(meta)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.take_failed_blocks() if self._worker is not None else set()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        """(None: no delayed frees, the async loads done since the last step)."""
        if self._worker is None:
            return None, None
        done = self._worker.get_finished(finished_req_ids, idle=self._idle_step)
        return None, (done or None)

    # ============================================================== both
    def get_kv_connector_stats(self) -> KvstashConnectorStats | None:
        data = self.counters.take_interval()
        return KvstashConnectorStats(data=data) if data else None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KvstashConnectorStats:
        return KvstashConnectorStats(data=dict(data or {}))

    def totals(self) -> dict[str, int | float]:
        """Counters since start (this role's), for tests and benchmarks."""
        return self.counters.totals()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Worker: waits for queued saves (True when all finished). Scheduler: True."""
        return self._worker.flush(timeout_s) if self._worker is not None else True

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()
        try:
            self.client.close()
        except Exception:
            pass
