"""What besides token ids decides a request's KV, and the kvstash codecs keyed by it.

- Model fingerprint: SHA-256 over the weights files of the model folder (*.safetensors,
  else *.bin / *.pt / *.gguf), each file's name and bytes in sorted order; or the
  `model_fingerprint` setting. Computed once per (path, size, mtime) in a process.
- KV dtype, chunk size, layout (layers, KV heads, head dim), tensor-parallel rank/size,
  tenant, cache_salt (the request's), LoRA adapter (name, id, SHA-256 of its weights
  files) and the codec with its artifact all enter the namespace (docs/format/keys.md)
  through kvstash.PrefixCodecOptions; two requests share stored KV only when all agree.
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
import os
import threading
from dataclasses import dataclass
from typing import Any

import kvstash

from .config import ConnectorConfig

__all__ = ["weights_fingerprint", "adapter_of", "request_extra_keys", "CodecCache",
           "NamespaceKey", "UncacheableRequest"]

_WEIGHT_SUFFIXES = ((".safetensors",), (".bin", ".pt", ".pth"), (".gguf",))
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


def weights_fingerprint(path: str) -> str:
    """Hex SHA-256 of the weights files under `path` (a folder or one file).

    The digest covers each file's base name and contents, in name order. Raises
    FileNotFoundError when there are no weights files (a hub id that is not local).
    """
    files = _weight_files(path)
    key = tuple((f, os.path.getsize(f), os.path.getmtime(f)) for f in files)
    with _fp_lock:
        if key in _fp_cache:
            return _fp_cache[key]
    h = hashlib.sha256()
    for f in files:
        h.update(os.path.basename(f).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    digest = h.hexdigest()
    with _fp_lock:
        _fp_cache[key] = digest
    return digest


@dataclass(frozen=True)
class NamespaceKey:
    """The per-request fields of the namespace: cache salt and LoRA adapter."""

    cache_salt: str = ""
    adapter_name: str = ""
    adapter_id: str = ""
    adapter_digest: str = ""   # hex SHA-256 of the adapter's weights ("" = no adapter)


def adapter_of(lora_request: Any) -> tuple[str, str, str]:
    """(name, id, hex digest of the weights) of a vLLM LoRARequest, or empty strings."""
    if lora_request is None:
        return "", "", ""
    name = str(getattr(lora_request, "lora_name", "") or "")
    lid = str(getattr(lora_request, "lora_int_id", "") or "")
    path = getattr(lora_request, "lora_path", "") or ""
    digest = weights_fingerprint(path) if path else ""
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
    and a worker in the same process (VLLM_ENABLE_V1_MULTIPROCESSING=0) load the spec
    predictor once.
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
        self._lock = threading.Lock()
        self._codecs: dict[NamespaceKey, Any] = {}

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

    def options(self, ns: NamespaceKey) -> "kvstash.PrefixCodecOptions":
        return kvstash.PrefixCodecOptions(
            kind=self.cfg.codec, model_fingerprint=bytes.fromhex(self.fingerprint),
            chunk_tokens=self.chunk_tokens, tenant=self.cfg.tenant, cache_salt=ns.cache_salt,
            kv_dtype=self.kv_dtype, tp_rank=self.tp_rank, tp_size=self.tp_size,
            adapter_name=ns.adapter_name, adapter_id=ns.adapter_id,
            adapter_digest=bytes.fromhex(ns.adapter_digest) if ns.adapter_digest else b"")

    def get(self, ns: NamespaceKey) -> Any:
        """The codec of namespace `ns`. Raises kvstash.KvstashError when it cannot be built
        (e.g. an artifact that does not fit the model: MismatchError)."""
        with self._lock:
            codec = self._codecs.get(ns)
            if codec is not None:
                return codec
            opts = self.options(ns)
            if self.cfg.codec == "raw":
                codec = kvstash.PrefixCodec.raw(self.layout, opts)
            elif self.cfg.codec == "spec":
                codec = kvstash.PrefixCodec.spec(self.cfg.codec_model, self.cfg.codec_artifact,
                                                 opts, threads=self.cfg.codec_threads)
            else:
                codec = kvstash.PrefixCodec.dckv(self.cfg.codec_model, self.cfg.codec_artifact, opts)
            self._codecs[ns] = codec
            return codec
