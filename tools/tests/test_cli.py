"""The `kvstash keys` command agrees with the Python key implementation."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
from kvstash_tools.keys import Namespace, chunk_keys, namespace_digest  # noqa: E402

KVSTASH = os.environ.get("KVSTASH_BIN", os.path.join(ROOT, "build", "kvstash"))


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_matches_python():
    fp = bytes(range(32))
    tokens = [5, 17, 49151, 0, 7, 7, 7]
    out = subprocess.run(
        [KVSTASH, "keys", "--model-fingerprint", fp.hex(), "--chunk-tokens", "3",
         "--tenant", "acme", "--codec", "spec", "--tokens", ",".join(map(str, tokens)),
         "--partial"],
        check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    ns = Namespace(model_fingerprint=fp, kv_dtype="bf16", n_layers=30, n_kv_heads=3,
                   head_dim=64, chunk_tokens=3, tenant=b"acme", codec_id=b"spec")
    d = namespace_digest(ns)
    assert got["namespace_digest"] == d.hex()
    want = chunk_keys(d, tokens, 3, True)
    assert [c["digest"] for c in got["chunks"]] == [k.digest.hex() for k in want]
    assert [c["partial"] for c in got["chunks"]] == [False, False, True]


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_model_file_is_the_producers_fingerprint(tmp_path):
    """--model-file gives the field kvstash's producers write: the lowercase hex SHA-256
    of the weights file as 64 bytes of text (the same as --model-fingerprint with the hex
    of that text), not the 32 raw digest bytes."""
    import hashlib
    weights = tmp_path / "w.gguf"
    weights.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    text = hashlib.sha256(weights.read_bytes()).hexdigest().encode()
    base = [KVSTASH, "keys", "--chunk-tokens", "2", "--tokens", "1,2,3,4"]

    def digest(*extra):
        return json.loads(subprocess.run(base + list(extra), check=True, capture_output=True,
                                         text=True).stdout)["namespace_digest"]

    got = digest("--model-file", str(weights))
    want = namespace_digest(Namespace(model_fingerprint=text, kv_dtype="bf16", n_layers=30,
                                      n_kv_heads=3, head_dim=64, chunk_tokens=2, codec_id=b"raw"))
    assert got == want.hex()
    assert got == digest("--model-fingerprint", text.hex())
    assert got != digest("--model-fingerprint", text.decode())  # the 32 raw bytes
    r = subprocess.run(base + ["--model-file", str(weights), "--model-fingerprint", "00"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    r = subprocess.run(base + ["--model-file", str(tmp_path / "none")], capture_output=True, text=True)
    assert r.returncode == 2


def _vllm_fingerprint(files):
    """engines/vllm/kvstash_vllm/namespace.py's rule, restated: SHA-256 over each weights
    file's base name, a NUL and its bytes, in name order."""
    import hashlib
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.name):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.digest()


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_vllm_model_and_adapter_are_the_connectors_fields(tmp_path):
    """--vllm-model and --vllm-adapter give the fields the vLLM connector writes: the model
    fingerprint as hex text, the adapter digest as 32 raw bytes; a folder's weights are
    its *.safetensors (else *.bin/*.pt/*.pth, else *.gguf), other files are ignored."""
    model, adapter = tmp_path / "model", tmp_path / "lora"
    model.mkdir()
    adapter.mkdir()
    shards = [model / "model-00002-of-00002.safetensors", model / "model-00001-of-00002.safetensors"]
    for i, f in enumerate(shards):
        f.write_bytes(bytes([i]) * 1000 + b"tensors")
    (model / "config.json").write_text("{}")
    (model / "pytorch_model.bin").write_bytes(b"ignored: safetensors win")
    (adapter / "adapter_model.bin").write_bytes(b"lora weights")
    (adapter / "adapter_config.json").write_text("{}")
    base = [KVSTASH, "keys", "--chunk-tokens", "2", "--tokens", "1,2,3,4", "--tenant", "vllm",
            "--adapter-name", "sql", "--adapter-id", "1"]

    def run(*extra):
        r = subprocess.run(base + list(extra), capture_output=True, text=True)
        return r.returncode, (json.loads(r.stdout)["namespace_digest"] if r.returncode == 0 else r.stderr)

    rc, got = run("--vllm-model", str(model), "--vllm-adapter", str(adapter))
    assert rc == 0, got
    fp, ad = _vllm_fingerprint(shards), _vllm_fingerprint([adapter / "adapter_model.bin"])
    want = namespace_digest(Namespace(model_fingerprint=fp.hex().encode(), kv_dtype="bf16",
                                      n_layers=30, n_kv_heads=3, head_dim=64, chunk_tokens=2,
                                      adapter_name=b"sql", adapter_id=b"1", adapter_digest=ad,
                                      tenant=b"vllm", codec_id=b"raw"))
    assert got == want.hex()
    # One weights file: its name enters the digest too (unlike --model-file).
    rc, one = run("--vllm-model", str(shards[1]), "--vllm-adapter", str(adapter))
    assert rc == 0 and one != got
    rc, plain = run("--model-file", str(shards[1]), "--vllm-adapter", str(adapter))
    assert rc == 0 and plain != one
    # Errors: no weights in the folder (exit 1); no such path, an empty path (an unset
    # $MODEL: it was ignored), both model flags (usage, exit 2).
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, err = run("--vllm-model", str(empty))
    assert rc == 1 and "no weights files" in err
    for flag in ("--vllm-model", "--vllm-adapter"):
        for path in (str(tmp_path / "none"), ""):
            rc, err = run(flag, path)
            assert rc == 2 and flag in err, (flag, path, err)
    rc, _ = run("--vllm-model", str(model), "--model-file", str(shards[0]))
    assert rc == 2
    rc, _ = run("--vllm-adapter", str(adapter), "--adapter-digest", "x")
    assert rc == 2


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_rejects_bad_input():
    r = subprocess.run([KVSTASH, "keys", "--tokens", "1,2", "--model-fingerprint", "abc"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "hex" in r.stderr
    r = subprocess.run([KVSTASH, "keys", "--tokens", "1", "--tp-rank", "2", "--tp-size", "2"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "InvalidArgument" in r.stderr


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_every_namespace_field_and_extra_keys():
    """Adapter id/digest, tp rank/size, artifact digest and per-chunk extra keys reach the
    keys exactly as the independent implementation computes them (issue 19, defect 2)."""
    fp = bytes(range(32))
    tokens = [0] * 7  # prompt-embedding requests: token ids carry nothing
    args = [KVSTASH, "keys", "--model-fingerprint", fp.hex(), "--chunk-tokens", "3",
            "--tp-rank", "1", "--tp-size", "4", "--adapter-name", "sql", "--adapter-id", "7",
            "--adapter-digest", "w1", "--codec-artifact-digest", "a1", "--cache-salt", "s",
            "--dtype", "f16", "--tokens", ",".join(map(str, tokens)), "--partial"]

    def run(*extra):
        return json.loads(subprocess.run(args + list(extra), check=True, capture_output=True,
                                         text=True).stdout)

    ns = Namespace(model_fingerprint=fp, kv_dtype="f16", n_layers=30, n_kv_heads=3,
                   head_dim=64, chunk_tokens=3, tp_rank=1, tp_size=4, adapter_name=b"sql",
                   adapter_id=b"7", adapter_digest=b"w1", codec_id=b"raw",
                   codec_artifact_digest=b"a1", cache_salt=b"s")
    d = namespace_digest(ns)
    a = run("--extra-key", "0:emb-a", "--extra-key", "2:img")
    b = run("--extra-key", "0:emb-b", "--extra-key", "2:img")
    assert a["namespace_digest"] == d.hex()
    want = chunk_keys(d, tokens, 3, True, [[b"emb-a"], [], [b"img"]])
    assert [c["digest"] for c in a["chunks"]] == [k.digest.hex() for k in want]
    assert all(x["digest"] != y["digest"] for x, y in zip(a["chunks"], b["chunks"]))
    r = subprocess.run(args + ["--extra-key", "3:x"], capture_output=True, text=True)
    assert r.returncode == 2 and "CHUNK below 3" in r.stderr
    r = subprocess.run(args + ["--extra-key", "nocolon"], capture_output=True, text=True)
    assert r.returncode == 2


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
@pytest.mark.parametrize("deadline", ["0", "-5", "3600001"])
def test_client_commands_refuse_a_deadline_outside_1ms_to_1h(deadline):
    """--deadline-ms 0 was accepted and failed every call at once with a message that
    blamed the server."""
    r = subprocess.run([KVSTASH, "stats", "--server", "127.0.0.1:1", "--deadline-ms", deadline],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--deadline-ms" in r.stderr, (r.returncode, r.stderr)


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
@pytest.mark.parametrize("tokens", ["1,abc,2", "1.5", "0x10", "abc", "1,,2", "4294967296"])
def test_keys_command_rejects_malformed_tokens(tokens):
    r = subprocess.run([KVSTASH, "keys", "--tokens", tokens], capture_output=True, text=True)
    assert r.returncode == 2, (tokens, r.stdout, r.stderr)


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_inspect_rejects_directories_and_garbage(tmp_path):
    r = subprocess.run([KVSTASH, "inspect", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "not a regular file" in r.stderr
    junk = tmp_path / "junk.kvsp"
    junk.write_bytes(b"KVSP\x01\x00\x88\x00" + bytes(200))  # v1, header size 136, bad CRC
    r = subprocess.run([KVSTASH, "inspect", str(junk)], capture_output=True, text=True)
    assert r.returncode == 1 and "Corruption" in r.stderr
