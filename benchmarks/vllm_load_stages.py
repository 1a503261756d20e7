#!/usr/bin/env python3
"""Stage times of one CPU load of KvstashConnector's worker (raw codec), without vLLM's engine.

  .venv-vllm/bin/python benchmarks/vllm_load_stages.py [--chunks 5] [--repeats 20] [--json F]

What vllm_ttft.py's raw hit loads: SmolLM2-135M's KV (30 layers, 3 KV heads, head_dim 64,
bf16: 23,040 bytes per token), chunks of 256 tokens (2 vLLM blocks of 128), 5 chunks =
1,280 tokens = 29.5 MB. The chunks (random bf16 bit patterns) are PUT once into a
memory-only kvstash-server on loopback (harness.Server); then the worker's sync load
(kvstash_vllm.worker.WorkerSide._load, the code vLLM runs) restores them `repeats`
times into 30 paged CPU cache tensors [blocks, 3, 128, 128] (vLLM's CPU layout, the tile
order probed from vLLM's own cpu_attn_reshape_and_cache), into shuffled block ids.
Stages (median ms over the repeats, and MB/s of the 29.5 MB), all in one process:
  load:    the whole _load (what the connector counts as load_ms): pipelined, each chunk
           verified and scattered as its GET completes (_load_raw_cpu);
  wait:    of that, the time blocked on GETs;  work: verifying + scattering;
  serial:  the same load unpipelined, as before (and as coded codecs still do): every
           GET (_fetch), then every chunk verified + scattered (_restore_into_blocks);
  fetch:   the GETs alone (get_parallelism threads), verified by the client's CRC32C.
Each repeat checks the round trip: the blocks gathered back equal the chunks PUT.
The server binary: $KVSTASH_SERVER, else build/kvstash-server (scripts/build.sh
kvstash-server). Exit 0 when every round trip matched, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "engines", "vllm", "tests"))
sys.path.insert(0, os.path.join(ROOT, "engines", "vllm"))

import kvstash  # noqa: E402
from harness import Server  # noqa: E402
from kvstash_vllm.config import ConnectorConfig  # noqa: E402
from kvstash_vllm.metadata import LoadOp  # noqa: E402
from kvstash_vllm.namespace import NamespaceKey  # noqa: E402
from kvstash_vllm.stats import Counters  # noqa: E402
from kvstash_vllm.worker import WorkerSide  # noqa: E402

L, H, D, B, C = 30, 3, 64, 128, 256  # SmolLM2-135M: layers, KV heads, head_dim; block; chunk


class _OneCodec:
    """The worker's codec cache for one namespace."""

    def __init__(self, codec):
        self.codec = codec

    def get(self, ns, counters):
        return self.codec


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        return next(
            (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine()
        )


def _median_ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1e3, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.chunks < 1 or a.repeats < 1:
        print("--chunks and --repeats must be >= 1", file=sys.stderr)
        return 2
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        print(f"--json {a.json}: no such folder", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    rng = np.random.default_rng(7)
    n_tokens = a.chunks * C
    tokens = [int(t) for t in rng.integers(1, 49000, n_tokens)]
    chunks = [rng.integers(0, 1 << 16, (L, 2, C, H, D), dtype=np.uint16) for _ in range(a.chunks)]
    mb = sum(c.nbytes for c in chunks) / 1e6
    srv = Server().start()
    try:
        cfg = ConnectorConfig(servers=(srv.address,), credential="secret", async_load=False)
        client = kvstash.Client([srv.address], cfg.tenant, "secret")
        codec = kvstash.PrefixCodec.raw(
            kvstash.KvLayout(L, H, D, "bf16"),
            kvstash.PrefixCodecOptions(model_fingerprint=bytes(32), chunk_tokens=C),
        )
        keys = [k for k in codec.chain_keys(tokens) if not k.partial]
        client.put_chunks(codec.encode_chunks(tokens, keys, chunks))
        w = WorkerSide(cfg, lambda *_: _OneCodec(codec), client, B, C, torch.bfloat16, "auto", Counters())
        n_blocks = n_tokens // B
        caches = {
            f"model.layers.{i}.self_attn.attn": torch.zeros(4 * n_blocks, H, B, 2 * D, dtype=torch.bfloat16)
            for i in range(L)
        }
        w.register_kv_caches(caches)
        stages: dict[str, list[float]] = {k: [] for k in ("load", "wait", "work", "serial", "fetch")}

        def serial_load(op):
            codec = w.codecs.get(op.ns, w.counters)
            t0 = time.perf_counter()
            keys, payloads = w._fetch(op, codec)
            stages["fetch"].append(time.perf_counter() - t0)
            w._restore_into_blocks(op, codec, keys, payloads)
            stages["serial"].append(time.perf_counter() - t0)

        ok = True
        for r in range(a.repeats + 1):  # repeat 0 warms up (connections, page faults)
            for mode in ("pipelined", "serial"):
                block_ids = [int(b) for b in rng.permutation(4 * n_blocks)[:n_blocks]]
                op = LoadOp(f"r{r}", tokens, NamespaceKey(), None, a.chunks, block_ids, 0)
                if mode == "serial":
                    serial_load(op)
                else:
                    before = w.counters.totals()
                    t0 = time.perf_counter()
                    ok &= not w._load(op)
                    stages["load"].append(time.perf_counter() - t0)
                    after = w.counters.totals()
                    stages["wait"].append(
                        (after["cost_transfer_ms"] - before.get("cost_transfer_ms", 0)) / 1e3
                    )
                    stages["work"].append((after["cost_decode_ms"] - before.get("cost_decode_ms", 0)) / 1e3)
                out = np.empty((L, 2, n_tokens, H, D), dtype=np.uint16)
                w.order.gather(w._layers_u16, block_ids, out)
                ok &= np.array_equal(out, np.concatenate(chunks, axis=2))
            if r == 0:
                for v in stages.values():
                    v.clear()
        w.shutdown()
        client.close()
    finally:
        srv.kill()
    res = {
        "mb": round(mb, 2),
        "chunks": a.chunks,
        "repeats": a.repeats,
        "round_trip_ok": bool(ok),
        "host": platform.node(),
        "cpu": _cpu_model(),
        "copy_loops": w.order.copy_loops(),
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg()[0],
    }
    for k, v in stages.items():
        res[f"{k}_ms"] = _median_ms(v)
        res[f"{k}_mb_s"] = round(mb / statistics.median(v), 1)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
