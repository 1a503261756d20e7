"""benchmarks/speed_table.py over the committed results: figures derived by hand from
the result files, and a missing file is a clear exit 1."""

import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import speed_table  # noqa: E402


def rows_by_path():
    return {r["path"]: r for r in speed_table.build_rows()}


def test_figures_from_the_committed_results():
    rows = rows_by_path()
    assert len(rows) == 11
    with open(os.path.join(ROOT, "benchmarks", "results", "profile_hit.json")) as f:
        profile = json.load(f)
    spec = next(r for r in profile["rows"] if r["codec"] == "spec")
    decode_ms = sum(
        g["cpu_ms"]
        for g in spec["groups"]
        if g["group"] in ("rANS decode", "spec decode: contexts + values", "checksums")
    )
    bf16_mb = profile["tokens"] * 30 * 2 * 3 * 64 * 2 / 1e6  # SmolLM2: layers x K,V x heads x head_dim x 2 B
    row = next(r for p, r in rows.items() if p.startswith("spec decode"))
    assert row["figure"].startswith(f"{bf16_mb / (decode_ms / 1e3):.0f} MB/s")
    dckv = next(r for r in profile["rows"] if r["codec"] == "dckv")
    row = next(r for p, r in rows.items() if p.startswith("dckv decode"))
    assert row["figure"].startswith(f"{bf16_mb / (dckv['hit_cpu_ms'] / 1e3):.0f} MB/s")
    assert not row["met"] and "ceiling" in row["note"]
    row = next(r for p, r in rows.items() if p.startswith("vLLM raw load"))
    assert row["figure"].startswith("792 MB/s") and not row["met"]
    row = next(r for p, r in rows.items() if p.startswith("llama.cpp demo"))
    assert row["figure"].startswith("0.41 ") and row["met"]


def test_missing_result_is_exit_1(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    shutil.copytree(os.path.join(ROOT, "benchmarks", "results"), results)
    os.remove(results / "vllm_load_stages.json")
    monkeypatch.setattr(speed_table, "RESULTS", str(results))
    assert speed_table.main([]) == 1
    assert "vllm_load_stages.json is missing" in capsys.readouterr().err
