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
        [
            KVSTASH,
            "keys",
            "--model-fingerprint",
            fp.hex(),
            "--chunk-tokens",
            "3",
            "--tenant",
            "acme",
            "--codec",
            "spec",
            "--tokens",
            ",".join(map(str, tokens)),
            "--partial",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    got = json.loads(out)
    ns = Namespace(
        model_fingerprint=fp,
        kv_dtype="bf16",
        n_layers=30,
        n_kv_heads=3,
        head_dim=64,
        chunk_tokens=3,
        tenant=b"acme",
        codec_id=b"spec",
    )
    d = namespace_digest(ns)
    assert got["namespace_digest"] == d.hex()
    want = chunk_keys(d, tokens, 3, True)
    assert [c["digest"] for c in got["chunks"]] == [k.digest.hex() for k in want]
    assert [c["partial"] for c in got["chunks"]] == [False, False, True]


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_explains_an_empty_chain():
    base = [KVSTASH, "keys", "--model-fingerprint", "00" * 32, "--chunk-tokens", "4", "--tokens", "1,2,3"]
    r = subprocess.run(base, check=True, capture_output=True, text=True)
    assert json.loads(r.stdout)["chunks"] == []
    assert "3 tokens are fewer than one chunk of 4" in r.stderr and "--partial" in r.stderr, r.stderr
    r = subprocess.run(base + ["--partial"], check=True, capture_output=True, text=True)
    assert [c["tokens"] for c in json.loads(r.stdout)["chunks"]] == [3] and r.stderr == ""


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
        return json.loads(
            subprocess.run(base + list(extra), check=True, capture_output=True, text=True).stdout
        )["namespace_digest"]

    got = digest("--model-file", str(weights))
    want = namespace_digest(
        Namespace(
            model_fingerprint=text,
            kv_dtype="bf16",
            n_layers=30,
            n_kv_heads=3,
            head_dim=64,
            chunk_tokens=2,
            codec_id=b"raw",
        )
    )
    assert got == want.hex()
    assert got == digest("--model-fingerprint", text.hex())
    assert got != digest("--model-fingerprint", text.decode())  # the 32 raw bytes
    r = subprocess.run(
        base + ["--model-file", str(weights), "--model-fingerprint", "00"], capture_output=True, text=True
    )
    assert r.returncode == 2
    r = subprocess.run(base + ["--model-file", str(tmp_path / "none")], capture_output=True, text=True)
    assert r.returncode == 2


def _vllm_fingerprint(files, config=None, overrides=None):
    """engines/vllm/kvstash_vllm/namespace.py's rule (docs/format/keys.md), restated:
    SHA-256 over each weights file's base name, a NUL and its bytes, in name order; then
    the config file's name (config.json / adapter_config.json), a NUL and its bytes; then
    b"hf_overrides", a NUL and the overrides' canonical JSON when they are not empty."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.name):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    if config is not None:
        h.update(config.name.encode() + b"\0" + config.read_bytes())
    if overrides:
        h.update(b"hf_overrides\0" + _canonical(overrides))
    return h.digest()


def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode(
        "ascii"
    )


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_vllm_model_and_adapter_are_the_connectors_fields(tmp_path):
    """--vllm-model and --vllm-adapter give the fields the vLLM connector writes: the model
    fingerprint as hex text, the adapter digest as 32 raw bytes; a folder's weights are
    its *.safetensors (else *.bin/*.pt/*.pth, else *.gguf), other files are ignored
    except config.json (adapter_config.json for an adapter), which follows the weights."""
    model, adapter = tmp_path / "model", tmp_path / "lora"
    model.mkdir()
    adapter.mkdir()
    shards = [model / "model-00002-of-00002.safetensors", model / "model-00001-of-00002.safetensors"]
    for i, f in enumerate(shards):
        f.write_bytes(bytes([i]) * 1000 + b"tensors")
    (model / "config.json").write_text('{"rope_theta": 100000.0, "num_hidden_layers": 30}')
    (model / "pytorch_model.bin").write_bytes(b"ignored: safetensors win")
    (model / "generation_config.json").write_text("{}")  # not part of the KV
    (adapter / "adapter_model.bin").write_bytes(b"lora weights")
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
    base = [
        KVSTASH,
        "keys",
        "--chunk-tokens",
        "2",
        "--tokens",
        "1,2,3,4",
        "--tenant",
        "vllm",
        "--adapter-name",
        "sql",
        "--adapter-id",
        "1",
    ]

    def run(*extra):
        r = subprocess.run(base + list(extra), capture_output=True, text=True)
        return r.returncode, (json.loads(r.stdout)["namespace_digest"] if r.returncode == 0 else r.stderr)

    def want(fp, ad):
        return namespace_digest(
            Namespace(
                model_fingerprint=fp.hex().encode(),
                kv_dtype="bf16",
                n_layers=30,
                n_kv_heads=3,
                head_dim=64,
                chunk_tokens=2,
                adapter_name=b"sql",
                adapter_id=b"1",
                adapter_digest=ad,
                tenant=b"vllm",
                codec_id=b"raw",
            )
        ).hex()

    rc, got = run("--vllm-model", str(model), "--vllm-adapter", str(adapter))
    assert rc == 0, got
    fp = _vllm_fingerprint(shards, model / "config.json")
    ad = _vllm_fingerprint([adapter / "adapter_model.bin"], adapter / "adapter_config.json")
    assert got == want(fp, ad)
    # The configuration is part of the digest: another config.json or adapter_config.json
    # (same weights) is another namespace.
    (model / "config.json").write_text('{"rope_theta": 10000.0, "num_hidden_layers": 30}')
    rc, other = run("--vllm-model", str(model), "--vllm-adapter", str(adapter))
    assert rc == 0 and other != got
    assert other == want(_vllm_fingerprint(shards, model / "config.json"), ad)
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 32}')
    rc, other2 = run("--vllm-model", str(model), "--vllm-adapter", str(adapter))
    assert rc == 0 and other2 != other
    ad = _vllm_fingerprint([adapter / "adapter_model.bin"], adapter / "adapter_config.json")
    assert other2 == want(_vllm_fingerprint(shards, model / "config.json"), ad)
    # Without a config file the stream is the weights alone.
    (model / "config.json").unlink()
    (adapter / "adapter_config.json").unlink()
    rc, bare = run("--vllm-model", str(model), "--vllm-adapter", str(adapter))
    assert rc == 0 and bare == want(
        _vllm_fingerprint(shards), _vllm_fingerprint([adapter / "adapter_model.bin"])
    )
    # One weights file: its name enters the digest too (unlike --model-file).
    rc, one = run("--vllm-model", str(shards[1]), "--vllm-adapter", str(adapter))
    assert rc == 0 and one != bare
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


def _float_cases():
    """Doubles whose repr exercises every branch of Python's float formatting, and random
    bit patterns (all finite doubles are fair game)."""
    import random
    import struct

    rnd = random.Random(1234)
    out = [
        0.0,
        -0.0,
        1.0,
        -1.5,
        0.1,
        0.2 + 0.1,
        1 / 3,
        10000.0,
        1e-4,
        1.5e-4,
        9.99e-5,
        1e-5,
        1e15,
        1e16,
        9999999999999998.0,
        1234567890123456.7,
        12345678901234567.0,
        2.0**53,
        2.0**63,
        2.0**64,
        1e22,
        1e23,
        5e-324,
        2.2250738585072014e-308,
        1.7976931348623157e308,
        123.456,
        100.0,
        1e100,
        -2.5e-7,
        0.5,
        4.35,
        0.3,
    ]
    while len(out) < 3000:
        v = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        if v == v and abs(v) != float("inf"):
            out.append(v)
    for _ in range(1000):  # human-sized values
        out.append(round(rnd.uniform(-1e6, 1e6), rnd.randrange(0, 12)))
    return out


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_hf_overrides_canonical_json(tmp_path):
    """--vllm-hf-overrides JSON enters --vllm-model's fingerprint in the connector's
    canonical form: Python json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=True) of the parsed object, whatever the input's spacing, key order,
    number spelling and escapes; checked on nested objects, unicode (BMP, astral,
    controls, DEL) and 4,000 floats against Python's repr."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights" * 100)
    (model / "config.json").write_text('{"rope_theta": 100000.0}')
    base = [KVSTASH, "keys", "--chunk-tokens", "2", "--tokens", "1,2", "--vllm-model", str(model)]

    def run(*extra):
        r = subprocess.run(base + list(extra), capture_output=True, text=True)
        return r.returncode, (json.loads(r.stdout)["namespace_digest"] if r.returncode == 0 else r.stderr)

    def want(overrides):
        fp = _vllm_fingerprint([model / "model.safetensors"], model / "config.json", overrides)
        return namespace_digest(
            Namespace(
                model_fingerprint=fp.hex().encode(),
                kv_dtype="bf16",
                n_layers=30,
                n_kv_heads=3,
                head_dim=64,
                chunk_tokens=2,
                codec_id=b"raw",
            )
        ).hex()

    rc, none = run()
    assert rc == 0 and none == want(None)
    assert run("--vllm-hf-overrides", "{}") == (0, none)  # empty: no overrides part
    rc, rope = run("--vllm-hf-overrides", '{"rope_theta": 10000}')
    assert rc == 0 and rope == want({"rope_theta": 10000}) and rope != none
    # The same object spelt differently: same digest. 10000 and 10000.0 differ (int vs float
    # in Python too), 1e4 is the float.
    assert run("--vllm-hf-overrides", ' { "rope_theta" :10000 } ') == (0, rope)
    rc, f = run("--vllm-hf-overrides", '{"rope_theta": 1e4}')
    assert rc == 0 and f == want({"rope_theta": 10000.0}) and f != rope
    nested = {
        "rope_scaling": {
            "type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8192,
            "beta": [1, 32.5, None, True, False],
        },
        "z": -0.0,
        "a": {"b": {"c": {}}, "empty": []},
        "num_layers": -9223372036854775808,
        "big": 18446744073709551615,
        "text": 'caf\u00e9 \u2603 \U0001f600 tab\t nl\n \x01 \x7f " \\ /',
        "\u00e9": 1,
        "e": 2,
        "\U0001f600": 3,
        "\uffff": 4,
    }
    text = json.dumps(nested, ensure_ascii=False, indent=1)  # raw UTF-8, unsorted, spaced
    rc, got = run("--vllm-hf-overrides", text)
    assert rc == 0, got
    assert got == want(nested)
    assert run("--vllm-hf-overrides", json.dumps(nested, ensure_ascii=True)) == (0, got)
    floats = _float_cases()
    rc, got = run("--vllm-hf-overrides", json.dumps({"f": floats}))
    assert rc == 0 and got == want({"f": floats}), got
    # Refused (exit 2): not an object, not JSON, NaN/Infinity (not JSON), numbers Python
    # reads differently (integers beyond 64 bits, 1e400); without --vllm-model.
    for bad in (
        "[1]",
        "3",
        "{",
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": 18446744073709551616}',
        '{"a": -9223372036854775809}',
        '{"a": 1e400}',
        '{"a": "\\ud800"}',
        "",
        '{"a":' + "[" * 20000 + "]" * 20000 + "}",
    ):  # nested 20,000 deep (crashed)
        rc, err = run("--vllm-hf-overrides", bad)
        assert rc == 2 and "--vllm-hf-overrides" in err, (bad, err)
    r = subprocess.run(
        [KVSTASH, "keys", "--tokens", "1", "--vllm-hf-overrides", "{}"], capture_output=True, text=True
    )
    assert r.returncode == 2


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_rejects_bad_input():
    r = subprocess.run(
        [KVSTASH, "keys", "--tokens", "1,2", "--model-fingerprint", "abc"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "hex" in r.stderr
    r = subprocess.run(
        [KVSTASH, "keys", "--tokens", "1", "--tp-rank", "2", "--tp-size", "2"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "InvalidArgument" in r.stderr


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
def test_keys_command_every_namespace_field_and_extra_keys():
    """Adapter id/digest, tp rank/size, artifact digest and per-chunk extra keys reach the
    keys exactly as the independent implementation computes them (issue 19, defect 2)."""
    fp = bytes(range(32))
    tokens = [0] * 7  # prompt-embedding requests: token ids carry nothing
    args = [
        KVSTASH,
        "keys",
        "--model-fingerprint",
        fp.hex(),
        "--chunk-tokens",
        "3",
        "--tp-rank",
        "1",
        "--tp-size",
        "4",
        "--adapter-name",
        "sql",
        "--adapter-id",
        "7",
        "--adapter-digest",
        "w1",
        "--codec-artifact-digest",
        "a1",
        "--cache-salt",
        "s",
        "--dtype",
        "f16",
        "--tokens",
        ",".join(map(str, tokens)),
        "--partial",
    ]

    def run(*extra):
        return json.loads(
            subprocess.run(args + list(extra), check=True, capture_output=True, text=True).stdout
        )

    ns = Namespace(
        model_fingerprint=fp,
        kv_dtype="f16",
        n_layers=30,
        n_kv_heads=3,
        head_dim=64,
        chunk_tokens=3,
        tp_rank=1,
        tp_size=4,
        adapter_name=b"sql",
        adapter_id=b"7",
        adapter_digest=b"w1",
        codec_id=b"raw",
        codec_artifact_digest=b"a1",
        cache_salt=b"s",
    )
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
    r = subprocess.run(
        [KVSTASH, "stats", "--server", "127.0.0.1:1", "--deadline-ms", deadline],
        capture_output=True,
        text=True,
    )
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
    assert r.returncode == 1 and f"kvstash inspect: {junk}: Corruption" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.exists(KVSTASH), reason="build/kvstash not built")
@pytest.mark.parametrize("codec", ["spec", "dckv"])
def test_calibrate_refuses_an_unusable_out_folder_before_any_work(tmp_path, codec):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    for out in (not_a_folder, not_a_folder / "sub"):
        r = subprocess.run(
            [KVSTASH, "calibrate", codec, "--out", str(out)], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2, r.stderr
        assert f"kvstash calibrate {codec}: --out: {not_a_folder} is not a folder" in r.stderr, r.stderr
