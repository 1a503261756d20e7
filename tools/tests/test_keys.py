"""Checks the Python prefix-key implementation against the committed vectors and the
non-collision cases of docs/format/keys.md."""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from kvstash_tools.keys import Namespace, chunk_keys, namespace_digest  # noqa: E402
from gen_key_vectors import namespaces  # noqa: E402

VECTORS = os.path.join(HERE, "..", "..", "tests", "common", "data", "key_vectors.json")


def load():
    with open(VECTORS) as f:
        return json.load(f)


def test_vectors_match_committed():
    doc = load()
    nss = namespaces()
    for case in doc["cases"]:
        ns = nss[case["name"]]
        d = namespace_digest(ns)
        assert d.hex() == case["namespace_digest"]
        keys = chunk_keys(d, case["tokens"], ns.chunk_tokens, True)
        assert [k.digest.hex() for k in keys] == [c["digest"] for c in case["chunks_with_partial"]]


def test_known_sha256_of_encoding():
    # The digest is plain SHA-256 of the documented encoding.
    for case in load()["cases"]:
        enc = bytes.fromhex(case["encoding_hex"])
        assert hashlib.sha256(enc).hexdigest() == case["namespace_digest"]


def test_non_collisions():
    nss = namespaces()
    digests = {name: namespace_digest(ns) for name, ns in nss.items()}
    assert len(set(digests.values())) == len(digests)
    # adapter name equal to a cache salt
    assert digests["adapter_name_x"] != digests["cache_salt_x"]
    # same adapter name, different ids
    assert digests["adapter_a_id1"] != digests["adapter_a_id2"]
    # same tokens under two model fingerprints
    toks = list(range(8))
    a = chunk_keys(digests["base"], toks, 4, False)
    b = chunk_keys(digests["other_model"], toks, 4, False)
    assert all(x.digest != y.digest for x, y in zip(a, b))
    # a full chunk vs the same tokens as a partial chunk (chunk size 8 vs 4 tokens)
    ns8 = Namespace(model_fingerprint=b"m", chunk_tokens=8)
    d8 = namespace_digest(ns8)
    partial = chunk_keys(d8, toks[:4], 8, True)
    assert len(partial) == 1 and partial[0].partial
    full_same_tokens = chunk_keys(d8, toks[:4], 4, False)
    assert partial[0].digest != full_same_tokens[0].digest
    # chaining: the second chunk's key depends on the first chunk's tokens
    c1 = chunk_keys(digests["base"], [1, 2, 3, 4, 5, 6, 7, 8], 4, False)
    c2 = chunk_keys(digests["base"], [9, 2, 3, 4, 5, 6, 7, 8], 4, False)
    assert c1[1].digest != c2[1].digest


def test_partial_chunk_only_when_asked():
    d = namespace_digest(Namespace(chunk_tokens=4))
    assert len(chunk_keys(d, list(range(10)), 4, False)) == 2
    ks = chunk_keys(d, list(range(10)), 4, True)
    assert len(ks) == 3 and ks[2].partial and ks[2].tokens == 2
    assert chunk_keys(d, [], 4, True) == []
