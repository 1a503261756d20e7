#!/usr/bin/env python3
"""Plot `kvstash-bench trace --json FILE` rows: token hit rate against budget.

One panel per trace; one colour per codec; solid = the Store with LFU-with-decay (the
default policy), dashed = the Store with sampled LRU, dotted = the plain exact-LRU
simulation over the same blocks and byte sizes.

Usage: tools/plot_trace.py benchmarks/results/bench_trace.json benchmarks/results/bench_trace.png
Needs matplotlib (tools/requirements.txt).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"lfu_decay": ("-", "o"), "lru": ("--", "s"), "lru_sim": (":", "x")}


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        data = json.load(f)
    rows = data["rows"]
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    codecs = list(dict.fromkeys(r["codec"] for r in rows))
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(traces), figsize=(6.5 * len(traces), 5.2), squeeze=False)
    for ax, trace in zip(axes[0], traces):
        for ci, codec in enumerate(codecs):
            for policy, (ls, marker) in STYLE.items():
                pts = sorted(
                    (r["budget_fraction"], r["token_hit_rate"])
                    for r in rows
                    if r["trace"] == trace and r["codec"] == codec and r["policy"] == policy
                )
                if not pts:
                    continue
                ax.plot(
                    [100 * x for x, _ in pts],
                    [y for _, y in pts],
                    linestyle=ls,
                    marker=marker,
                    markersize=4,
                    linewidth=1.6 if policy == "lfu_decay" else 1.0,
                    color=cmap(ci % 10),
                    label=codec if policy == "lfu_decay" else None,
                )
        ax.set_xscale("log")
        budgets = sorted({100 * r["budget_fraction"] for r in rows if r["trace"] == trace})
        ax.set_xticks(budgets)
        ax.set_xticklabels([f"{b:g}%" for b in budgets])
        ax.minorticks_off()
        ax.set_xlabel("budget (% of the trace's distinct blocks at raw bf16 size)")
        ax.set_ylabel("token hit rate")
        ax.set_ylim(0, 1)
        ax.set_title(trace.replace(".jsonl", ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, title="codec (solid: lfu_decay)", title_fontsize=8)
    setup = data.get("setup", {})
    fig.suptitle(
        f"kvstash-bench trace: {setup.get('model', '?')} KV, codec sizes from SmolLM2 "
        "measurements; dashed: Store LRU, dotted: exact-LRU simulation",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
