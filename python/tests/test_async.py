"""The asyncio API: several concurrent calls on one loop, errors as exceptions."""

from __future__ import annotations

import asyncio

import pytest

import kvstash
from conftest import CREDENTIAL, TENANT
from test_client import free_port, make_chain


def test_concurrent_async_calls(server):
    async def main():
        async with kvstash.Client([server.address], tenant=TENANT, credential=CREDENTIAL) as c:
            chains = [make_chain(40 + i, 9) for i in range(6)]
            # First chunks of 6 chains at once, then the rest of each chain in order.
            await asyncio.gather(*(c.put_async(p[0].route, p[0].key, None, p[0].payload)
                                   for _, _, _, p, _ in chains))
            for i, (_, _, _, puts, _) in enumerate(chains):
                if i % 2:
                    await c.put_chunks_async(puts[1:])
                else:
                    for p in puts[1:]:
                        await c.put_async(p.route, p.key, p.parent, p.payload)
            hits = await asyncio.gather(*(c.lookup_async(k) for _, _, k, _, _ in chains))
            assert [(h.matched_chunks, h.matched_tokens) for h in hits] == [(3, 9)] * 6
            gets = [c.get_async(k[0].stored, key.stored) for _, _, k, _, _ in chains for key in k]
            got = await asyncio.gather(*gets)
            assert got == [p.payload for _, _, _, puts, _ in chains for p in puts]
            route, key = chains[0][2][0].stored, chains[0][2][2].stored
            await c.pin_async(route, key)
            await c.pin_async(route, key, pinned=False)
            stats = await c.stats_async()
            assert isinstance(stats, dict)
            assert await c.delete_async(route, key) is True
            with pytest.raises(kvstash.NotFoundError):
                await c.get_async(route, key)
            results = await asyncio.gather(c.get_async(route, key), c.lookup_async(chains[1][2]),
                                           return_exceptions=True)
            assert isinstance(results[0], kvstash.NotFoundError)
            assert results[1].matched_chunks == 3

    asyncio.run(main())


def test_async_server_down_is_unavailable():
    async def main():
        with kvstash.Client([f"127.0.0.1:{free_port()}"], tenant=TENANT, credential=CREDENTIAL,
                            deadline_ms=1500, connect_timeout_ms=200, max_attempts=2) as c:
            outcomes = await asyncio.gather(*(c.get_async(b"\0" * 16, bytes([i]) * 16)
                                              for i in range(4)), return_exceptions=True)
            assert all(isinstance(o, kvstash.UnavailableError) and o.retryable for o in outcomes)

    asyncio.run(main())


def test_close_fails_outstanding_async_calls(server):
    async def main():
        c = kvstash.Client([server.address], tenant=TENANT, credential=CREDENTIAL)
        fut = c.stats_async()
        c.close()
        try:
            assert isinstance(await fut, dict)  # answered before the close
        except kvstash.UnavailableError:
            pass  # or failed by it: never left pending
        with pytest.raises(kvstash.InvalidArgumentError):  # a call after close()
            await c.stats_async()

    asyncio.run(asyncio.wait_for(main(), 30))
