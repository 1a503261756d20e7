#!/usr/bin/env python3
"""Writes tests/model/data/qwen2_coder_goldens.json: what llama.cpp (llama-cpp-python
0.3.36, the pinned build in .venv) computes for Qwen2.5-Coder-0.5B-Instruct Q4_K_M
(models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf, scripts/fetch_qwen2.sh), as an
independent reference for the reference runtime's qwen2 path (tests/model/qwen2_test.cc):

  - token ids of several texts (code, English, digits, whitespace runs, unicode,
    contractions, special tokens), by llama_tokenize(add_special=False,
    parse_special=True);
  - for 2 prompts (a code prompt and a chat-templated one), the greedy continuation of
    32 tokens at temperature 0 (argmax of llama.cpp's logits, one token per decode,
    n_threads 2), with the margin between the best and second-best logit at each step
    (to tell a near-tie from a bug) and the top 8 logits of the prompt's last position.

  .venv/bin/python tools/gen_qwen2_goldens.py [--models models]

setup.sh installs llama-cpp-python with --no-deps; its own Python dependencies
(typing_extensions, diskcache, jinja2) come from tools/requirements.txt.
"""

import argparse
import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "model", "data", "qwen2_coder_goldens.json")
MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
N_THREADS = 2
N_GREEDY = 32

TEXTS = [
    # code
    'def fibonacci(n: int) -> list[int]:\n    """Return the first n Fibonacci numbers."""\n'
    "    a, b = 0, 1\n    out = []\n    for _ in range(n):\n        out.append(a)\n"
    "        a, b = b, a + b\n    return out\n",
    '#include <stdio.h>\n\nint main(void) {\n\tprintf("%d\\n", 42);\r\n\treturn 0;\n}\n',
    # English with contractions in both cases
    "The quick brown fox doesn't jump; it's THE DOG'S turn, and we'LL see what they've DONE.",
    # digits
    "Order 1234567 costs $89.99 (3.14159e-10, 0x1F, 2026-12-07 08:15:00).",
    # whitespace runs
    "a  b   c\t\td \n\n\n  e    \n\t\n    f   ",
    # unicode: accents, CJK, Cyrillic, emoji, Devanagari, full-width and non-ASCII digits
    "Café naïve façade — 你好，世界！ Привет, мир 👋🏽 नमस्ते ＡＢＣ١٢٣ ½ ⅷ",
    # an unassigned code point (U+0378), NEL, LINE SEPARATOR, ideographic space, NUL/DEL,
    # a ligature, a titlecase letter with a combining mark, superscript digit
    "1\u0378're \u00bd\u0130\u0085x\u2028y\u3000z \ufb01 \u01c5\u0301 \x00\x7f end\u00b2",
    # special tokens inside text
    "<|im_start|>user\nhi<|im_end|>\n<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|><tool_call></tool_call>",
]

# The prompts are chosen so that llama.cpp's top-1 margin stays above 0.2 at every
# greedy step (min 1.75 and 0.21; the runtime's logits are within 0.1 of llama.cpp's):
# "# Python\ndef is_prime(n: int) -> bool:\n" alone has a near-tie of 0.013 at step 1
# (' """' vs ' if'), where the fp32 runtime and llama.cpp's Q8 arithmetic pick
# differently, and most chat prompts tried had a step below 0.1.
CODE_PROMPT = '# Python\ndef is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n'
# The file's chat template (tokenizer.chat_template) rendered for one user message and
# add_generation_prompt=True: the default system prompt, the user turn, the assistant
# header.
CHAT_PROMPT = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function is_even(n) that returns True when n is even. "
    "Reply with code only.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def greedy(llm, llama_cpp, prompt_ids):
    llm.reset()
    llm.eval(prompt_ids)
    n_vocab = llm.n_vocab()
    last = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)).copy()
    top = np.argsort(-last, kind="stable")[:8]
    out, margins = [], []
    logits = last
    for _ in range(N_GREEDY):
        order = np.argsort(-logits, kind="stable")[:2]
        out.append(int(order[0]))
        margins.append(float(logits[order[0]] - logits[order[1]]))
        llm.eval([int(order[0])])
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)).copy()
    return {
        "ids": out,
        "top1_margins": [float(f"{m:.6g}") for m in margins],
        "last_prompt_top8": {"ids": [int(i) for i in top], "values": [float(f"{last[i]:.9g}") for i in top]},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    args = ap.parse_args()
    import llama_cpp

    path = os.path.join(args.models, MODEL)
    llm = llama_cpp.Llama(
        model_path=path,
        n_ctx=512,
        n_batch=512,
        n_threads=N_THREADS,
        n_threads_batch=N_THREADS,
        seed=0,
        verbose=False,
    )
    cases = []
    for t in TEXTS:
        ids = llm.tokenize(t.encode("utf-8"), add_bos=False, special=True)
        cases.append({"text": t, "ids": [int(i) for i in ids]})
    prompts = []
    for name, text in (("code", CODE_PROMPT), ("chat", CHAT_PROMPT)):
        ids = [int(i) for i in llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)]
        g = greedy(llm, llama_cpp, ids)
        g_text = llm.detokenize(g["ids"], special=True).decode("utf-8", errors="replace")
        prompts.append(
            {
                "name": name,
                "text": text,
                "prompt_ids": ids,
                "greedy_ids": g["ids"],
                "greedy_text": g_text,
                "top1_margins": g["top1_margins"],
                "last_prompt_top8": g["last_prompt_top8"],
            }
        )
        print(f"{name}: {len(ids)} prompt tokens, min top-1 margin {min(g['top1_margins']):.4f}\n{g_text!r}")
    doc = {
        "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, n_threads {N_THREADS}, "
        "greedy argmax of its logits, one token per decode",
        "model": MODEL,
        "model_sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "tokenizer_cases": cases,
        "greedy": prompts,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
