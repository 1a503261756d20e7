"""What besides token ids decides a request's KV, and the kvstash codecs keyed by it.

- Model fingerprint (model_fingerprint): SHA-256 over the model's weights files AND its
  configuration (the folder's config.json and the engine's hf_overrides), the exact byte
  stream in model_fingerprint's docstring and docs/format/keys.md; or the
  `model_fingerprint` setting. Computed once per (files, sizes, mtimes, overrides) in a
  process.
- KV dtype, chunk size, layout (layers, KV heads, head dim), tensor-parallel rank/size,
  tenant, cache_salt (the request's), LoRA adapter (name, id, SHA-256 of its weights
  files and adapter_config.json) and the codec with its artifact all enter the namespace
  (docs/format/keys.md) through kvstash.PrefixCodecOptions; two requests share stored
  KV only when all agree.
- Multimodal inputs: a request with multimodal features is not cached unless
  `cache_multimodal` is set; then every chunk's extra keys are the identifiers (content
  hashes) of the features whose placeholder tokens overlap that chunk.
- Prompt-embedding requests are never cached: their KV depends on the embeddings, and
  vLLM passes no digest of them to the connector.

Thread-safety: CodecCache is guarded by a lock; the codecs it returns are immutable
and may be used from several threads (kvstash.PrefixCodec's contract).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import kvstash

from .config import ConnectorConfig

__all__ = ["weights_fingerprint", "model_fingerprint", "adapter_fingerprint", "canonical_json",
           "adapter_of", "request_extra_keys", "CodecCache", "NamespaceKey", "UncacheableRequest"]

_WEIGHT_SUFFIXES = ((".safetensors",), (".bin", ".pt", ".pth"), (".gguf",))
MODEL_CONFIG = "config.json"              # the model folder's file entering the fingerprint
ADAPTER_CONFIG = "adapter_config.json"    # the LoRA adapter folder's
_fp_lock = threading.Lock()
_fp_cache: dict[tuple, str] = {}


class UncacheableRequest(Exception):
    """This request's KV is not determined by what kvstash keys (reason in the message)."""


def _weight_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model path {path!r} is neither a file nor a folder")
    names = sorted(os.listdir(path))
    for suffixes in _WEIGHT_SUFFIXES:
        files = [os.path.join(path, n) for n in names if n.endswith(suffixes)]
        if files:
            return files
    raise FileNotFoundError(f"no weights files (*.safetensors, *.bin, *.gguf) in {path!r}")


_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


def _check_json(v: Any, where: str) -> None:
    """ValueError unless `v` is a JSON value canonical_json can write reproducibly."""
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{where}: a string with a lone surrogate") from None
        return
    if isinstance(v, int):
        if not _INT_MIN <= v <= _INT_MAX:
            raise ValueError(f"{where}: integer {v} outside [-2^63, 2^64 - 1]")
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{where}: {v} (NaN and infinities are not JSON)")
        return
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_json(x, f"{where}[{i}]")
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            _check_json(k, f"{where} key")
            _check_json(x, f"{where}[{k!r}]")
        return
    raise ValueError(f"{where}: {type(v).__name__} is not a JSON value")


def canonical_json(value: Any, where: str = "hf_overrides") -> bytes:
    """The canonical JSON text of `value` (ASCII bytes): json.dumps(value, sort_keys=True,
    separators=(",", ":")) with ensure_ascii (non-ASCII as lowercase \\uXXXX escapes,
    surrogate pairs above U+FFFF) and floats as Python's repr (shortest round-trip digits;
    exponent form "1e-05" / "1.5e+16" when the decimal exponent is < -4 or >= 16, else
    fixed with at least one decimal "10000.0"). `kvstash keys --vllm-hf-overrides`
    reproduces it byte for byte (cli/keys_command.cc). Accepted: None, bool, str (no lone
    surrogates), int in [-2^63, 2^64 - 1], finite float, list/tuple, dict with str keys;
    anything else raises ValueError (it could not be reproduced from JSON text)."""
    _check_json(value, where)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def _file_id(f: str) -> tuple:
    st = os.stat(f)
    return (f, st.st_size, st.st_mtime_ns)


def _fingerprint(path: str, config_name: str, overrides: bytes) -> str:
    files = _weight_files(path)
    config = os.path.join(path, config_name) if config_name and os.path.isdir(path) else ""
    if config and not os.path.isfile(config):
        config = ""
    key = (tuple(_file_id(f) for f in files), _file_id(config) if config else None, config_name, overrides)
    with _fp_lock:
        if key in _fp_cache:
            return _fp_cache[key]
    h = hashlib.sha256()

    def feed(name: str, f: str) -> None:
        h.update(name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)

    for f in files:
        feed(os.path.basename(f), f)
    if config:
        feed(config_name, config)
    if overrides:
        h.update(b"hf_overrides\0" + overrides)
    digest = h.hexdigest()
    with _fp_lock:
        _fp_cache[key] = digest
    return digest


def weights_fingerprint(path: str) -> str:
    """Hex SHA-256 of the weights files under `path` (a folder or one file) alone: the
    first part of model_fingerprint's stream (no configuration). Raises FileNotFoundError
    when there are no weights files (a hub id that is not local)."""
    return _fingerprint(path, "", b"")


def model_fingerprint(path: str, hf_overrides: Any = None) -> str:
    """Hex SHA-256 identifying the model vLLM serves from `path` (a folder or one file)
    with the engine's `hf_overrides` (vllm_config.model_config.hf_overrides).

    The digest is SHA-256 over, in this order:
      1. each weights file, in name order: its base name, a NUL byte, its bytes (a folder's
         *.safetensors, else *.bin / *.pt / *.pth, else *.gguf; a file path: that file);
      2. when `path` is a folder holding a file config.json: b"config.json", NUL, its bytes;
      3. when hf_overrides is a non-empty dict: b"hf_overrides", NUL, canonical_json(it).
    Part 1 alone is weights_fingerprint. `kvstash keys --vllm-model PATH
    [--vllm-hf-overrides JSON]` computes the same digest (docs/format/keys.md).
    Raises FileNotFoundError when there are no weights files (a hub id that is not local),
    ValueError for hf_overrides that cannot be fingerprinted (a function, or a value
    canonical_json refuses).
    """
    if callable(hf_overrides):
        raise ValueError("hf_overrides is a function: what it changes cannot be fingerprinted "
                         "(set the connector's model_fingerprint instead)")
    if hf_overrides and not isinstance(hf_overrides, dict):
        raise ValueError(f"hf_overrides: expected a dict, got {type(hf_overrides).__name__}")
    overrides = canonical_json(hf_overrides) if hf_overrides else b""
    return _fingerprint(path, MODEL_CONFIG, overrides)


def adapter_fingerprint(path: str) -> str:
    """Hex SHA-256 of a LoRA adapter folder (or file): model_fingerprint's parts 1 and 2
    with adapter_config.json in place of config.json (`kvstash keys --vllm-adapter PATH`)."""
    return _fingerprint(path, ADAPTER_CONFIG, b"")


@dataclass(frozen=True)
class NamespaceKey:
    """The per-request fields of the namespace: cache salt and LoRA adapter."""

    cache_salt: str = ""
    adapter_name: str = ""
    adapter_id: str = ""
    adapter_digest: str = ""   # hex adapter_fingerprint ("" = no adapter)


def adapter_of(lora_request: Any) -> tuple[str, str, str]:
    """(name, id, hex adapter_fingerprint: weights + adapter_config.json) of a vLLM
    LoRARequest, or empty strings."""
    if lora_request is None:
        return "", "", ""
    name = str(getattr(lora_request, "lora_name", "") or "")
    lid = str(getattr(lora_request, "lora_int_id", "") or "")
    path = getattr(lora_request, "lora_path", "") or ""
    digest = adapter_fingerprint(path) if path else ""
    if not digest:
        raise UncacheableRequest(f"LoRA adapter {name!r} has no local weights to fingerprint")
    return name, lid, digest


def namespace_key(request: Any) -> NamespaceKey:
    """The NamespaceKey of a vLLM Request. Raises UncacheableRequest."""
    name, lid, digest = adapter_of(getattr(request, "lora_request", None))
    return NamespaceKey(cache_salt=getattr(request, "cache_salt", None) or "",
                        adapter_name=name, adapter_id=lid, adapter_digest=digest)


def request_extra_keys(request: Any, n_chunks: int, chunk_tokens: int,
                       cache_multimodal: bool) -> list[list[str]] | None:
    """Per-chunk extra keys of a request, None when its tokens alone decide its KV.

    Raises UncacheableRequest for prompt embeddings, and for multimodal inputs unless
    cache_multimodal (then each chunk lists the identifiers of the features whose
    placeholder range overlaps it; chaining makes later chunks depend on earlier ones).
    """
    if getattr(request, "prompt_embeds", None) is not None:
        raise UncacheableRequest("prompt embeddings (no digest in the key)")
    feats = list(getattr(request, "mm_features", None) or [])
    if not feats:
        return None
    if not cache_multimodal:
        raise UncacheableRequest("multimodal inputs (cache_multimodal is off)")
    per_chunk: list[list[str]] = [[] for _ in range(n_chunks)]
    for f in feats:
        ident = getattr(f, "identifier", None)
        pos = getattr(f, "mm_position", None)
        if not ident or pos is None:
            raise UncacheableRequest("a multimodal feature without identifier or position")
        lo, hi = int(pos.offset), int(pos.offset) + int(pos.length)
        for c in range(n_chunks):
            if lo < (c + 1) * chunk_tokens and hi > c * chunk_tokens:
                per_chunk[c].append(str(ident))
    return per_chunk


class CodecCache:
    """kvstash.PrefixCodec per NamespaceKey, built on first use, shared by both roles.

    One instance per (connector settings, engine layout) in a process, so a scheduler
    and a worker in the same process (VLLM_ENABLE_V1_MULTIPROCESSING=0) share codecs.
    What a namespace's codec costs on its own is small (its options and digest): the
    native module shares the heavy state (model, spec predictor and artifact, dckv
    codec) of every codec made from the same files (python/src/codec.cc). The cache is
    an LRU of at most `max_codecs` codecs (the setting); an evicted codec still in use
    (a load or save holding it) lives until that finishes, and its namespace's next
    request builds a new one (its heavy state stays loaded while any codec uses it).
    get() counts `codec_builds` and `codec_evictions` and sets the `codecs_cached` gauge
    on the Counters passed to it (stats.py).
    """

    _instances: dict[tuple, "CodecCache"] = {}
    _instances_lock = threading.Lock()

    def __init__(self, cfg: ConnectorConfig, layout: "kvstash.KvLayout", fingerprint: str,
                 chunk_tokens: int, tp_rank: int, tp_size: int, kv_dtype: str):
        self.cfg = cfg
        self.layout = layout
        self.fingerprint = fingerprint
        self.chunk_tokens = chunk_tokens
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.kv_dtype = kv_dtype
        self.max_codecs = int(cfg.max_codecs)
        self._lock = threading.Lock()
        self._codecs: OrderedDict[NamespaceKey, Any] = OrderedDict()
        self.builds = 0          # codecs built since start
        self.evictions = 0       # codecs dropped by the LRU bound since start

    @classmethod
    def shared(cls, cfg: ConnectorConfig, n_layers: int, n_kv_heads: int, head_dim: int,
               kv_dtype: str, fingerprint: str, chunk_tokens: int, tp_rank: int,
               tp_size: int) -> "CodecCache":
        key = (cfg, n_layers, n_kv_heads, head_dim, kv_dtype, fingerprint, chunk_tokens,
               tp_rank, tp_size)
        with cls._instances_lock:
            inst = cls._instances.get(key)
            if inst is None:
                layout = kvstash.KvLayout(n_layers, n_kv_heads, head_dim, kv_dtype)
                inst = cls(cfg, layout, fingerprint, chunk_tokens, tp_rank, tp_size, kv_dtype)
                cls._instances[key] = inst
            return inst

    def __len__(self) -> int:
        with self._lock:
            return len(self._codecs)

    def options(self, ns: NamespaceKey) -> "kvstash.PrefixCodecOptions":
        return kvstash.PrefixCodecOptions(
            kind=self.cfg.codec, model_fingerprint=bytes.fromhex(self.fingerprint),
            chunk_tokens=self.chunk_tokens, tenant=self.cfg.tenant, cache_salt=ns.cache_salt,
            kv_dtype=self.kv_dtype, tp_rank=self.tp_rank, tp_size=self.tp_size,
            adapter_name=ns.adapter_name, adapter_id=ns.adapter_id,
            adapter_digest=bytes.fromhex(ns.adapter_digest) if ns.adapter_digest else b"")

    def _build(self, ns: NamespaceKey) -> Any:
        opts = self.options(ns)
        if self.cfg.codec == "raw":
            return kvstash.PrefixCodec.raw(self.layout, opts)
        if self.cfg.codec == "spec":
            return kvstash.PrefixCodec.spec(self.cfg.codec_model, self.cfg.codec_artifact,
                                            opts, threads=self.cfg.resolved_codec_threads())
        return kvstash.PrefixCodec.dckv(self.cfg.codec_model, self.cfg.codec_artifact, opts)

    def get(self, ns: NamespaceKey, counters: Any = None) -> Any:
        """The codec of namespace `ns` (the most recently used one). counters: a
        stats.Counters that gets codec_builds / codec_evictions / codecs_cached. Raises
        kvstash.KvstashError when it cannot be built (e.g. an artifact that does not fit
        the model: MismatchError)."""
        with self._lock:
            codec = self._codecs.get(ns)
            if codec is not None:
                self._codecs.move_to_end(ns)
                return codec
            codec = self._build(ns)
            self._codecs[ns] = codec
            self.builds += 1
            evicted = 0
            while len(self._codecs) > self.max_codecs:
                self._codecs.popitem(last=False)
                evicted += 1
            self.evictions += evicted
            size = len(self._codecs)
        if counters is not None:
            counters.add(codec_builds=1, **({"codec_evictions": evicted} if evicted else {}))
            counters.gauge(codecs_cached=size)
        return codec
