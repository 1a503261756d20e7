#!/usr/bin/env python3
"""Where the CPU time of one spec hit and one dckv hit goes: a perf profile, as a table.

  .venv-vllm/bin/python benchmarks/profile_hit.py [--codecs spec,dckv] [--tokens 1280]
      [--threads 2] [--repeats 3] [--json F]

A hit is what the vLLM connector runs for a stored 1,280-token prefix (5 chunks of 256):
PrefixCodec.restore_chunks of the chunks' payloads (verification, for spec the
predictor over the matched tokens, then the decode into canonical bf16 chunks). The
payloads are made first (outside the profile): the exact bf16 KV of real text (the
demo's first document, /usr/share/common-licenses/Apache-2.0, with the reference
runtime's tokenizer) encoded by the same codec. Then `perf record` attaches to this
process for `repeats` restores, and the samples are grouped by the function they fell
in (the groups below, first match wins): each group's CPU milliseconds per hit (all
threads), beside the hit's wall time.

Artifacts: spec, the one benchmarks/vllm_ttft.py uses (harness.spec_artifact: calibrated
once into .cache/); dckv, harness.dckv_artifact (rate 8, made once by `kvstash calibrate
dckv`: $KVSTASH_TOOL, else build/kvstash). No server is needed.
Needs perf (Debian linux-perf) and permission to attach (root, or
kernel.perf_event_paranoid <= 1); exits 77 without them, 2 for bad arguments, 0 on
success.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "engines", "vllm", "tests"))

import kvstash  # noqa: E402
from harness import GGUF, dckv_artifact, spec_artifact  # noqa: E402

DOC = "/usr/share/common-licenses/Apache-2.0"
CHUNK = 256
FREQ_HZ = 2000  # perf samples per CPU-second: one sample = 0.5 ms of CPU

# (group, regular expression over the symbol name); first match wins.
GROUPS = [
    ("checksums", r"XXH|Xxh|Crc32"),
    ("rANS decode", r"entropy::"),
    ("dckv centre prediction", r"dckv::.*Predict"),
    ("dckv synthesis", r"dckv::"),
    ("predictor: int8 GEMM", r"Gemm|gemm|Amx|Vnni"),
    ("predictor: attention", r"Attention|attention|Softmax|softmax|WeightedSum"),
    ("predictor: other ops", r"model::|numerics::|Quantiz"),
    ("spec decode: contexts + values", r"spec::"),
    ("memory copies", r"memcpy|memmove|memset"),
    ("thread pool / sync", r"ParallelFor|futex|sched_yield|pthread"),
    ("kernel", r"^\[k\]"),
]


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown")


def _perf_ok() -> str:
    """'' when perf can attach to this process, else why not."""
    if shutil.which("perf") is None:
        return "perf not found (apt-get install linux-perf)"
    r = subprocess.run(
        ["perf", "stat", "-e", "task-clock", "-p", str(os.getpid()), "--", "sleep", "0.01"],
        capture_output=True,
        text=True,
    )
    return "" if r.returncode == 0 else f"perf cannot attach: {r.stderr.strip()[:200]}"


def _group(symbol: str) -> str:
    for name, pattern in GROUPS:
        if re.search(pattern, symbol):
            return name
    return "other"


def profile(restore, repeats: int, workdir: str):
    """Runs restore() `repeats` times under perf record; returns the wall times, each
    group's CPU milliseconds per restore (samples at FREQ_HZ), the largest symbols left in
    "other" (so the groups can be refined) and the 15 largest symbols (group, symbol, ms)."""
    data = os.path.join(workdir, "perf.data")
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-F", str(FREQ_HZ), "-o", data, "-p", str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # perf attached
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        restore()
        walls.append(time.perf_counter() - t0)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    # Samples per symbol, this process only (the sleep before the restores is idle).
    rep = subprocess.run(
        ["perf", "report", "-i", data, "--stdio", "-n", "--sort", "sym", "--percent-limit", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    cpu_ms: dict[str, float] = {}
    other: list[tuple[str, float]] = []
    top: list[tuple[str, str, float]] = []
    for line in rep.stdout.splitlines():
        m = re.match(r"\s*[0-9.]+%\s+([0-9]+)\s+(\[[k.]\])\s+(.*)", line)
        if not m:
            continue
        ms = int(m.group(1)) * 1e3 / FREQ_HZ / repeats
        kind, sym = m.group(2), m.group(3).strip()
        g = _group("[k] " + sym if kind == "[k]" else sym)
        cpu_ms[g] = cpu_ms.get(g, 0.0) + ms
        top.append((g, sym[:120], ms))
        if g == "other":
            other.append((sym[:120], ms))
    return walls, cpu_ms, sorted(other, key=lambda x: -x[1])[:8], sorted(top, key=lambda x: -x[2])[:15]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--codecs", default="spec,dckv")
    ap.add_argument("--tokens", type=int, default=1280, help="matched tokens (a multiple of 256)")
    ap.add_argument("--threads", type=int, default=2, help="spec predictor threads")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    codecs = [c for c in a.codecs.split(",") if c]
    if not codecs or any(c not in ("spec", "dckv") for c in codecs):
        print(f"--codecs: spec and/or dckv, got {a.codecs!r}", file=sys.stderr)
        return 2
    if a.tokens < CHUNK or a.tokens % CHUNK or a.repeats < 1 or a.threads < 1:
        print(f"--tokens: a positive multiple of {CHUNK}; --repeats, --threads: >= 1", file=sys.stderr)
        return 2
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        print(f"--json {a.json}: no such folder", file=sys.stderr)
        return 2
    why = _perf_ok()
    if why:
        print(f"profile_hit: skipped: {why}", file=sys.stderr)
        return 77
    ref = kvstash.ReferenceModel.load(GGUF, threads=a.threads)
    with open(DOC, encoding="utf-8") as f:
        tokens = ref.tokenize(f.read())[: a.tokens]
    if len(tokens) < a.tokens:
        print(f"--tokens {a.tokens}: {DOC} has {len(tokens)} tokens", file=sys.stderr)
        return 2
    artifacts = {
        "spec": spec_artifact(CHUNK) if "spec" in codecs else "",
        "dckv": dckv_artifact() if "dckv" in codecs else "",
    }  # made before any profile
    exact = ref.prefill_kv(tokens, "bf16")  # [L, 2, T, H, D]
    with open(GGUF, "rb") as f:
        fingerprint = hashlib.sha256(f.read()).digest()
    opts = kvstash.PrefixCodecOptions(model_fingerprint=fingerprint, chunk_tokens=CHUNK)
    result = {
        "benchmark": "profile_hit",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": _cpu_model(),
        "load_avg_at_start": os.getloadavg()[0],
        "tokens": len(tokens),
        "threads": a.threads,
        "repeats": a.repeats,
        "rows": [],
    }
    for name in codecs:
        if name == "spec":
            codec = kvstash.PrefixCodec.spec(GGUF, artifacts["spec"], opts, threads=a.threads)
        else:
            codec = kvstash.PrefixCodec.dckv(GGUF, artifacts["dckv"], opts)
        keys = [k for k in codec.chain_keys(tokens) if not k.partial]
        chunks = [exact[:, :, i * CHUNK : (i + 1) * CHUNK].copy() for i in range(len(keys))]
        payloads = [p.payload for p in codec.encode_chunks(tokens, keys, chunks)]
        back = codec.restore_chunks(tokens, keys, payloads)  # warm-up, checked
        if name == "spec" and not all((x == c).all() for x, c in zip(back, chunks)):
            print("spec restore is not bit-exact", file=sys.stderr)
            return 1
        with tempfile.TemporaryDirectory() as d:
            restore = functools.partial(codec.restore_chunks, tokens, keys, payloads)
            walls, cpu_ms, other, top = profile(restore, a.repeats, d)
        wall_ms = statistics.median(walls) * 1e3
        total = sum(cpu_ms.values())
        groups = sorted(cpu_ms.items(), key=lambda x: -x[1])
        row = {
            "codec": name,
            "hit_wall_ms": round(wall_ms, 1),
            "hit_cpu_ms": round(total, 1),
            "payload_bytes": sum(len(p) for p in payloads),
            "groups": [
                {"group": g, "cpu_ms": round(ms, 1), "share": round(ms / total, 3)} for g, ms in groups
            ],
            "other_top": [{"symbol": sym, "cpu_ms": round(ms, 1)} for sym, ms in other],
            "top_symbols": [{"group": g, "symbol": sym, "cpu_ms": round(ms, 1)} for g, sym, ms in top],
        }
        result["rows"].append(row)
        print(
            f"\n{name} hit: {len(keys)} chunks, {len(tokens)} tokens, median wall {wall_ms:.0f} ms, "
            f"{total:.0f} CPU ms ({a.threads} predictor threads; perf samples at {FREQ_HZ} Hz)"
        )
        print(f"| {'where':32} | CPU ms per hit | share |")
        print(f"|{'-' * 34}|---------------:|------:|")
        for g in row["groups"]:
            print(f"| {g['group']:32} | {g['cpu_ms']:14.1f} | {g['share'] * 100:4.1f}% |")
        if other:
            print("largest in other: " + "; ".join(f"{sym[:60]} {ms:.0f} ms" for sym, ms in other[:4]))
    result["load_avg_at_end"] = os.getloadavg()[0]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
