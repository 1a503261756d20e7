"""kv_connector_extra_config parsing (kvstash_vllm.config): defaults, types, refusals;
the client options reach the connector's kvstash.Client (a real kvstash-server); the
`kvstash keys` CLI reproduces the connector's namespace."""
import json
import os
import socket
import subprocess
import types

import kvstash
import pytest

from harness import ROOT, Server
from kvstash_vllm.config import ConfigError, ConnectorConfig
from kvstash_vllm.connector import _make_client
from kvstash_vllm.namespace import CodecCache, NamespaceKey, adapter_of, weights_fingerprint


def test_defaults_and_chunk_size():
    c = ConnectorConfig.from_extra_config({})
    assert c.servers == ("127.0.0.1:7470",) and c.tenant == "vllm" and c.codec == "raw"
    assert c.resolved_chunk_tokens(128) == 256          # 0 = two vLLM blocks
    assert c.async_load is True and c.load_concurrency == 2     # loads are asynchronous by default
    assert ConnectorConfig.from_extra_config({"async_load": False}).async_load is False
    assert ConnectorConfig.from_extra_config({"chunk_tokens": 96}).resolved_chunk_tokens(32) == 96
    with pytest.raises(ConfigError, match="whole number of vLLM blocks"):
        ConnectorConfig.from_extra_config({"chunk_tokens": 100}).resolved_chunk_tokens(32)


def test_servers_forms():
    c = ConnectorConfig.from_extra_config({"servers": "a:1, b:2"})
    assert c.servers == ("a:1", "b:2")
    with pytest.raises(ConfigError, match="servers"):
        ConnectorConfig.from_extra_config({"servers": []})


@pytest.mark.parametrize("extra, msg", [
    ({"tenat": "x"}, "unknown"),                          # typo
    ({"codec": "zstd"}, "codec"),
    ({"codec": "spec"}, "codec_model"),
    ({"codec": "spec", "codec_model": "/nonexistent.gguf", "codec_artifact": "/x"}, "no file"),
    ({"get_deadline_ms": 0}, "must be > 0"),
    ({"get_deadline_ms": "5"}, "integer"),
    ({"save": 1}, "true or false"),
    ({"async_load": "yes"}, "true or false"),
    ({"load_concurrency": 0}, "must be > 0"),
    ({"idle_wait_ms": -1}, "must be >= 0"),
    ({"down_server_skip_ms": -1}, "down_server_skip_ms: must be >= 0"),
    ({"unacked_timeout_ms": -5}, "unacked_timeout_ms: must be >= 0"),
    ({"connect_timeout_ms": 0}, "connect_timeout_ms: must be > 0"),
    ({"max_attempts": 0}, "max_attempts: must be > 0"),
    ({"model_fingerprint": "abc"}, "64 hex"),
    ({"tenant": ""}, "tenant"),
    ({"credential_file": "/nonexistent"}, "credential_file"),
])
def test_refusals(extra, msg):
    with pytest.raises(ConfigError, match=msg):
        ConnectorConfig.from_extra_config(extra)


def test_credential_sources(tmp_path, monkeypatch):
    f = tmp_path / "cred"
    f.write_text("s3cret\nignored\n")
    assert ConnectorConfig.from_extra_config({"credential_file": str(f)}).resolved_credential() == "s3cret"
    monkeypatch.setenv("KVSTASH_CREDENTIAL", "fromenv")
    assert ConnectorConfig.from_extra_config({}).resolved_credential() == "fromenv"
    assert ConnectorConfig.from_extra_config({"credential": "x"}).resolved_credential() == "x"


def _dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_failover_options_reach_the_client(logdir):
    """servers = [live, dead]: a chain whose rendezvous owner is the dead server fails over
    to the live one by default, and fails Unavailable with down_server_skip_ms 0."""
    server = Server(log_path=os.path.join(str(logdir), "config-failover-server.log")).start()
    try:
        extra = {"servers": [server.address, _dead_address()], "credential": "secret",
                 "connect_timeout_ms": 300, "max_attempts": 2, "get_deadline_ms": 3000}
        cfg = ConnectorConfig.from_extra_config(extra)
        assert (cfg.down_server_skip_ms, cfg.unacked_timeout_ms) == (1000, 3000)
        with _make_client(cfg) as probe:
            # a chain owned by the dead server (its first stored key routes it)
            chain = next(ch for ch in ([kvstash.ChunkKey(bytes([i]) * 32, 16)] for i in range(1, 64))
                         if probe.server_for(ch[0].stored) == 1)
        with _make_client(cfg) as c:
            assert c.lookup(chain).matched_chunks == 0      # failed over to the live server: a miss
        no_failover = ConnectorConfig.from_extra_config({**extra, "down_server_skip_ms": 0})
        with _make_client(no_failover) as c:
            with pytest.raises(kvstash.UnavailableError):
                c.lookup(chain)
    finally:
        server.stop()


def test_kvstash_keys_reproduces_the_connectors_namespace(tmp_path):
    """`kvstash keys --vllm-model DIR --vllm-adapter DIR` computes the namespace digest the
    connector keys a request with (so an operator can check why nothing hits)."""
    cli = os.path.join(ROOT, "build", "kvstash")
    if not os.access(cli, os.X_OK):
        pytest.skip("build/kvstash not built")
    model, lora = tmp_path / "model", tmp_path / "lora"
    model.mkdir()
    lora.mkdir()
    for i in (1, 2):
        (model / f"model-0000{i}-of-00002.safetensors").write_bytes(bytes([i]) * 4096)
    (model / "config.json").write_text("{}")
    (lora / "adapter_model.safetensors").write_bytes(b"lora" * 100)
    cfg = ConnectorConfig.from_extra_config({"tenant": "acme"})
    name, lid, digest = adapter_of(types.SimpleNamespace(lora_name="sql", lora_int_id=3,
                                                         lora_path=str(lora)))
    cache = CodecCache.shared(cfg, 30, 3, 64, "bf16", weights_fingerprint(str(model)), 64, 1, 2)
    codec = cache.get(NamespaceKey(cache_salt="s1", adapter_name=name, adapter_id=lid,
                                   adapter_digest=digest))
    out = subprocess.run(
        [cli, "keys", "--vllm-model", str(model), "--vllm-adapter", str(lora), "--adapter-name", "sql",
         "--adapter-id", "3", "--cache-salt", "s1", "--tenant", "acme", "--chunk-tokens", "64",
         "--tp-rank", "1", "--tp-size", "2", "--tokens", "1"],
        check=True, capture_output=True, text=True).stdout
    assert json.loads(out)["namespace_digest"] == codec.namespace_digest.hex()
