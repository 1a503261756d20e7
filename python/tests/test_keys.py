"""Namespace digests and chain keys against tests/common/data/key_vectors.json (the
vectors tools/gen_key_vectors.py generated from the spec, docs/format/keys.md)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import kvstash
from conftest import ROOT

VECTORS = json.load(open(os.path.join(ROOT, "tests", "common", "data", "key_vectors.json")))


def namespace_of(fields: dict) -> kvstash.Namespace:
    """The vectors write every opaque field as hex of its bytes."""
    f = {k: (bytes.fromhex(v) if isinstance(v, str) and k != "kv_dtype" else v) for k, v in fields.items()}
    return kvstash.Namespace(
        f["model_fingerprint"],
        f["n_layers"],
        f["n_kv_heads"],
        f["head_dim"],
        dtype=f["kv_dtype"],
        chunk_tokens=f["chunk_tokens"],
        tp_rank=f["tp_rank"],
        tp_size=f["tp_size"],
        adapter_name=f["adapter_name"],
        adapter_id=f["adapter_id"],
        adapter_digest=f["adapter_digest"],
        cache_salt=f["cache_salt"],
        tenant=f["tenant"],
        codec_id=f["codec_id"],
        codec_artifact_digest=f["codec_artifact_digest"],
    )


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_namespace_and_chain_match_vectors(case):
    ns = namespace_of(case["namespace"])
    assert ns.encode().hex() == case["encoding_hex"]
    assert ns.digest().hex() == case["namespace_digest"]
    c = case["namespace"]["chunk_tokens"]
    full = kvstash.chain_keys(ns.digest(), case["tokens"], c, include_partial=False)
    assert [k.digest.hex() for k in full] == case["chunks_full_only"]
    with_partial = kvstash.chain_keys(ns.digest(), np.array(case["tokens"], dtype=np.int64), c)
    assert [(k.digest.hex(), k.stored.hex(), k.tokens, k.partial) for k in with_partial] == [
        (e["digest"], e["stored"], e["tokens"], e["partial"]) for e in case["chunks_with_partial"]
    ]
    assert all(len(k.digest) == 32 and k.stored == k.digest[:16] for k in with_partial)


def _case(name):
    return next(c for c in VECTORS["cases"] if c["name"] == name)


def test_extra_keys_and_large_token_ids():
    e = VECTORS["extra_keys_case"]
    base = _case(e["namespace"])
    ns = namespace_of(base["namespace"]).digest()
    extra = [[bytes.fromhex(x) for x in chunk] for chunk in e["extra_keys_hex"]]
    keys = kvstash.chain_keys(ns, e["tokens"], base["namespace"]["chunk_tokens"], extra_keys=extra)
    assert [k.digest.hex() for k in keys] == e["chunks"]
    # Without the extra keys the first chunk's key differs (the image digest counts).
    plain = kvstash.chain_keys(ns, e["tokens"], base["namespace"]["chunk_tokens"])
    assert plain[0].digest != keys[0].digest
    big = VECTORS["large_tokens_case"]
    keys = kvstash.chain_keys(
        namespace_of(_case(big["namespace"])["namespace"]).digest(),
        np.array(big["tokens"], dtype=np.uint32),
        4,
    )
    assert [k.digest.hex() for k in keys] == big["chunks"]
    # NumPy integer scalars (a list of them, a strided array) are token ids too.
    want = [k.digest for k in kvstash.chain_keys(ns, e["tokens"], 4)]
    for tokens in (
        [np.int64(t) for t in e["tokens"]],
        list(np.array(e["tokens"], np.int32)),
        np.repeat(np.array(e["tokens"], np.int64), 2)[::2],
    ):
        assert [k.digest for k in kvstash.chain_keys(ns, tokens, 4)] == want


def test_bad_inputs_raise_invalid_argument():
    ns = namespace_of(_case("base")["namespace"]).digest()
    for call in (
        lambda: kvstash.chain_keys(ns[:31], [1], 4),
        lambda: kvstash.chain_keys(ns, [1], 0),
        lambda: kvstash.chain_keys(ns, [-1], 4),
        lambda: kvstash.chain_keys(ns, [2**32], 4),
        lambda: kvstash.chain_keys(ns, np.zeros((2, 2), np.int32), 4),
        lambda: kvstash.chain_keys(ns, np.zeros(4, np.float32), 4),
        lambda: kvstash.chain_keys(ns, [True, False], 4),
        lambda: kvstash.chain_keys(ns, [1.0, 2.0], 4),
        lambda: kvstash.chain_keys(ns, [np.int64(-1)], 4),
        lambda: kvstash.chain_keys(ns, [1, 2, 3, 4, 5], 4, extra_keys=[[b"x"]]),
        lambda: kvstash.Namespace(b"fp", 30, 3, 64, tp_rank=1, tp_size=1),
        lambda: kvstash.Namespace(b"fp", 0, 3, 64),
        lambda: kvstash.Namespace(b"fp", 30, 3, 64, dtype="int4"),
    ):
        with pytest.raises(kvstash.InvalidArgumentError) as e:
            call()
        assert e.value.code == "InvalidArgument" and not e.value.retryable


def test_every_namespace_field_changes_the_digest():
    base = dict(model_fingerprint=b"\x01" * 32, n_layers=30, n_kv_heads=3, head_dim=64)
    variants = [
        dict(dtype="f16"),
        dict(chunk_tokens=128),
        dict(tp_rank=1, tp_size=2),
        dict(tp_size=2),
        dict(adapter_name="a"),
        dict(adapter_id="7"),
        dict(adapter_digest=b"\x02" * 32),
        dict(cache_salt="s"),
        dict(tenant="t"),
        dict(codec_id="spec"),
        dict(codec_artifact_digest=b"\x03" * 32),
        dict(model_fingerprint=b"\x04" * 32),
        dict(head_dim=128),
    ]
    digests = {kvstash.Namespace(**base).digest()}
    for v in variants:
        digests.add(kvstash.Namespace(**{**base, **v}).digest())
    assert len(digests) == 1 + len(variants)


def test_codec_namespace_is_the_keys_md_namespace():
    fp = bytes(range(32))
    layout = kvstash.KvLayout(30, 3, 64)
    opts = kvstash.PrefixCodecOptions(
        fp,
        chunk_tokens=64,
        tenant="team-a",
        cache_salt="salt",
        tp_rank=1,
        tp_size=2,
        adapter_name="lora",
        adapter_id="3",
        adapter_digest=b"\x09" * 32,
    )
    codec = kvstash.PrefixCodec.raw(layout, opts)
    # PrefixCodec enters the fingerprint as its lowercase hex text (client/prefix_codec.cc).
    ns = kvstash.Namespace(
        fp.hex().encode(),
        30,
        3,
        64,
        chunk_tokens=64,
        tp_rank=1,
        tp_size=2,
        adapter_name="lora",
        adapter_id="3",
        adapter_digest=b"\x09" * 32,
        cache_salt="salt",
        tenant="team-a",
        codec_id="raw",
    )
    assert codec.namespace_digest == ns.digest()
    tokens = list(range(1000, 1150))
    assert codec.chain_keys(tokens) == kvstash.chain_keys(ns.digest(), tokens, 64)
    extra = [[b"img:1"], [], []]
    assert codec.chain_keys(tokens, extra_keys=extra) == kvstash.chain_keys(
        ns.digest(), tokens, 64, extra_keys=extra
    )
