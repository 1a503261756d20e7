"""Test/benchmark harness for kvstash_vllm: a real kvstash-server, the demo's
shared-prefix prompts, and vLLM engines in separate processes (runner.py).

- find_server(): $KVSTASH_SERVER, else build/kvstash-server of this checkout.
- Server: starts kvstash-server on free loopback ports (--ready-file), stop()/kill().
- demo_prompts(): the prompts of `kvstash-demo` (demo/demo_workload.cc): SmolLM2's
  chat template around one of 3 system prompts, "Document:\\n" and a passage of exactly
  doc_tokens tokens from the start of each evaluation-split file, then a question.
  Token ids come from the converted model's tokenizer (tools/gguf_to_hf.py; it equals
  our BPE tokenizer on the golden texts), concatenated part by part like the demo.
- Engine: one vLLM process (runner.py) driven over stdin/stdout with JSON lines.
- Models: SmolLM2-135M (MODEL/GGUF, the default everywhere) and Qwen2.5-Coder-0.5B
  (QWEN2_MODEL/QWEN2_GGUF: scripts/fetch_qwen2.sh, then tools/gguf_to_hf.py --gguf
  qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; optional, qwen2_missing() says what is absent).
  Both use the ChatML tokens (<|im_start|>, <|im_end|>) the demo prompts are built with.
Thread-safety: none needed (used from one test thread).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import queue
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MODEL = os.path.join(ROOT, "models", "smollm2-135m-hf")
GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LORA_DIR = os.path.join(ROOT, "models", "lora")  # tools/make_lora_adapters.py
QWEN2_MODEL = os.path.join(ROOT, "models", "qwen2.5-coder-0.5b-hf")
QWEN2_GGUF = os.path.join(ROOT, "models", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
MARK = "@@kvstash@@"

SYSTEM_PROMPTS = [
    "You are a helpful assistant. Answer the question using only the document.",
    "You are a careful legal and technical reviewer. Quote the document when you can and say "
    "when it does not answer the question.",
    "You are a concise assistant for software engineers. Reply in at most two sentences.",
]
QUESTIONS = [
    "What is this document about?",
    "Summarize the first paragraph in one sentence.",
    "Which obligations or rules does the text state?",
    "Who is the author or copyright holder named in the text?",
    "Give one concrete example taken from the document.",
    "What would a new user need to know first?",
    "Is anything in the text about warranties or errors?",
    "List two important terms used in the document.",
]
_LIC, _PY = "/usr/share/common-licenses/", "/usr/lib/python3.11/"
EVAL_FILES = [
    _LIC + "Apache-2.0",
    _PY + "typing.py",
    _LIC + "MPL-2.0",
    _PY + "inspect.py",
    _LIC + "GPL-2",
    _LIC + "Artistic",
    _PY + "subprocess.py",
    _LIC + "CC0-1.0",
    _LIC + "GFDL-1.2",
    _PY + "pathlib.py",
    _LIC + "MPL-1.1",
    _LIC + "LGPL-2",
    _LIC + "GPL-1",
]


def qwen2_missing() -> str | None:
    """Why the Qwen2.5-Coder-0.5B tests and benchmark cannot run here (None: both files exist):
    the GGUF is fetched only on request (KVSTASH_MODEL_QWEN2=1 scripts/setup.sh), so CI
    lacks it."""
    if not os.path.isfile(QWEN2_GGUF):
        return f"no {os.path.relpath(QWEN2_GGUF, ROOT)} (KVSTASH_MODEL_QWEN2=1 scripts/setup.sh)"
    if not os.path.isfile(os.path.join(QWEN2_MODEL, "config.json")):
        return (
            f"no {os.path.relpath(QWEN2_MODEL, ROOT)} (KVSTASH_MODEL_QWEN2=1 scripts/setup.sh, or "
            "tools/gguf_to_hf.py --gguf qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)"
        )
    return None


def _model_tag(gguf: str) -> str:
    """Artifact cache name part of a model: "" for SmolLM2 (the names the cache always
    had), else the GGUF's stem."""
    return (
        ""
        if os.path.abspath(gguf) == os.path.abspath(GGUF)
        else os.path.basename(gguf).rsplit(".", 1)[0] + "-"
    )


def find_server() -> str:
    for p in (
        os.environ.get("KVSTASH_SERVER", ""),
        os.path.join(ROOT, "build", "kvstash-server"),
    ):
        if p and os.access(p, os.X_OK):
            return p
    raise FileNotFoundError(
        "no kvstash-server: build it (scripts/build.sh kvstash-server) " "or set KVSTASH_SERVER"
    )


class Server:
    """A kvstash-server on free loopback ports. data_dir None: memory only."""

    def __init__(
        self,
        data_dir: str | None = None,
        tenants=("vllm=secret",),
        port: int = 0,
        memory_budget: str | None = None,
        log_path: str | None = None,
    ):
        self.data_dir, self.tenants, self.want_port = data_dir, list(tenants), port
        self.memory_budget = memory_budget
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.port = self.http_port = 0

    def start(self) -> "Server":
        tmp = tempfile.mkdtemp(prefix="kvstash-ready-")
        ready = os.path.join(tmp, "ready.json")
        cmd = [
            find_server(),
            "--port",
            str(self.want_port),
            "--http-port",
            "0",
            "--ready-file",
            ready,
            "--log-level",
            "warn",
        ]
        if self.data_dir:
            cmd += ["--data-dir", self.data_dir]
        if self.memory_budget is not None:
            cmd += ["--memory-budget", self.memory_budget]
        for t in self.tenants:
            cmd += ["--tenant", t]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        deadline = time.time() + 30
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"kvstash-server did not start: {cmd}")
            time.sleep(0.05)
        time.sleep(0.05)
        info = json.load(open(ready))
        shutil.rmtree(tmp, ignore_errors=True)
        self.port, self.http_port = int(info["port"]), int(info["http_port"])
        self.want_port = self.port  # a restart comes back on the same port
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        """SIGTERM and wait (a clean shutdown flushes the store)."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def demo_prompts(n_docs: int, doc_tokens: int, questions_per_doc: int, model_dir: str = MODEL):
    """[(doc index, prompt token ids)] in document order (no shuffle: tests decide order)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    passages = []
    for path in EVAL_FILES:
        if len(passages) == n_docs:
            break
        if not os.path.exists(path):
            continue
        ids = enc(open(path, encoding="utf-8", errors="strict").read())
        if len(ids) >= doc_tokens:
            passages.append(ids[:doc_tokens])
    if len(passages) < n_docs:
        raise RuntimeError(f"only {len(passages)} evaluation files with {doc_tokens} tokens")
    out = []
    for d, passage in enumerate(passages):
        prefix = (
            enc("<|im_start|>system\n" + SYSTEM_PROMPTS[d % 3] + "<|im_end|>\n<|im_start|>user\nDocument:\n")
            + passage
        )
        for q in range(questions_per_doc):
            question = QUESTIONS[(d + q) % len(QUESTIONS)]
            out.append((d, prefix + enc("\n\nQuestion: " + question + "<|im_end|>\n<|im_start|>assistant\n")))
    return out


def connector_config(
    server_addrs,
    codec="raw",
    tenant="vllm",
    credential="secret",
    chunk_tokens=64,
    restore_policy="always",
    **extra,
) -> dict:
    """restore_policy defaults to "always" here (the connector's default is "cost"): the
    tests that check loads must not depend on this machine's speed; test_e2e's
    cost-model test passes "cost"."""
    cfg = {
        "servers": list(server_addrs),
        "tenant": tenant,
        "credential": credential,
        "codec": codec,
        "chunk_tokens": chunk_tokens,
        "restore_policy": restore_policy,
    }
    cfg.update(extra)
    return {
        "kv_connector": "KvstashConnector",
        "kv_connector_module_path": "kvstash_vllm",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": cfg,
    }


class Engine:
    """A vLLM engine in its own process (runner.py); one JSON request/reply per call.
    model: the model folder (default MODEL); hf_overrides: vLLM's, passed as given.

    Every reply has a deadline (timeout_s, or longer for a command with its own
    timeout_s; 60 s for "quit"): a runner that stops answering (hung, or killed without
    closing its stdout) is killed and the call raises TimeoutError with the tail of its
    log, so a stuck engine fails its test instead of blocking the whole run. A daemon
    thread reads the lines into a queue so that the deadline holds while none arrives."""

    def __init__(
        self,
        kv_transfer_config: dict | None,
        block_size: int = 32,
        enable_prefix_caching: bool = False,
        log_path: str | None = None,
        max_model_len: int = 2048,
        timeout_s: float = 600,
        max_lora_rank: int = 0,
        hf_overrides: dict | None = None,
        model: str = MODEL,
    ):
        env = dict(os.environ)
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONPATH"] = os.path.join(ROOT, "engines", "vllm") + os.pathsep + env.get("PYTHONPATH", "")
        spec = {
            "model": model,
            "kv_transfer_config": kv_transfer_config,
            "block_size": block_size,
            "enable_prefix_caching": enable_prefix_caching,
            "max_model_len": max_model_len,
            "max_lora_rank": max_lora_rank,
            "hf_overrides": hf_overrides,
        }
        self.log_path = log_path
        self.log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "runner.py"), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_lines, daemon=True).start()
        self.ready = self._reply(self.timeout_s)

    def _read_lines(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # end of file: the runner exited

    def _log_tail(self, lines: int = 30) -> str:
        if not self.log_path:
            return "(no log_path)"
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode("utf-8", "replace")
        except OSError as e:
            return f"(log unreadable: {e})"

    def _reply(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                self.proc.wait(10)
                raise TimeoutError(
                    f"vLLM runner did not answer within {timeout_s:g} s (killed); "
                    f"last lines of its log:\n{self._log_tail()}"
                ) from None
            if line is None:
                raise RuntimeError(
                    f"vLLM runner exited (rc {self.proc.wait(10)}); "
                    f"last lines of its log:\n{self._log_tail()}"
                )
            if line.startswith(MARK):
                msg = json.loads(line[len(MARK) :])
                if "error" in msg:
                    raise RuntimeError("runner: " + msg["error"])
                return msg

    def call(self, reply_timeout_s: float | None = None, **cmd) -> dict:
        """Sends one command; waits reply_timeout_s (default: timeout_s, and at least a
        minute past the command's own timeout_s) for its reply."""
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        if reply_timeout_s is None:
            reply_timeout_s = max(self.timeout_s, float(cmd.get("timeout_s", 0)) + 60)
        return self._reply(reply_timeout_s)

    def generate(self, prompts, max_tokens=8, salts=None, serial=True, flush_each=False, loras=None) -> dict:
        """Greedy outputs; serial (default): one prompt at a time (see runner.py).
        loras: per prompt None or (name, int id, adapter folder); needs max_lora_rank > 0."""
        return self.call(
            cmd="generate",
            prompts=[list(p) for p in prompts],
            max_tokens=max_tokens,
            salts=salts,
            serial=serial,
            flush_each=flush_each,
            loras=[list(lo) if lo else None for lo in loras] if loras else None,
        )

    def status(self) -> dict:
        """The runner's "status": VmRSS of the engine process, each connector's fingerprint
        and codec-cache counts, kvstash.PrefixCodec.shared_state()."""
        return self.call(cmd="status")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call(cmd="quit", reply_timeout_s=60)
            except Exception:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


CALIBRATION_FILES = ["/usr/share/common-licenses/GPL-3", "/usr/lib/python3.11/argparse.py"]


def spec_artifact(chunk_tokens: int, doc_tokens: int = 1024, gguf: str = GGUF) -> str:
    """Path of a spec artifact of the model `gguf` for chunk_tokens, calibrated once with
    our reference runtime (kvstash.ReferenceModel.calibrate_spec) on the first doc_tokens
    tokens of two files of the CALIBRATION split (disjoint from the demo's evaluation
    files); cached in .cache/ (the file name carries the model unless it is SmolLM2)."""
    import kvstash

    cache = os.path.join(ROOT, ".cache", "kvstash-vllm")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"spec-{_model_tag(gguf)}c{chunk_tokens}-d{doc_tokens}.kvsa")
    if not os.path.exists(path):
        ref = kvstash.ReferenceModel.load(gguf, threads=2)
        docs = [ref.tokenize(open(f, encoding="utf-8").read())[:doc_tokens] for f in CALIBRATION_FILES]
        ref.calibrate_spec(docs, path + ".part", chunk_tokens=chunk_tokens, dtype="bf16")
        os.replace(path + ".part", path)
    return path


def dckv_artifact(rate: float = 8.0, cal_tokens: int = 2048, gguf: str = GGUF) -> str:
    """Path of a dckv artifact of the model `gguf` (default SmolLM2) at `rate`x, made once
    by `kvstash calibrate dckv` (build/kvstash, or $KVSTASH_TOOL) on the calibration split;
    cached in .cache/ (the folder name carries the model unless it is SmolLM2). SmolLM2
    uses the committed Fisher output weights, another model output weights the tool
    measures on 2 calibration documents (its default without a weights file)."""
    out = os.path.join(ROOT, ".cache", "kvstash-vllm", f"dckv-{_model_tag(gguf)}r{rate:g}-c{cal_tokens}")
    found = sorted(f for f in os.listdir(out) if f.endswith(".kvda")) if os.path.isdir(out) else []
    if not found:
        tool = os.environ.get("KVSTASH_TOOL") or os.path.join(ROOT, "build", "kvstash")
        if not os.access(tool, os.X_OK):
            raise FileNotFoundError("no kvstash tool to calibrate dckv (scripts/build.sh kvstash)")
        os.makedirs(out, exist_ok=True)
        subprocess.run(
            [
                tool,
                "calibrate",
                "dckv",
                "--model",
                gguf,
                "--rate",
                f"{rate:g}",
                "--cal-tokens",
                str(cal_tokens),
                "--out",
                out,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        found = sorted(f for f in os.listdir(out) if f.endswith(".kvda"))
    if not found:
        raise FileNotFoundError(f"kvstash calibrate dckv wrote no .kvda into {out}")
    return os.path.join(out, found[0])
