#!/usr/bin/env python3
"""One row per model: kvstash's codecs and engine paths on each real model, from the
committed results (benchmarks/results/), so the models can be compared side by side.

  python3 benchmarks/model_table.py [--json benchmarks/results/model_table.json]

For each model it reads four result files, each written by a command stated in the docs:
  spec    `kvstash-bench codec --codec spec --dtype both --json F`: bits per scalar and
          ratio of spec and of the published method's ideal code length (spec-published)
          for bf16 and fp8, and whether every chunk decoded bit-exact;
  dckv    `kvstash-bench codec --codec dckv+kvtc --json F`: the highest dckv ratio whose
          top-1 agreement is >= 0.97, with its mean KL;
  vllm    `benchmarks/vllm_ttft.py --json F`: median TTFT without the connector and with
          raw, spec and dckv (the cost policy: a declined spec hit runs as a miss; and
          spec with every hit taken), the spec predictor's time over vLLM's prefill of
          the same prefix (prefix_costs);
  llama   `kvstash-demo --engine llama.cpp --json F`: median hit and miss TTFT per codec,
          the predictor's time per hit over llama.cpp's prefill (see llama_predictor).
Prints a Markdown table and writes the rows as JSON. Exit 1 when a file is missing or
lacks a field, 2 for bad arguments. Uses only the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")

MODELS = [
    {
        "model": "SmolLM2-135M-Instruct",
        "params": "135M",
        "kv_bytes_per_token_bf16": 23040,
        "spec": "bench_codec_spec.json",
        "dckv": "bench_codec_dckv_fisher_p8.json",
        "vllm": "vllm_ttft_smollm2.json",
        "llama": "demo_llama_cost.json",
    },
    {
        "model": "Qwen2.5-Coder-0.5B-Instruct",
        "params": "494M",
        "kv_bytes_per_token_bf16": 12288,
        "spec": "bench_codec_spec_qwen2.json",
        "dckv": "bench_codec_dckv_qwen2_p8.json",
        "vllm": "vllm_ttft_qwen2.json",
        "llama": "demo_llama_qwen2.json",
    },
]


class MissingResult(Exception):
    pass


def load(name):
    path = os.path.join(RESULTS, name)
    if not os.path.exists(path):
        raise MissingResult(f"{path} is missing")
    with open(path) as f:
        return json.load(f)


def spec_columns(d):
    out = {}
    for dtype, key in (("bf16", "bf16"), ("fp8_e4m3", "fp8")):
        rows = {r["codec"]: r for r in d["rows"] if r["dtype"] == dtype}
        if "spec" not in rows or "spec-published" not in rows:
            raise MissingResult(f"spec rows for {dtype} missing")
        s, p = rows["spec"], rows["spec-published"]
        out[f"spec_{key}_bits"] = s["bits_per_scalar"]
        out[f"spec_{key}_ratio"] = s["ratio"]
        out[f"spec_{key}_lossless"] = bool(s["lossless"])
        out[f"published_{key}_bits"] = p["bits_per_scalar"]
        out[f"published_{key}_ratio"] = p["ratio"]
        out[f"spec_{key}_saving_vs_published"] = 1.0 - s["bits_per_scalar"] / p["bits_per_scalar"]
    return out


def dckv_columns(d):
    ok = [r for r in d["rows"] if r["codec"] == "dckv" and r["top1_agreement"] >= 0.97]
    if not ok:
        return {"dckv_ratio_top1_097": None, "dckv_kl_at_it": None, "dckv_top1_at_it": None}
    best = max(ok, key=lambda r: r["ratio_vs_bf16"])
    return {
        "dckv_ratio_top1_097": best["ratio_vs_bf16"],
        "dckv_kl_at_it": best["kl_mean"],
        "dckv_top1_at_it": best["top1_agreement"],
    }


def vllm_columns(d):
    runs = d["runs"]
    out = {
        "vllm_no_connector_ttft_s": runs["no_connector"]["ttft_median_s"],
        "vllm_prompt_tokens": statistics.median(d["settings"]["prompt_tokens"]),
    }
    for name in ("raw", "spec", "spec_always", "dckv"):
        r = runs.get(name)
        out[f"vllm_{name}_ttft_s"] = r["ttft_median_s"] if r else None
        out[f"vllm_{name}_loads"] = r["loads"] if r else None
    costs = d.get("prefix_costs")
    if not costs:
        raise MissingResult("vLLM results without prefix_costs (rerun benchmarks/vllm_ttft.py)")
    out["vllm_prefill_of_prefix_s"] = costs["vllm_prefill_of_prefix_median_s"]
    out["predictor_over_vllm_prefill"] = costs["predictor_over_vllm_prefill"]
    return out


def llama_columns(d):
    out = {"llama_predictor": d["setup"].get("predictor")}
    rows = {r["codec"]: r for r in d["rows"]}
    misses = [r["ttft_miss_ms"] for r in d["rows"] if r.get("ttft_miss_ms")]
    out["llama_miss_ttft_s"] = statistics.median(misses) / 1e3 if misses else None
    for name in ("raw", "spec", "dckv"):
        r = rows.get(name)
        hit = r.get("ttft_hit_ms") if r else None
        out[f"llama_{name}_hit_ttft_s"] = hit / 1e3 if hit else None
        out[f"llama_{name}_declined"] = r.get("declined") if r else None
    spec = rows.get("spec")
    if spec and spec.get("hits") and spec.get("hit_breakdown_ms", {}).get("predictor"):
        # The predictor's time per taken hit over the median miss (llama.cpp's prefill of
        # a whole prompt: the matched prefix plus a short question).
        out["predictor_over_llama_prefill"] = spec["hit_breakdown_ms"]["predictor"] / spec["ttft_miss_ms"]
    else:
        out["predictor_over_llama_prefill"] = None
    return out


def fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=os.path.join(RESULTS, "model_table.json"))
    args = ap.parse_args()
    rows = []
    try:
        for m in MODELS:
            row = {k: m[k] for k in ("model", "params", "kv_bytes_per_token_bf16")}
            row["sources"] = {k: m[k] for k in ("spec", "dckv", "vllm", "llama")}
            row.update(spec_columns(load(m["spec"])))
            row.update(dckv_columns(load(m["dckv"])))
            row.update(vllm_columns(load(m["vllm"])))
            row.update(llama_columns(load(m["llama"])))
            rows.append(row)
    except (MissingResult, KeyError) as e:
        print(f"model_table: {e}", file=sys.stderr)
        return 1
    print(
        "| model | spec bf16 (ideal) | spec fp8 (ideal) | dckv at top-1 >= 0.97 | predictor / prefill "
        "(vLLM, llama.cpp) | vLLM TTFT: none / raw / spec / dckv | llama.cpp TTFT: miss / raw / spec / dckv |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} ({r['params']}) "
            f"| {r['spec_bf16_ratio']:.2f}x, {r['spec_bf16_bits']:.2f} b ({r['published_bf16_ratio']:.2f}x) "
            f"| {r['spec_fp8_ratio']:.2f}x, {r['spec_fp8_bits']:.2f} b ({r['published_fp8_ratio']:.2f}x) "
            f"| {fmt(r['dckv_ratio_top1_097'], '{:.1f}x')} (KL {fmt(r['dckv_kl_at_it'], '{:.4f}')}) "
            f"| {fmt(r['predictor_over_vllm_prefill'])}, {fmt(r['predictor_over_llama_prefill'])} "
            f"| {r['vllm_no_connector_ttft_s']:.2f} / {fmt(r['vllm_raw_ttft_s'])} / {fmt(r['vllm_spec_ttft_s'])}"
            f"{' (declined)' if r['vllm_spec_loads'] == 0 else ''} / {fmt(r['vllm_dckv_ttft_s'])} s "
            f"| {fmt(r['llama_miss_ttft_s'])} / {fmt(r['llama_raw_hit_ttft_s'])} / {fmt(r['llama_spec_hit_ttft_s'])}"
            f" / {fmt(r['llama_dckv_hit_ttft_s'])} s |"
        )
    with open(args.json, "w") as f:
        json.dump({"benchmark": "model_table", "rows": rows}, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {os.path.relpath(args.json, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
