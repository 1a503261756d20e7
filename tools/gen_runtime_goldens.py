#!/usr/bin/env python3
"""Regenerates the committed golden files of the reference runtime (model/) from an
independent implementation: Hugging Face transformers (PyPI), fp32 on CPU.

  .venv/bin/pip install -r tools/requirements-reference.txt
  .venv/bin/python tools/gen_runtime_goldens.py [--models models] [--only smollm|qwen3|llama2c|tokenizer]

Writes under tests/model/data/:
  smollm2_goldens.json   SmolLM2-135M-Instruct Q4_1 GGUF (transformers dequantises it to
                         fp32 with gguf-py): prompt token ids, per-layer K after and
                         before RoPE and V at a few positions, logits top-k rows, and the
                         greedy continuation of 32 tokens.
  smollm2_tokenizer.json texts and their token ids by transformers' GGUF tokenizer.
  tiny_qwen3/            a random-weight Qwen3 made by transformers (config.json +
                         model.safetensors) and goldens.json (all K/V/logits).
  tiny_llama2c/          a SentencePiece BPE tokenizer trained on the GPL-3 text, written
                         as llama2.c tokenizer.bin, a tiny Llama trained briefly on the
                         same text and exported in the llama2.c (v0) checkpoint format,
                         and goldens.json (logits, K/V, tokenizer vectors, greedy text).
Texts are real documents that Debian ships (the GPL-3 text, a C header); the excerpts
used are stored in the goldens, so tests never read them from the system.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "model", "data")
GPL3 = "/usr/share/common-licenses/GPL-3"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"

torch.manual_seed(1234)
torch.set_num_threads(max(1, os.cpu_count() or 1))


def f32(x):
    """Shortest text that parses back to the same float32."""
    return [float(f"{v:.9g}") for v in np.asarray(x, dtype=np.float32).reshape(-1)]


def dump(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def read_text(path, limit=None):
    with open(path, encoding="utf-8") as f:
        t = f.read()
    return t if limit is None else t[:limit]


def capture_forward(model, ids, pre_rope_module):
    """Runs model on ids [1, T]; returns logits [T, V], and per layer (k_pre, k, v)
    each [T, kv_heads, head_dim] as numpy."""
    pre = {}
    hooks = []
    for l, layer in enumerate(model.model.layers):
        mod = pre_rope_module(layer.self_attn)

        def hook(_m, _inp, out, l=l):
            pre[l] = out.detach()

        hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    for h in hooks:
        h.remove()
    cfg = model.config
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kvh = cfg.num_key_value_heads
    T = ids.shape[1]
    cache = out.past_key_values
    layers = []
    for l in range(cfg.num_hidden_layers):
        if hasattr(cache, "layers"):
            k, v = cache.layers[l].keys, cache.layers[l].values
        else:
            k, v = cache[l]
        k = k[0].transpose(0, 1).contiguous().numpy()  # [T, kvh, hd]
        v = v[0].transpose(0, 1).contiguous().numpy()
        kp = pre[l][0].reshape(T, kvh, hd).numpy()
        layers.append((kp, k, v))
    return out.logits[0].numpy(), layers


def topk_rows(logits, rows, k):
    out = []
    for r in rows:
        idx = np.argsort(-logits[r], kind="stable")[:k]
        out.append({"row": int(r), "ids": [int(i) for i in idx], "values": f32(logits[r][idx])})
    return out


def gen_smollm(models):
    from transformers import AutoModelForCausalLM

    tok = smollm_tokenizer(models)
    model = AutoModelForCausalLM.from_pretrained(models, gguf_file=SMOL, dtype=torch.float32)
    model.eval()
    prompt = read_text(GPL3, 1400)
    ids = tok.encode(prompt, add_special_tokens=False)
    x = torch.tensor([ids])
    logits, layers = capture_forward(model, x, lambda a: a.k_proj)
    T = len(ids)
    positions = [0, 1, T // 2, T - 1]
    gold = {
        "model": SMOL,
        "reference": "transformers %s, torch %s, fp32 CPU"
        % (__import__("transformers").__version__, torch.__version__),
        "prompt": prompt,
        "prompt_ids": ids,
        "positions": positions,
        "layers": [],
        "logits_topk": topk_rows(logits, positions, 32),
        "logits_last_every_97": f32(logits[T - 1][::97]),
    }
    for kp, k, v in layers:
        gold["layers"].append(
            {"k_pre_rope": f32(kp[positions]), "k": f32(k[positions]), "v": f32(v[positions])}
        )
    # Greedy continuation of a short real prompt (the GPL-3 preamble's first sentence).
    gprompt = read_text(GPL3, 800)
    gids = tok.encode(gprompt, add_special_tokens=False)
    with torch.no_grad():
        gen = model.generate(torch.tensor([gids]), max_new_tokens=32, do_sample=False, num_beams=1)
    gold["greedy_prompt"] = gprompt
    gold["greedy_prompt_ids"] = gids
    gold["greedy_ids"] = [int(t) for t in gen[0][len(gids) :]]
    gold["greedy_text"] = tok.decode(gold["greedy_ids"])
    dump(os.path.join(DATA, "smollm2_goldens.json"), gold)


def tokenizer_texts():
    gpl = read_text(GPL3)
    texts = [
        gpl[:6000],
        gpl[20000:23000],
        read_text("/usr/include/stdio.h", 3000),
        "Version 3, 29 June 2007; it's 2,048 tokens -- we'll see.\n\n\tTabs   and  spaces  \r\n",
        "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u2014 \u201cquoted\u201d \u2026 \u00bd \u2153 \u0661\u0662\u0663 \u65e5\u672c\u8a9e \U0001f600!",
        "<|im_start|>user\nWhat is copyleft?<|im_end|>\n<|im_start|>assistant\n",
        "",
        " ",
        "a",
    ]
    return texts


def smollm_tokenizer(models):
    """transformers' GGUF conversion gives SmolLM2 a plain ByteLevel pre-tokenizer; the
    model's own tokenizer.json (and llama.cpp's "smollm" pre-tokenizer) first isolate
    every \\p{N} character (Digits(individual_digits=True)). We restore that, so the
    vectors are those of SmolLM2's real tokenizer."""
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models, gguf_file=SMOL)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    return tok


def gen_tokenizer(models):
    tok = smollm_tokenizer(models)
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in tokenizer_texts()]
    for c in cases:
        assert tok.decode(c["ids"]) == c["text"], c["text"][:40]
    dump(os.path.join(DATA, "smollm2_tokenizer.json"), {"tokenizer": SMOL, "cases": cases})


def full_goldens(model, ids, pre_rope):
    logits, layers = capture_forward(model, torch.tensor([ids]), pre_rope)
    return {
        "prompt_ids": ids,
        "logits": f32(logits),
        "layers": [{"k_pre_rope": f32(kp), "k": f32(k), "v": f32(v)} for kp, k, v in layers],
    }


def gen_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    torch.manual_seed(7)
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # random norm weights too, so QK-norm and RMSNorm weights matter
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    out = os.path.join(DATA, "tiny_qwen3")
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    # Token ids: the bytes of a real text (vocab 256), so the sequence is not random.
    ids = list(read_text(GPL3, 61).encode("utf-8"))
    gold = full_goldens(model, ids, lambda a: a.k_norm)
    gold["reference"] = "transformers Qwen3ForCausalLM, fp32 CPU"
    dump(os.path.join(out, "goldens.json"), gold)


def train_sentencepiece(text, prefix, vocab):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([l for l in text.splitlines() if l.strip()]),
        model_prefix=prefix,
        vocab_size=vocab,
        model_type="bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def write_llama2c_tokenizer(sp, path):
    """karpathy/llama2.c tokenizer.py export: max_token_length, then (score, len, bytes)."""
    tokens, scores = [], []
    for i in range(sp.get_piece_size()):
        t = sp.id_to_piece(i)
        if i == sp.bos_id():
            t = "\n<s>\n"
        elif i == sp.eos_id():
            t = "\n</s>\n"
        tokens.append(t.replace("\u2581", " ").encode("utf-8"))
        scores.append(sp.get_score(i))
    with open(path, "wb") as f:
        f.write(struct.pack("I", max(len(t) for t in tokens)))
        for b, s in zip(tokens, scores):
            f.write(struct.pack("fI", s, len(b)))
            f.write(b)


def write_llama2c_checkpoint(model, path, shared):
    """karpathy/llama2.c export.py legacy_export (version 0) of a LlamaForCausalLM,
    with q/k permuted back to the interleaved RoPE layout (export.py permute_reverse)."""
    cfg = model.config
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    dim, nh, nkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    hd = dim // nh

    def interleave(w, heads):
        return w.view(heads, 2, hd // 2, dim).transpose(1, 2).reshape(heads * hd, dim)

    L = cfg.num_hidden_layers
    with open(path, "wb") as f:
        f.write(
            struct.pack(
                "iiiiiii",
                dim,
                cfg.intermediate_size,
                L,
                nh,
                nkv,
                cfg.vocab_size if shared else -cfg.vocab_size,
                cfg.max_position_embeddings,
            )
        )

        def w(t):
            f.write(t.contiguous().numpy().astype("<f4").tobytes())

        w(sd["model.embed_tokens.weight"])
        # llama2.c order: each weight kind for all layers, then the next kind.
        per_layer = [
            lambda l: sd[f"model.layers.{l}.input_layernorm.weight"],
            lambda l: interleave(sd[f"model.layers.{l}.self_attn.q_proj.weight"], nh),
            lambda l: interleave(sd[f"model.layers.{l}.self_attn.k_proj.weight"], nkv),
            lambda l: sd[f"model.layers.{l}.self_attn.v_proj.weight"],
            lambda l: sd[f"model.layers.{l}.self_attn.o_proj.weight"],
            lambda l: sd[f"model.layers.{l}.post_attention_layernorm.weight"],
            lambda l: sd[f"model.layers.{l}.mlp.gate_proj.weight"],
            lambda l: sd[f"model.layers.{l}.mlp.down_proj.weight"],
            lambda l: sd[f"model.layers.{l}.mlp.up_proj.weight"],
        ]
        for weight in per_layer:
            for l in range(L):
                w(weight(l))
        w(sd["model.norm.weight"])
        # freq_cis_real / imag [seq_len, hd/2] as llama2.c's model.py precomputes them.
        freqs = 1.0 / (10000.0 ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
        ang = torch.outer(torch.arange(cfg.max_position_embeddings).float(), freqs)
        w(torch.cos(ang))
        w(torch.sin(ang))
        if not shared:
            w(sd["lm_head.weight"])


def gen_llama2c():
    from transformers import LlamaConfig, LlamaForCausalLM

    out = os.path.join(DATA, "tiny_llama2c")
    os.makedirs(out, exist_ok=True)
    text = read_text(GPL3)
    sp = train_sentencepiece(text, "/tmp/kvstash_tiny_sp", 384)
    write_llama2c_tokenizer(sp, os.path.join(out, "tokenizer.bin"))
    cfg = LlamaConfig(
        vocab_size=sp.get_piece_size(),
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
    )
    torch.manual_seed(11)
    model = LlamaForCausalLM(cfg)
    # A short training run on the GPL-3 text so the checkpoint generates real words.
    data = torch.tensor(sp.encode(text), dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(5)
    for _ in range(250):
        starts = torch.randint(0, len(data) - 129, (16,), generator=g)
        batch = torch.stack([data[s : s + 129] for s in starts])
        loss = model(input_ids=batch[:, :-1], labels=batch[:, 1:]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"tiny llama2.c model: final training loss {loss.item():.3f}")
    model.eval()
    write_llama2c_checkpoint(model, os.path.join(out, "model.bin"), shared=True)
    prompt = "The GNU General Public License is"
    ids = [sp.bos_id()] + sp.encode(prompt)
    gold = full_goldens(model, ids, lambda a: a.k_proj)
    gold["reference"] = (
        "transformers LlamaForCausalLM, fp32 CPU; sentencepiece %s" % __import__("sentencepiece").__version__
    )
    gold["prompt"] = prompt
    with torch.no_grad():
        gen = model.generate(
            torch.tensor([ids]),
            max_new_tokens=24,
            do_sample=False,
            num_beams=1,
            eos_token_id=sp.eos_id(),
            pad_token_id=sp.eos_id(),
        )
    gold["greedy_ids"] = [int(t) for t in gen[0][len(ids) :]]
    gold["greedy_text"] = sp.decode(gold["greedy_ids"])
    cases = []
    for t in [
        text[:3000],
        text[30000:31500],
        "Version 3, 29 June 2007; it's 2,048 tokens.\n\n  Spaces  ",
        "Caf\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001f600",
        "a",
        "",
    ]:
        cases.append({"text": t, "ids": sp.encode(t)})
    gold["tokenizer_cases"] = cases
    dump(os.path.join(out, "goldens.json"), gold)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--only", choices=["smollm", "tokenizer", "qwen3", "llama2c"])
    a = ap.parse_args()
    steps = {
        "smollm": lambda: gen_smollm(a.models),
        "tokenizer": lambda: gen_tokenizer(a.models),
        "qwen3": gen_qwen3,
        "llama2c": gen_llama2c,
    }
    for name, fn in steps.items():
        if a.only in (None, name):
            fn()


if __name__ == "__main__":
    sys.exit(main())
