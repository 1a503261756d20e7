#!/usr/bin/env bash
# The test command (README.md; .ci/run calls it). Runs set-up, then:
#   0. the link check (scripts/check_links.py, ~1 s of CPU): every relative Markdown link
#      and every repository path named in the tracked docs and comments resolves, and
#      nothing cites files outside the repository (docs/development.md); then the
#      format check (scripts/check_format.sh): lines changed since .ci/format-base follow
#      .clang-format, and ruff.toml's lint and format hold for Python;
#   1. configure + build (CUDA kernels too when nvcc exists) and run every ctest test;
#   1a. the CPU code as a CPU without AVX-512 runs it: the determinism manifest and the
#      common and codec unit tests under qemu-x86_64 -cpu EPYC-Milan-v1, an emulated AMD
#      Zen 3 (scripts/no_avx512_check.sh); skip with KVSTASH_SKIP_NO_AVX512=1;
#   1b. clang's -Wthread-safety over the library code as an error (scripts/thread_safety.sh:
#      build/compile_commands.json, syntax only; python/src/ after step 5 from a
#      configure-only build-python-tsa/); skip with KVSTASH_SKIP_TSA=1;
#   2. an AddressSanitizer + UBSan build of the unit tests (label "unit");
#   3. every libFuzzer target under fuzz/ for KVSTASH_FUZZ_SECONDS (default 20) each (a
#      smoke run: the 10^8-execution campaigns are scripts/fuzz_campaign.sh);
#   4. the Python tests of tools/ (pytest);
#   5. the kvstash Python package: pip install ./python into .venv (scikit-build-core +
#      nanobind, build folder build-python/, ccache), then its pytest suite python/tests
#      against the build/kvstash-server just built; with CUDA, the optional CUDA module
#      built as a wheel (build-python-cuda/) and its tests run without a device;
#   6. the vLLM connector tests (engines/vllm/tests, real vLLM in .venv-vllm, real
#      kvstash-server from build/): installs the kvstash package into .venv-vllm first;
#      before them the tests of tools/ that need torch (tools/tests_torch: the dckv
#      trainer tools/train_dckv.py for a few steps on short prompts, ~1 min of CPU);
#   6b. the determinism variants (docs/determinism.md): decoder-only builds clang -O3
#      and gcc -O3 -march=x86-64-v4 (the latter SKIPPED on a CPU without AVX-512), run
#      with forced SIMD paths, thread counts and batch splits against
#      tests/determinism/manifest.json (build-det/; KVSTASH_DETERMINISM_ROWS=. runs the
#      full table, gcc -O0/-O3 and clang -O0 too); then the aarch64 cross build
#      (build-aarch64/) run under qemu-user against the manifest, and its payloads
#      decoded on x86-64 (scripts/determinism_aarch64.sh); skip both with KVSTASH_SKIP_CROSS=1;
#   7. optional (KVSTASH_TSAN=1): the store and server integration tests under
#      ThreadSanitizer, the kvstash-server processes they start included (build-tsan/).
# Environment: KVSTASH_FUZZ_SECONDS, KVSTASH_SKIP_SANITIZE=1, KVSTASH_SKIP_FUZZ=1,
#   KVSTASH_SKIP_NO_AVX512=1,
#   KVSTASH_SKIP_PYTHON_CUDA=1 (the CUDA module's compile check), KVSTASH_SKIP_VLLM=1,
#   KVSTASH_VLLM_TIMEOUT_S (cap of the vLLM step, default 2400), KVSTASH_SKIP_CROSS=1,
#   KVSTASH_SKIP_TSA=1, KVSTASH_TSAN=1, KVSTASH_JOBS (parallel build jobs, default nproc),
#   CCACHE_MAXSIZE (default 5G).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
FUZZ_SECONDS="${KVSTASH_FUZZ_SECONDS:-20}"
step() { printf '\n==== %s (at %d s) ====\n' "$*" "$SECONDS"; }
# ccache (when installed): paths relative to the clone so any clone folder hits. One
# cold run of every build below filled 0.6 GB (2026-12-02).
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"

step "set-up"
scripts/setup.sh

step "link check (scripts/check_links.py)"
python3 scripts/check_links.py --self-test > /dev/null || { python3 scripts/check_links.py --self-test; exit 1; }
python3 scripts/check_links.py

step "format check (scripts/check_format.sh)"
scripts/check_format.sh

step "build (build/)"
KVSTASH_BUILD_DIR=build scripts/build.sh

step "tests (ctest)"
ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 1500

if [[ "${KVSTASH_SKIP_NO_AVX512:-0}" != 1 ]]; then
  step "CPU code on an emulated AMD Zen 3 without AVX-512 (scripts/no_avx512_check.sh)"
  scripts/no_avx512_check.sh build
fi

if [[ "${KVSTASH_SKIP_TSA:-0}" != 1 ]]; then
  step "clang -Wthread-safety (scripts/thread_safety.sh)"
  KVSTASH_BUILD_DIR=build KVSTASH_JOBS="$JOBS" scripts/thread_safety.sh
fi

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
KVSTASH_SERVER_BIN="$ROOT/build/kvstash-server" KVSTASH_FAULT_PROXY_BIN="$ROOT/build/kvstash_fault_proxy" .venv/bin/python -m pytest -q -rs python/tests
if [[ "${KVSTASH_SKIP_TSA:-0}" != 1 ]]; then
  # The module's own sources (python/src/) are not in build/: a configure-only folder
  # (build-python-tsa/, ~10 s) gives their compile commands, with nanobind's headers from
  # its pinned wheel (pip's build environment of the install above is gone by now).
  step "clang -Wthread-safety over python/src/ (build-python-tsa/)"
  nb_version="$(sed -n 's/.*"nanobind==\([0-9.]*\)".*/\1/p' python/pyproject.toml)"
  rm -rf build-python-tsa/nanobind-pkg
  .venv/bin/pip download -q --no-deps "nanobind==$nb_version" -d build-python-tsa/wheel
  .venv/bin/python -m zipfile -e "build-python-tsa/wheel/nanobind-$nb_version-py3-none-any.whl" \
      build-python-tsa/nanobind-pkg
  cmake -S . -B build-python-tsa -G Ninja -DKVSTASH_PYTHON_ONLY=ON -DPython_EXECUTABLE="$ROOT/.venv/bin/python" \
        -Dnanobind_ROOT="$ROOT/build-python-tsa/nanobind-pkg/nanobind/cmake" > build-python-tsa/configure.log
  KVSTASH_BUILD_DIR=build-python-tsa KVSTASH_TSA_DIRS="python/src/" KVSTASH_JOBS="$JOBS" scripts/thread_safety.sh
fi

# The optional CUDA module (python/src/cuda) must keep compiling: a wheel built in its own
# folder (build-python-cuda/, so the default install above stays incremental), unpacked
# and imported by the CUDA tests without a device (~1.5 min warm, ~7 min cold).
if [[ "${KVSTASH_SKIP_PYTHON_CUDA:-0}" != 1 ]] && grep -q '^KVSTASH_CUDA:BOOL=ON' build/CMakeCache.txt; then
  step "Python CUDA module (pip wheel -C cmake.define.KVSTASH_PYTHON_CUDA=ON, build-python-cuda/)"
  rm -rf build-python-cuda/wheel build-python-cuda/unpacked
  CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" .venv/bin/pip wheel -q --no-deps ./python -w build-python-cuda/wheel \
      -C cmake.define.KVSTASH_PYTHON_CUDA=ON -C build-dir=../build-python-cuda
  .venv/bin/python -m zipfile -e build-python-cuda/wheel/kvstash-*.whl build-python-cuda/unpacked
  PYTHONPATH="$ROOT/build-python-cuda/unpacked" .venv/bin/python -m pytest -q -rs -p no:cacheprovider \
      python/tests/test_cuda.py
fi

if [[ "${KVSTASH_SKIP_VLLM:-0}" != 1 && -x .venv-vllm/bin/python ]]; then
  step "vLLM connector tests (.venv-vllm)"
  CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" .venv-vllm/bin/uv pip install -q --python .venv-vllm/bin/python ./python
  # The torch case of the package tests (.venv keeps torch out; .venv-vllm has it).
  .venv-vllm/bin/python -m pytest -q -p no:cacheprovider python/tests/test_codec.py -k torch
  # The tools that need torch (the dckv trainer; skipped without models/smollm2-135m-hf).
  .venv-vllm/bin/python -m pytest -q -rs -p no:cacheprovider tools/tests_torch
  # Each engine reply has its own deadline (harness.Engine); the step as a whole is capped
  # too (SIGINT: pytest reports the test it was in), and the slowest tests are listed.
  KVSTASH_SERVER="$ROOT/build/kvstash-server" KVSTASH_FAULT_PROXY_BIN="$ROOT/build/kvstash_fault_proxy" \
  VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \
    timeout -s INT -k 60 "${KVSTASH_VLLM_TIMEOUT_S:-2400}" \
    .venv-vllm/bin/python -m pytest -q -p no:cacheprovider --durations=12 engines/vllm/tests
fi

if [[ "${KVSTASH_SKIP_CROSS:-0}" != 1 ]]; then
  # CI runs the rows of two builds: with build/'s gcc RelWithDebInfo (-O2, whose
  # manifest check is a ctest test, and its no-AVX-512 run above) they cover both
  # compilers, -O2 and -O3, AVX-512 code generation (on a CPU with AVX-512; SKIPPED
  # elsewhere), the scalar and AVX2 paths, 1 and 2 threads and batch splits. The -O0
  # builds add a third and fourth decoder build to a cold run and stay in the campaign
  # (KVSTASH_DETERMINISM_ROWS=. runs all five).
  rows="${KVSTASH_DETERMINISM_ROWS:-clang-O3|gcc-O3-x86-64-v4}"
  step "determinism variants on x86-64 (build-det/, rows: $rows)"
  KVSTASH_JOBS="$JOBS" scripts/determinism_variants.sh "$rows"
  step "determinism on aarch64 under qemu-user (build-aarch64/): both directions"
  KVSTASH_JOBS="$JOBS" scripts/determinism_aarch64.sh
fi

if [[ "${KVSTASH_TSAN:-0}" == 1 ]]; then
  step "store + server integration tests under ThreadSanitizer (build-tsan/)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSTASH_TSAN=ON \
        -DKVSTASH_CUDA=OFF -DKVSTASH_BENCHMARKS=OFF
  cmake --build build-tsan -j "$JOBS" --target store_integration_tests server_e2e_tests \
        server_loopback_tests kvstash-server
  # Every process (the tests and the servers they start) writes its reports to
  # build-tsan/tsan/<name>.<pid>; any report fails the step.
  rm -rf build-tsan/tsan && mkdir -p build-tsan/tsan
  # Left out: StoreCrash (SIGKILLed RocksDB-bound children, a time-bounded round count
  # too low at TSan's speed) and AThousandConcurrentConnections (1,000 HELLOs at TSan's
  # speed: some connections are closed, "End of file"). Measured: ~2.5 min of tests on
  # 2 loaded cores after a ~25 min build.
  export TSAN_OPTIONS="log_path=$ROOT/build-tsan/tsan/report second_deadlock_stack=1 history_size=4 suppressions=$ROOT/scripts/tsan.supp"
  for t in build-tsan/tests/store/store_integration_tests build-tsan/tests/server/server_e2e_tests \
           build-tsan/tests/server/server_loopback_tests; do
    echo "-- $t"
    "$t" --gtest_brief=1 --gtest_filter='-StoreCrash.*:LoopbackTest.AThousandConcurrentConnections'
  done
  unset TSAN_OPTIONS
  if compgen -G "build-tsan/tsan/report.*" >/dev/null; then
    cat build-tsan/tsan/report.*
    echo "ThreadSanitizer reported data races (above)"
    exit 1
  fi
  echo "ThreadSanitizer: no reports"
fi

step "all tests passed"
