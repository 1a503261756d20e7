#!/usr/bin/env python3
"""Output sensitivity of every K/V dimension of SmolLM2-135M for the dckv codec: the
diagonal of the Fisher information of the next-token distributions with respect to
the prompt cache, from Hugging Face transformers (fp32, CPU) with autograd.

  .venv/bin/pip install -r tools/requirements-reference.txt
  .venv/bin/python tools/dckv_output_fisher.py [--models models] [--out FILE]

Why: dckv minimises the weighted distortion sum_d w_d (x_d - x^_d)^2 of a cache row
(codec/dckv/dckv_calibration.h, "Output weights"). For a small perturbation delta of
the prompt cache the KL divergence of a next-token distribution p is
KL(p || p~) ~= 1/2 delta^T F delta, F = E_{y~p}[g g^T], g = d log p(y) / d cache
(the Fisher information; Gauss-Newton form of the KL's Hessian). With independent
quantisation errors of variance sigma_d^2 per dimension the expected KL is
1/2 sum_d F_dd sigma_d^2, so the weight of dimension d is w_d = 1/2 F_dd summed over the
coded positions: the KL cost, in nats per continuation token, of a unit squared error
on that dimension at every coded position, divided by the number of coded positions.
The C++ calibration's noise measurement (benchmarks/drivers/dckv_bench.cc, AddSensitivity)
estimates the same quantity summed per (layer, K/V, head) block from a few documents; this
script resolves the 64 dimensions of each head (keys BEFORE RoPE, as dckv stores them)
and averages over every calibration document.

Setup mirrors `kvstash-bench codec` (benchmarks/drivers/dckv_bench.h): documents of the
CALIBRATION split (model/corpus/text_corpus.cc, disjoint from the evaluation split) cut into
prompt_tokens + continuation_tokens token pieces; the first raw_head and last raw_tail
prompt positions are stored raw by dckv, so only the positions between them are
perturbed; the continuation is teacher-forced over the prompt cache. F is estimated by
sampling y ~ p at every continuation position (`samples` draws): the cross terms
between positions vanish in expectation because E_{y~p}[d log p(y)] = 0.

Writes JSON: model, documents, settings, n_layers, n_kv_heads, head_dim and `weight`,
flat [n_layers, 2 (K, V), n_kv_heads, head_dim] (index ((l * 2 + kv) * H + h) * D + d),
read by `kvstash calibrate dckv --sensitivity-file` and `kvstash-bench codec
--dckv-sensitivity-file`.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_runtime_goldens import SMOL, smollm_tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIC = "/usr/share/common-licenses/"
PY = "/usr/lib/python3.11/"
# model/corpus/text_corpus.cc, CorpusSplit::kCalibration (keep in sync).
CALIBRATION_FILES = [LIC + "GPL-3", LIC + "LGPL-2.1", LIC + "GFDL-1.3", PY + "argparse.py",
                     PY + "collections/__init__.py"]


def rope(k, cos, sin):
    """k [1, H, T, D] before RoPE -> after (Llama's rotate-half convention)."""
    half = k.shape[-1] // 2
    rot = torch.cat((-k[..., half:], k[..., :half]), dim=-1)
    return k * cos + rot * sin


def prompt_cache(model, ids):
    """Prefill ids [1, P] without gradients; per layer (K before RoPE, V), each [1, H, P, D]."""
    cfg = model.config
    H = cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    pre = {}
    hooks = [layer.self_attn.k_proj.register_forward_hook(lambda _m, _i, out, l=l: pre.__setitem__(l, out))
             for l, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    for h in hooks:
        h.remove()
    P = ids.shape[1]
    layers = []
    for l in range(cfg.num_hidden_layers):
        k_pre = pre[l].reshape(1, P, H, D).transpose(1, 2).contiguous()
        layers.append((k_pre, out.past_key_values.layers[l].values.detach().clone()))
    return layers


def add_fisher(model, ids, P, raw_head, raw_tail, samples, gen, acc):
    """Adds sum over samples, continuation positions and coded prompt positions of
    g^2 to acc [L, 2, H, D] (g = gradient of log p(y) with y ~ p)."""
    cfg = model.config
    cache_layers = prompt_cache(model, ids[:, :P])
    lo, hi = raw_head, P - raw_tail
    from transformers import DynamicCache
    leaves, cache = [], DynamicCache(config=cfg)
    pos = torch.arange(P).unsqueeze(0)
    cos, sin = model.model.rotary_emb(cache_layers[0][1], pos)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    for l, (k_pre, v) in enumerate(cache_layers):
        kc = k_pre[:, :, lo:hi].clone().requires_grad_(True)
        vc = v[:, :, lo:hi].clone().requires_grad_(True)
        leaves += [kc, vc]
        k_full = torch.cat((k_pre[:, :, :lo], kc, k_pre[:, :, hi:]), dim=2)
        v_full = torch.cat((v[:, :, :lo], vc, v[:, :, hi:]), dim=2)
        cache.update(rope(k_full, cos, sin), v_full, l)
    T = ids.shape[1] - P
    out = model(input_ids=ids[:, P:], cache=cache, position_ids=torch.arange(P, P + T).unsqueeze(0),
                use_cache=True)
    logp = torch.log_softmax(out.logits[0].float(), dim=-1)  # [T, V]
    probs = logp.detach().exp()
    for s in range(samples):
        y = torch.multinomial(probs, 1, generator=gen)  # [T, 1]
        grads = torch.autograd.grad(logp.gather(1, y).sum(), leaves, retain_graph=s + 1 < samples)
        for l in range(cfg.num_hidden_layers):
            for kv in range(2):
                g = grads[2 * l + kv][0]  # [H, positions, D]
                acc[l, kv] += (g.double() ** 2).sum(dim=1)
    return T * samples * (hi - lo)


def main():
    class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Formatter)
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "inputs", "smollm2-135m-dckv-fisher.json"),
                    help="output JSON (the default is the committed file: a trial run should pass its own)")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--continuation-tokens", type=int, default=64)
    ap.add_argument("--raw-head", type=int, default=4)
    ap.add_argument("--raw-tail", type=int, default=128)
    ap.add_argument("--samples", type=int, default=4, help="draws of y ~ p per continuation position")
    ap.add_argument("--max-docs", type=int, default=0, help="0: every full piece of the calibration split")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.samples < 1:
        ap.error("--samples must be >= 1")
    if a.raw_head < 0 or a.raw_tail < 0 or a.prompt_tokens <= a.raw_head + a.raw_tail:
        ap.error("--prompt-tokens must exceed --raw-head + --raw-tail (the coded positions)")
    if a.continuation_tokens < 1:
        ap.error("--continuation-tokens must be >= 1")
    if a.threads:
        torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM
    tok = smollm_tokenizer(a.models)
    model = AutoModelForCausalLM.from_pretrained(a.models, gguf_file=SMOL, dtype=torch.float32)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    cfg = model.config
    H = cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    acc = torch.zeros(cfg.num_hidden_layers, 2, H, D, dtype=torch.float64)
    n = a.prompt_tokens + a.continuation_tokens
    gen = torch.Generator().manual_seed(a.seed)
    terms, docs, t0 = 0, [], time.time()
    for path in CALIBRATION_FILES:
        with open(path, encoding="utf-8") as f:
            ids = tok.encode(f.read(), add_special_tokens=False)
        for start in range(0, len(ids) - n + 1, n):
            if a.max_docs and len(docs) >= a.max_docs:
                break
            x = torch.tensor([ids[start:start + n]])
            terms += add_fisher(model, x, a.prompt_tokens, a.raw_head, a.raw_tail, a.samples, gen, acc)
            docs.append({"source": path, "first_token": start})
            print("%s @%d: %d pieces, %.0f s" % (path, start, len(docs), time.time() - t0), flush=True)
    if not docs:
        sys.exit("no calibration piece of %d tokens: lower --prompt-tokens/--continuation-tokens" % n)
    # Per continuation token and coded position: w_d = 1/2 F_dd (module docstring).
    weight = 0.5 * acc / terms
    out = {
        "model": SMOL,
        "reference": "transformers %s, torch %s, fp32 CPU" % (__import__("transformers").__version__, torch.__version__),
        "method": "diagonal Fisher of the next-token distributions w.r.t. the coded prompt cache (K before RoPE, V), "
                  "1/2 F_dd averaged over continuation tokens and coded positions (tools/dckv_output_fisher.py)",
        "documents": docs,
        "prompt_tokens": a.prompt_tokens, "continuation_tokens": a.continuation_tokens,
        "raw_head": a.raw_head, "raw_tail": a.raw_tail, "samples": a.samples, "seed": a.seed,
        "n_layers": cfg.num_hidden_layers, "n_kv_heads": H, "head_dim": D,
        "weight": [float("%.6g" % w) for w in weight.flatten().tolist()],
    }
    if os.path.dirname(a.out):
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=0)
        f.write("\n")
    print("wrote %s (%d pieces, %.0f s)" % (a.out, len(docs), time.time() - t0))


if __name__ == "__main__":
    main()
