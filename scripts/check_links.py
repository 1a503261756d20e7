#!/usr/bin/env python3
"""Link check: every file reference in the repository's docs and comments resolves.

Usage:
  scripts/check_links.py              check the files git tracks (exit 1 on a finding)
  scripts/check_links.py --self-test  show that a planted broken reference is flagged
                                      and good ones pass (exit 1 if not)
  scripts/check_links.py --root DIR   check another checkout

Each finding is printed as "file:line: <reference> does not exist". Python 3 standard
library only; scripts/test.sh runs it right after set-up (about a second).

What is scanned: the files `git ls-files` lists, except
  - binary files (a NUL byte in the first 8 KiB, or not UTF-8);
  - models/, benchmarks/results/, benchmarks/codec/results/ (measured outputs);
  - data, fixture and seed folders: any path with a component `data`, `fixtures` or
    `seeds` (tests/**/data/, scripts/fixtures/, fuzz/seeds/, benchmarks/data/);
  - third-party folders (third_party/, vendor/, external/; none today);
  - JSON and other formats without comments, and this script itself (its rules name
    the very strings it looks for).

Which text of a file is checked:
  - Markdown (.md): all of it; rule (a) skips fenced code blocks.
  - C, C++, CUDA, JavaScript, CSS (.h .cc .cu .cuh .c .cpp .hpp .js .css): // and /* */
    comments only. String and character literals (raw strings included) are not
    checked: a path in a literal is an output name or an argument, not a reference.
  - Python (.py .pyi): # comments and triple-quoted strings (docstrings), through the
    tokenize module; other string literals are not checked.
  - Shell, CMake, YAML, TOML, requirement lists, Dockerfile, ignore files, and files
    with a shell shebang: # comments outside quotes (in shell, a # that starts a word).
  - HTML: <!-- --> comments.

Rules:
  (a) Markdown links [text](target) in .md files: a target that is not a URL (no
      "scheme:"), not an in-page anchor ("#...") and not an autolink (<...>) must exist
      relative to the Markdown file (a leading "/" means the repository root); any
      "#anchor" or "?query" is cut off first.
  (b) Repository paths in checked text: a word that starts with docs/, scripts/,
      tools/, benchmarks/ or tests/ (not preceded by a letter, digit, ".", "/", "$",
      "~" or "-", so ../x/tests/... , $ROOT/scripts/... and URLs do not count) must
      exist relative to the repository root. The path ends at the first character
      outside [A-Za-z0-9_.*{},/-]; trailing ".", ",", ":" and ";" are cut. URLs are
      removed from a line before this rule runs. Globs (*, **) must match at least one
      file and {a,b} alternatives are expanded, each of which must exist, so
      docs/format/*.md and docs/format/{keys,payload}.md are checked, not skipped.
      A placeholder such as tests/<module>/ stops at "<" and checks only tests/.
      Two kinds of path that rule (b) would see are checked differently:
        - a build product: a path whose last part has no "." (tests/campaign/
          fault_campaign, tests/determinism/kvstash_determinism) passes when its folder
          exists and that folder's CMakeLists.txt names the target as a word;
        - another project's path: one written right after that project's name
          (rwkv.cpp docs/FILE_FORMAT.md, ggml docs/gguf.md, llama.cpp's tools/...;
          the names are EXTERNAL_PROJECTS below) is not ours and is not checked.
  (b') Paths into the other top-level folders (common/, codec/, model/, gpu_kernels/,
      store/, server/, client/, cli/, engines/, python/, demo/, fuzz/, deploy/,
      docker/) under the same word rule, but only when the last part names a file (it
      ends in ".ext") or is a glob: prose such as "client/server" or "common/codec"
      is not a path.
  (c) DESIGN.md and STYLE.md (the team's internal briefing, not part of the
      repository) must not be mentioned anywhere in a scanned file: architecture is
      docs/architecture.md, conventions are docs/development.md.

ALLOWED lists references that rule (b) would flag but that are right, each with its
reason; it is empty now. Fix a broken reference rather than adding to it.
"""
from __future__ import annotations

import argparse
import glob
import io
import os
import re
import subprocess
import sys
import tempfile
import time
import tokenize

# reference -> why it is correct although it does not exist in a checkout.
ALLOWED: dict[str, str] = {}

SKIP_PREFIXES = ("models/", "benchmarks/results/", "benchmarks/codec/results/",
                 "third_party/", "vendor/", "external/")
SKIP_COMPONENTS = {"data", "fixtures", "seeds"}
SELF = "scripts/check_links.py"

C_LIKE = {".h", ".cc", ".cu", ".cuh", ".c", ".cpp", ".hpp", ".js", ".css"}
PYTHON = {".py", ".pyi"}
HASH = {".sh", ".cmake", ".yml", ".yaml", ".toml", ".txt", ".supp", ".cfg", ".ini"}
HASH_NAMES = {"CMakeLists.txt", "Dockerfile", ".gitignore", ".dockerignore"}

MD_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
REPO_PATH = re.compile(r"(?<![A-Za-z0-9_./$~-])((?:docs|scripts|tools|benchmarks|tests)/"
                       r"[A-Za-z0-9_.*{},/-]*)")
EXTERNAL_PROJECTS = ("rwkv.cpp", "ggml", "llama.cpp", "vLLM", "vllm", "transformers", "RocksDB",
                     "rocksdb", "Redis", "redis", "htscodecs", "nanobind", "LMCache", "SGLang")
AFTER_PROJECT = re.compile(r"(?:^|[\s(])(?:" + "|".join(re.escape(p) for p in EXTERNAL_PROJECTS) +
                           r")(?:'s)?\s+`?$")
SOURCE_PATH = re.compile(r"(?<![A-Za-z0-9_./$~-])((?:common|codec|model|gpu_kernels|store|server|client|"
                         r"cli|engines|python|demo|fuzz|deploy|docker)/[A-Za-z0-9_.*{},/-]*)")
NAMES_FILE = re.compile(r"(\.[A-Za-z0-9*]+|\*)$")
MISSING_DOCS = re.compile(r"(?<![A-Za-z0-9_])(DESIGN\.md|STYLE\.md)")


def kind_of(path: str, text: str) -> str | None:
    name = os.path.basename(path)
    ext = os.path.splitext(name)[1]
    if ext == ".md":
        return "md"
    if ext in C_LIKE:
        return "c"
    if ext in PYTHON:
        return "py"
    if ext == ".html":
        return "html"
    if ext == ".sh" or (not ext and text.startswith("#!") and "sh" in text.split("\n", 1)[0]):
        return "sh"
    if ext in HASH or name in HASH_NAMES:
        return "hash"
    return None


C_TOKENS = re.compile(r"""//[^\n]*|/\*.*?(?:\*/|\Z)"""
                      r"""|(?<![A-Za-z0-9_])R"([^()\\\s]{0,16})\(.*?\)\1"|"(?:\\.|[^"\\\n])*(?:"|$)"""
                      r"""|(?<![A-Za-z0-9_])'(?:\\.|[^'\\\n])*(?:'|$)""", re.S | re.M)


def mask_c(text: str) -> str:
    """Keeps // and /* */ comments; blanks code and string/char literals (newlines kept)."""
    out = []
    last = 0
    for m in C_TOKENS.finditer(text):
        out.append(re.sub(r"[^\n]", " ", text[last:m.start()]))
        tok = m.group(0)
        out.append(tok if tok.startswith(("//", "/*")) else re.sub(r"[^\n]", " ", tok))
        last = m.end()
    out.append(re.sub(r"[^\n]", " ", text[last:]))
    return "".join(out)


def mask_python(text: str) -> str:
    """Keeps # comments and triple-quoted strings (docstrings) via tokenize."""
    lines = text.split("\n")
    out = [[" "] * len(line) for line in lines]
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            keep = tok.type == tokenize.COMMENT or (
                tok.type == tokenize.STRING and re.match(r"^[A-Za-z]*('''|\"\"\")", tok.string))
            if not keep:
                continue
            (r0, c0), (r1, c1) = tok.start, tok.end
            for r in range(r0, r1 + 1):
                line = lines[r - 1]
                a = c0 if r == r0 else 0
                b = c1 if r == r1 else len(line)
                out[r - 1][a:b] = line[a:b]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return mask_hash(text, shell=False)
    return "\n".join("".join(o) for o in out)


def mask_hash(text: str, shell: bool) -> str:
    """Keeps # comments outside quotes. Quote state carries over lines, so a quote that
    is never closed blanks the rest: a missed check, never a false finding."""
    res = []
    quote = None
    for line in text.split("\n"):
        kept = [" "] * len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 2
                    continue
                if c == quote:
                    quote = None
            elif c in "\"'" and not (c == "'" and i > 0 and line[i - 1].isalnum() and not shell):
                quote = c
            elif c == "#" and (not shell or i == 0 or line[i - 1] in " \t;("):
                kept[i:] = line[i:]
                break
            elif c == "\\" and shell:
                i += 2
                continue
            i += 1
        res.append("".join(kept))
    return "\n".join(res)


def mask_html(text: str) -> str:
    out = [c if c == "\n" else " " for c in text]
    for m in re.finditer(r"<!--.*?-->", text, re.S):
        out[m.start():m.end()] = text[m.start():m.end()]
    return "".join(out)


def expand_braces(s: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    return [x for alt in m.group(1).split(",") for x in expand_braces(s[:m.start()] + alt + s[m.end():])]


def exists(root: str, rel: str) -> bool:
    for alt in expand_braces(rel):
        p = os.path.join(root, alt)
        if any(ch in alt for ch in "*?["):
            if not glob.glob(p, recursive=True):
                return False
        elif not os.path.exists(p):
            return False
    return True


def build_target(root: str, rel: str) -> bool:
    """True for folder/name where name (no '.') is a target of folder/CMakeLists.txt."""
    folder, name = os.path.split(rel.rstrip("/"))
    if not folder or not name or "." in name or any(ch in name for ch in "*?[{"):
        return False
    cmake = os.path.join(root, folder, "CMakeLists.txt")
    if not os.path.isfile(cmake):
        return False
    with open(cmake, encoding="utf-8", errors="replace") as f:
        return re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", f.read()) is not None


def check_file(root: str, rel: str, text: str, kind: str) -> list[str]:
    found = []
    lines = text.split("\n")
    for no, line in enumerate(lines, 1):
        for m in MISSING_DOCS.finditer(line):
            found.append(f"{rel}:{no}: {m.group(1)} does not exist")
    if kind == "md":
        in_fence = False
        for no, line in enumerate(lines, 1):
            if re.match(r"^\s*(```|~~~)", line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for m in MD_LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                target = re.split(r"[#?]", target, maxsplit=1)[0]
                if not target:
                    continue
                base = root if target.startswith("/") else os.path.join(root, os.path.dirname(rel))
                if not os.path.exists(os.path.normpath(os.path.join(base, target.lstrip("/")))):
                    found.append(f"{rel}:{no}: {m.group(1)} does not exist")
        checked = text
    elif kind == "c":
        checked = mask_c(text)
    elif kind == "py":
        checked = mask_python(text)
    elif kind == "html":
        checked = mask_html(text)
    else:
        checked = mask_hash(text, shell=(kind == "sh"))
    for no, line in enumerate(checked.split("\n"), 1):
        line = URL.sub(" ", line)
        refs = [(m, m.group(1).rstrip(".,:;")) for m in REPO_PATH.finditer(line)]
        refs += [(m, r) for m in SOURCE_PATH.finditer(line)
                 if NAMES_FILE.search(r := m.group(1).rstrip(".,:;")) and "{" not in r.split("/")[0]]
        for m, ref in refs:
            if ref in ALLOWED or exists(root, ref) or build_target(root, ref):
                continue
            if AFTER_PROJECT.search(line[:m.start()]):
                continue
            found.append(f"{rel}:{no}: {ref} does not exist")
    return found


def scanned(rel: str) -> bool:
    if rel == SELF or rel.startswith(SKIP_PREFIXES):
        return False
    return not (set(rel.split("/")[:-1]) & SKIP_COMPONENTS)


def check_tree(root: str, files: list[str]) -> tuple[list[str], int]:
    findings, n = [], 0
    for rel in files:
        if not scanned(rel):
            continue
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data[:8192]:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        kind = kind_of(rel, text)
        if kind is None:
            continue
        n += 1
        findings += check_file(root, rel, text, kind)
    return findings, n


def git_files(root: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    return [f for f in out.decode("utf-8", "replace").split("\0") if f]


def self_test() -> int:
    files = {
        "docs/good.md": "See [the other page](other.md#part), [top](/README.md), "
                        "[web](https://example.com/x.md), [here](#anchor),\n"
                        "scripts/real.sh, docs/*.md, docs/{good,other}.md and tests/<module>/.\n"
                        "```\n[not a link](inside/a/fence.md)\n```\n",
        "docs/other.md": "Back to [good](good.md). https://github.com/o/r/blob/main/tests/none.cc\n",
        "README.md": "Pointers: docs/other.md.\n",
        "scripts/real.sh": "#!/usr/bin/env bash\n# runs tools/ok.py\necho \"# tests/output_name.json\"\n",
        "tools/ok.py": '"""Docstring naming scripts/real.sh."""\nOUT = "benchmarks/made_at_run_time.json"  # ok\n',
        "common/x.h": '// Comment naming docs/good.md.\nconst char* kOut = "tests/written_later.bin";\n'
                      '// Built as tests/unit/unit_tests; format: rwkv.cpp docs/FILE_FORMAT.md.\n',
        "tests/unit/CMakeLists.txt": "# tests/unit/\nkvstash_add_test(NAME unit_tests SOURCES a.cc)\n",
        # planted breakage, one per rule:
        "docs/bad.md": "A [broken link](missing.md) here.\n",
        "common/y.h": "// See scripts/nope.sh for details; client/server split; model/gone.h.\n",
        "docs/third.md": "Per DESIGN.md section 2.\n",
        "tools/bad.py": "# reads benchmarks/inputs/absent.json\n",
        "scripts/bad.sh": "#!/bin/sh\n# built as tests/unit/other_tests\n",
    }
    want = {"docs/bad.md:1: missing.md does not exist",
            "common/y.h:1: scripts/nope.sh does not exist",
            "common/y.h:1: model/gone.h does not exist",
            "docs/third.md:1: DESIGN.md does not exist",
            "tools/bad.py:1: benchmarks/inputs/absent.json does not exist",
            "scripts/bad.sh:2: tests/unit/other_tests does not exist"}
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        got, _ = check_tree(root, sorted(files))
    ok = set(got) == want and len(got) == len(want)
    for line in sorted(set(got) | want):
        mark = "ok" if line in want and line in got else ("MISSED" if line in want else "FALSE POSITIVE")
        print(f"  [{mark}] {line}")
    print("self-test " + ("passed: the planted broken references are flagged, the good ones pass"
                          if ok else "FAILED"))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    t0 = time.monotonic()
    findings, n = check_tree(args.root, git_files(args.root))
    for f in findings:
        print(f)
    dt = time.monotonic() - t0
    if findings:
        print(f"check_links: {len(findings)} broken reference(s) in {n} files ({dt:.2f} s)")
        return 1
    print(f"check_links: {n} files, every reference resolves ({dt:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
