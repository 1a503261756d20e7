"""A server, proxy or storage fault that answers the GET of prefix A's chunk with prefix
D's VALID payload for the same position must never reach the caller as KV: the Python
package refuses it with CorruptionError.

The fault is injected by kvstash_fault_proxy (tests/support/fault_proxy.h; conftest's
FaultProxy) in front of a real kvstash-server: `substitute A D` forwards the GET of A as
the GET of D and recomputes the frame CRCs, so the reply passes every frame check and
the payload every check of its own (header CRC, body checksum, codec, layout, model,
token count and offset); only the chunk key it is bound to (payload format version 2)
tells it apart.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvstash
from conftest import CREDENTIAL, TENANT

LAYOUT = kvstash.KvLayout(2, 2, 8)  # 64 bytes of bf16 KV per token
CHUNK = 4
N_TOKENS = 10  # 2 full chunks + a partial one of 2 tokens


def codec():
    opts = kvstash.PrefixCodecOptions(bytes([7]) * 32, chunk_tokens=CHUNK, tenant=TENANT,
                                      cache_salt="fault-proxy-test")
    return kvstash.PrefixCodec.raw(LAYOUT, opts)


def chain(c, seed: int):
    """(tokens, keys, puts, chunks) of a raw chain of N_TOKENS random tokens and bf16 KV."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 50000, N_TOKENS).tolist()
    keys = c.chain_keys(tokens)
    chunks = [rng.integers(0, 2**16, (2, 2, k.tokens, 2, 8), dtype=np.uint16) for k in keys]
    return tokens, keys, c.encode_chunks(tokens, keys, chunks, 0), chunks


@pytest.fixture
def two_chains(client):
    """Chains A and D of one codec, same length (same chunk positions), both stored."""
    c = codec()
    a, d = chain(c, 101), chain(c, 202)
    assert [k.tokens for k in a[1]] == [k.tokens for k in d[1]] == [4, 4, 2]
    assert all(ka.stored != kd.stored for ka, kd in zip(a[1], d[1]))
    client.put_chunks(a[2])
    client.put_chunks(d[2])
    return c, a, d


def proxied_client(proxy):
    return kvstash.Client([proxy.address], tenant=TENANT, credential=CREDENTIAL, max_attempts=1)


def test_get_answered_with_another_keys_payload_is_corruption(two_chains, fault_proxy):
    # Check exercised: the native client's Get compares the reply payload's chunk key
    # with the key it asked for (CheckPayloadKey in client/client.cc). Without it the
    # substituted get() returns D's payload and this test fails.
    _, (_, ka, pa, _), (_, kd, pd, _) = two_chains
    route_a, route_d = ka[0].stored, kd[0].stored
    with proxied_client(fault_proxy) as pc:
        # No rule: the proxy is transparent.
        assert [pc.get(route_a, k.stored) for k in ka] == [p.payload for p in pa]
        for i in range(len(ka)):
            fault_proxy.substitute(ka[i].stored, kd[i].stored)
            with pytest.raises(kvstash.CorruptionError) as e:
                pc.get(route_a, ka[i].stored)
            assert not e.value.retryable
            with pytest.raises(kvstash.CorruptionError):
                pc.get_array(route_a, ka[i].stored)
        assert fault_proxy.stats()["substituted"] == 2 * len(ka)
        # D's own chunks are not rewritten.
        assert [pc.get(route_d, k.stored) for k in kd] == [p.payload for p in pd]
        fault_proxy.rule("clear")
        assert pc.get(route_a, ka[1].stored) == pa[1].payload
        assert fault_proxy.stats()["substituted"] == 2 * len(ka)


def test_get_async_answered_with_another_keys_payload_is_corruption(two_chains, fault_proxy):
    # Check exercised: the same key check on the callback path (Client::GetAsync).
    import asyncio

    _, (_, ka, _, _), (_, kd, _, _) = two_chains
    fault_proxy.substitute(ka[0].stored, kd[0].stored)

    async def run():
        with proxied_client(fault_proxy) as pc:
            await pc.get_async(ka[0].stored, ka[0].stored)

    with pytest.raises(kvstash.CorruptionError):
        asyncio.run(run())
    assert fault_proxy.stats()["substituted"] == 1


def test_restore_of_another_chains_payloads_is_corruption(two_chains, fault_proxy):
    # Check exercised: PrefixCodec restore compares each payload's chunk key with the
    # chain's key at that position (CheckHeader -> CheckPayloadKey, client/prefix_codec.cc).
    # Without it restore_chunks returns D's KV for A's tokens and this test fails.
    c, (ta, ka, pa, _), (td, kd, pd, chunks_d) = two_chains
    with proxied_client(fault_proxy) as pc:
        d_payloads = [pc.get(kd[0].stored, k.stored) for k in kd]  # D's own, valid
    restored_d = c.restore_chunks(td, kd, d_payloads)
    assert all(np.array_equal(x, y) for x, y in zip(restored_d, chunks_d))
    with pytest.raises(kvstash.CorruptionError):
        c.restore_chunks(ta, ka, d_payloads)
    # A single chunk of the other chain (the last, partial one) is refused too.
    with pytest.raises(kvstash.CorruptionError):
        c.restore_chunks(ta, ka, [pa[0].payload, pa[1].payload, pd[2].payload])
    # A's own payloads restore A.
    assert len(c.restore_chunks(ta, ka, [p.payload for p in pa])) == len(ka)
    # The same checks without copies (the vLLM connector's raw path): D's payloads, received
    # into arrays, are refused for A's chain as a whole and one by one.
    with proxied_client(fault_proxy) as pc:
        d_arrays = [pc.get_array(kd[0].stored, k.stored) for k in kd]
    assert all(np.array_equal(x, y) for x, y in zip(c.restore_chunk_views(td, kd, d_arrays), chunks_d))
    with pytest.raises(kvstash.CorruptionError):
        c.restore_chunk_views(ta, ka, d_arrays)
    with pytest.raises(kvstash.CorruptionError):
        c.restore_chunk_views(ta, ka, [pa[0].payload, pa[1].payload, d_arrays[2]])


def test_flipped_payload_byte_never_restores(two_chains, fault_proxy):
    # Check exercised: the payload's own body checksum, verified by get() (the frame CRC
    # was recomputed by the proxy, and the key is A's).
    c, (ta, ka, pa, _), _ = two_chains
    fault_proxy.flip(ka[0].stored)
    with proxied_client(fault_proxy) as pc:
        with pytest.raises(kvstash.CorruptionError, match="body checksum"):
            pc.get(ka[0].stored, ka[0].stored)
    assert fault_proxy.stats()["flipped"] == 1


def test_proxy_answers_errors_for_bad_rules(fault_proxy):
    assert fault_proxy.command("flip 1234").startswith("error: ")
    assert fault_proxy.command("substitute").startswith("error: ")
    assert fault_proxy.command("explode " + "00" * 16).startswith("error: ")
    assert fault_proxy.command("clear") == "ok"
