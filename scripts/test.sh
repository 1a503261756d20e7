#!/usr/bin/env bash
# The test command (README.md; .ci/run calls it). Runs set-up, then:
#   1. configure + build (CUDA kernels too when nvcc exists) and run every ctest test;
#   2. an AddressSanitizer + UBSan build of the unit tests (label "unit");
#   3. every libFuzzer target under fuzz/ for KVSTASH_FUZZ_SECONDS (default 60) each;
#   4. the Python tests of tools/ (pytest);
#   5. the kvstash Python package: pip install ./python into .venv (scikit-build-core +
#      nanobind, build folder build-python/, ccache), then its pytest suite python/tests
#      against the build/kvstash-server just built;
#   6. the vLLM connector tests (engines/vllm/tests, real vLLM in .venv-vllm, real
#      kvstash-server from build/): installs the kvstash package into .venv-vllm first.
# Environment: KVSTASH_FUZZ_SECONDS, KVSTASH_SKIP_SANITIZE=1, KVSTASH_SKIP_FUZZ=1,
# KVSTASH_SKIP_VLLM=1,
# KVSTASH_JOBS (parallel build jobs, default nproc).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
FUZZ_SECONDS="${KVSTASH_FUZZ_SECONDS:-60}"
step() { printf '\n==== %s ====\n' "$*"; }
# ccache (when installed): paths relative to the clone so any clone folder hits.
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"

step "set-up"
scripts/setup.sh

step "build (build/)"
KVSTASH_BUILD_DIR=build scripts/build.sh

step "tests (ctest)"
ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 1500

if [[ "${KVSTASH_SKIP_SANITIZE:-0}" != 1 ]]; then
  step "unit tests under ASan + UBSan (build-asan/)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVSTASH_SANITIZE=ON \
        -DKVSTASH_CUDA=OFF -DKVSTASH_BENCHMARKS=OFF
  cmake --build build-asan -j "$JOBS" --target kvstash_unit_tests
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -L unit --output-on-failure -j "$JOBS" --timeout 1500
fi

if [[ "${KVSTASH_SKIP_FUZZ:-0}" != 1 ]]; then
  step "fuzz targets, ${FUZZ_SECONDS}s each (build-fuzz/)"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKVSTASH_FUZZ=ON -DKVSTASH_CUDA=OFF -DKVSTASH_BENCHMARKS=OFF
  cmake --build build-fuzz -j "$JOBS" --target kvstash_fuzzers
  for f in build-fuzz/fuzz/*_fuzz; do
    name="$(basename "$f")"
    corpus="build-fuzz/corpus/$name"
    mkdir -p "$corpus"
    seeds=(); [[ -d "fuzz/seeds/$name" ]] && seeds=("fuzz/seeds/$name")
    echo "-- $name"
    "$f" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout=10 \
         -rss_limit_mb=2048 "$corpus" "${seeds[@]}" 2>&1 | tail -n 12
    echo "$name: no findings in ${FUZZ_SECONDS}s"
  done
fi

step "Python tests (tools/)"
.venv/bin/python -m pytest -q tools/tests

step "Python package (pip install ./python, python/tests)"
CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" .venv/bin/pip install -q ./python
KVSTASH_SERVER_BIN="$ROOT/build/kvstash-server" .venv/bin/python -m pytest -q -rs python/tests

if [[ "${KVSTASH_SKIP_VLLM:-0}" != 1 && -x .venv-vllm/bin/python ]]; then
  step "vLLM connector tests (.venv-vllm)"
  CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" .venv-vllm/bin/uv pip install -q --python .venv-vllm/bin/python ./python
  KVSTASH_SERVER="$ROOT/build/kvstash-server" VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \
    .venv-vllm/bin/python -m pytest -q -p no:cacheprovider engines/vllm/tests
fi

step "all tests passed"
