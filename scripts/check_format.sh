#!/usr/bin/env bash
# The format check of the test command (scripts/test.sh step 0; docs/development.md):
#   - C, C++ and CUDA: the lines changed since the base commit follow .clang-format
#     (git clang-format --diff; the code before the base is not reformatted wholesale);
#   - Python: `ruff check` (ruff.toml) passes on every tracked Python file, and
#     `ruff format --check` on the Python files changed since the base commit.
# The base commit is the one in .ci/format-base (when .clang-format was introduced), or
# $1. Without the default base in the history (a shallow clone) the changed-line checks
# print SKIPPED with that reason; `ruff check` still runs. A base given as $1 that is not
# a commit is an error (exit 2). Only tracked files are checked: `git add` a new file
# first.
# Fix what it reports: `git clang-format BASE -- '*.h' '*.cc' '*.cu' '*.cuh' '*.cpp'` and `.venv/bin/ruff format FILE...`.
# Needs: clang-format (Debian clang-format, which ships git-clang-format) and ruff
# (tools/requirements.txt, in .venv), both installed by scripts/setup.sh.
# Exit status: 0 clean (or skipped), 1 a file needs formatting or a lint fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BASE="${1:-$(cat .ci/format-base)}"
RUFF="${KVSTASH_RUFF:-.venv/bin/ruff}"
status=0
if [[ $# -gt 0 ]] && ! git cat-file -e "$BASE^{commit}" 2>/dev/null; then
  echo "usage: scripts/check_format.sh [BASE-COMMIT] ('$BASE' is not a commit here)" >&2
  exit 2
fi
if [[ ! -x "$RUFF" ]]; then
  echo "check_format: no ruff at $RUFF (scripts/setup.sh installs it into .venv; or set KVSTASH_RUFF)" >&2
  exit 1
fi

mapfile -t py_all < <(git ls-files '*.py')
if ! "$RUFF" check --quiet "${py_all[@]}"; then
  echo "check_format: ruff check found the problems above (ruff.toml)" >&2
  status=1
fi

if ! git cat-file -e "$BASE^{commit}" 2>/dev/null; then
  echo "SKIPPED: changed-line format check: base commit $BASE is not in this clone's history (shallow clone?)"
  exit "$status"
fi

# Only these paths: a bare `git clang-format BASE` also reformats the committed JSON
# under benchmarks/results (clang-format formats .json too).
CXX_PATHS=("*.h" "*.cc" "*.cu" "*.cuh" "*.cpp")
cxx_diff="$(git clang-format --quiet --diff "$BASE" -- "${CXX_PATHS[@]}" 2>&1 || true)"
if [[ -n "$cxx_diff" && "$cxx_diff" != *"no modified files to format"* && "$cxx_diff" != *"did not modify any files"* ]]; then
  printf '%s\n' "$cxx_diff"
  echo "check_format: lines changed since $BASE are not in .clang-format's style; run: git clang-format $BASE -- ${CXX_PATHS[*]@Q}" >&2
  status=1
fi

mapfile -t py_changed < <(git diff --name-only --diff-filter=d "$BASE" -- '*.py')
if ((${#py_changed[@]})) && ! "$RUFF" format --check --quiet "${py_changed[@]}"; then
  echo "check_format: run: $RUFF format ${py_changed[*]}" >&2
  status=1
fi
exit "$status"
