#!/usr/bin/env bash
# The first command of README.md: kvstash end to end on this machine.
#   1. set-up (scripts/setup.sh: Debian packages, .venv, the SmolLM2 model file);
#   2. build kvstash-demo and kvstash-server in build/ (same configuration as scripts/test.sh,
#      so a later test run reuses it);
#   3. `kvstash-demo --start-server build/kvstash-server`: starts kvstash-server (RocksDB
#      under ./data, dashboard URL printed), runs the shared-prefix RAG workload on
#      SmolLM2-135M with llama.cpp as the engine (--engine reference: the embedded
#      runtime) for the raw (baseline), spec and dckv codecs, prints the table
#      (also written to data/demo.json) and stops the server (--keep-server leaves it
#      running). However the demo ends (Ctrl-C, kill, a crash) the server it started
#      ends with it; a port or ./data held by another server is an error that names it.
# Usage: scripts/demo.sh [kvstash-demo options...]   (scripts/demo.sh --help for them)
# Environment: KVSTASH_JOBS (parallel build jobs, default nproc).
# Exit code: kvstash-demo's (0 = every acceptance check held).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
t0=$(date +%s)
step() { printf '\n==== [%4ds] %s ====\n' "$(( $(date +%s) - t0 ))" "$*"; }

step "set-up"
scripts/setup.sh

step "build (build/: kvstash-demo, kvstash-server)"
KVSTASH_BUILD_DIR=build scripts/build.sh kvstash-demo kvstash-server

step "kvstash-demo"
# The table goes to data/demo.json unless the caller names its own --json FILE.
json=(--json data/demo.json)
for arg in "$@"; do
  case "$arg" in --json|--json=*) json=() ;; esac
done
status=0
build/kvstash-demo --start-server build/kvstash-server --data-dir data "${json[@]}" "$@" || status=$?
step "done (exit status $status)"
exit "$status"
