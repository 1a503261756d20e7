"""A loopback TCP proxy that can delay the server's replies (fault injection for tests).

DelayProxy(target_port).start() listens on a free 127.0.0.1 port and forwards every
connection to 127.0.0.1:target_port. Setting `delay_s` > 0 holds each block of
server -> client bytes that long before forwarding it (client -> server is never
delayed), so a call whose deadline is below delay_s fails with DeadlineExceeded while
the server itself stays healthy. Setting `hold_large_s` > 0 instead holds only large
replies (GET payloads: on each connection, the first piece of at least `large_bytes`
bytes after hold_large_s was set, then again after `burst_gap_s` without one) that long, so
LOOKUPs (small replies) pass at full speed while a load is slowed; `holds` counts them.
Threads: one acceptor, two pumps per connection.
"""
from __future__ import annotations

import socket
import threading
import time


class DelayProxy:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self.delay_s = 0.0
        self._hold_s = 0.0
        self._epoch = 0                  # bumped by each hold_large_s assignment
        self.large_bytes = 16384
        self.burst_gap_s = 0.2
        self.holds = 0
        self._ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._ls.bind(("127.0.0.1", 0))
        self._ls.listen(64)
        self.port = self._ls.getsockname()[1]
        self._closed = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def hold_large_s(self) -> float:
        return self._hold_s

    @hold_large_s.setter
    def hold_large_s(self, v: float) -> None:
        with self._lock:
            self._hold_s = float(v)
            self._epoch += 1

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "DelayProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self._ls.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                s.settimeout(None)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._socks += [c, s]
            threading.Thread(target=self._pump, args=(c, s, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, delayed: bool) -> None:
        last, epoch = 0.0, -1
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if delayed and self.delay_s > 0:
                    time.sleep(self.delay_s)
                hold = self._hold_s
                if delayed and hold > 0 and len(data) >= self.large_bytes and \
                        (epoch != self._epoch or time.monotonic() - last > self.burst_gap_s):
                    with self._lock:
                        self.holds += 1
                        epoch = self._epoch
                    time.sleep(hold)
                dst.sendall(data)
                if len(data) >= self.large_bytes:
                    last = time.monotonic()
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._ls.close()
        with self._lock:
            for s in self._socks:
                try:
                    s.close()
                except OSError:
                    pass
