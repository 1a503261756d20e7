#!/usr/bin/env bash
# The first command of README.md: kvstash end to end on this machine.
#   1. set-up of what the demo needs only (KVSTASH_SETUP_PROFILE=demo scripts/setup.sh:
#      the build packages, .venv, the SmolLM2 model file, llama.cpp; not the test
#      toolchain, vLLM or the aarch64 cross packages);
#   2. build kvstash-demo and kvstash-server in build/ (same configuration as scripts/test.sh,
#      so a later test run reuses it);
#   3. `kvstash-demo --start-server build/kvstash-server`: starts kvstash-server (RocksDB
#      under ./data, dashboard URL printed), runs the shared-prefix RAG workload on
#      SmolLM2-135M with llama.cpp as the engine (--engine reference: the embedded
#      runtime) for the raw (baseline), spec and dckv codecs: by default 2 documents x 3
#      requests per codec (--full: kvstash-demo's own 10 documents), prints the table
#      (also written to data/demo.json) and stops the server (--keep-server leaves it
#      running). However the demo ends (Ctrl-C, kill, a crash) the server it started
#      ends with it; a port or ./data held by another server is an error that names it.
# Usage: scripts/demo.sh [--full] [kvstash-demo options...]   (scripts/demo.sh --help for them)
# Time: about 6 minutes on a 2-core machine from a fresh clone whose package and
# compiler caches are warm (README.md gives the measured steps); --full about 5 times
# the demo step.
# Environment: KVSTASH_JOBS (parallel build jobs, default nproc).
# Exit code: kvstash-demo's (0 = every acceptance check held).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
t0=$(date +%s)
step() { printf '\n==== [%4ds] %s ====\n' "$(( $(date +%s) - t0 ))" "$*"; }

step "set-up (profile demo)"
KVSTASH_SETUP_PROFILE=demo scripts/setup.sh

step "build (build/: kvstash-demo, kvstash-server)"
KVSTASH_BUILD_DIR=build scripts/build.sh kvstash-demo kvstash-server

step "kvstash-demo"
# The table goes to data/demo.json unless the caller names its own --json FILE.
# The quick workload (2 documents) unless the caller asks for --full or sets --documents.
json=(--json data/demo.json)
workload=(--documents 2)
args=()
for arg in "$@"; do
  case "$arg" in
    --json|--json=*) json=() ;;
    --documents|--documents=*) workload=() ;;
    --full) workload=(); continue ;;
  esac
  args+=("$arg")
done
status=0
build/kvstash-demo --start-server build/kvstash-server --data-dir data "${json[@]}" "${workload[@]}" "${args[@]}" \
  || status=$?
step "done (exit status $status)"
exit "$status"
