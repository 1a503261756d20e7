#!/usr/bin/env bash
# Builds and runs every GPU test (ctest label "gpu") and GPU benchmark in one go.
#
#   scripts/gpu_check.sh                 on a GPU machine with the project's set-up:
#                                        configure build-gpu/, build, run, report.
#   scripts/gpu_check.sh --bundle        on a machine WITHOUT a GPU (CI kind): build the
#                                        GPU test/bench binaries and pack them with the
#                                        shared libraries they need into .gpu-bundle/
#                                        (git-ignored) for a bare GPU machine that has no
#                                        package registry (the lent device machine).
#   scripts/gpu_check.sh --from-bundle   on that bare GPU machine: run .gpu-bundle/.
#
# Run mode also checks the Python CUDA path (python_gpu_checks): it installs the kvstash
# package WITH its CUDA module into .venv-vllm (uv pip install ./python -C
# cmake.define.KVSTASH_PYTHON_CUDA=ON), runs python/tests/test_cuda.py and
# engines/vllm/tests/test_cuda_layout.py on the device, then reinstalls the default
# CUDA-free package. It needs scripts/setup.sh's .venv-vllm and a torch that sees the
# GPU; the bundle modes cannot run it (the bare machine has no Python environment, and
# torch does not fit in a bundle), so there it is reported as not run.
#
# Logs go to $OUT (if set) or gpu-check-out/. Exit status is non-zero if any GPU test
# fails or no device is visible in the run modes.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODE="${1:-run}"
LOGDIR="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$LOGDIR"
BUNDLE="$ROOT/.gpu-bundle"

gpu_binaries() {  # test and benchmark executables that need a GPU
  find "$1" -maxdepth 4 -type f -perm -u+x \( -name '*gpu*tests' -o -name '*gpu*bench' \) | sort
}

run_binaries() {  # $1 = folder with binaries; runs tests then benches
  local fail=0
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$LOGDIR/device.txt"
  for t in $(gpu_binaries "$1" | grep 'tests$'); do
    echo "== $(basename "$t")"
    KVSTASH_SOURCE_DIR="$ROOT" "$t" --gtest_output="xml:$LOGDIR/$(basename "$t").xml" \
      2>&1 | tee "$LOGDIR/$(basename "$t").log" | tail -n 25
    [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
    if grep -q "SKIPPED: no CUDA device" "$LOGDIR/$(basename "$t").log"; then fail=1; fi
  done
  for b in $(gpu_binaries "$1" | grep 'bench$'); do
    echo "== $(basename "$b")"
    KVSTASH_SOURCE_DIR="$ROOT" "$b" --benchmark_out="$LOGDIR/$(basename "$b").json" \
      --benchmark_out_format=json 2>&1 | tee "$LOGDIR/$(basename "$b").log" | tail -n 30
  done
  # The determinism manifest (docs/determinism.md): every CPU item of this build, and
  # with --cuda the CUDA predictor (SpecPredictorCuda), spec decoder (DeviceSpecDecoder)
  # and dckv decoder (DeviceDckvDecoder) as cuda:<item>, each equal to the manifest's
  # <item>. Needs models/ (94 MB: more than the lent device machine's 64 MiB carry, so
  # --from-bundle there skips it, visibly).
  local det model="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  det=$(find "$1" -maxdepth 4 -type f -perm -u+x -name kvstash_determinism | head -n 1)
  if [[ -n "$det" && -f "$model" ]]; then
    echo "== kvstash_determinism --cuda (manifest tests/determinism/manifest.json)"
    "$det" --cuda --manifest "$ROOT/tests/determinism/manifest.json" --fixtures "$ROOT/tests/determinism/fixtures" \
      --model "$model" --splits 1,33 --json "$LOGDIR/determinism.json" 2>&1 | tee "$LOGDIR/determinism.log" | tail -n 30
    [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  else
    echo "SKIPPED kvstash_determinism --cuda: ${det:-no kvstash_determinism binary} / $model absent" \
      | tee "$LOGDIR/determinism.log"
  fi
  [[ $fail -eq 0 ]] && echo "gpu_check: all GPU tests passed" || echo "gpu_check: FAILURES"
  return $fail
}

python_gpu_checks() {  # run mode only: kvstash.cuda and the vLLM connector's CUDA class
  local py=.venv-vllm/bin/python
  if [[ ! -x "$py" ]] || ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "== python GPU checks: NOT RUN (needs scripts/setup.sh's .venv-vllm with a torch that sees the GPU)"
    return 0
  fi
  echo "== python GPU checks (kvstash built with KVSTASH_PYTHON_CUDA=ON into .venv-vllm)"
  local fail=0
  .venv-vllm/bin/uv pip install -q --python "$py" ./python -C cmake.define.KVSTASH_PYTHON_CUDA=ON || return 1
  KVSTASH_SERVER_BIN="$ROOT/build-gpu/kvstash-server" "$py" -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_cuda.py engines/vllm/tests/test_cuda_layout.py 2>&1 | tee "$LOGDIR/python_gpu.log" | tail -n 20
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  if grep -q "SKIPPED: no CUDA device\|SKIPPED: kvstash built without" "$LOGDIR/python_gpu.log"; then fail=1; fi
  .venv-vllm/bin/uv pip install -q --python "$py" ./python || fail=1  # back to the default package
  return $fail
}

case "$MODE" in
  run|--run)
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSTASH_CUDA=ON || exit 1
    cmake --build build-gpu -j "$(nproc)" || exit 1
    rc=0
    run_binaries build-gpu || rc=1
    python_gpu_checks || { rc=1; echo "gpu_check: python GPU checks FAILED"; }
    exit $rc
    ;;
  --bundle)
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSTASH_CUDA=ON || exit 1
    targets="$(cmake --build build-gpu --target help | grep -o -E '^[a-z0-9_]*gpu[a-z0-9_]*(tests|bench)' | sort -u) kvstash_determinism"
    cmake --build build-gpu -j "$(nproc)" --target $targets || exit 1
    rm -rf "$BUNDLE"
    # shellcheck disable=SC2046
    scripts/bundle.sh "$BUNDLE" $(gpu_binaries build-gpu) build-gpu/tests/determinism/kvstash_determinism || exit 1
    echo "bundle ready: run on the GPU machine with carry=[.gpu-bundle]: scripts/gpu_check.sh --from-bundle"
    ;;
  --from-bundle)
    [[ -d "$BUNDLE/bin" ]] || { echo "no .gpu-bundle/: run --bundle first" >&2; exit 1; }
    export LD_LIBRARY_PATH="$BUNDLE/lib:${LD_LIBRARY_PATH:-}"
    run_binaries "$BUNDLE/bin"
    rc=$?
    echo "== python GPU checks: NOT RUN in bundle mode (no Python environment; see the header)"
    exit $rc
    ;;
  *)
    echo "usage: scripts/gpu_check.sh [--bundle|--from-bundle]" >&2; exit 2 ;;
esac
