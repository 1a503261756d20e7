#!/usr/bin/env python3
"""Lossless coders of the real SmolLM2 KV in one table: spec, byte-plane rANS, zstd -3/-19,
htscodecs order-0/1 over byte planes (all in C++) and ZipNN (PyPI zipnn, Python).

  .venv-vllm/bin/python benchmarks/lossless_peers.py [--kvstash-bench build/kvstash-bench]
      [--json benchmarks/results/bench_codec_lossless_peers.json] [-- ARGS...]

Runs `kvstash-bench codec --codec lossless-peers --dump-dir TMP --json TMP/cpp.json ARGS`
(benchmarks/drivers/lossless_peers_bench.h: SmolLM2-135M's KV of the evaluation corpus in
256-token chunks as bf16, f16 and fp8 e4m3; every coder round-trips every chunk), then
codes the same chunks, read back from the dump (kv-<dtype>.bin: the chunks' canonical
bytes one after another, layout in that header), with zipnn.ZipNN (bytearray input,
the dtype's ZipNN name, threads=1, its defaults otherwise) one chunk at a time, checks
each decodes to the same bytes, and prints the merged table as Markdown and writes the
merged JSON. ZipNN's stored size adds the fp8 scales (4 bytes each), like the other peers.
ZipNN's compress reorders the bits of its input buffer in place (bf16, f32), so each
chunk is handed a fresh copy, made outside the timed call.

Times: MB/s = raw MB per CPU-second of the coding calls on one thread (C++: thread CPU
time; ZipNN: process CPU time, Python's other threads idle). spec's encode/decode exclude
its predictor; the predictor's CPU time per token and the decode speed including it are
separate columns. ZipNN needs torch, which .venv-vllm has (scripts/setup.sh installs
zipnn there, engines/vllm/requirements.txt); run it with that interpreter.
Exit 0 on success, 1 when a coder fails to round-trip or the C++ bench fails.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZIPNN_DTYPE = {"bf16": "bfloat16", "f16": "float16", "fp8_e4m3": "float8_e4m3fn"}


def zipnn_row(dump: dict, template: dict) -> dict:
    """Codes every chunk of one dump with ZipNN; raises when one does not round-trip."""
    import zipnn  # pylint: disable=import-outside-toplevel

    coder = zipnn.ZipNN(bytearray_dtype=ZIPNN_DTYPE[dump["dtype"]], threads=1)
    chunk_bytes = dump["chunk_bytes"]
    stored = encode_s = decode_s = 0.0
    with open(dump["path"], "rb") as f:
        for i in range(dump["chunks"]):
            chunk = f.read(chunk_bytes)
            if len(chunk) != chunk_bytes:
                raise RuntimeError(f"{dump['path']}: chunk {i} truncated")
            work = bytearray(chunk)  # compress rewrites its input in place
            t0 = time.process_time()
            packed = coder.compress(work)
            t1 = time.process_time()
            back = coder.decompress(packed)
            t2 = time.process_time()
            if bytes(back) != chunk:
                raise RuntimeError(f"zipnn did not round-trip {dump['dtype']} chunk {i}")
            stored += len(packed) + dump["fp8_scale_bytes_per_chunk"]
            encode_s += t1 - t0
            decode_s += t2 - t1
    raw = template["raw_bytes"]
    scalars = raw / dump["element_bytes"]
    return {"codec": f"zipnn-{importlib.metadata.version('zipnn')}",
            "dtype": dump["dtype"], "tokens": template["tokens"], "chunks": dump["chunks"],
            "raw_bytes": raw, "stored_bytes": int(stored), "ratio": raw / stored,
            "bits_per_scalar": 8.0 * stored / scalars, "encode_mb_s": raw / encode_s / 1e6,
            "decode_mb_s": raw / decode_s / 1e6, "lossless": True}


def fmt(row: dict, key: str, prec: int) -> str:
    v = row.get(key)
    return "-" if v is None else f"{v:,.{prec}f}"


def markdown(out: dict) -> str:
    s = out["setup"]
    lines = [f"CPU {s['cpu_model']} ({os.cpu_count()} CPUs), load average "
             f"{s['load_average_start'][0]:.2f} -> {s['zipnn_load_average_end'][0]:.2f} (1 min); "
             f"coding on 1 thread, predictor on {s['threads']}; {s['evaluation_tokens']:,} tokens "
             f"in {s['evaluation_tokens'] // s['chunk_tokens']} chunks of {s['chunk_tokens']}",
             "",
             "| codec | dtype | ratio | bits/scalar | encode MB/s | decode MB/s | predictor ms/token (CPU) |"
             " decode + predictor MB/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in out["rows"]:
        lines.append(f"| {r['codec']} | {r['dtype']} | {fmt(r, 'ratio', 3)}x | {fmt(r, 'bits_per_scalar', 3)} | "
                     f"{fmt(r, 'encode_mb_s', 1)} | {fmt(r, 'decode_mb_s', 1)} | "
                     f"{fmt(r, 'predictor_cpu_ms_per_token', 3)} | {fmt(r, 'decode_with_predictor_mb_s', 1)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--kvstash-bench", default=str(ROOT / "build" / "kvstash-bench"), help="the kvstash-bench binary")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bench_codec_lossless_peers.json"),
                    help="merged results file")
    ap.add_argument("args", nargs="*", help="passed to `kvstash-bench codec` (after --)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvstash-peers-") as tmp:
        cpp_json = Path(tmp) / "cpp.json"
        cmd = [a.kvstash_bench, "codec", "--codec", "lossless-peers", "--dump-dir", tmp,
               "--json", str(cpp_json), *a.args]
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, check=False).returncode != 0:
            print("lossless_peers: the C++ bench failed", file=sys.stderr)
            return 1
        out = json.loads(cpp_json.read_text())
        rows = []
        try:
            for dump in out["dumps"]:
                mine = [r for r in out["rows"] if r["dtype"] == dump["dtype"]]
                rows += mine + [zipnn_row(dump, mine[0])]
        except RuntimeError as e:
            print(f"lossless_peers: {e}", file=sys.stderr)
            return 1
    out["rows"] = rows
    for d in out["dumps"]:
        d["path"] = Path(d["path"]).name  # the temporary folder is gone
    out["setup"]["zipnn_load_average_end"] = list(os.getloadavg())
    out["setup"]["command"] = "benchmarks/lossless_peers.py " + " ".join(a.args)
    print(markdown(out))
    Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
