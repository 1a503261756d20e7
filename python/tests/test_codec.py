"""Client-side codecs from Python: raw exactness (NumPy, torch), spec on real SmolLM2 KV
from the reference runtime, and the checks that never let unverified KV through."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kvstash
from conftest import ROOT, TENANT

FP = bytes(range(32))


LAYOUT = kvstash.KvLayout(3, 2, 16)


def raw_codec(layout=LAYOUT, chunk=8, kv_dtype="bf16"):
    return kvstash.PrefixCodec.raw(
        layout, kvstash.PrefixCodecOptions(FP, chunk_tokens=chunk, tenant=TENANT, kv_dtype=kv_dtype)
    )


@pytest.mark.parametrize("n", [1, 7, 8, 9, 17, 24])
def test_raw_round_trip_is_exact(n):
    codec = raw_codec()
    assert (codec.kind, codec.chunk_tokens, codec.artifact_digest) == ("raw", 8, bytes(32))
    rng = np.random.default_rng(n)
    tokens = rng.integers(0, 49152, n, dtype=np.int64)
    keys = codec.chain_keys(tokens)
    assert [k.tokens for k in keys] == [8] * (n // 8) + ([n % 8] if n % 8 else [])
    chunks = [rng.integers(0, 2**16, (3, 2, k.tokens, 2, 16), dtype=np.uint16) for k in keys]
    puts = codec.encode_chunks(tokens, keys, chunks, 0)
    out = codec.restore_chunks(tokens, keys, [p.payload for p in puts])
    assert len(out) == len(chunks)
    for a, b in zip(out, chunks):
        assert a.shape == b.shape and a.dtype == np.uint16 and np.array_equal(a, b)
    # Encoding only the tail of the chain (first_chunk) gives the same payloads.
    if len(keys) > 1:
        tail = codec.encode_chunks(tokens, keys, chunks[1:], 1)
        assert [p.payload for p in tail] == [p.payload for p in puts[1:]]
        assert tail[0].parent == keys[0].stored
    # A prefix of the payloads restores a prefix of the chunks.
    assert np.array_equal(codec.restore_chunks(tokens, keys, [puts[0].payload])[0], chunks[0])


def test_raw_f16_and_non_contiguous_input():
    codec = raw_codec(kv_dtype="f16")
    assert codec.layout.dtype == "f16"
    tokens = list(range(16))
    keys = codec.chain_keys(tokens)
    rng = np.random.default_rng(3)
    chunks = [rng.standard_normal((3, 2, 8, 2, 16)).astype(np.float16) for _ in keys]
    # A transposed view (non-contiguous) is made contiguous on the way in.
    strided = [np.ascontiguousarray(c.transpose(0, 1, 2, 4, 3)).transpose(0, 1, 2, 4, 3) for c in chunks]
    assert not strided[0].flags.c_contiguous
    puts = codec.encode_chunks(tokens, keys, strided)
    out = codec.restore_chunks(tokens, keys, [p.payload for p in puts])
    for a, b in zip(out, chunks):
        assert a.dtype == np.float16 and np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_torch_tensors_in_place():
    torch = pytest.importorskip("torch", reason="torch is not installed in .venv (by design)")
    codec = raw_codec()
    tokens = list(range(8))
    keys = codec.chain_keys(tokens)
    t = torch.randn(3, 2, 8, 2, 16).to(torch.bfloat16)
    puts = codec.encode_chunks(tokens, keys, [t])  # contiguous: read in place (DLPack)
    out = codec.restore_chunks(tokens, keys, [puts[0].payload])[0]
    assert np.array_equal(out, t.view(torch.int16).numpy().view(np.uint16))
    window = torch.randn(3, 2, 16, 2, 16).to(torch.bfloat16)[:, :, 4:12]  # non-contiguous
    assert not window.is_contiguous()
    out = codec.restore_chunks(tokens, keys, [codec.encode_chunks(tokens, keys, [window])[0].payload])[0]
    assert np.array_equal(out, window.contiguous().view(torch.int16).numpy().view(np.uint16))
    with pytest.raises(kvstash.InvalidArgumentError):
        codec.encode_chunks(tokens, keys, [torch.randn(3, 2, 8, 2, 16)])  # float32


def test_bad_chunks_raise_invalid_argument():
    codec = raw_codec()
    tokens = list(range(12))
    keys = codec.chain_keys(tokens)
    good = [np.zeros((3, 2, k.tokens, 2, 16), np.uint16) for k in keys]
    bad_calls = [
        [np.zeros((3, 2, 8, 2, 15), np.uint16), good[1]],  # shape
        [good[0].astype(np.float32), good[1]],  # dtype
        [good[0], np.zeros((3, 2, 8, 2, 16), np.uint16)],  # partial chunk has 4 tokens
        [good[0]],  # too few chunks
    ]
    for chunks in bad_calls:
        with pytest.raises(kvstash.InvalidArgumentError):
            codec.encode_chunks(tokens, keys, chunks, 0)
    with pytest.raises(kvstash.InvalidArgumentError):
        codec.restore_chunks(tokens, keys, [])
    with pytest.raises(kvstash.InvalidArgumentError):  # keys of another prefix length
        codec.encode_chunks(tokens[:8], keys, good, 0)


@pytest.mark.parametrize("restore", ["restore_chunks", "restore_chunk_views"])
def test_corrupted_payload_is_corruption(restore):
    codec = raw_codec()
    tokens = list(range(8))
    keys = codec.chain_keys(tokens)
    kv = np.random.default_rng(5).integers(0, 2**16, (3, 2, 8, 2, 16), dtype=np.uint16)
    payload = bytearray(codec.encode_chunks(tokens, keys, [kv])[0].payload)
    payload[-5] ^= 0x40  # one bit of the KV body
    with pytest.raises(kvstash.CorruptionError) as e:
        getattr(codec, restore)(tokens, keys, [bytes(payload)])
    assert not e.value.retryable
    # A payload of another namespace/model position is a Mismatch, not KV.
    other = raw_codec(chunk=8, kv_dtype="f16")
    with pytest.raises(kvstash.MismatchError):
        getattr(other, restore)(
            tokens, other.chain_keys(tokens), [codec.encode_chunks(tokens, keys, [kv])[0].payload]
        )
    with pytest.raises(kvstash.InvalidArgumentError):  # not a bytes-like payload
        getattr(codec, restore)(tokens, keys, [8])


@pytest.mark.parametrize("kv_dtype,np_dtype", [("bf16", np.uint16), ("f16", np.float16)])
def test_raw_chunk_views_are_verified_read_only_views(kv_dtype, np_dtype):
    codec = raw_codec(kv_dtype=kv_dtype)
    rng = np.random.default_rng(11)
    tokens = rng.integers(0, 49152, 20).tolist()  # 2 full chunks + a partial one
    keys = codec.chain_keys(tokens)
    chunks = [rng.integers(0, 2**16, (3, 2, k.tokens, 2, 16), dtype=np.uint16).view(np_dtype) for k in keys]
    payloads = [bytearray(p.payload) for p in codec.encode_chunks(tokens, keys, chunks)]
    views = codec.restore_chunk_views(tokens, keys, payloads)
    for v, c in zip(views, chunks):
        assert v.dtype == np_dtype and not v.flags.writeable
        assert np.array_equal(v.view(np.uint16), c.view(np.uint16))
    with pytest.raises(BufferError):  # a viewed payload cannot move under its view
        payloads[0].extend(b"x")
    del views
    payloads[0].extend(b"x")
    # The payload of the first chunk alone restores that chunk.
    assert len(codec.restore_chunk_views(tokens, keys, [bytes(payloads[0][:-1])])) == 1
    with pytest.raises(kvstash.MismatchError):  # chunk 1's payload at position 0
        codec.restore_chunk_views(tokens, keys, [payloads[1]])
    # first_chunk: each chunk verified on its own, at its own position.
    for i in range(len(keys)):
        (v,) = codec.restore_chunk_views(tokens, keys, [bytes(payloads[i][: len(payloads[i]) - (i == 0)])], i)
        assert np.array_equal(v.view(np.uint16), chunks[i].view(np.uint16))
    assert len(codec.restore_chunk_views(tokens, keys, [bytes(payloads[1]), bytes(payloads[2])], 1)) == 2
    with pytest.raises(kvstash.MismatchError):  # chunk 2's payload at position 1
        codec.restore_chunk_views(tokens, keys, [bytes(payloads[2])], 1)
    with pytest.raises(kvstash.InvalidArgumentError):  # past the chain's end
        codec.restore_chunk_views(tokens, keys, [bytes(payloads[2]), bytes(payloads[2])], 2)
    with pytest.raises(kvstash.InvalidArgumentError):
        codec.restore_chunk_views(tokens, keys, [bytes(payloads[2])], 3)


# ---------------------------------------------------------------- spec on SmolLM2
SPEC_CHUNK = 64


def read_text(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def smol(model_path, tmp_path_factory):
    """The reference model, the tokens of a real text, its exact bf16 KV, and two spec
    artifacts calibrated on two other texts (so they differ)."""
    ref = kvstash.ReferenceModel.load(model_path)
    tokens = ref.tokenize(read_text("docs/format/keys.md"))[: 2 * SPEC_CHUNK + 37]
    kv = ref.prefill_kv(tokens)  # [L, 2, T, H, D] uint16
    d = tmp_path_factory.mktemp("artifacts")
    arts = []
    for i, rel in enumerate(("docs/protocol.md", "docs/format/spec.md")):
        doc = ref.tokenize(read_text(rel))[: 2 * SPEC_CHUNK]
        path = str(d / f"spec-{i}.kvsa")
        assert ref.calibrate_spec([doc], path, chunk_tokens=SPEC_CHUNK) > 0
        arts.append(path)
    return ref, tokens, kv, arts


def split_chunks(kv, keys):
    out, b = [], 0
    for k in keys:
        out.append(np.ascontiguousarray(kv[:, :, b : b + k.tokens]))
        b += k.tokens
    return out


def test_spec_round_trip_on_real_kv_through_the_server(smol, model_path, client):
    ref, tokens, kv, arts = smol
    layout = ref.layout()
    assert kv.shape == (layout.n_layers, 2, len(tokens), layout.n_kv_heads, layout.head_dim)
    opts = kvstash.PrefixCodecOptions(FP, chunk_tokens=SPEC_CHUNK, tenant=TENANT, cache_salt="pytest-spec")
    spec = kvstash.PrefixCodec.spec(model_path, arts[0], opts, threads=2)
    assert spec.kind == "spec" and spec.layout == layout and spec.artifact_digest != bytes(32)
    keys = spec.chain_keys(tokens)
    assert [k.tokens for k in keys] == [64, 64, 37] and keys[-1].partial
    chunks = split_chunks(kv, keys)
    puts = spec.encode_chunks(tokens, keys, chunks, 0)
    raw_bytes = sum(c.nbytes for c in chunks)
    coded = sum(p.payload_size for p in puts)
    assert coded < raw_bytes  # spec compresses real KV (3.3x on long prompts)
    client.put_chunks(puts)
    assert client.lookup(keys).matched_chunks == 3
    payloads = [client.get(keys[0].stored, k.stored) for k in keys]
    out = spec.restore_chunks(tokens, keys, payloads)
    for a, b in zip(out, chunks):
        assert np.array_equal(a, b)  # lossless: bit-exact bf16
    # restore_chunk_views of a coded payload decodes (from get_array's buffers, in place).
    arrays = [client.get_array(keys[0].stored, k.stored) for k in keys]
    for a, b in zip(spec.restore_chunk_views(tokens, keys, arrays), chunks):
        assert np.array_equal(a, b)
    with pytest.raises(kvstash.InvalidArgumentError):  # a coded chunk needs the ones before it
        spec.restore_chunk_views(tokens, keys, arrays[1:], 1)
    # Restoring from another artifact is a Mismatch, never wrong KV.
    other = kvstash.PrefixCodec.spec(model_path, arts[1], opts)
    assert other.artifact_digest != spec.artifact_digest
    with pytest.raises(kvstash.MismatchError):
        other.restore_chunks(tokens, keys, payloads)
    # A damaged spec payload is Corruption.
    bad = bytearray(payloads[1])
    bad[len(bad) // 2] ^= 0x10
    with pytest.raises(kvstash.CorruptionError):
        spec.restore_chunks(tokens, keys, [payloads[0], bytes(bad)])


def test_spec_codecs_share_the_heavy_state(smol, model_path, tmp_path):
    """Codecs of many namespaces made from the same files share one model, predictor and
    artifact (PrefixCodec.shared_state()); another artifact or thread count adds only
    that; a copy of a file at another path is another entry; the state is freed with the
    last codec."""
    import gc
    import shutil

    ref, tokens, kv, arts = smol
    gc.collect()
    s0 = kvstash.PrefixCodec.shared_state()
    codecs = [
        kvstash.PrefixCodec.spec(
            model_path,
            arts[0],
            kvstash.PrefixCodecOptions(FP, chunk_tokens=SPEC_CHUNK, cache_salt=f"salt-{i}"),
            threads=1,
        )
        for i in range(12)
    ]
    s1 = kvstash.PrefixCodec.shared_state()
    assert len({c.namespace_digest for c in codecs}) == 12
    assert s1["model_loads"] - s0["model_loads"] <= 1  # 0 if a live codec holds it
    assert s1["predictor_builds"] - s0["predictor_builds"] <= 1
    assert s1["spec_artifact_loads"] - s0["spec_artifact_loads"] <= 1
    # A codec on the shared state still round-trips exactly.
    keys = codecs[0].chain_keys(tokens)
    puts = codecs[0].encode_chunks(tokens, keys, split_chunks(kv, keys), 0)
    out = codecs[0].restore_chunks(tokens, keys, [p.payload for p in puts])
    assert all(np.array_equal(a, b) for a, b in zip(out, split_chunks(kv, keys)))
    # Another artifact: one artifact load, the model and predictor shared; another thread
    # count: another predictor of the same model.
    other = kvstash.PrefixCodec.spec(
        model_path, arts[1], kvstash.PrefixCodecOptions(FP, chunk_tokens=SPEC_CHUNK)
    )
    two = kvstash.PrefixCodec.spec(
        model_path, arts[0], kvstash.PrefixCodecOptions(FP, chunk_tokens=SPEC_CHUNK), threads=2
    )
    s2 = kvstash.PrefixCodec.shared_state()
    assert s2["model_loads"] == s1["model_loads"]
    assert s2["spec_artifact_loads"] == s1["spec_artifact_loads"] + 1
    assert s2["predictor_builds"] == s1["predictor_builds"] + 1
    # A copy of the artifact elsewhere (another path) is another entry.
    copy = str(tmp_path / "copy.kvsa")
    shutil.copyfile(arts[0], copy)
    c3 = kvstash.PrefixCodec.spec(model_path, copy, kvstash.PrefixCodecOptions(FP, chunk_tokens=SPEC_CHUNK))
    assert kvstash.PrefixCodec.shared_state()["spec_artifact_loads"] == s2["spec_artifact_loads"] + 1
    assert c3.artifact_digest == codecs[0].artifact_digest
    live = kvstash.PrefixCodec.shared_state()
    del codecs, other, two, c3
    gc.collect()
    end = kvstash.PrefixCodec.shared_state()
    assert end["spec_artifacts"] == live["spec_artifacts"] - 3
    assert end["predictors"] == live["predictors"] - 2


def test_codec_factories_report_bad_files(model_path, tmp_path):
    opts = kvstash.PrefixCodecOptions(FP)
    with pytest.raises(kvstash.NotFoundError):
        kvstash.PrefixCodec.spec(model_path, str(tmp_path / "absent.kvsa"), opts)
    junk = tmp_path / "junk.kvda"
    junk.write_bytes(b"not an artifact" * 10)
    with pytest.raises((kvstash.CorruptionError, kvstash.InvalidArgumentError)):
        kvstash.PrefixCodec.dckv(model_path, str(junk), opts)
    with pytest.raises(kvstash.InvalidArgumentError):
        kvstash.PrefixCodecOptions(b"short")
    with pytest.raises(kvstash.InvalidArgumentError):
        kvstash.PrefixCodec.raw(kvstash.KvLayout(2, 2, 8), kvstash.PrefixCodecOptions(FP, kind="spec"))
