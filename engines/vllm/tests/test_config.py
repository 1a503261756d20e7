"""kv_connector_extra_config parsing (kvstash_vllm.config): defaults, types, refusals."""
import pytest

from kvstash_vllm.config import ConfigError, ConnectorConfig


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
