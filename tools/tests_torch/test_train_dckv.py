"""tools/train_dckv.py on the real SmolLM2-135M (models/smollm2-135m-hf), short prompts of
the calibration split, a small weighted-PCA artifact written here (dckv_test_artifact.py).
Runs with torch: `.venv-vllm/bin/python -m pytest -q tools/tests_torch` (scripts/test.sh
step 6). Skips only when the model folder is absent (scripts/setup.sh makes it)."""

import json
import os
import struct
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "models", "smollm2-135m-hf")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(MODEL, "config.json")),
    reason="models/smollm2-135m-hf is absent (scripts/setup.sh converts it from the GGUF)",
)

import train_dckv as T  # noqa: E402

PROMPT, CONT, RAW_HEAD, RAW_TAIL, N_ACTIVE, HIDDEN = 40, 8, 4, 8, 12, 16


def args(art_path, out_dir, lam, steps, extra=()):
    return [
        "--base-artifact",
        art_path,
        "--model",
        MODEL,
        "--lambda",
        repr(lam),
        "--out-dir",
        str(out_dir),
        "--prompts",
        "2",
        "--prompt-tokens",
        str(PROMPT),
        "--continuation-tokens",
        str(CONT),
        "--hidden",
        str(HIDDEN),
        "--steps",
        str(steps),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(torch, tokenizer, model, artifact path): the artifact is a weighted PCA of the
    first training prompt's coded rows (so its steps fit real KV)."""
    import dckv_test_artifact as A

    torch = T.setup_torch(2)
    tok, model = T.load_model(MODEL)
    d = tmp_path_factory.mktemp("art")
    cfg = model.config
    L, H, D = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
    theta = float(cfg.rope_parameters["rope_theta"])
    rng = np.random.default_rng(0)
    dims = 2 * 6 * H * D
    q = [np.linalg.qr(rng.standard_normal((dims, N_ACTIVE)))[0].T.astype(np.float32) for _ in range(L // 6)]
    provisional = [
        {
            "mean": np.zeros(dims, np.float32),
            "encode_scale": None,
            "basis": b,
            "step": np.ones(N_ACTIVE, np.float32),
        }
        for b in q
    ]
    p0 = str(d / "provisional.kvda")
    A.write_artifact(p0, L, H, D, theta, 6, RAW_HEAD, RAW_TAIL, provisional)
    a = T.parse_args(args(p0, d, 0.0, 1))
    tr = next(T.make_trainers(a, T.read_artifact(p0), model, tok))[1]
    rows = [tr.rows(tr.exact_pass(0), g) for g in tr.art["groups"]]
    path = str(d / "base.kvda")
    A.write_artifact(path, L, H, D, theta, 6, RAW_HEAD, RAW_TAIL, A.pca_groups(rows, N_ACTIVE, 1))
    return torch, tok, model, path


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__")
    tensors = {}
    for name, h in header.items():
        assert h["dtype"] == "F32", name
        lo, hi = h["data_offsets"]
        tensors[name] = np.frombuffer(data[8 + n + lo : 8 + n + hi], "<f4").reshape(h["shape"])
    return meta, tensors


def test_tokenizer_gives_kvstash_ids(setup):
    _, tok, _, _ = setup
    assert T.check_tokenizer(tok) >= 5


def test_exact_cache_gives_zero_kl(setup):
    """The cache path itself: the exact rows through RoPE + DynamicCache reproduce the
    exact pass's continuation distributions."""
    torch, tok, model, path = setup
    tr = next(
        T.make_trainers(T.parse_args(args(path, "/nonexistent", 0.0, 1)), T.read_artifact(path), model, tok)
    )[1]
    for grp in tr.codec:
        grp.encode = lambda x: x
        grp.quantise = lambda y, mu=None: (y, None)
        grp.decode = lambda c: c
        grp.bits = lambda y, gen, mu=None: torch.zeros(())
    with torch.no_grad():
        _, kl, _, _ = tr.forward(0)
    assert abs(float(kl)) < 1e-5


def test_first_step_is_the_linear_codec(setup):
    """lambda 0, nets' last layers zero: the reconstruction equals the closed-form codec's
    linear one, computed here with numpy in float64 from the artifact: y = basis (e (x -
    m)), s = round(y / step), x^ = m + sum_i s_i step_i basis_i."""
    torch, tok, model, path = setup
    art = T.read_artifact(path)
    tr = next(T.make_trainers(T.parse_args(args(path, "/nonexistent", 0.0, 1)), art, model, tok))[1]
    with torch.no_grad():
        _, _, _, recon = tr.forward(0)
    compared = 0
    for gi, (g, xh) in enumerate(zip(art["groups"], recon)):
        x = tr.rows(tr.exact_pass(0), g).astype(np.float64)
        m, e = g["mean"].astype(np.float64), g["encode_scale"].astype(np.float64)
        b, step = g["basis"].astype(np.float64), g["step"].astype(np.float64)
        u = (((x - m) * e) @ b.T) / step
        s = np.round(u)
        ref = m + (s * step) @ b
        # Symbols may differ only where u is within fp32 rounding of a rounding tie.
        near_tie = np.abs(np.abs(u - np.floor(u)) - 0.5) < 1e-3
        y_t = tr.codec[gi].encode(torch.from_numpy(x.astype(np.float32)))
        s_t = np.round((y_t / torch.from_numpy(g["step"])).detach().numpy())
        assert np.all((s_t == s) | near_tie)
        ok_rows = np.all(s_t == s, axis=1)
        assert ok_rows.mean() > 0.9
        err = np.abs(xh.detach().numpy().astype(np.float64) - ref)[ok_rows]
        tol = 1e-5 * (np.abs(m) + np.abs(s * step) @ np.abs(b) + 1)[ok_rows]
        assert np.all(err <= tol), float((err - tol).max())
        assert np.abs(s).sum() > 0  # not a trivial all-zero reconstruction
        compared += int(ok_rows.sum())
    assert compared > 0


def test_first_step_quantises_around_the_token_conditioned_centre(setup, tmp_path):
    """--centre base: with a token-conditioned model in the artifact, the first step's
    symbols are round((y - mu) / step) and its reconstruction m + sum_i (mu_i + s_i step_i)
    basis_i, mu = P^T [z; 1] for the position's token, computed here with numpy in float64
    (centres of a few steps' size, so the symbols differ from rounding around 0)."""
    import dckv_test_artifact as A

    torch, tok, model, path = setup
    art0 = T.read_artifact(path)
    cfg = model.config
    rng = np.random.default_rng(5)
    rank = 3
    # bf16-exact embeddings: small integers over 8.
    embed = (rng.integers(-8, 9, (cfg.vocab_size, rank)) / 8.0).astype(np.float32)
    groups = []
    for g in art0["groups"]:
        n = g["basis"].shape[0]
        groups.append(
            {
                "mean": g["mean"],
                "encode_scale": g["encode_scale"],
                "basis": g["basis"],
                "step": g["step"],
                "token_map": (rng.standard_normal((rank + 1, n)) * g["step"][None, :]).astype(np.float32),
            }
        )
    p = str(tmp_path / "conditioned.kvda")
    theta = float(cfg.rope_parameters["rope_theta"])
    A.write_artifact(
        p,
        cfg.num_hidden_layers,
        cfg.num_key_value_heads,
        cfg.head_dim,
        theta,
        6,
        RAW_HEAD,
        RAW_TAIL,
        groups,
        embed,
    )
    art = T.read_artifact(p)
    assert np.array_equal(art["embed"], embed)
    tr = next(T.make_trainers(T.parse_args(args(p, "/nonexistent", 0.0, 1)), art, model, tok))[1]
    with torch.no_grad():
        _, _, _, recon = tr.forward(0)
    lo, hi = tr.coded_range()
    z = embed[np.asarray(tr.prompts[0][2][lo:hi])].astype(np.float64)
    differs = 0
    for g, xh in zip(art["groups"], recon):
        x = tr.rows(tr.exact_pass(0), g).astype(np.float64)
        m, e = g["mean"].astype(np.float64), g["encode_scale"].astype(np.float64)
        b, step = g["basis"].astype(np.float64), g["step"].astype(np.float64)
        pm = g["token_map"].astype(np.float64)
        mu = z @ pm[:-1] + pm[-1]
        y = ((x - m) * e) @ b.T
        u = (y - mu) / step
        s = np.round(u)
        ref = m + (mu + s * step) @ b
        near_tie = np.abs(np.abs(u - np.floor(u)) - 0.5) < 1e-3
        ok_rows = ~near_tie.any(axis=1)
        assert ok_rows.mean() > 0.9
        err = np.abs(xh.detach().numpy().astype(np.float64) - ref)[ok_rows]
        tol = 1e-5 * (np.abs(m) + np.abs(mu + s * step) @ np.abs(b) + 1)[ok_rows]
        assert np.all(err <= tol), float((err - tol).max())
        differs += int((s != np.round(y / step)).sum())
    assert differs > 0  # the centre changed symbols: the test would catch quantising around 0
    # --centre none quantises around 0 whatever the artifact holds.
    tr0 = next(
        T.make_trainers(T.parse_args(args(p, "/nonexistent", 0.0, 1, ("--centre", "none"))), art, model, tok)
    )[1]
    assert tr0.centre(0, 0) is None


def test_kl_decreases_on_a_fixed_prompt(setup):
    torch, tok, model, path = setup
    # lambda 0, one prompt (a fixed batch), default rates but faster steps. Measured
    # (deterministic): 0.0734, 0.0571, 0.0608, 0.0369, 0.0371, 0.0278.
    a = T.parse_args(
        args(
            path,
            "/nonexistent",
            0.0,
            1,
            ("--prompts", "1", "--lr-log", "0.05", "--lr", "2e-5", "--lr-net", "1e-4"),
        )
    )
    tr = next(T.make_trainers(a, T.read_artifact(path), model, tok))[1]
    kls = [tr.step()[2] for _ in range(6)]
    assert kls[-1] < 0.7 * kls[0], kls
    assert max(kls[2:]) < kls[0], kls
    assert all(np.isfinite(kls))


def test_export_determinism_and_resume(setup, tmp_path):
    """The exported file parses with the agreed names, shapes and metadata; two runs
    write the same bytes; 2 steps + resume to 4 equals 4 steps in one go, byte for byte."""
    torch, tok, model, path = setup
    lam = 1e-4
    full, half, again, resumed = (tmp_path / n for n in ("full", "half", "again", "resumed"))
    ck = str(tmp_path / "ck.pt")
    assert T.main(args(path, full, lam, 4, ("--history", str(tmp_path / "h.json")))) == 0
    assert T.main(args(path, half, lam, 2, ("--checkpoint", ck, "--checkpoint-every", "1"))) == 0
    assert T.main(args(path, again, lam, 2)) == 0
    assert T.main(args(path, resumed, lam, 4, ("--checkpoint", ck))) == 0
    # Other settings than the checkpoint's are refused, naming the flags (nothing is loaded).
    with pytest.raises(SystemExit, match="other settings \\(--hidden, --lr\\)"):
        T.main(args(path, resumed, lam, 4, ("--checkpoint", ck, "--hidden", str(HIDDEN + 1), "--lr", "1e-3")))
    name = "dckv-trained-lambda%s-seed1.safetensors" % repr(lam)
    rd = lambda d: open(os.path.join(d, name), "rb").read()  # noqa: E731
    assert rd(half) == rd(again)
    assert rd(full) == rd(resumed)
    assert rd(full) != rd(half)
    meta, t = read_safetensors(os.path.join(full, name))
    from safetensors.numpy import load_file  # the reference reader agrees

    ref = load_file(os.path.join(full, name))
    assert sorted(ref) == sorted(t) and all(np.array_equal(ref[k], t[k]) for k in t)
    art = T.read_artifact(path)
    assert meta == {
        "format": "kvstash-dckv-trained/1",
        "base_artifact_sha256": art["sha256"],
        "lambda": repr(lam),
        "seed": "1",
        "steps": "4",
        "model": "smollm2-135m-hf",
        "threshold": "0.3",
        "centre": "base",
    }
    assert len(t) == len(art["groups"]) * 13
    for gi, g in enumerate(art["groups"]):
        dims = g["dims"]
        n = t["group.%d.step" % gi].shape[0]
        assert 0 < n <= N_ACTIVE
        want = {
            "mean": [dims],
            "encoder": [n, dims],
            "decoder": [n, dims],
            "step": [n],
            "scale": [n],
            "decoder_net.w1": [HIDDEN, n],
            "decoder_net.b1": [HIDDEN],
            "decoder_net.w2": [dims, HIDDEN],
            "decoder_net.b2": [dims],
            "encoder_net.w1": [HIDDEN, dims],
            "encoder_net.b1": [HIDDEN],
            "encoder_net.w2": [n, HIDDEN],
            "encoder_net.b2": [n],
        }
        for k, shape in want.items():
            v = t["group.%d.%s" % (gi, k)]
            assert list(v.shape) == shape, k
            assert np.all(np.isfinite(v)), k
        assert np.all(t["group.%d.step" % gi] > 0)
        assert np.all(t["group.%d.scale" % gi] / t["group.%d.step" % gi] >= 0.3)
        # Trained: the decoder net's last layer left zero, the bases moved from the init.
        assert np.abs(t["group.%d.decoder_net.w2" % gi]).max() > 0
    hist = json.load(open(tmp_path / "h.json"))[repr(lam)]["history"]
    assert [h[0] for h in hist] == [1, 2, 3, 4]
    st = torch.load(ck, weights_only=False)["state"]
    assert st["step"] == 4
