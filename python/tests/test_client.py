"""kvstash.Client against a real kvstash-server: round trips, errors, threads."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

import kvstash
from conftest import CREDENTIAL, TENANT

LAYOUT = kvstash.KvLayout(2, 2, 8)  # small: 64 bytes of bf16 KV per token
CHUNK = 4


def make_chain(seed: int, n_tokens: int):
    """(tokens, keys, PutChunks) of a raw-coded chain of random bf16 KV, salted by seed."""
    opts = kvstash.PrefixCodecOptions(bytes([seed]) * 32, chunk_tokens=CHUNK, tenant=TENANT,
                                      cache_salt=f"client-test-{seed}")
    codec = kvstash.PrefixCodec.raw(LAYOUT, opts)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 50000, n_tokens).tolist()
    keys = codec.chain_keys(tokens)
    chunks = [rng.integers(0, 2**16, (2, 2, k.tokens, 2, 8), dtype=np.uint16) for k in keys]
    return codec, tokens, keys, codec.encode_chunks(tokens, keys, chunks, 0), chunks


def test_put_get_lookup_delete_pin_stats(client):
    codec, tokens, keys, puts, chunks = make_chain(1, 10)  # 2 full chunks + 2-token partial
    route = keys[0].stored
    assert [p.key for p in puts] == [k.stored for k in keys]
    assert puts[0].parent is None and puts[1].parent == keys[0].stored
    assert all(p.route == route for p in puts)
    assert client.lookup(keys).matched_chunks == 0
    stored = client.put(puts[0].route, puts[0].key, None, puts[0].payload)
    assert stored == len(puts[0].payload)
    hit = client.lookup(keys)
    assert (hit.matched_chunks, hit.matched_tokens) == (1, 4)
    client.put_chunks(puts[1:])
    hit = client.lookup(keys)
    assert (hit.matched_chunks, hit.matched_tokens) == (3, 10)
    payloads = [client.get(route, k.stored) for k in keys]
    assert payloads == [p.payload for p in puts]
    restored = codec.restore_chunks(tokens, keys, payloads)
    for a, b in zip(restored, chunks):
        assert a.dtype == np.uint16 and np.array_equal(a, b)
    arrays = [client.get_array(route, k.stored) for k in keys]  # the same bytes, not copied
    assert all(a.dtype == np.uint8 and a.ndim == 1 and not a.flags.writeable for a in arrays)
    assert [a.tobytes() for a in arrays] == payloads
    for a, b in zip(codec.restore_chunk_views(tokens, keys, arrays), chunks):
        assert not a.flags.writeable and np.array_equal(a, b)
    client.pin(route, keys[1].stored)
    client.pin(route, keys[1].stored, pinned=False)
    stats = client.stats()
    assert isinstance(stats, dict) and stats  # the /v1/stats document
    assert client.delete(route, keys[1].stored) is True  # removes chunk 1 and its child
    assert client.delete(route, keys[1].stored) is False
    assert client.lookup(keys).matched_chunks == 1
    with pytest.raises(kvstash.NotFoundError) as e:
        client.get(route, keys[2].stored)
    assert not e.value.retryable
    with pytest.raises(kvstash.NotFoundError):
        client.get_array(route, keys[2].stored)
    with pytest.raises(kvstash.NotFoundError):
        client.pin(route, keys[2].stored)


def test_put_with_missing_parent_and_bad_keys(client):
    _, _, keys, puts, _ = make_chain(2, 8)
    with pytest.raises(kvstash.NotFoundError):
        client.put(puts[1].route, puts[1].key, puts[1].parent, puts[1].payload)
    with pytest.raises(kvstash.InvalidArgumentError):
        client.get(b"short", keys[0].stored)
    with pytest.raises(kvstash.InvalidArgumentError):
        client.lookup([])
    with pytest.raises(kvstash.KvstashError) as e:  # not a payload: refused by the server
        client.put(puts[0].route, puts[0].key, None, b"not a payload")
    assert e.value.code in ("InvalidArgument", "Corruption")


def test_wrong_credential_is_permission_denied(server):
    with kvstash.Client([server.address], tenant=TENANT, credential="wrong",
                        max_attempts=1) as c:
        with pytest.raises(kvstash.PermissionDeniedError) as e:
            c.stats()
        assert not e.value.retryable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_is_unavailable_and_retryable():
    with kvstash.Client([f"127.0.0.1:{free_port()}"], tenant=TENANT, credential=CREDENTIAL,
                        deadline_ms=2000, connect_timeout_ms=300, max_attempts=2) as c:
        with pytest.raises(kvstash.UnavailableError) as e:
            c.get(b"\0" * 16, b"\1" * 16)
        assert e.value.retryable and e.value.code == "Unavailable"


def test_a_dead_servers_chains_fail_over_unless_down_server_skip_is_0(server):
    dead = f"127.0.0.1:{free_port()}"
    servers = [server.address, dead]
    with kvstash.Client(servers, tenant=TENANT, credential=CREDENTIAL, connect_timeout_ms=300,
                        max_attempts=2) as probe:
        chains = [make_chain(s, 2 * CHUNK) for s in range(100, 140)]
        owned = [c for c in chains if probe.server_for(c[2][0].stored) == 1]
    assert owned, "no chain of 40 routed to the second server"
    _, _, keys, puts, _ = owned[0]
    # Default (1 s): the dead owner is marked down and the call goes to the chain's next
    # rendezvous choice (the live server): a miss, then a PUT and a hit there.
    with kvstash.Client(servers, tenant=TENANT, credential=CREDENTIAL, connect_timeout_ms=300,
                        max_attempts=2, unacked_timeout_ms=2000) as c:
        assert c.lookup(keys).matched_chunks == 0
        c.put(puts[0])
        assert c.lookup(keys).matched_chunks == 1
    # 0: no failover: the chain's calls keep going to its dead owner.
    with kvstash.Client(servers, tenant=TENANT, credential=CREDENTIAL, connect_timeout_ms=300,
                        max_attempts=2, down_server_skip_ms=0) as c:
        with pytest.raises(kvstash.UnavailableError):
            c.lookup(keys)
    with pytest.raises(kvstash.InvalidArgumentError):
        kvstash.Client(servers, tenant=TENANT, down_server_skip_ms=-1)


def test_closed_client_and_bad_options(server):
    c = kvstash.Client([server.address], tenant=TENANT, credential=CREDENTIAL)
    c.close()
    c.close()  # idempotent
    assert c.closed
    # A call after close() is the caller's error: never retryable.
    with pytest.raises(kvstash.InvalidArgumentError) as e:
        c.stats()
    assert not e.value.retryable and "closed" in str(e.value)
    for kwargs in (dict(servers=[]), dict(servers=["no-port"]), dict(servers=["h:99999"]),
                   dict(servers=[server.address], tenant="")):
        kwargs.setdefault("tenant", TENANT)
        with pytest.raises(kvstash.InvalidArgumentError):
            kvstash.Client(**kwargs)
    with pytest.raises(kvstash.InvalidArgumentError):
        kvstash.Client([server.address], tenant=TENANT,
                       tls=kvstash.TlsOptions(ca_file="/nonexistent/ca.pem"))


def test_one_address_as_a_string_and_put_of_a_put_chunk(server):
    # "host:port" alone is one server (not a sequence of one-character addresses).
    with kvstash.Client(server.address, tenant=TENANT, credential=CREDENTIAL) as c:
        assert c.servers == [server.address]
        _, _, keys, puts, _ = make_chain(90, 2 * CHUNK)
        assert c.put(puts[0]) == len(puts[0].payload)
        assert c.put(puts[1]) == len(puts[1].payload)
        assert c.get(keys[0].stored, keys[1].stored) == puts[1].payload
        with pytest.raises(kvstash.InvalidArgumentError):
            c.put(puts[0], keys[0].stored)
        with pytest.raises(kvstash.InvalidArgumentError):
            c.put(keys[0].stored)


def test_threads_share_one_client(client):
    chains = [make_chain(10 + i, 8) for i in range(4)]
    errors = []

    def worker(chain):
        try:
            _, _, keys, puts, _ = chain
            client.put_chunks(puts)
            for _ in range(5):
                got = [client.get(keys[0].stored, k.stored) for k in keys]
                assert got == [p.payload for p in puts]
                assert client.lookup(keys).matched_chunks == len(keys)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(c,)) for c in chains]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_two_servers_route_each_chain_to_one(server):
    from conftest import Server
    other = Server()
    try:
        addrs = [server.address, other.address]
        chains = [make_chain(60 + i, 8) for i in range(12)]
        with kvstash.Client(addrs, tenant=TENANT, credential=CREDENTIAL) as c:
            owners = [c.server_for(keys[0].stored) for _, _, keys, _, _ in chains]
            assert set(owners) == {0, 1}  # 12 chains land on both servers
            for _, _, _, puts, _ in chains:
                c.put_chunks([kvstash.PutChunk(p.route, p.key, p.parent, memoryview(p.payload))
                              for p in puts])
            for _, _, keys, _, _ in chains:
                assert c.lookup(keys).matched_chunks == 2
        # Each chain is stored on its owner only.
        for i, addr in enumerate(addrs):
            with kvstash.Client([addr], tenant=TENANT, credential=CREDENTIAL) as one:
                for owner, (_, _, keys, _, _) in zip(owners, chains):
                    assert one.lookup(keys).matched_chunks == (2 if owner == i else 0)
        with kvstash.Client(addrs, tenant=TENANT) as c2, pytest.raises(kvstash.InvalidArgumentError):
            c2.put_chunks([b"not a PutChunk"])
    finally:
        other.stop()
