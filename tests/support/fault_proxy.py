"""Python face of kvstash_fault_proxy (tests/support/fault_proxy.h), shared by the
Python package tests (python/tests) and the vLLM connector tests (engines/vllm/tests):
a loopback proxy that parses the kvstash frames and rewrites GETs by rule
(`substitute A D`: the GET of key A is forwarded as the GET of key D, so the client gets
D's valid payload for A; `flip A`: one payload body byte of A's GET replies flipped;
`clear`). Frame CRCs are recomputed, so only the payload's own checks can see it.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time


class FaultProxyError(RuntimeError):
    """The proxy could not start, or refused a rule."""


class FaultProxy:
    """kvstash_fault_proxy (tests/support/fault_proxy.h) in front of a server: a loopback
    proxy that parses the kvstash frames and rewrites GETs by rule (substitute A D: the
    GET of key A is forwarded as the GET of D; flip A: one payload body byte of A's
    replies flipped; clear). Frame CRCs are recomputed, so only payload checks see it."""

    def __init__(self, binary: str, target: str) -> None:
        if not os.path.exists(binary):
            raise FaultProxyError(f"{binary} not built: scripts/build.sh kvstash_fault_proxy")
        self.tmp = tempfile.TemporaryDirectory(prefix="kvstash-fault-proxy-")
        port_file = os.path.join(self.tmp.name, "port")
        self.proc = subprocess.Popen([binary, "--target", target, "--port-file", port_file],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file):  # written atomically (rename)
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise FaultProxyError("kvstash_fault_proxy did not start")
            time.sleep(0.01)
        with open(port_file, encoding="utf-8") as f:
            self.port = int(f.read())
        self.address = f"127.0.0.1:{self.port}"

    def command(self, line: str) -> str:
        """Sends one line; returns the proxy's answer ("ok ..." or "error: ...")."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().rstrip("\n")

    def rule(self, line: str) -> None:
        answer = self.command(line)
        if answer != "ok":
            raise FaultProxyError(f"{line!r}: {answer}")

    def substitute(self, a: bytes, d: bytes) -> None:
        self.rule(f"substitute {a.hex()} {d.hex()}")

    def flip(self, a: bytes) -> None:
        self.rule(f"flip {a.hex()}")

    def stats(self) -> dict[str, int]:
        """{"substituted": N, "flipped": M, "connections": K}."""
        answer = self.command("stats")
        if not answer.startswith("ok "):
            raise FaultProxyError(f"stats: {answer}")
        return {k: int(v) for k, v in (w.split("=") for w in answer.split()[1:])}

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: the proxy exits
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.tmp.cleanup()
