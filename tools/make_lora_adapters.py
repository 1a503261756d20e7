#!/usr/bin/env python3
"""Train two small LoRA adapters for models/smollm2-135m-hf, in the PEFT folder format
vLLM loads (LoRARequest(name, id, path)), for the connector's LoRA tests
(engines/vllm/tests/test_lora.py): one adapter per text, so the two really differ.

  .venv-vllm/bin/python tools/make_lora_adapters.py [--model models/smollm2-135m-hf]
                                                    [--out models/lora] [--steps 24]

Each adapter: rank 8, alpha 16, on q_proj and v_proj of every layer (PEFT's default
LLaMA targets), A initialised from a seeded normal (std 1/rank) and B from zeros, as
PEFT does, then trained with AdamW (lr 2e-3) on next-token loss over 128-token windows of
real text: adapter "legal" on /usr/share/common-licenses/Apache-2.0, adapter "code" on
Python's /usr/lib/python3.11/subprocess.py, float32 on the CPU. B starts at zero, so
an untrained adapter would be the base model; after training the adapters change the
greedy outputs (the tests check that they do). Written files: <out>/<name>/
adapter_config.json and adapter_model.safetensors (tensors "base_model.model.model.
layers.<i>.self_attn.<q|v>_proj.lora_<A|B>.weight", A [r, in], B [out, r], float32),
into a temporary folder renamed at the end, so an interrupted run leaves no half
adapter. Deterministic for a given machine and torch (seeded; one thread); the tests
compare runs of the same files, never against golden values.
Exit 0 on success, 2 on bad arguments or a missing model.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADAPTERS = {"legal": "/usr/share/common-licenses/Apache-2.0", "code": "/usr/lib/python3.11/subprocess.py"}
RANK, ALPHA, TARGETS, WINDOW, LR = 8, 16, ("q_proj", "v_proj"), 128, 2e-3


def train(model_dir: str, text_path: str, steps: int, seed: int):
    """The trained LoRA tensors of one adapter: {safetensors name: tensor}."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.requires_grad_(False)
    ids = tok(open(text_path, encoding="utf-8").read(), return_tensors="pt").input_ids[0]
    if ids.numel() < WINDOW * 2:
        raise SystemExit(f"{text_path}: too short for training windows")
    params, hooks, names = [], [], {}
    scale = ALPHA / RANK
    for i, layer in enumerate(model.model.layers):
        for t in TARGETS:
            lin = getattr(layer.self_attn, t)
            a = torch.nn.Parameter(torch.randn(RANK, lin.in_features) / RANK)
            b = torch.nn.Parameter(torch.zeros(lin.out_features, RANK))
            params += [a, b]
            prefix = f"base_model.model.model.layers.{i}.self_attn.{t}"
            names[f"{prefix}.lora_A.weight"], names[f"{prefix}.lora_B.weight"] = a, b
            hooks.append(lin.register_forward_hook(
                lambda mod, inp, out, a=a, b=b: out + scale * (inp[0] @ a.t() @ b.t())))
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        at = int(torch.randint(0, ids.numel() - WINDOW - 1, (1,), generator=g))
        x = ids[at:at + WINDOW + 1].unsqueeze(0)
        loss = model(input_ids=x, labels=x).loss  # transformers shifts the labels
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in (0, steps - 1):
            print(f"  step {step}: loss {loss.item():.3f}")
    for h in hooks:
        h.remove()
    return {k: v.detach().contiguous() for k, v in names.items()}


def write_adapter(out_dir: str, name: str, tensors, model_dir: str) -> None:
    from safetensors.torch import save_file
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir)
    os.chmod(tmp, 0o755)
    save_file(tensors, os.path.join(tmp, "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA,
              "lora_dropout": 0.0, "bias": "none", "target_modules": list(TARGETS),
              "base_model_name_or_path": os.path.abspath(model_dir), "fan_in_fan_out": False,
              "modules_to_save": None, "use_rslora": False, "use_dora": False,
              "kvstash": {"tool": "tools/make_lora_adapters.py", "text": ADAPTERS[name]}}
    with open(os.path.join(tmp, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    final = os.path.join(out_dir, name)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)


def main() -> int:
    ap = argparse.ArgumentParser(
        description="Train two LoRA adapters (legal, code) for SmolLM2-135M in the PEFT folder format "
                    "vLLM loads (engines/vllm/tests/test_lora.py).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m-hf"),
                    help="the Hugging Face model folder (tools/gguf_to_hf.py)")
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "lora"), help="folder of the adapters")
    ap.add_argument("--steps", type=int, default=24, help="AdamW steps per adapter")
    args = ap.parse_args()
    if args.steps < 1:
        print("--steps must be >= 1", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        print(f"{args.model}: no Hugging Face model (run scripts/setup.sh)", file=sys.stderr)
        return 2
    missing = [t for t in ADAPTERS.values() if not os.path.isfile(t)]
    if missing:
        print(f"training text missing: {', '.join(missing)}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for seed, (name, text) in enumerate(ADAPTERS.items(), start=1):
        print(f"adapter {name}: {args.steps} steps on {text}")
        write_adapter(args.out, name, train(args.model, text, args.steps, seed), args.model)
    print(f"wrote {', '.join(ADAPTERS)} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
