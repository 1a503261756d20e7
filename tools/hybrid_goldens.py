#!/usr/bin/env python3
"""Regenerates the committed goldens of the hybrid (Gated DeltaNet + gated attention)
runtime, model/hybrid/, from Hugging Face transformers' Qwen3.5 text model
(`qwen3_5_text`, transformers.Qwen3_5ForCausalLM), fp32 on CPU.

  python3 -m venv /tmp/refvenv
  /tmp/refvenv/bin/pip install -r tools/requirements-reference.txt
  /tmp/refvenv/bin/python tools/hybrid_goldens.py

transformers runs its own torch code paths here (no fla / causal-conv1d kernels are
installed): torch_chunk_gated_delta_rule for every multi-token call,
torch_recurrent_gated_delta_rule for single-token decode, causal_conv1d_fn /
causal_conv1d_update (F.conv1d), eager attention. The script asserts that.

Writes tests/model/hybrid/data/tiny_qwen35/:
  config.json        the Qwen3_5TextConfig (4 layers: 3 linear_attention + 1
                     full_attention, hidden 64, GQA 4/2 heads of 16, partial RoPE 0.5,
                     Gated DeltaNet with 2 key heads of 16 and 4 value heads of 8)
  model.safetensors  fp32 random weights, fixed seed, every tensor drawn at random
                     (norm weights too, so the zero-centred (1 + w) form is exercised)
  goldens.safetensors fp32 tensors:
     full_logits        [P + C, vocab]   one prefill over prefix + continuation
     prefix_logits      [P, vocab]       prefill of the prefix alone (with a cache)
     cont_logits        [C, vocab]       continuation prefill from the prefix's cache
                                         (the chunked rule with an initial state)
     layers.<l>.key     [P, n_kv_heads, head_dim]  attention layer l after k_norm+RoPE
     layers.<l>.value   [P, n_kv_heads, head_dim]
     layers.<l>.conv_state  [conv_dim, kernel - 1] linear layer l: the last kernel-1
                                         pre-convolution qkv inputs (transformers keeps
                                         kernel columns; its first one is never read)
     layers.<l>.delta_state [n_v_heads, head_k_dim, head_v_dim] S[h][k][v]
  goldens.json       tokens (prefix, continuation), the greedy decode of G tokens after
                     the prefix by transformers (single-token decode path), versions.
"""

import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.cache_utils import DynamicCache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "model", "hybrid", "data", "tiny_qwen35")
SEED = 20260
PREFIX = 80  # 5 kvstash chunks of 16 tokens; 2 chunks (64 + 16) of the HF kernel
CONT = 12
GREEDY = 8


def make_config():
    return Qwen3_5TextConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
    )


def randomise(model, gen):
    """Every parameter drawn at random with a fixed generator (sizes keep activations
    O(1) so that the goldens are not dominated by saturation)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = p.shape
            if name.endswith("A_log"):
                v = torch.log(torch.empty(shape).uniform_(0.5, 8.0, generator=gen))
            elif name.endswith("dt_bias"):
                v = torch.randn(shape, generator=gen) * 0.5
            elif name.endswith("linear_attn.norm.weight"):
                v = 1.0 + torch.randn(shape, generator=gen) * 0.2  # plain weight
            elif "norm" in name:
                v = torch.randn(shape, generator=gen) * 0.2  # zero-centred (1 + w)
            elif name.endswith("conv1d.weight"):
                v = torch.randn(shape, generator=gen) * 0.5
            elif name.endswith("embed_tokens.weight"):
                v = torch.randn(shape, generator=gen)
            else:  # linear layers [out, in]
                v = torch.randn(shape, generator=gen) / np.sqrt(shape[-1])
            p.copy_(v)


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(SEED)
    cfg = make_config()
    cfg._attn_implementation = "eager"
    model = Qwen3_5ForCausalLM(cfg).eval().to(torch.float32)
    randomise(model, gen)

    mod = sys.modules[type(model.model.layers[0].linear_attn).__module__]
    for fn in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
        f = getattr(mod, fn)
        assert f.__module__ == mod.__name__, f"{fn} is replaced by a hub kernel"

    tokens = torch.randint(0, cfg.vocab_size, (PREFIX + CONT,), generator=gen)
    prefix, cont = tokens[:PREFIX], tokens[PREFIX:]

    out = {}
    with torch.no_grad():
        full = model(tokens[None], use_cache=False).logits[0]
        cache = DynamicCache(config=cfg)
        pre = model(prefix[None], cache=cache, use_cache=True)
        out["prefix_logits"] = pre.logits[0]
        for l, t in enumerate(cfg.layer_types):
            layer = cache.layers[l]
            if t == "full_attention":
                out[f"layers.{l}.key"] = layer.keys[0].transpose(0, 1)  # [T, kvh, hd]
                out[f"layers.{l}.value"] = layer.values[0].transpose(0, 1)
            else:
                out[f"layers.{l}.conv_state"] = layer.conv_states[0][0, :, 1:]
                out[f"layers.{l}.delta_state"] = layer.recurrent_states[0][0]
        snap = {k: v.clone() for k, v in out.items()}
        out = snap
        # Continuation prefill from a copy of the prefix cache.
        import copy

        cache2 = copy.deepcopy(cache)
        out["cont_logits"] = model(cont[None], cache=cache2, use_cache=True).logits[0]
        # Greedy decode after the prefix, one token at a time (recurrent path).
        greedy = []
        nxt = int(pre.logits[0, -1].argmax())
        for _ in range(GREEDY):
            greedy.append(nxt)
            lg = model(torch.tensor([[nxt]]), cache=cache, use_cache=True).logits[0, -1]
            nxt = int(lg.argmax())
    out["full_logits"] = full

    d_pre = (full[:PREFIX] - out["prefix_logits"]).abs().max().item()
    d_cont = (full[PREFIX:] - out["cont_logits"]).abs().max().item()
    print(f"max |full - prefix| {d_pre:.3g}, max |full[P:] - continuation| {d_cont:.3g}")
    assert d_pre < 1e-4 and d_cont < 1e-4

    os.makedirs(OUT, exist_ok=True)
    cfg_dict = cfg.to_dict()
    cfg_dict.pop("_attn_implementation", None)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()},
        os.path.join(OUT, "model.safetensors"),
        metadata={"format": "pt"},
    )
    save_file(
        {k: v.contiguous().to(torch.float32) for k, v in out.items()},
        os.path.join(OUT, "goldens.safetensors"),
    )
    meta = {
        "generator": "tools/hybrid_goldens.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": SEED,
        "prefix_tokens": prefix.tolist(),
        "continuation_tokens": cont.tolist(),
        "greedy_after_prefix": greedy,
    }
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
