#!/usr/bin/env python3
"""Rate-distortion training of the dckv codec on model outputs (docs/methods.md §2,
docs/format/dckv.md "Training"), starting from a closed-form artifact of
`kvstash calibrate dckv`.

  .venv-vllm/bin/python tools/train_dckv.py --base-artifact A.kvda --lambda L --out-dir DIR

What is trained, per group of `group_layers` attention layers (rows x = [K_l before
RoPE | V_l] for each layer l of the group, as codec/dckv/dckv_artifact.h): the mean m,
the encoder basis W_e (init basis_i * encode_scale), the decoder basis W_d (init
basis_i), per-component log-steps, a 256-unit GELU encoder net g_e(x - m) added to
y = W_e (x - m) and a 256-unit GELU decoder net g_d(c) added to x^ = m + W_d^T c (tanh
form of GELU, what the C++ decoder evaluates; last layers zero at init, so step 0 is
the closed-form codec), and per-component Laplace scales.
Loss per step (one prompt): KL(p_exact || p_reconstructed) averaged over the
teacher-forced continuation tokens (nats) + lambda * rate, rate = bits per coded token
summed over groups and components under the additive-uniform-noise proxy: y + U(-D/2,
D/2) (D the step) costed as -log2 of the zero-mean Laplace(scale) mass of the cell of
width D centred on it. The cache the continuation sees is the reconstruction m + W_d^T c
+ g_d(c) with c = mu + D round((y - mu) / D) (straight-through gradient for y, the
learned-step-size gradient round(u) - u for D) at the coded positions, mu the codec's
token-conditioned centre from the base artifact (--centre), the exact rows at the first
raw_head and last raw_tail positions (the codec stores those), keys re-rotated with
the model's RoPE.
Data: the CALIBRATION split of model/corpus/text_corpus.cc (disjoint from the evaluation
split `kvstash-bench codec` scores), each file tokenised whole and cut into pieces of
prompt_tokens + continuation_tokens tokens; `--prompts` of them spread evenly over the
split. The tokenizer of the model folder is checked against kvstash's golden token ids
(tests/model/data/smollm2_tokenizer.json) before anything runs.
Export (one file per lambda, safetensors, format "kvstash-dckv-trained/1" of
docs/format/dckv.md "Trained codecs"): components whose trained scale / step is below
--threshold are removed; `kvstash calibrate dckv` imports the file with the base
artifact and refits the conditional entropy models and tables in closed form.

Determinism: torch.manual_seed(seed), deterministic algorithms, a fixed thread count
(--threads, default 2): two runs with the same arguments write the same bytes, and a run
resumed from --checkpoint continues bit-identically.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIC = "/usr/share/common-licenses/"
PY = "/usr/lib/python3.11/"
# model/corpus/text_corpus.cc, CorpusSplit::kCalibration (keep in sync).
CALIBRATION_FILES = [
    LIC + "GPL-3",
    LIC + "LGPL-2.1",
    LIC + "GFDL-1.3",
    PY + "argparse.py",
    PY + "collections/__init__.py",
]
TOKENIZER_GOLDENS = os.path.join(ROOT, "tests", "model", "data", "smollm2_tokenizer.json")
FORMAT = "kvstash-dckv-trained/1"
MAX_SYMBOL = 32767  # the codec clamps symbols to +-32767 (16-bit two's-complement alphabet)

# Measured wall seconds per training step (default settings: 1,024 + 64-token prompts, base
# artifact rate 24 with 3,092 active components in 5 groups of 2,304 dims, 256-unit nets,
# --threads 2) on the 2-core development VM (Intel Xeon, Sapphire Rapids class) at load
# average ~2: 1.79 s (400 steps in 11.9 min, 3.5 CPU-s per step, exact passes included);
# at load ~7 (other work running) 8.5 s, at load 10-14 37-300 s.
MEASURED_S_PER_STEP = 1.79
DEFAULT_STEPS = 400


# --------------------------------------------------------------------------- artifact


def read_artifact(path):
    """Parses a dckv artifact (codec/dckv/dckv_artifact.h, versions 3 and 4) into a dict:
    n_layers, n_kv_heads, head_dim, rope_theta, group_layers, raw_head, raw_tail,
    target_ratio, vocab, rank, embed [vocab, rank] f32 (the reduced token embeddings),
    and groups (list of dicts: first_layer, layers, dims, mean [dims] f32, encode_scale
    [dims] f32 or None, basis [n_active, dims] f32, step [n_active] f32, table_index /
    odd_table_index [n_active] u16, token_map [rank + 1, n_active] f32, has_context,
    decoder_net / encoder_net (dict w1, b1, w2, b2 or None)). Also sha256 (hex of the file's bytes).
    The XXH3-64 trailer is verified when the xxhash module is importable.
    Raises ValueError on a malformed file (any check of the C++ parser that concerns
    the fields read here)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("dckv artifact: too short")
    try:
        import xxhash
    except ImportError:
        xxhash = None
    if xxhash is not None:
        stored = struct.unpack_from("<Q", data, len(data) - 8)[0]
        if xxhash.xxh3_64_intdigest(data[:-8]) != stored:
            raise ValueError("dckv artifact: checksum mismatch")
    off = 0

    def take(fmt, count=None):
        nonlocal off
        if count is None:
            size = struct.calcsize("<" + fmt)
            if off + size > len(data) - 8:
                raise ValueError("dckv artifact: truncated")
            v = struct.unpack_from("<" + fmt, data, off)
            off += size
            return v if len(v) > 1 else v[0]
        dt = np.dtype("<" + fmt)
        if off + dt.itemsize * count > len(data) - 8:
            raise ValueError("dckv artifact: truncated")
        v = np.frombuffer(data, dtype=dt, count=count, offset=off).copy()
        off += dt.itemsize * count
        return v

    magic, version, reserved = take("IHH")
    if magic != 0x414B4344:
        raise ValueError("dckv artifact: bad magic")
    if version not in (3, 4):
        raise ValueError("dckv artifact: unsupported version %d (3 and 4 parse)" % version)
    if reserved != 0:
        raise ValueError("dckv artifact: nonzero reserved field")
    a = {}
    (
        a["n_layers"],
        a["n_kv_heads"],
        a["head_dim"],
        a["rope_theta"],
        a["group_layers"],
        a["raw_head"],
        a["raw_tail"],
        a["target_ratio"],
        a["vocab"],
        a["rank"],
    ) = take("IIIfIIIfII")
    # Reduced token embeddings (bf16 bits -> f32) [vocab, rank]: not trained; they give the
    # centre mu of the token-conditioned model (--centre base).
    a["embed"] = (take("H", a["vocab"] * a["rank"]).astype(np.uint32) << 16).view(np.float32)
    a["embed"] = a["embed"].reshape(a["vocab"], a["rank"])
    n_groups = take("I")
    hr = a["n_kv_heads"] * a["head_dim"]
    groups, next_layer = [], 0
    for _ in range(n_groups):
        g = {}
        g["first_layer"], g["layers"], g["dims"], n_active = take("IIII")
        if (
            g["first_layer"] != next_layer
            or g["layers"] == 0
            or g["dims"] != 2 * g["layers"] * hr
            or n_active > g["dims"]
        ):
            raise ValueError("dckv artifact: inconsistent group")
        next_layer += g["layers"]
        d = g["dims"]
        g["mean"] = take("f", d)
        has_scale = take("I")
        if has_scale not in (0, 1):
            raise ValueError("dckv artifact: bad encode-scale flag")
        g["encode_scale"] = take("f", d) if has_scale else None
        g["basis"] = take("f", n_active * d).reshape(n_active, d)
        g["step"] = take("f", n_active)
        if not np.all(np.isfinite(g["step"]) & (g["step"] > 0)):
            raise ValueError("dckv artifact: bad step")
        g["table_index"] = take("H", n_active)
        g["odd_table_index"] = take("H", n_active)
        # Token map P [rank + 1, n_active] (mu = P^T [z; 1]): the base's, used as the
        # training centre; the import refits it for the trained transform.
        g["token_map"] = take("f", (a["rank"] + 1) * n_active).reshape(a["rank"] + 1, n_active)
        context_rows = take("I")
        g["has_context"] = context_rows > 0
        take("f", context_rows * n_active)  # context map: refitted by the import
        g["decoder_net"] = g["encoder_net"] = None
        if version == 4:
            for name, n_in, n_out in (("decoder_net", n_active, d), ("encoder_net", d, n_active)):
                h = take("I")
                if h:
                    g[name] = {
                        "w1": take("f", h * n_in).reshape(h, n_in),
                        "b1": take("f", h),
                        "w2": take("f", n_out * h).reshape(n_out, h),
                        "b2": take("f", n_out),
                    }
        groups.append(g)
    if next_layer != a["n_layers"]:
        raise ValueError("dckv artifact: groups do not cover the layers")
    table_bytes = take("I")
    if off + table_bytes != len(data) - 8:
        raise ValueError("dckv artifact: bad table section")
    a["groups"] = groups
    a["sha256"] = hashlib.sha256(data).hexdigest()
    return a


def write_safetensors(path, tensors, metadata):
    """Writes F32 tensors (name -> torch tensor) as a safetensors file with a byte-stable
    layout: header JSON with sorted keys and no spaces ("__metadata__" first, tensors in
    name order, data in the same order), padded with spaces to a multiple of 8 bytes (the
    safetensors convention). (safetensors.torch.save_file orders the metadata differently
    from process to process, so its bytes are not reproducible.) Atomic: written to
    path + ".tmp" and renamed."""
    header, blobs, off = {"__metadata__": dict(sorted(metadata.items()))}, [], 0
    for name in sorted(tensors):
        b = tensors[name].detach().contiguous().cpu().numpy().astype("<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(tensors[name].shape),
            "data_offsets": [off, off + len(b)],
        }
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


# --------------------------------------------------------------------------- data


def check_tokenizer(tok):
    """Raises SystemExit unless `tok` gives kvstash's golden token ids (the ids the C++
    calibration and bench tokenise the corpus into)."""
    with open(TOKENIZER_GOLDENS) as f:
        cases = json.load(f)["cases"]
    for c in cases:
        ids = tok.encode(c["text"], add_special_tokens=False)
        if ids != c["ids"]:
            sys.exit(
                "train_dckv: the model folder's tokenizer does not give kvstash's token ids (%s, text %r...): "
                "rebuild it with tools/gguf_to_hf.py" % (TOKENIZER_GOLDENS, c["text"][:40])
            )
    return len(cases)


def calibration_pieces(tok, n_tokens):
    """Every non-overlapping piece of n_tokens tokens of the calibration split, in file
    order: list of (source path, first token, ids)."""
    pieces = []
    for path in CALIBRATION_FILES:
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            ids = tok.encode(f.read(), add_special_tokens=False)
        for start in range(0, len(ids) - n_tokens + 1, n_tokens):
            pieces.append((path, start, ids[start : start + n_tokens]))
    return pieces


def spread(items, n):
    """n of `items` spread evenly over the list (benchmarks/drivers/dckv_bench.cc Spread)."""
    if n >= len(items):
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


# --------------------------------------------------------------------------- model


def rope(k, cos, sin):
    """k [1, H, T, D] before RoPE -> after (Hugging Face rotate-half, codec/dckv/dckv_rope.h)."""
    import torch

    half = k.shape[-1] // 2
    rot = torch.cat((-k[..., half:], k[..., :half]), dim=-1)
    return k * cos + rot * sin


def laplace_cell_bits(v, step, scale):
    """-log2 of the mass of a zero-mean Laplace(scale) over [v - step/2, v + step/2]
    (elementwise, differentiable; torch tensors broadcast)."""
    import torch

    a = v.abs()
    h = 0.5 * step
    ln_half = math.log(0.5)
    # |v| >= step/2: the cell lies on one side: 1/2 e^{-(a-h)/b} (1 - e^{-2h/b}).
    outer = ln_half - (a - h).clamp(min=0) / scale + torch.log(-torch.expm1(-step / scale))
    # |v| < step/2: the cell holds 0: 1 - 1/2 e^{-(h-a)/b} - 1/2 e^{-(h+a)/b}.
    inner_p = 1 - 0.5 * torch.exp(-(h - a).clamp(min=0) / scale) - 0.5 * torch.exp(-(h + a) / scale)
    inner = torch.log(inner_p.clamp(min=1e-30))
    ln_p = torch.where(a >= h, outer, inner).clamp(min=-60.0)
    return -ln_p / math.log(2.0)


def build_codec(art, hidden, init_scales, input_stds):
    """The trainable codec (torch.nn.Module) initialised from the artifact dict `art`;
    init_scales: per group a numpy [n_active] of initial Laplace scales; input_stds: per
    group (std of x - m [dims], std of y [n_active]) over every prompt's coded rows:
    each net's first layer (PyTorch's default init) has its input columns divided by
    them, so the pre-activations start O(1) whatever the inputs' units."""
    import torch
    from torch import nn

    class Net(nn.Module):
        """g(in) = w2 GELU_tanh(w1 in + b1) + b2; last layer zero at init."""

        def __init__(self, n_in, n_out, h, in_std):
            super().__init__()
            self.l1 = nn.Linear(n_in, h)
            self.l2 = nn.Linear(h, n_out)
            with torch.no_grad():
                self.l1.weight /= torch.from_numpy(np.maximum(in_std, 1e-6).astype(np.float32))[None, :]
            nn.init.zeros_(self.l2.weight)
            nn.init.zeros_(self.l2.bias)

        def forward(self, x):
            return self.l2(torch.nn.functional.gelu(self.l1(x), approximate="tanh"))

    class Group(nn.Module):
        def __init__(self, g, scales, stds):
            super().__init__()
            e = g["encode_scale"] if g["encode_scale"] is not None else np.ones(g["dims"], np.float32)
            basis = torch.from_numpy(g["basis"])
            self.mean = nn.Parameter(torch.from_numpy(g["mean"]).clone())
            self.w_e = nn.Parameter(basis * torch.from_numpy(e)[None, :])
            self.w_d = nn.Parameter(basis.clone())
            self.log_step = nn.Parameter(torch.from_numpy(g["step"]).log())
            self.log_scale = nn.Parameter(torch.from_numpy(np.asarray(scales, np.float32)).log())
            n = basis.shape[0]
            self.enc_net = Net(g["dims"], n, hidden, stds[0]) if hidden else None
            self.dec_net = Net(n, g["dims"], hidden, stds[1]) if hidden else None

        def encode(self, x):
            """x [R, dims] -> y [R, n_active]."""
            u = x - self.mean
            y = u @ self.w_e.t()
            return y + self.enc_net(u) if self.enc_net is not None else y

        def quantise(self, y, mu=None):
            """-> (c, q): the dequantised coefficients mu + D round((y - mu) / D) (value
            exact; gradient 1 for y, round(u) - u for D) and the integer symbols q; mu
            [R, n_active] the predicted centre (None: 0), a constant."""
            step = self.log_step.exp()
            r = y if mu is None else y - mu
            u = r / step
            q = torch.round(u).clamp(-MAX_SYMBOL, MAX_SYMBOL)
            lsq = r + step * (q - u).detach()
            c = (step * q).detach() + (lsq - lsq.detach())
            return (c if mu is None else c + mu), q

        def decode(self, c):
            x = self.mean + c @ self.w_d
            return x + self.dec_net(c) if self.dec_net is not None else x

        def bits(self, y, gen, mu=None):
            """Rate proxy: bits of y - mu + U(-D/2, D/2) under Laplace(0, scale), [R,
            n_active] (mu None: 0)."""
            step = self.log_step.exp()
            noise = (torch.rand(y.shape, generator=gen) - 0.5) * step
            r = y if mu is None else y - mu
            return laplace_cell_bits(r + noise, step, self.log_scale.exp())

    return nn.ModuleList([Group(g, s, d) for g, s, d in zip(art["groups"], init_scales, input_stds)])


class Trainer:
    """One lambda's training state: model (frozen), prompts, codec, optimiser, step count
    and the rate-noise generator. Not thread-safe."""

    def __init__(self, a, art, model, prompts, lam):
        import torch

        self.a, self.art, self.model, self.lam = a, art, model, lam
        self.prompts = prompts  # list of (source, first, ids)
        cfg = model.config
        self.L, self.H = cfg.num_hidden_layers, cfg.num_key_value_heads
        self.D = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        if (self.L, self.H, self.D) != (art["n_layers"], art["n_kv_heads"], art["head_dim"]):
            sys.exit(
                "train_dckv: the artifact's shape (%d layers x %d heads x %d) is not the model's (%d x %d x %d)"
                % (art["n_layers"], art["n_kv_heads"], art["head_dim"], self.L, self.H, self.D)
            )
        self.exact = {}
        self.centres = {}
        torch.manual_seed(a.seed)
        # Initial Laplace scales mean |y| and the nets' input scales over the coded rows of
        # EVERY prompt (their exact passes are cached for training anyway): one prompt's rows
        # put some components below --threshold that the calibration's statistic (E|y| over
        # its documents) kept, so an untrained export lost them.
        init_scales, input_stds = [], []
        with torch.no_grad():
            for gi, g in enumerate(art["groups"]):
                x = torch.from_numpy(
                    np.concatenate([self.rows(self.exact_pass(i), g) for i in range(len(prompts))])
                )
                e = g["encode_scale"] if g["encode_scale"] is not None else np.ones(g["dims"], np.float32)
                y = ((x - torch.from_numpy(g["mean"])) * torch.from_numpy(e)) @ torch.from_numpy(
                    g["basis"]
                ).t()
                mu = [self.centre(i, gi) for i in range(len(prompts))]
                r = y if mu[0] is None else y - torch.cat(mu)
                init_scales.append(np.maximum(r.abs().mean(0).numpy(), 0.01 * g["step"]).astype(np.float32))
                input_stds.append(((x - torch.from_numpy(g["mean"])).std(0).numpy(), y.std(0).numpy()))
        self.codec = build_codec(art, a.hidden, init_scales, input_stds)
        base, logs, nets = [], [], []
        for grp in self.codec:
            base += [grp.mean, grp.w_e, grp.w_d]
            logs += [grp.log_step, grp.log_scale]
            for net in (grp.enc_net, grp.dec_net):
                if net is not None:
                    nets += list(net.parameters())
        self.opt = torch.optim.Adam(
            [{"params": base, "lr": a.lr}, {"params": logs, "lr": a.lr_log}, {"params": nets, "lr": a.lr_net}]
        )
        self.gen = torch.Generator().manual_seed(a.seed + 1)
        self.step_count = 0
        self.history = []  # (step, loss, kl, bits per token)

    def exact_pass(self, i):
        """Cached per prompt: (ids [1, P+T], k_pre [L][P, H*D], v [L][P, H*D], exact log-probs [T, V])."""
        import torch

        if i in self.exact:
            return self.exact[i]
        P = self.a.prompt_tokens
        ids = torch.tensor([self.prompts[i][2]])
        pre = {}
        hooks = [
            layer.self_attn.k_proj.register_forward_hook(lambda _m, _i, out, l=l: pre.__setitem__(l, out))
            for l, layer in enumerate(self.model.model.layers)
        ]
        with torch.no_grad():
            out = self.model(input_ids=ids, use_cache=True)
        for h in hooks:
            h.remove()
        k = [pre[l][0, :P].contiguous() for l in range(self.L)]
        v = [
            out.past_key_values.layers[l].values[0, :, :P].transpose(0, 1).reshape(P, -1).contiguous()
            for l in range(self.L)
        ]
        # The logits the continuation forward gives: positions P .. P+T-1 (each predicts the next token).
        logp = torch.log_softmax(out.logits[0, P:].float(), dim=-1)
        self.exact[i] = (ids, k, v, logp)
        return self.exact[i]

    def coded_range(self):
        P = self.a.prompt_tokens
        return self.art["raw_head"], P - self.art["raw_tail"]

    def centre(self, i, gi):
        """The predicted centre mu [coded positions, n_active] of group gi's coefficients
        at prompt i's coded positions: the base artifact's token-conditioned model P^T
        [z; 1] (z the position's reduced token embedding), a constant; None with
        --centre none. (A group whose base has a checkerboard context map predicts its
        odd rows from their decoded neighbours too; training uses the token model for
        every row.)"""
        import torch

        if self.a.centre == "none":
            return None
        key = (i, gi)
        if key not in self.centres:
            lo, hi = self.coded_range()
            ids = np.asarray(self.prompts[i][2][lo:hi])
            p = self.art["groups"][gi]["token_map"]
            mu = np.repeat(p[-1][None, :], len(ids), axis=0)  # the bias row (all of it at rank 0)
            if self.art["rank"] > 0:
                mu = self.art["embed"][ids] @ p[:-1] + mu
            self.centres[key] = torch.from_numpy(mu.astype(np.float32))
        return self.centres[key]

    def rows(self, ex, g):
        """Numpy [coded positions, dims] rows [K_l | V_l ...] of group g of an exact pass."""
        lo, hi = self.coded_range()
        _, k, v, _ = ex
        parts = []
        for l in range(g["first_layer"], g["first_layer"] + g["layers"]):
            parts += [k[l][lo:hi], v[l][lo:hi]]
        import torch

        return torch.cat(parts, dim=1).numpy()

    def forward(self, i):
        """Loss terms for prompt i: (loss, kl, bits per coded token, reconstructions per group)."""
        import torch
        from transformers import DynamicCache

        ids, k, v, logp_exact = self.exact_pass(i)
        P = self.a.prompt_tokens
        lo, hi = self.coded_range()
        hr = self.H * self.D
        k_new, v_new = list(k), list(v)
        bits = torch.zeros(())
        recon = []
        for gi, (g, grp) in enumerate(zip(self.art["groups"], self.codec)):
            mu = self.centre(i, gi)
            x = torch.cat(
                [
                    t
                    for l in range(g["first_layer"], g["first_layer"] + g["layers"])
                    for t in (k[l][lo:hi], v[l][lo:hi])
                ],
                dim=1,
            )
            y = grp.encode(x)
            c, _ = grp.quantise(y, mu)
            xh = grp.decode(c)
            recon.append(xh)
            bits = bits + grp.bits(y, self.gen, mu).sum() / (hi - lo)
            for j in range(g["layers"]):
                l = g["first_layer"] + j
                k_new[l] = torch.cat((k[l][:lo], xh[:, 2 * j * hr : (2 * j + 1) * hr], k[l][hi:]), dim=0)
                v_new[l] = torch.cat(
                    (v[l][:lo], xh[:, (2 * j + 1) * hr : (2 * j + 2) * hr], v[l][hi:]), dim=0
                )
        pos = torch.arange(P).unsqueeze(0)
        cos, sin = self.model.model.rotary_emb(k[0], pos)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        cache = DynamicCache(config=self.model.config)
        for l in range(self.L):
            kk = k_new[l].reshape(P, self.H, self.D).transpose(0, 1).unsqueeze(0)
            vv = v_new[l].reshape(P, self.H, self.D).transpose(0, 1).unsqueeze(0)
            cache.update(rope(kk, cos, sin), vv, l)
        T = ids.shape[1] - P
        out = self.model(
            input_ids=ids[:, P:],
            past_key_values=cache,
            position_ids=torch.arange(P, P + T).unsqueeze(0),
            use_cache=True,
        )
        logq = torch.log_softmax(out.logits[0].float(), dim=-1)
        kl = (logp_exact.exp() * (logp_exact - logq)).sum(-1).mean()
        loss = kl + self.lam * bits
        return loss, kl, bits, recon

    def step(self):
        """One optimiser step on prompt (step_count mod prompts); returns (loss, kl, bits)."""
        i = self.step_count % len(self.prompts)
        self.opt.zero_grad(set_to_none=True)
        loss, kl, bits, _ = self.forward(i)
        loss.backward()
        self.opt.step()
        self.step_count += 1
        rec = (self.step_count, float(loss.detach()), float(kl.detach()), float(bits.detach()))
        self.history.append(rec)
        return rec

    def state(self):
        return {
            "codec": self.codec.state_dict(),
            "opt": self.opt.state_dict(),
            "gen": self.gen.get_state(),
            "step": self.step_count,
            "history": self.history,
            "lambda": self.lam,
        }

    def load(self, st):
        self.codec.load_state_dict(st["codec"])
        self.opt.load_state_dict(st["opt"])
        self.gen.set_state(st["gen"])
        self.step_count = st["step"]
        self.history = list(st["history"])

    def export(self, path):
        """Writes the trained-codec file (module docstring); returns {group: n_active}."""
        import torch

        tensors, kept = {}, {}
        with torch.no_grad():
            for gi, grp in enumerate(self.codec):
                step = grp.log_step.exp()
                scale = grp.log_scale.exp()
                keep = torch.nonzero(scale / step >= self.a.threshold).flatten()
                kept[gi] = int(keep.numel())
                t = {
                    "mean": grp.mean,
                    "encoder": grp.w_e[keep],
                    "decoder": grp.w_d[keep],
                    "step": step[keep],
                    "scale": scale[keep],
                }
                if grp.dec_net is not None:
                    t.update(
                        {
                            "decoder_net.w1": grp.dec_net.l1.weight[:, keep],
                            "decoder_net.b1": grp.dec_net.l1.bias,
                            "decoder_net.w2": grp.dec_net.l2.weight,
                            "decoder_net.b2": grp.dec_net.l2.bias,
                        }
                    )
                if grp.enc_net is not None:
                    t.update(
                        {
                            "encoder_net.w1": grp.enc_net.l1.weight,
                            "encoder_net.b1": grp.enc_net.l1.bias,
                            "encoder_net.w2": grp.enc_net.l2.weight[keep],
                            "encoder_net.b2": grp.enc_net.l2.bias[keep],
                        }
                    )
                for name, val in t.items():
                    tensors["group.%d.%s" % (gi, name)] = val.detach().float().contiguous().clone()
        meta = {
            "format": FORMAT,
            "base_artifact_sha256": self.art["sha256"],
            "lambda": repr(self.lam),
            "seed": str(self.a.seed),
            "steps": str(self.step_count),
            "model": os.path.basename(os.path.normpath(self.a.model)),
            "threshold": repr(self.a.threshold),
            "centre": self.a.centre,
        }
        write_safetensors(path, tensors, meta)
        return kept


# --------------------------------------------------------------------------- driver


class Progress:
    """tqdm when importable, else a one-line printer (carriage return)."""

    def __init__(self, total, initial, desc, enabled):
        self.enabled = enabled
        self.bar = None
        if not enabled:
            return
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)
        except ImportError:
            self.total, self.n, self.desc, self.t0 = total, initial, desc, time.time()

    def update(self, loss, kl, bits):
        if not self.enabled:
            return
        post = "loss=%.5f kl=%.5f rate=%.0f bit/tok (%.0f B)" % (loss, kl, bits, bits / 8)
        if self.bar is not None:
            self.bar.set_postfix_str(post, refresh=False)
            self.bar.update(1)
        else:
            self.n += 1
            sys.stderr.write(
                "\r%s %d/%d %.1f s/step %s"
                % (self.desc, self.n, self.total, (time.time() - self.t0) / max(1, self.n), post)
            )
            sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


def setup_torch(threads):
    import torch

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    return torch


def load_model(path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return tok, model


def out_path(a, lam):
    return os.path.join(a.out_dir, "dckv-trained-lambda%s-seed%d.safetensors" % (repr(lam), a.seed))


def parse_args(argv=None):
    class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass

    minutes = MEASURED_S_PER_STEP * DEFAULT_STEPS / 60
    epilog = (
        "CPU time per rate point: %.2f s of wall time per step measured on a 2-core VM (--threads 2, default "
        "1,024 + 64-token prompts, a rate-24 base artifact with 3,092 active components, 256-unit nets; load "
        "average ~2), so one --lambda at the default %d steps takes about %.0f min, exact passes included "
        "(once per prompt; cached in memory, ~60 MB per prompt). With other work running steps take longer: "
        "8.5 s at load ~7, 37-300 s at load 10-14." % (MEASURED_S_PER_STEP, DEFAULT_STEPS, minutes)
    )
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Formatter, epilog=epilog)
    ap.add_argument(
        "--base-artifact", required=True, help="closed-form artifact of `kvstash calibrate dckv` (v3/v4)"
    )
    ap.add_argument(
        "--model",
        default=os.path.join(ROOT, "models", "smollm2-135m-hf"),
        help="Hugging Face model folder (scripts/setup.sh, tools/gguf_to_hf.py)",
    )
    ap.add_argument(
        "--lambda",
        dest="lambdas",
        type=float,
        action="append",
        required=True,
        help="rate weight, nats of KL per bit per coded token (repeatable: one file each)",
    )
    ap.add_argument("--out-dir", required=True, help="where the trained files go")
    ap.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help="optimiser steps per lambda (one prompt each)"
    )
    ap.add_argument(
        "--prompts",
        type=int,
        default=47,
        help="calibration pieces, spread over the split, cycled (47: every piece at the default lengths; "
        "each costs ~60 MB for its cached exact pass)",
    )
    ap.add_argument(
        "--prompt-tokens", type=int, default=1024, help="tokens per prompt (> the artifact's raw head + tail)"
    )
    ap.add_argument(
        "--continuation-tokens", type=int, default=64, help="teacher-forced tokens scored per prompt"
    )
    ap.add_argument("--hidden", type=int, default=256, help="GELU units of each correction net (0: none)")
    ap.add_argument(
        "--centre",
        choices=("base", "none"),
        default="base",
        help="quantise around the codec's predicted centre (the base artifact's token-conditioned model, as "
        "the codec does) or around 0",
    )
    ap.add_argument("--lr", type=float, default=1e-7, help="Adam rate of the mean and the bases")
    ap.add_argument("--lr-log", type=float, default=1e-3, help="Adam rate of the log-steps and log-scales")
    ap.add_argument("--lr-net", type=float, default=2e-6, help="Adam rate of the correction nets")
    ap.add_argument(
        "--threshold",
        type=float,
        default=0.3,
        help="export: components with trained scale / step below it are removed (the codec's default)",
    )
    ap.add_argument("--seed", type=int, default=1, help="torch seed (init of the nets, rate-proxy noise)")
    ap.add_argument(
        "--threads", type=int, default=2, help="torch threads (part of what makes a run reproducible)"
    )
    ap.add_argument(
        "--checkpoint",
        default="",
        help="checkpoint file, written every --checkpoint-every steps; when it exists the run resumes from it "
        "(the same command again resumes; other settings are refused)",
    )
    ap.add_argument(
        "--checkpoint-every", type=int, default=50, help="steps between checkpoints (and one at the end)"
    )
    ap.add_argument("--history", default="", help="optional JSON file: per step (step, loss, kl, bits/token)")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    if (
        a.steps < 0
        or a.prompts < 1
        or a.continuation_tokens < 1
        or a.hidden < 0
        or a.checkpoint_every < 1
        or a.threads < 1
    ):
        ap.error(
            "--steps >= 0, --prompts >= 1, --continuation-tokens >= 1, --hidden >= 0, --checkpoint-every >= 1, "
            "--threads >= 1"
        )
    if any(not (lam >= 0 and math.isfinite(lam)) for lam in a.lambdas):
        ap.error("--lambda must be finite and >= 0")
    return a


def make_trainers(a, art, model, tok):
    """Yields (lambda index, Trainer) for each lambda (same prompts, fresh init each)."""
    n = a.prompt_tokens + a.continuation_tokens
    if a.prompt_tokens <= art["raw_head"] + art["raw_tail"]:
        sys.exit(
            "train_dckv: --prompt-tokens must exceed the artifact's raw_head + raw_tail (%d)"
            % (art["raw_head"] + art["raw_tail"])
        )
    pieces = calibration_pieces(tok, n)
    if not pieces:
        sys.exit("train_dckv: no calibration piece of %d tokens" % n)
    if a.prompts > len(pieces):
        print(
            "train_dckv: --prompts %d: the calibration split has %d pieces of %d tokens; using all %d"
            % (a.prompts, len(pieces), n, len(pieces)),
            file=sys.stderr,
        )
    prompts = spread(pieces, a.prompts)
    for li, lam in enumerate(a.lambdas):
        yield li, Trainer(a, art, model, prompts, lam)


# The arguments a checkpoint must have been written with to be resumed (--steps may grow:
# training continues; the rest only names files or sets the display).
RESUME_SETTINGS = (
    "lambdas",
    "seed",
    "prompts",
    "prompt_tokens",
    "continuation_tokens",
    "hidden",
    "centre",
    "lr",
    "lr_log",
    "lr_net",
    "threads",
)


def settings(a):
    return {k: getattr(a, k) for k in RESUME_SETTINGS}


def load_checkpoint(a, art):
    """The checkpoint to resume from (None: start), or exit 1 with the reason."""
    import torch

    if not a.checkpoint or not os.path.exists(a.checkpoint):
        return None
    try:  # tensors and plain containers only: a checkpoint cannot run code when loaded
        ck = torch.load(a.checkpoint, weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises several types for a damaged file
        sys.exit(
            "train_dckv: cannot read the checkpoint %s (%s: %s); delete it to start again"
            % (a.checkpoint, type(e).__name__, str(e).splitlines()[0] if str(e) else "damaged")
        )
    if not isinstance(ck, dict) or ck.get("base") != art["sha256"]:
        sys.exit(
            "train_dckv: %s was written for another --base-artifact (or is not a checkpoint)" % a.checkpoint
        )
    differ = [k for k in RESUME_SETTINGS if ck.get("settings", {}).get(k) != getattr(a, k)]
    if differ:
        flags = ", ".join("--lambda" if k == "lambdas" else "--" + k.replace("_", "-") for k in differ)
        sys.exit(
            "train_dckv: %s was written with other settings (%s); use the same arguments or another --checkpoint"
            % (a.checkpoint, flags)
        )
    return ck


def main(argv=None):
    a = parse_args(argv)
    setup_torch(a.threads)
    if os.path.exists(a.out_dir) and not os.path.isdir(a.out_dir):
        sys.exit("train_dckv: --out-dir %s exists and is not a folder" % a.out_dir)
    for f in (a.checkpoint, a.history):  # fail now, not after the steps
        if f:
            os.makedirs(os.path.dirname(os.path.abspath(f)), exist_ok=True)
    try:
        art = read_artifact(a.base_artifact)
    except (OSError, ValueError) as e:
        sys.exit("train_dckv: --base-artifact %s: %s" % (a.base_artifact, e))
    tok, model = load_model(a.model)
    check_tokenizer(tok)
    ck = load_checkpoint(a, art)
    try:
        return run(a, art, tok, model, ck)
    except KeyboardInterrupt:
        print(
            "\ntrain_dckv: interrupted%s"
            % (
                "; the same command resumes from " + a.checkpoint
                if a.checkpoint
                else " (no --checkpoint: nothing kept)"
            ),
            file=sys.stderr,
        )
        return 130


def run(a, art, tok, model, ck):
    history = {}
    for li, tr in make_trainers(a, art, model, tok):
        if ck is not None and li < ck["index"]:
            continue
        if ck is not None and li == ck["index"]:
            tr.load(ck["state"])
        bar = Progress(a.steps, tr.step_count, "lambda %g" % tr.lam, not a.no_progress)
        t0, c0, s0 = time.time(), time.process_time(), tr.step_count
        while tr.step_count < a.steps:
            _, loss, kl, bits = tr.step()
            bar.update(loss, kl, bits)
            if a.checkpoint and (tr.step_count % a.checkpoint_every == 0 or tr.step_count == a.steps):
                save_checkpoint(a, art, li, tr)
        bar.close()
        if a.checkpoint and tr.step_count == s0:
            save_checkpoint(a, art, li, tr)
        path = out_path(a, tr.lam)
        kept = tr.export(path)
        ran = tr.step_count - s0  # 0 when a finished checkpoint is only exported
        dt = (time.time() - t0) / ran if ran else float("nan")
        cpu = (time.process_time() - c0) / ran if ran else float("nan")
        h = tr.history
        print(
            "lambda %g: %d steps (%.2f s/step wall, %.2f CPU s/step, this run's steps incl. exact passes); first %s, "
            "last %s (step, loss, kl, bits/token); wrote %s (active components per group %s)"
            % (tr.lam, tr.step_count, dt, cpu, h[0] if h else None, h[-1] if h else None, path, kept)
        )
        history[repr(tr.lam)] = {
            "seconds_per_step": dt if ran else None,
            "cpu_seconds_per_step": cpu if ran else None,
            "history": h,
            "file": path,
            "active": kept,
        }
    if a.history:
        with open(a.history, "w") as f:
            json.dump(history, f)
            f.write("\n")
    return 0


def save_checkpoint(a, art, li, tr):
    import torch

    tmp = a.checkpoint + ".tmp"
    torch.save({"base": art["sha256"], "settings": settings(a), "index": li, "state": tr.state()}, tmp)
    os.replace(tmp, a.checkpoint)


if __name__ == "__main__":
    sys.exit(main())
