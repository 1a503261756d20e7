"""Fixtures of the kvstash package tests: a REAL kvstash-server on free loopback ports.

Environment: KVSTASH_SERVER_BIN (default build/kvstash-server of the repository),
KVSTASH_FAULT_PROXY_BIN (default build/kvstash_fault_proxy: the fault-injection proxy of
tests/support/fault_proxy.h), KVSTASH_MODEL (default models/SmolLM2-135M-Instruct.Q4_1.gguf).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from fault_proxy import FaultProxy  # noqa: E402  (tests/support/fault_proxy.py)
SERVER_BIN = os.environ.get("KVSTASH_SERVER_BIN", os.path.join(ROOT, "build", "kvstash-server"))
FAULT_PROXY_BIN = os.environ.get("KVSTASH_FAULT_PROXY_BIN",
                                 os.path.join(ROOT, "build", "kvstash_fault_proxy"))
MODEL = os.environ.get("KVSTASH_MODEL",
                       os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
TENANT, CREDENTIAL = "pytest", "s3cret"


class Server:
    """A kvstash-server process with a temporary data folder (ports chosen by the OS)."""

    def __init__(self, *extra: str) -> None:
        if not os.path.exists(SERVER_BIN):
            pytest.fail(f"{SERVER_BIN} not built: scripts/build.sh kvstash-server")
        self.tmp = tempfile.TemporaryDirectory(prefix="kvstash-pytest-")
        ready = os.path.join(self.tmp.name, "ready.json")
        self.log = open(os.path.join(self.tmp.name, "server.log"), "w+b")
        self.proc = subprocess.Popen(
            [SERVER_BIN, "--listen", "127.0.0.1", "--port", "0", "--http-listen", "127.0.0.1",
             "--http-port", "0", "--data-dir", os.path.join(self.tmp.name, "data"),
             "--tenant", f"{TENANT}={CREDENTIAL}", "--ready-file", ready, *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                self.log.seek(0)
                pytest.fail("kvstash-server did not start:\n" + self.log.read().decode(errors="replace"))
            time.sleep(0.05)
        time.sleep(0.05)  # the ready file may be written in two steps
        with open(ready, encoding="utf-8") as f:
            info = json.load(f)
        self.port = int(info["port"])
        self.http_port = int(info["http_port"])
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        self.tmp.cleanup()


@pytest.fixture
def fault_proxy(server):
    """A FaultProxy in front of the session's server, without rules."""
    p = FaultProxy(FAULT_PROXY_BIN, server.address)
    yield p
    p.stop()


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    import kvstash
    with kvstash.Client([server.address], tenant=TENANT, credential=CREDENTIAL) as c:
        yield c


@pytest.fixture(scope="session")
def model_path():
    if not os.path.exists(MODEL):
        pytest.fail(f"{MODEL} absent: run scripts/setup.sh")
    return MODEL
