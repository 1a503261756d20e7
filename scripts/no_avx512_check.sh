#!/usr/bin/env bash
# Runs kvstash's CPU code as a CPU without AVX-512 runs it, on any x86-64 machine: test
# binaries of an existing build under qemu-x86_64 (Debian's qemu-user) with the CPU model
# EPYC-Milan-v1, an AMD Zen 3: x86-64-v3 (AVX2, FMA, BMI2, F16C), no AVX-512, VNNI or
# AMX. The emulated CPUID is what the run-time ISA dispatch (common/cpu_path.h,
# __builtin_cpu_supports) sees, so the binaries take the paths a Zen 3 takes; and qemu's
# TCG implements no AVX-512 instruction at all, so any AVX-512 code that slipped into
# them (a -march flag, an unguarded intrinsic) dies with SIGILL here as it would there.
#
# What runs (each must pass):
#   - kvstash_determinism against tests/determinism/manifest.json with the SIMD paths as
#     dispatched (AVX2: spec int8 GEMM and predictor, rANS decoder, dckv synthesis,
#     checksums; docs/determinism.md) at 2 threads: every AVX2 kernel's output on the
#     manifest's real inputs;
#   - the unit tests of common/ and codec/ (checksums, rANS and its frequency tables,
#     with their AVX2-vs-scalar equality tests).
# Left to the native ctest run, as too slow under emulation (measured here: 230 s for
# the scalar manifest row, 242 s for dckv_tests, against 131 s for the row above): the
# scalar path (CPU-independent) and the AVX2 equality unit tests of dckv synthesis and
# the spec GEMM/predictor, whose kernels the manifest row runs. Prints one line per
# binary and "no-AVX-512 check: N passed, 0 failed".
#
# Usage: scripts/no_avx512_check.sh [BUILD_DIR]     (default: build)
# Environment: KVSTASH_QEMU_CPU (default EPYC-Milan-v1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${1:-build}"
CPU="${KVSTASH_QEMU_CPU:-EPYC-Milan-v1}"
if [[ "$(uname -m)" != x86_64 ]]; then
  echo "SKIPPED: no-AVX-512 check needs an x86-64 host (this is $(uname -m))"
  exit 0
fi
QEMU="$(command -v qemu-x86_64 || true)"
[[ -n "$QEMU" ]] || { echo "qemu-x86_64 not found: scripts/setup.sh installs qemu-user" >&2; exit 1; }

# The emulated CPU must really lack AVX-512 and have AVX2, or this proves nothing.
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf '%s\n' '#include <stdio.h>' \
  'int main(void) { __builtin_cpu_init();' \
  '  printf("%d %d\n", __builtin_cpu_supports("avx2") != 0, __builtin_cpu_supports("avx512f") != 0); }' \
  >"$probe_dir/probe.c"
cc -O1 "$probe_dir/probe.c" -o "$probe_dir/probe"
probe="$("$QEMU" -cpu "$CPU" "$probe_dir/probe" 2>/dev/null || true)"
read -r avx2 avx512 <<<"${probe:-? ?}"
if [[ "$avx2" != 1 || "$avx512" != 0 ]]; then
  echo "qemu CPU $CPU reports avx2=$avx2 avx512f=$avx512: not an AVX2-only CPU" >&2
  exit 1
fi
echo "emulated CPU: $CPU (avx2=1, avx512f=0)"

passed=0 failed=0
# run NAME COMMAND...: one result line; the log goes to $BUILD_DIR/no-avx512/NAME.log.
mkdir -p "$BUILD_DIR/no-avx512"
run() {
  local name="$1" log="$BUILD_DIR/no-avx512/$1.log" t0=$SECONDS rc=0
  shift
  "$QEMU" -cpu "$CPU" "$@" >"$log" 2>&1 || rc=$?
  if [[ $rc -eq 0 ]]; then
    passed=$((passed + 1))
    echo "ok     $name ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1))
    echo "FAILED $name (rc $rc$([[ $rc -eq 132 ]] && echo ': SIGILL'), $((SECONDS - t0)) s; log $log):"
    grep -v '^qemu-x86_64: warning' "$log" | tail -n 15
  fi
}
det="$BUILD_DIR/tests/determinism/kvstash_determinism"
[[ -x "$det" ]] || { echo "$det not built (scripts/build.sh)" >&2; exit 1; }
# (The variable is set for qemu itself: qemu-user does not follow an exec into env.)
KVSTASH_CPU_PATH=auto run determinism "$det" --threads 2
for t in common/common_tests codec/entropy/codec_tests; do
  bin="$BUILD_DIR/tests/$t"
  [[ -x "$bin" ]] || { echo "$bin not built (scripts/build.sh)" >&2; exit 1; }
  run "$(basename "$t")" "$bin" --gtest_brief=1
done
echo "no-AVX-512 check: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
