"""kv_connector_extra_config parsing (kvstash_vllm.config): defaults, types, refusals;
the client options reach the connector's kvstash.Client (a real kvstash-server); the
model fingerprint covers weights, config.json and hf_overrides (a real vLLM engine's);
the `kvstash keys` CLI reproduces the connector's namespace; the codec cache is an LRU
of max_codecs codecs sharing one copy of the heavy codec state."""
import hashlib
import json
import os
import socket
import subprocess
import types

import kvstash
import pytest

from harness import GGUF, MODEL, ROOT, Engine, Server, connector_config
from kvstash_vllm.config import ConfigError, ConnectorConfig
from kvstash_vllm.connector import KvstashConnector, _make_client
from kvstash_vllm.namespace import (CodecCache, NamespaceKey, adapter_fingerprint, adapter_of,
                                    canonical_json, model_fingerprint, weights_fingerprint)
from kvstash_vllm.stats import Counters, KvstashConnectorStats


def test_defaults_and_chunk_size():
    c = ConnectorConfig.from_extra_config({})
    assert c.servers == ("127.0.0.1:7470",) and c.tenant == "vllm" and c.codec == "raw"
    assert c.resolved_chunk_tokens(128) == 256          # 0 = two vLLM blocks
    assert c.async_load is True and c.load_concurrency == 2     # loads are asynchronous by default
    assert c.max_codecs == 64
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
    ({"max_codecs": 0}, "max_codecs: must be > 0"),
    ({"tenant": ""}, "tenant"),
    ({"credential_file": "/nonexistent"}, "credential_file"),
    ({"restore_policy": "never"}, "restore_policy"),
    ({"restore_margin": 0}, "restore_margin"),
    ({"restore_margin": float("inf")}, "restore_margin"),
    ({"restore_margin": "2"}, "a number"),
    ({"codec_threads": -1}, "codec_threads: must be >= 0"),
    ({"codec_threads": 10**9}, "codec_threads: at most"),
])
def test_refusals(extra, msg):
    with pytest.raises(ConfigError, match=msg):
        ConnectorConfig.from_extra_config(extra)


def test_restore_and_thread_settings():
    c = ConnectorConfig.from_extra_config({})
    assert c.restore_policy == "cost" and c.restore_margin == 1.0
    assert c.resolved_codec_threads() == len(os.sched_getaffinity(0))
    c = ConnectorConfig.from_extra_config({"restore_policy": "always", "restore_margin": 2, "codec_threads": 3})
    assert (c.restore_policy, c.restore_margin, c.resolved_codec_threads()) == ("always", 2.0, 3)


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


def _cli():
    for p in (os.environ.get("KVSTASH_TOOL", ""), os.path.join(ROOT, "build", "kvstash")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("build/kvstash not built (or set KVSTASH_TOOL)")


def test_kvstash_keys_reproduces_the_connectors_namespace(tmp_path):
    """`kvstash keys --vllm-model DIR --vllm-hf-overrides JSON --vllm-adapter DIR` computes
    the namespace digest the connector keys a request with (so an operator can check why
    nothing hits): weights + config.json + hf_overrides, adapter weights +
    adapter_config.json."""
    cli = _cli()
    model, lora = tmp_path / "model", tmp_path / "lora"
    model.mkdir()
    lora.mkdir()
    for i in (1, 2):
        (model / f"model-0000{i}-of-00002.safetensors").write_bytes(bytes([i]) * 4096)
    (model / "config.json").write_text('{"rope_theta": 100000.0, "hidden_size": 576}')
    (lora / "adapter_model.safetensors").write_bytes(b"lora" * 100)
    (lora / "adapter_config.json").write_text('{"r": 8}')
    overrides = {"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 2.0},
                 "note": "caf\u00e9 \U0001F600", "max_position_embeddings": 4096}
    cfg = ConnectorConfig.from_extra_config({"tenant": "acme"})
    name, lid, digest = adapter_of(types.SimpleNamespace(lora_name="sql", lora_int_id=3,
                                                         lora_path=str(lora)))
    base = [cli, "keys", "--vllm-model", str(model), "--vllm-adapter", str(lora), "--adapter-name", "sql",
            "--adapter-id", "3", "--cache-salt", "s1", "--tenant", "acme", "--chunk-tokens", "64",
            "--tp-rank", "1", "--tp-size", "2", "--tokens", "1"]
    for ov, flag in ((overrides, ["--vllm-hf-overrides", json.dumps(overrides, ensure_ascii=False)]),
                     (None, []), ({}, ["--vllm-hf-overrides", "{}"])):
        cache = CodecCache.shared(cfg, 30, 3, 64, "bf16", model_fingerprint(str(model), ov), 64, 1, 2)
        codec = cache.get(NamespaceKey(cache_salt="s1", adapter_name=name, adapter_id=lid,
                                       adapter_digest=digest))
        out = subprocess.run(base + flag, check=True, capture_output=True, text=True).stdout
        assert json.loads(out)["namespace_digest"] == codec.namespace_digest.hex(), ov


def test_model_fingerprint_covers_config_and_overrides(tmp_path):
    """The fingerprint is SHA-256 over the weights files (name, NUL, bytes; the weights-only
    digest of before is its prefix), then config.json, then the canonical hf_overrides;
    each part changes it. The adapter digest covers adapter_config.json."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w" * 1000)
    (model / "tokenizer.json").write_text("{}")              # not part of the KV
    w = hashlib.sha256(b"model.safetensors\0" + b"w" * 1000)
    assert weights_fingerprint(str(model)) == w.hexdigest() == model_fingerprint(str(model))
    (model / "config.json").write_bytes(b'{"rope_theta": 100000.0}')
    with_cfg = model_fingerprint(str(model))
    h = w.copy()
    h.update(b'config.json\0{"rope_theta": 100000.0}')
    assert with_cfg == h.hexdigest() != weights_fingerprint(str(model))
    assert model_fingerprint(str(model), {}) == model_fingerprint(str(model), None) == with_cfg
    ov = model_fingerprint(str(model), {"rope_theta": 10000})
    h.update(b'hf_overrides\0{"rope_theta":10000}')
    assert ov == h.hexdigest()
    assert model_fingerprint(str(model), {"rope_theta": 10000.0}) not in (ov, with_cfg)
    # Key order and tuples do not matter; the canonical text is json.dumps' sorted compact form.
    a = {"b": [1, 2.5, None], "a": {"y": True, "x": "\u00e9"}}
    assert canonical_json(a) == b'{"a":{"x":"\\u00e9","y":true},"b":[1,2.5,null]}'
    assert model_fingerprint(str(model), a) == model_fingerprint(str(model), {"a": {"x": "\u00e9", "y": True},
                                                                             "b": (1, 2.5, None)})
    # config.json rewritten: another fingerprint (the cache is keyed by size and mtime).
    (model / "config.json").write_bytes(b'{"rope_theta": 500000.0}')
    assert model_fingerprint(str(model)) != with_cfg
    # Values that cannot be reproduced from JSON text are refused.
    for bad in ({"x": float("nan")}, {"x": float("inf")}, {1: 2}, {"x": 1 << 64}, {"x": -(1 << 63) - 1},
                {"x": {1, 2}}, {"x": b"bytes"}, {"x": "\ud800"}):
        with pytest.raises(ValueError):
            model_fingerprint(str(model), bad)
    with pytest.raises(ValueError, match="function"):
        model_fingerprint(str(model), lambda c: c)
    with pytest.raises(ConfigError, match="hf_overrides is a function"):
        KvstashConnector._model_fingerprint(types.SimpleNamespace(model=str(model), hf_overrides=lambda c: c))
    # Adapters: weights + adapter_config.json.
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "adapter_model.safetensors").write_bytes(b"a" * 10)
    bare = adapter_fingerprint(str(lora))
    (lora / "adapter_config.json").write_bytes(b'{"r": 8}')
    full = adapter_fingerprint(str(lora))
    assert full == hashlib.sha256(b"adapter_model.safetensors\0" + b"a" * 10 +
                                  b'adapter_config.json\0{"r": 8}').hexdigest() != bare
    assert adapter_of(types.SimpleNamespace(lora_name="x", lora_int_id=1, lora_path=str(lora)))[2] == full


def test_codec_cache_is_an_lru_with_stats(tmp_path):
    """max_codecs bounds the codecs; evictions and builds are counted; the gauge
    codecs_cached is aggregated as a maximum, counters as sums."""
    cfg = ConnectorConfig.from_extra_config({"tenant": "lru", "max_codecs": 2})
    cache = CodecCache.shared(cfg, 2, 1, 8, "bf16", "cd" * 32, 32, 0, 1)
    counters = Counters()
    ns = [NamespaceKey(cache_salt=f"s{i}") for i in range(3)]
    c0 = cache.get(ns[0], counters)
    c1 = cache.get(ns[1], counters)
    assert cache.get(ns[0], counters) is c0                 # a hit; s0 is now the newest
    cache.get(ns[2], counters)                              # evicts s1, the least recently used
    assert len(cache) == 2 and cache.evictions == 1 and cache.builds == 3
    assert cache.get(ns[0], counters) is c0
    c1b = cache.get(ns[1], counters)                        # rebuilt: same namespace digest
    assert c1b is not c1 and c1b.namespace_digest == c1.namespace_digest
    t = counters.totals()
    assert t["codec_builds"] == 4 and t["codec_evictions"] == 2 and t["codecs_cached"] == 2
    a = KvstashConnectorStats(data={"codecs_cached": 2, "codec_builds": 1})
    a.aggregate(KvstashConnectorStats(data={"codecs_cached": 1, "codec_builds": 3}))
    assert a.reduce() == {"codec_builds": 4, "codecs_cached": 2}


def test_spec_codecs_share_the_heavy_state(tmp_path):
    """Codecs of many namespaces load the model, predictor and artifact once (the native
    module's shared-state cache), and free them with the last codec."""
    import gc

    from harness import spec_artifact
    art = spec_artifact(64)
    before = kvstash.PrefixCodec.shared_state()
    cfg = ConnectorConfig.from_extra_config({"tenant": "share", "codec": "spec", "codec_model": GGUF,
                                             "codec_artifact": art, "max_codecs": 8})
    cache = CodecCache(cfg, kvstash.KvLayout(30, 3, 64, "bf16"), "ef" * 32, 64, 0, 1, "bf16")
    codecs = [cache.get(NamespaceKey(cache_salt=f"salt-{i}")) for i in range(20)]
    assert len({c.namespace_digest for c in codecs}) == 20 and len(cache) == 8
    st = kvstash.PrefixCodec.shared_state()
    assert st["model_loads"] - before["model_loads"] <= 1
    assert st["predictor_builds"] - before["predictor_builds"] <= 1
    assert st["spec_artifact_loads"] - before["spec_artifact_loads"] <= 1
    assert st["models"] >= 1 and st["predictors"] >= 1 and st["spec_artifacts"] >= 1
    del codecs, cache
    gc.collect()
    after = kvstash.PrefixCodec.shared_state()
    assert after["predictors"] == st["predictors"] - 1 and after["spec_artifacts"] == st["spec_artifacts"] - 1


def test_engine_fingerprint_covers_hf_overrides(logdir):
    """A real vLLM engine with hf_overrides={"rope_theta": 10000.0}: the connector's
    fingerprint is model_fingerprint(model, overrides), not the plain model's, and
    `kvstash keys --vllm-hf-overrides` reproduces it."""
    overrides = {"rope_theta": 10000.0}
    cfg = connector_config(["127.0.0.1:1"], chunk_tokens=64, lookup_deadline_ms=200,
                           connect_timeout_ms=200, max_attempts=1)
    eng = Engine(cfg, block_size=32, log_path=os.path.join(logdir, "engine-hf-overrides.log"),
                 hf_overrides=overrides)
    try:
        fps = {c["fingerprint"] for c in eng.status()["connectors"]}
    finally:
        eng.close()
    assert fps == {model_fingerprint(MODEL, overrides)}
    assert model_fingerprint(MODEL, overrides) != model_fingerprint(MODEL)
    cli = os.environ.get("KVSTASH_TOOL") or os.path.join(ROOT, "build", "kvstash")
    if os.access(cli, os.X_OK):
        def ns(*extra):
            out = subprocess.run([cli, "keys", "--tokens", "1", *extra],
                                 check=True, capture_output=True, text=True).stdout
            return json.loads(out)["namespace_digest"]
        fp = model_fingerprint(MODEL, overrides)
        assert (ns("--vllm-model", MODEL, "--vllm-hf-overrides", json.dumps(overrides))
                == ns("--model-fingerprint", fp.encode().hex())
                != ns("--vllm-model", MODEL))
