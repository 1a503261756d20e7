#!/usr/bin/env bash
# clang's thread-safety analysis (-Wthread-safety) over the library code: every
# translation unit under common/ store/ server/ client/ engines/ demo/ cli/ python/src/
# that the build compiles (python/src/ is in the Python package's build folder,
# build-python/, not in build/), with that build's include paths and defines, syntax only (no code is
# generated). Any finding fails the run. The annotations it checks are in
# common/thread_annotations.h; docs/development.md says how to use them.
#
# Usage: scripts/thread_safety.sh              self-test, then the tree
#        scripts/thread_safety.sh --self-test  only the self-test: a snippet that reads a
#                                              KVSTASH_GUARDED_BY field without its lock,
#                                              and one that takes two mutexes against
#                                              their KVSTASH_ACQUIRED_BEFORE order, must be
#                                              reported, their fixed twin must not
# Needs a configured build folder (scripts/build.sh; CMAKE_EXPORT_COMPILE_COMMANDS is
# on, so configure alone is enough) and clang++.
# Environment:
#   KVSTASH_BUILD_DIR  build folder holding compile_commands.json. Default: build
#   KVSTASH_CLANGXX    clang++ to run. Default: clang++
#   KVSTASH_JOBS       parallel compiles. Default: nproc
#   KVSTASH_TSA_DIRS   space-separated folder prefixes to check. Default: the list above
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${KVSTASH_BUILD_DIR:-build}"
CLANGXX="${KVSTASH_CLANGXX:-clang++}"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
# -Wthread-safety-beta adds the lock-order check (KVSTASH_ACQUIRED_BEFORE). Boost 1.74's
# asio enables co_await for gcc only; clang 14 with libstdc++'s <coroutine> handles it
# when asked.
FLAGS=(-fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror=thread-safety
       -DBOOST_ASIO_HAS_CO_AWAIT -DBOOST_ASIO_HAS_STD_COROUTINE)

self_test() {
  local dir
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' RETURN
  cat > "$dir/snippet.cc" <<'EOF'
#include "common/thread_annotations.h"
class Counter {
 public:
  void Add() { kvstash::MutexLock lock(mu_); ++n_; }
#ifdef KVSTASH_SELF_TEST_BAD
  int Read() { return n_; }  // no lock: must be reported
  void Both() { kvstash::MutexLock b(second_); kvstash::MutexLock a(mu_); }  // wrong order
#else
  int Read() { kvstash::MutexLock lock(mu_); return n_; }
  void Both() { kvstash::MutexLock a(mu_); kvstash::MutexLock b(second_); }
#endif
 private:
  kvstash::Mutex mu_ KVSTASH_ACQUIRED_BEFORE(second_);
  kvstash::Mutex second_;
  int n_ KVSTASH_GUARDED_BY(mu_) = 0;
};
int main() { Counter c; c.Add(); c.Both(); return c.Read(); }
EOF
  if ! "$CLANGXX" -std=c++20 -I"$ROOT" "${FLAGS[@]}" "$dir/snippet.cc" 2> "$dir/good.log"; then
    cat "$dir/good.log" >&2
    echo "thread_safety: self-test FAILED: the locked snippet was reported" >&2
    return 1
  fi
  if "$CLANGXX" -std=c++20 -I"$ROOT" "${FLAGS[@]}" -DKVSTASH_SELF_TEST_BAD "$dir/snippet.cc" \
       2> "$dir/bad.log" || ! grep -q "requires holding mutex 'mu_'" "$dir/bad.log" ||
     ! grep -q "mutex 'mu_' must be acquired before 'second_'" "$dir/bad.log"; then
    cat "$dir/bad.log" >&2
    echo "thread_safety: self-test FAILED: an unlocked read of a guarded field or a lock" \
         "order violation was not reported" >&2
    return 1
  fi
  echo "thread_safety: self-test ok, reported as errors:" \
       "$(grep -o "reading variable.*requires holding mutex '[a-z_]*'" "$dir/bad.log");" \
       "$(grep -o "mutex '[a-z_]*' must be acquired before '[a-z_]*'" "$dir/bad.log")"
}

self_test
[[ "${1:-}" == "--self-test" ]] && exit 0

DB="$BUILD_DIR/compile_commands.json"
[[ -f "$DB" ]] || { echo "thread_safety: $DB missing: run scripts/build.sh first" >&2; exit 2; }

# One command per translation unit (the first entry when several targets compile a
# file), keeping what decides how it parses: -D -U -I -isystem -iquote -include -std
# -m (target features); dropping gcc's warning and code-generation flags.
TSA_DIRS="${KVSTASH_TSA_DIRS:-common/ store/ server/ client/ engines/ demo/ cli/ python/src/}"
python3 - "$ROOT" "$DB" "$TSA_DIRS" "$CLANGXX" "${FLAGS[@]}" > "$BUILD_DIR/thread_safety.cmds" <<'EOF'
import json, os, shlex, sys
root, db, dirs, clangxx, flags = sys.argv[1], sys.argv[2], tuple(sys.argv[3].split()), sys.argv[4], sys.argv[5:]
seen = set()
for e in json.load(open(db)):
    path = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
    if not path.startswith(dirs) or not path.endswith((".cc", ".cpp")) or path in seen:
        continue
    seen.add(path)
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    keep, it = [], iter(args[1:])
    for a in it:
        if a in ("-isystem", "-iquote", "-include", "-I", "-D", "-U"):
            keep += [a, next(it)]
        elif a.startswith(("-D", "-U", "-I", "-isystem", "-iquote", "-std=", "-m")) \
                or a == "-pthread":
            keep.append(a)
        elif a == "-o":
            next(it)
    source = os.path.join(e["directory"], e["file"])
    print(shlex.join([path, e["directory"], clangxx, *keep, *flags, source]))
EOF

n="$(wc -l < "$BUILD_DIR/thread_safety.cmds")"
[[ "$n" -gt 0 ]] || { echo "thread_safety: no translation units selected from $DB" >&2; exit 2; }
logs="$BUILD_DIR/thread_safety"
rm -rf "$logs" && mkdir -p "$logs"
start=$SECONDS
# Each line: the source path (for the log name), the directory to run in, the command.
# shellcheck disable=SC2016
xargs -P "$JOBS" -L 1 bash -c '
  path="$1"; dir="$2"; shift 2
  log="'"$logs"'/${path//\//_}.log"
  (cd "$dir" && "$@") > "$log" 2>&1 || echo "$path" >> "$log.failed"
' _ < "$BUILD_DIR/thread_safety.cmds"

failed=()
for f in "$logs"/*.failed; do
  [[ -e "$f" ]] && failed+=("$(cat "$f")")
done
findings="$(cat "$logs"/*.log | grep -E "warning:|error:" | grep -F "thread-safety" \
            | sort -u || true)"
count="$(grep -c . <<< "$findings" || true)"
echo "thread_safety: $n translation units in $((SECONDS - start))s with $CLANGXX" \
     "($(command "$CLANGXX" --version | head -1)), $count distinct findings," \
     "${#failed[@]} failed"
if [[ ${#failed[@]} -gt 0 ]]; then
  for p in "${failed[@]}"; do
    echo "---- $p"
    cat "$logs/${p//\//_}.log"
  done
  exit 1
fi
