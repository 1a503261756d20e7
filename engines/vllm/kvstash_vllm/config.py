"""KvstashConnector settings: every `kv_connector_extra_config` key, its default and checks.

docs/engines/vllm.md lists the same keys for users; keep the two in sync.
Errors: ConfigError (a ValueError) naming the key, for a wrong type or value or an
unknown key (a typo must not silently fall back to a default).
Thread-safety: ConnectorConfig is a frozen dataclass.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["ConnectorConfig", "ConfigError"]

CODECS = ("raw", "spec", "dckv")
RESTORE_POLICIES = ("cost", "always")
MAX_CODEC_THREADS = 256   # the predictor keeps scratch per thread: a typo must not exhaust memory


class ConfigError(ValueError):
    """A kv_connector_extra_config value is missing, unknown or invalid."""


@dataclass(frozen=True)
class ConnectorConfig:
    """Parsed kv_connector_extra_config (see docs/engines/vllm.md for each key)."""

    servers: tuple[str, ...] = ("127.0.0.1:7470",)  # "host:port" kvstash-server addresses
    tenant: str = "vllm"                 # server tenant (namespace field)
    credential: str = ""                 # tenant secret; or credential_file / $KVSTASH_CREDENTIAL
    credential_file: str = ""            # file holding the secret (first line)
    tls: bool = False                    # TLS to the protocol port
    tls_ca_file: str = ""                # CA bundle for TLS ("" = system store)
    tls_server_name: str = ""            # SNI / verification name ("" = the host)
    codec: str = "raw"                   # raw | spec | dckv
    codec_model: str = ""                # spec/dckv: the GGUF our predictor/decoder runs on
    codec_artifact: str = ""             # spec: .kvsa, dckv: .kvda artifact
    codec_threads: int = 0               # threads of the spec predictor / coder; 0 = the CPUs this process may use
    max_codecs: int = 64                 # namespace codecs kept (LRU; one per cache_salt x adapter)
    chunk_tokens: int = 0                # tokens per kvstash chunk; 0 = 2 vLLM blocks
    model_fingerprint: str = ""          # hex SHA-256 replacing the model fingerprint (weights + config)
    lookup_deadline_ms: int = 1000       # the one LOOKUP per request (scheduler)
    get_deadline_ms: int = 5000          # each chunk GET (worker; the engine waits on it only in sync mode)
    put_deadline_ms: int = 10000         # each chunk PUT (background thread)
    connect_timeout_ms: int = 2000       # TCP (+TLS) connect to a server
    max_attempts: int = 3                # attempts per call (retryable errors), within its deadline
    down_server_skip_ms: int = 1000      # a server found down is skipped this long (chains fail over); 0: no failover
    unacked_timeout_ms: int = 3000       # unacknowledged sent bytes this long: connection aborted, server marked down; 0: kernel default
    get_parallelism: int = 4             # concurrent chunk GETs (all loads together)
    async_load: bool = True              # load between steps (vLLM parks the request); False: in the step
    load_concurrency: int = 2            # async mode: loads in flight at once (background threads)
    idle_wait_ms: int = 5                # async mode: a step with nothing to compute waits this long for a load
    max_pending_saves: int = 16          # queued saves; beyond: dropped and counted
    cache_multimodal: bool = False       # cache requests with multimodal inputs, keyed by their digests
    restore_policy: str = "cost"         # cost: load a hit only when estimated faster than vLLM's prefill; always
    restore_margin: float = 1.0          # cost: load when restore estimate * margin < prefill estimate
    save: bool = True                    # store prefixes (also requires kv_role producer/both)
    load: bool = True                    # load prefixes (also requires kv_role consumer/both)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # unused, for forward compat

    @staticmethod
    def from_extra_config(extra: dict[str, Any] | None) -> "ConnectorConfig":
        """Builds and validates the settings. Raises ConfigError."""
        extra = dict(extra or {})
        known = {f.name: f for f in fields(ConnectorConfig) if f.name != "extra"}
        unknown = sorted(k for k in extra if k not in known)
        if unknown:
            raise ConfigError(f"unknown kv_connector_extra_config key(s) {unknown}; "
                              f"known: {sorted(known)}")
        vals: dict[str, Any] = {}
        for name, f in known.items():
            if name not in extra:
                continue
            v = extra[name]
            default = f.default
            if name == "servers":
                if isinstance(v, str):
                    v = [s.strip() for s in v.split(",") if s.strip()]
                if not isinstance(v, (list, tuple)) or not v or not all(isinstance(s, str) for s in v):
                    raise ConfigError("servers: a non-empty list of 'host:port' strings")
                v = tuple(v)
            elif isinstance(default, bool):
                if not isinstance(v, bool):
                    raise ConfigError(f"{name}: expected true or false, got {v!r}")
            elif isinstance(default, float):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ConfigError(f"{name}: expected a number, got {v!r}")
                v = float(v)
            elif isinstance(default, int):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ConfigError(f"{name}: expected an integer, got {v!r}")
            elif isinstance(default, str):
                if not isinstance(v, str):
                    raise ConfigError(f"{name}: expected a string, got {v!r}")
            vals[name] = v
        cfg = ConnectorConfig(**vals)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Range and consistency checks. Raises ConfigError."""
        if self.codec not in CODECS:
            raise ConfigError(f"codec: one of {CODECS}, got {self.codec!r}")
        if self.codec != "raw":
            for key in ("codec_model", "codec_artifact"):
                path = getattr(self, key)
                if not path:
                    raise ConfigError(f"{key}: required for codec {self.codec}")
                if not os.path.isfile(path):
                    raise ConfigError(f"{key}: no file at {path!r}")
        if self.codec_threads > MAX_CODEC_THREADS:
            raise ConfigError(f"codec_threads: at most {MAX_CODEC_THREADS} (0: the process's CPUs)")
        if self.restore_policy not in RESTORE_POLICIES:
            raise ConfigError(f"restore_policy: one of {RESTORE_POLICIES}, got {self.restore_policy!r}")
        if not self.restore_margin > 0 or self.restore_margin == float("inf"):
            raise ConfigError("restore_margin: a finite number > 0")
        if not self.tenant:
            raise ConfigError("tenant: must not be empty")
        if self.chunk_tokens < 0:
            raise ConfigError("chunk_tokens: must be >= 0")
        for key in ("idle_wait_ms", "down_server_skip_ms", "unacked_timeout_ms", "codec_threads"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be >= 0")
        for key in ("lookup_deadline_ms", "get_deadline_ms", "put_deadline_ms",
                    "connect_timeout_ms", "max_attempts", "get_parallelism",
                    "max_pending_saves", "load_concurrency", "max_codecs"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}: must be > 0")
        if self.model_fingerprint:
            fp = self.model_fingerprint
            if len(fp) != 64 or any(c not in "0123456789abcdefABCDEF" for c in fp):
                raise ConfigError("model_fingerprint: 64 hex digits (a SHA-256)")
        if self.credential_file and not os.path.isfile(self.credential_file):
            raise ConfigError(f"credential_file: no file at {self.credential_file!r}")

    def resolved_credential(self) -> str:
        """credential, else the first line of credential_file, else $KVSTASH_CREDENTIAL."""
        if self.credential:
            return self.credential
        if self.credential_file:
            with open(self.credential_file, encoding="utf-8") as f:
                return f.readline().strip()
        return os.environ.get("KVSTASH_CREDENTIAL", "")

    def resolved_codec_threads(self) -> int:
        """codec_threads, or when 0 the CPUs this process may run on (its affinity mask):
        a load's predictor runs while its request is parked, on the cores the engine
        leaves idle (docs/engines/vllm.md, "Threads")."""
        return self.codec_threads or len(os.sched_getaffinity(0))

    def resolved_chunk_tokens(self, block_size: int) -> int:
        """chunk_tokens, or 2 blocks when 0. Raises ConfigError unless a multiple of block_size."""
        c = self.chunk_tokens or 2 * block_size
        if c % block_size != 0:
            raise ConfigError(f"chunk_tokens {c} must be a whole number of vLLM blocks "
                              f"(block_size {block_size})")
        return c
