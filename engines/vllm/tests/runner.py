"""One vLLM engine in this process, driven by JSON lines on stdin (harness.Engine).

argv[1]: {"model", "kv_transfer_config" (dict or null), "block_size",
          "enable_prefix_caching", "max_model_len", "max_lora_rank" (0 or absent: LoRA off),
          "hf_overrides" (dict; absent or null: none)}
Commands (one JSON object per line) and replies (a line "@@kvstash@@" + JSON):
  {"cmd": "generate", "prompts": [[ids]], "max_tokens": N, "salts": [str|null]|null,
   "loras": [[name, int id, path]|null]|null, "serial": bool, "flush_each": bool}
      -> {"tokens": [[ids]], "logprobs": [[logprob of each chosen token]], "cached":
          [num_cached_tokens], "ttft_s": [vLLM first-token latency], "wall_s",
          "first_token_ts"/"last_token_ts": [engine-core monotonic timestamps, s],
          "metrics": {vLLM prefix-cache counters}, "connector": {role: totals}}
      serial: one llm.generate call per prompt, in order (batch size 1: vLLM's CPU
      numerics depend on the batch shape, so serial runs are comparable run to run);
      flush_each: wait for the connector's saves after each prompt.
  {"cmd": "flush", "timeout_s": T} -> {"flushed": bool}   (queued kvstash saves done)
  {"cmd": "abort_during_load", "prompt": [ids], "after_steps": N, "timeout_s": T}
      -> {"parked", "held_blocks", "held_after_abort": [blocks still held, per step],
          "released", "release_s", "free_before", "free_after", "connector"}
      adds the prompt through LLMEngine, steps until vLLM parks it for an async load
      (WAITING_FOR_REMOTE_KVS), aborts it, then steps: its blocks must stay allocated
      while the load is in flight and return to the pool once it is reported.
  {"cmd": "status"} -> {"vm_rss_kib": VmRSS of this (the engine's) process from
      /proc/self/status, "connectors": [{"role", "fingerprint", "codecs_cached",
      "codec_builds", "codec_evictions"}], "shared_state": kvstash.PrefixCodec.shared_state()}
  {"cmd": "quit"} -> {"bye": true}
A failed command replies {"error": text}. Greedy sampling (temperature 0).
"""
import json
import os
import sys
import time
import traceback

MARK = "@@kvstash@@"


def reply(obj):
    sys.stdout.write(MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def connector_totals():
    try:
        from kvstash_vllm.connector import instances
    except Exception:
        return {}
    return {c.role.name.lower(): c.totals() for c in instances()}


def flush(timeout_s):
    try:
        from kvstash_vllm.connector import instances
    except Exception:
        return True
    return all(c.flush(timeout_s) for c in instances())


def vm_rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def status():
    conns = []
    try:
        from kvstash_vllm.connector import instances
    except Exception:
        instances = list
    for c in instances():
        codecs = c._scheduler.codecs if c._scheduler is not None else (c._worker.codecs if c._worker else None)
        conns.append({"role": c.role.name.lower(), "fingerprint": c.fingerprint,
                      "codecs_cached": len(codecs) if codecs is not None else 0,
                      "codec_builds": codecs.builds if codecs is not None else 0,
                      "codec_evictions": codecs.evictions if codecs is not None else 0})
    out = {"vm_rss_kib": vm_rss_kib(), "connectors": conns}
    try:
        import kvstash
        out["shared_state"] = dict(kvstash.PrefixCodec.shared_state())
    except Exception:
        pass
    return out


def vllm_counters(llm):
    want = ("vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries",
            "vllm:prefix_cache_hits", "vllm:prefix_cache_queries")
    out = {}
    for m in llm.get_metrics():
        if m.name in want and hasattr(m, "value"):
            out[m.name] = out.get(m.name, 0) + m.value
    return out


def abort_during_load(llm, cmd):
    from vllm import SamplingParams
    from vllm.v1.request import RequestStatus
    eng = llm.llm_engine
    sched = eng.engine_core.engine_core.scheduler
    pool = sched.kv_cache_manager.block_pool
    free0 = pool.get_num_free_blocks()
    rid = "abort-during-load"
    sp = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    iid = eng.add_request(rid, {"prompt_token_ids": cmd["prompt"]}, sp)   # the engine core's id
    deadline = time.time() + cmd.get("timeout_s", 60)
    parked = False
    for _ in range(50):
        eng.step()
        req = sched.requests.get(iid)
        if req is not None and req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            parked = True
            break
    held = free0 - pool.get_num_free_blocks()
    eng.abort_request([rid])
    after = []
    for _ in range(cmd.get("after_steps", 3)):
        eng.step()
        after.append(free0 - pool.get_num_free_blocks())
    t = time.time()
    while iid in sched.requests and time.time() < deadline:
        eng.step()
    return {"parked": parked, "held_blocks": held, "held_after_abort": after,
            "released": iid not in sched.requests, "release_s": time.time() - t,
            "free_before": free0, "free_after": pool.get_num_free_blocks(),
            "connector": connector_totals()}


def main():
    spec = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.lora.request import LoRARequest
    ktc = spec.get("kv_transfer_config")
    kwargs = dict(model=spec["model"], dtype="bfloat16", enforce_eager=True,
                  max_model_len=spec.get("max_model_len", 2048), block_size=spec.get("block_size", 32),
                  enable_prefix_caching=spec.get("enable_prefix_caching", False),
                  disable_log_stats=False, seed=0)
    if ktc:
        kwargs["kv_transfer_config"] = KVTransferConfig(**ktc)
    if spec.get("hf_overrides"):
        kwargs["hf_overrides"] = spec["hf_overrides"]
    if spec.get("max_lora_rank"):
        kwargs.update(enable_lora=True, max_lora_rank=spec["max_lora_rank"], max_loras=2)
    t0 = time.time()
    llm = LLM(**kwargs)
    reply({"ready": True, "startup_s": time.time() - t0})
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
            if cmd["cmd"] == "quit":
                reply({"bye": True})
                break
            if cmd["cmd"] == "flush":
                reply({"flushed": flush(cmd.get("timeout_s", 120))})
                continue
            if cmd["cmd"] == "status":
                reply(status())
                continue
            if cmd["cmd"] == "abort_during_load":
                reply(abort_during_load(llm, cmd))
                continue
            if cmd["cmd"] != "generate":
                raise ValueError(f"unknown command {cmd['cmd']!r}")
            salts = cmd.get("salts") or [None] * len(cmd["prompts"])
            prompts = []
            for ids, salt in zip(cmd["prompts"], salts):
                p = {"prompt_token_ids": ids}
                if salt:
                    p["cache_salt"] = salt
                prompts.append(p)
            loras = [LoRARequest(*lo) if lo else None for lo in (cmd.get("loras") or [None] * len(prompts))]
            sp = SamplingParams(temperature=0.0, max_tokens=cmd.get("max_tokens", 8), ignore_eos=True,
                                logprobs=1)
            t = time.time()
            if cmd.get("serial"):
                outs = []
                for p, lo in zip(prompts, loras):
                    outs += llm.generate([p], sp, use_tqdm=False, lora_request=lo)
                    if cmd.get("flush_each"):
                        flush(120)
            else:
                outs = llm.generate(prompts, sp, use_tqdm=False, lora_request=loras)
            wall = time.time() - t
            reply({"tokens": [list(o.outputs[0].token_ids) for o in outs],
                   "logprobs": [[lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)]
                                for o in outs],
                   "cached": [o.num_cached_tokens for o in outs],
                   "ttft_s": [o.metrics.first_token_latency if o.metrics else None for o in outs],
                   "first_token_ts": [o.metrics.first_token_ts if o.metrics else None for o in outs],
                   "last_token_ts": [o.metrics.last_token_ts if o.metrics else None for o in outs],
                   "wall_s": wall, "metrics": vllm_counters(llm), "connector": connector_totals()})
        except Exception as e:
            reply({"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})
    flush(60)
    os._exit(0)   # skip vLLM's slow interpreter teardown; saves were flushed above


if __name__ == "__main__":
    main()
