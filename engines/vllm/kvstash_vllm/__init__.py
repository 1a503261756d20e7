"""kvstash_vllm: kvstash as a vLLM KV connector.

vLLM loads `KvstashConnector` from this module (kv_connector_module_path="kvstash_vllm");
see kvstash_vllm.connector and docs/engines/vllm.md. The connector (and the kvstash
package it needs) is imported on first access, so `kvstash_vllm.layout` works alone.
"""
from __future__ import annotations

__all__ = ["KvstashConnector", "KvstashConnectorStats"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "KvstashConnector":
        from .connector import KvstashConnector
        return KvstashConnector
    if name == "KvstashConnectorStats":
        from .stats import KvstashConnectorStats
        return KvstashConnectorStats
    raise AttributeError(f"module 'kvstash_vllm' has no attribute {name!r}")
