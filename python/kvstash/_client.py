"""kvstash.Client: the Python face of the C++ client (client/include/kvstash/client.h)."""

from __future__ import annotations

import asyncio
import atexit
import json
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from . import _native
from ._errors import InvalidArgumentError
from ._native import ChunkKey, LookupResult, PutChunk, TlsOptions

if TYPE_CHECKING:
    import numpy

_DEFAULT_DEADLINE_MS = 5000

# Clients still open at interpreter exit are closed first, while their I/O threads can
# still take the GIL to fail outstanding calls.
_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_open_clients() -> None:
    for c in list(_open_clients):
        c.close()


def _settle(fut: asyncio.Future, error: BaseException | None, value: Any) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


def _bridge(
    start: Callable[[Callable[[Any, Any], None]], None], convert: Callable[[Any], Any] | None = None
) -> asyncio.Future:
    """Starts a native callback-form call and returns a future of the running loop that
    its callback settles (from the client's I/O thread, via call_soon_threadsafe)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def done(error: Any, value: Any) -> None:  # on the I/O thread, GIL held
        if error is None and convert is not None:
            try:
                value = convert(value)
            except Exception as e:  # noqa: BLE001 - delivered to the awaiting task
                error, value = e, None
        try:
            loop.call_soon_threadsafe(_settle, fut, error, value)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits the result any more

    start(done)
    return fut


class Client:
    """A client of a kvstash server fleet.

    A chain lives on one server, chosen by rendezvous hashing of its first chunk's
    stored key (`route`); every call takes that route besides the key it acts on.
    Calls are pipelined on pooled connections, retried with backoff on retryable
    failures within their deadline. A server whose connect fails is skipped for 1 s:
    its chains' calls go to their next rendezvous choice meanwhile (misses there, not
    errors; the C++ client.h, "Failover"); with one server, its calls fail.

    Thread-safety: every method may be called from any thread; the sync methods
    release the GIL while they wait. The `*_async` methods return awaitables of the
    running asyncio loop (no thread per call: the native I/O thread settles them).

    Errors (all methods): `UnavailableError` (server down; calls in flight when the
    client is closed), `InvalidArgumentError` also for any call after close(),
    `DeadlineExceededError`, `PermissionDeniedError` (credential rejected),
    `InvalidArgumentError` (a key that is not 16 bytes, a bad option), and the
    per-method errors listed below.
    """

    def __init__(
        self,
        servers: Sequence[str],
        tenant: str = "",
        credential: str = "",
        tls: TlsOptions | None = None,
        deadline_ms: int = _DEFAULT_DEADLINE_MS,
        *,
        client_name: str = "kvstash-python",
        connections_per_server: int = 2,
        max_attempts: int = 3,
        initial_backoff_ms: int = 10,
        max_backoff_ms: int = 500,
        max_reply_bytes: int = 1 << 30,
        connect_timeout_ms: int = 2000,
        request_memory: bool = True,
        down_server_skip_ms: int = 1000,
        unacked_timeout_ms: int = 3000,
    ) -> None:
        """Validates the options and starts the I/O thread (connections open lazily).

        Args:
            servers: "host:port" addresses, at least one (one address may be given
                as a plain string).
            tenant, credential: the tenant and its secret (server config `tenants`).
            tls: TLS options, or None for plain TCP.
            deadline_ms: default deadline of a call, all attempts included. Default 5000.
            client_name .. request_memory: the other ClientOptions fields (client.h).
            down_server_skip_ms: how long a server whose connect failed, or whose host
                stopped acknowledging, is skipped by routed calls (they fail over to the
                chain's next rendezvous choice); 0: no failover. Default 1000.
            unacked_timeout_ms: a connection whose sent bytes stay unacknowledged this
                long is aborted and its server marked down (TCP_USER_TIMEOUT), and a
                connection waiting on replies that has read nothing this long sends a
                PING so that a host gone after acknowledging is noticed too; 0: the
                kernel's default (~15 min), no probe. Default 3000.
        Raises:
            InvalidArgumentError: no servers, a bad address, an empty tenant, zero counts,
                a TLS CA file that does not load.
        """
        servers = [servers] if isinstance(servers, str) else list(servers)
        self._native = _native.Client(
            servers,
            tenant,
            credential,
            tls,
            deadline_ms,
            client_name,
            connections_per_server,
            max_attempts,
            initial_backoff_ms,
            max_backoff_ms,
            max_reply_bytes,
            connect_timeout_ms,
            request_memory,
            down_server_skip_ms,
            unacked_timeout_ms,
        )
        self.servers = list(servers)
        _open_clients.add(self)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Fails outstanding calls with UnavailableError and stops the I/O thread.
        Idempotent; later calls raise InvalidArgumentError (not retryable)."""
        self._native.close()
        _open_clients.discard(self)

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def server_for(self, route: bytes) -> int:
        """Index into `servers` of the server owning the chain routed by `route`."""
        return self._native.server_for(route)

    # ------------------------------------------------------------------ sync
    def lookup(
        self, chain: Sequence[ChunkKey], require_state: bool = False, deadline_ms: int | None = None
    ) -> LookupResult:
        """Longest stored run from chain[0] in ONE round trip (routed by chain[0]).

        Raises: InvalidArgumentError for an empty chain or more than 65,536 chunks.
        """
        return self._native.lookup(list(chain), require_state, deadline_ms)

    def put(
        self,
        route: "bytes | PutChunk",
        key: bytes | None = None,
        parent: bytes | None = None,
        payload: Any = None,
        *,
        pin: bool = False,
        deadline_ms: int | None = None,
    ) -> int:
        """Stores one chunk payload (any bytes-like object, common/include/kvstash/payload_format.h).
        Returns the payload bytes as stored. `put(chunk)` takes a PutChunk (what the
        codecs return) instead of route, key, parent, payload and pin. A payload not yet
        bound to a key (format version 1, docs/format/payload.md) is bound to `key`;
        the codecs' PutChunks are bound already.

        Raises: NotFoundError when `parent` is not stored; InvalidArgumentError or
        CorruptionError for a payload that fails the server's validation or is bound to
        another key.
        """
        if isinstance(route, PutChunk):
            if key is not None or parent is not None or payload is not None:
                raise InvalidArgumentError("put(chunk): pass a PutChunk alone, not also key/parent/payload")
            chunk = route
            return self._native.put(
                chunk.route, chunk.key, chunk.parent, chunk.payload, chunk.pin or pin, deadline_ms
            )
        if key is None or payload is None:
            raise InvalidArgumentError("put: key and payload are required (or pass a PutChunk)")
        return self._native.put(route, key, parent, payload, pin, deadline_ms)

    def put_chunks(self, chunks: Sequence[PutChunk], deadline_ms: int | None = None) -> None:
        """Stores the chunks in order (parents before children); stops at the first
        failure and raises it."""
        self._native.put_chunks(list(chunks), deadline_ms)

    def get(self, route: bytes, key: bytes, deadline_ms: int | None = None) -> bytes:
        """The payload stored under `key`, verified (header, body checksum, bound to
        `key`). Raises NotFoundError when absent; CorruptionError when the stored chunk
        failed its checksum, the reply's payload is damaged or is bound to another key
        (never returned); MismatchError for an unbound (format version 1) payload."""
        return self._native.get(route, key, deadline_ms)

    def get_array(self, route: bytes, key: bytes, deadline_ms: int | None = None) -> numpy.ndarray:
        """As get(), with the same checks and errors, but the payload is returned without a
        copy: a READ-ONLY 1-D uint8 NumPy array that owns the received bytes (get() copies
        them into a new bytes object). For large payloads read in place, e.g. by
        PrefixCodec.restore_chunk_views."""
        return self._native.get_array(route, key, deadline_ms)

    def delete(self, route: bytes, key: bytes, deadline_ms: int | None = None) -> bool:
        """Removes the chunk and its descendants; True when it existed."""
        return self._native.delete(route, key, deadline_ms)

    def pin(self, route: bytes, key: bytes, pinned: bool = True, deadline_ms: int | None = None) -> None:
        """Pins (exempt from eviction) or unpins a chunk. Raises NotFoundError when the
        chunk is not stored."""
        self._native.pin(route, key, pinned, deadline_ms)

    def stats(self, server_index: int = 0, deadline_ms: int | None = None) -> dict[str, Any]:
        """The /v1/stats document of server `server_index`, parsed."""
        return json.loads(self._native.stats(server_index, deadline_ms))

    # ------------------------------------------------------------------ asyncio
    def lookup_async(
        self, chain: Sequence[ChunkKey], require_state: bool = False, deadline_ms: int | None = None
    ) -> "asyncio.Future[LookupResult]":
        """As lookup(); awaitable on the running loop."""
        chain = list(chain)
        return _bridge(lambda done: self._native.lookup_cb(chain, require_state, deadline_ms, done))

    def put_async(
        self,
        route: bytes,
        key: bytes,
        parent: bytes | None,
        payload: Any,
        *,
        pin: bool = False,
        deadline_ms: int | None = None,
    ) -> "asyncio.Future[int]":
        """As put(); awaitable on the running loop."""
        return _bridge(lambda done: self._native.put_cb(route, key, parent, payload, pin, deadline_ms, done))

    async def put_chunks_async(self, chunks: Sequence[PutChunk], deadline_ms: int | None = None) -> None:
        """As put_chunks(): each chunk awaited before the next (parents first)."""
        for c in list(chunks):
            await self.put_async(c.route, c.key, c.parent, c.payload, pin=c.pin, deadline_ms=deadline_ms)

    def get_async(self, route: bytes, key: bytes, deadline_ms: int | None = None) -> "asyncio.Future[bytes]":
        """As get(); awaitable on the running loop."""
        return _bridge(lambda done: self._native.get_cb(route, key, deadline_ms, done))

    def delete_async(
        self, route: bytes, key: bytes, deadline_ms: int | None = None
    ) -> "asyncio.Future[bool]":
        """As delete(); awaitable on the running loop."""
        return _bridge(lambda done: self._native.delete_cb(route, key, deadline_ms, done))

    def pin_async(
        self, route: bytes, key: bytes, pinned: bool = True, deadline_ms: int | None = None
    ) -> "asyncio.Future[None]":
        """As pin(); awaitable on the running loop."""
        return _bridge(lambda done: self._native.pin_cb(route, key, pinned, deadline_ms, done))

    def stats_async(
        self, server_index: int = 0, deadline_ms: int | None = None
    ) -> "asyncio.Future[dict[str, Any]]":
        """As stats(); awaitable on the running loop."""
        return _bridge(lambda done: self._native.stats_cb(server_index, deadline_ms, done), json.loads)
