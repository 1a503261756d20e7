#!/usr/bin/env bash
# The determinism manifest on aarch64 (issue 21, docs/determinism.md): a cross build of
# the decoder libraries and the tool (cmake -DKVSTASH_DECODER_ONLY=ON with
# scripts/aarch64-toolchain.cmake), run under qemu-aarch64; scripts/test.sh runs it
# (skip with KVSTASH_SKIP_CROSS=1). scripts/setup.sh installs the packages (multiarch
# arm64 -dev packages, g++-aarch64-linux-gnu, qemu-user; KVSTASH_SETUP_CROSS=0 skips).
# Steps:
#   1. on aarch64: every manifest item, the x86-64-encoded payload and state fixtures
#      decoded there; the payloads and states it encodes again are emitted;
#   2. on x86-64 (this build's tool): the manifest again with the aarch64-encoded
#      payloads and states as the fixtures, i.e. aarch64 -> x86-64 decodes.
# Both must equal tests/determinism/manifest.json. aarch64 has no SIMD kernel of its
# own (the portable code is compiled; no NEON path exists), so there is nothing else
# to compare there.
#
# Usage: scripts/determinism_aarch64.sh
# Environment: KVSTASH_JOBS (default nproc); KVSTASH_DET_X86_TOOL (default the first of
# build/ and build-det/gcc-O3/ that has tests/determinism/kvstash_determinism);
# KVSTASH_AARCH64_PROMPTS (default all: the emulated run checks only the first N
# evaluation prompts' items, the tool's --prompts; measured 3.5 min for all 19 items at
# one thread on a loaded 2-core machine, so CI checks all).
# The emulated run uses one thread and the batch splits 1,33 (threads are checked on
# x86-64, where they are cheap).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
DIR=build-aarch64
SYSROOT=/usr/aarch64-linux-gnu
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "$tool missing: run scripts/setup.sh" >&2; exit 1; }
done

mkdir -p "$DIR"
t0=$(date +%s)
cmake -S . -B "$DIR" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$ROOT/scripts/aarch64-toolchain.cmake" \
  -DKVSTASH_DECODER_ONLY=ON -DCMAKE_BUILD_TYPE=Release >"$DIR/configure.log" 2>&1 \
  || { cat "$DIR/configure.log"; exit 1; }
cmake --build "$DIR" -j "$JOBS" --target kvstash_determinism >"$DIR/build.log" 2>&1 \
  || { tail -n 40 "$DIR/build.log"; exit 1; }
echo "built $DIR (aarch64) in $(( $(date +%s) - t0 ))s"
readelf -h "$DIR/tests/determinism/kvstash_determinism" | grep -q AArch64 \
  || { echo "$DIR/tests/determinism/kvstash_determinism is not an aarch64 binary" >&2; exit 1; }

emitted="$DIR/emitted"
rm -rf "$emitted" && mkdir -p "$emitted"
t0=$(date +%s)
echo "-- aarch64 (qemu-aarch64): manifest, x86-64-encoded fixtures"
# OPENBLAS_NUM_THREADS=1: arm64 OpenBLAS's thread pool start-up spins forever under
# qemu-user (measured: a hello-world linked with -lopenblas never reaches main); the
# decoder does not use BLAS threads anyway.
subset=(); [[ -n "${KVSTASH_AARCH64_PROMPTS:-}" ]] && subset=(--prompts "$KVSTASH_AARCH64_PROMPTS")
OPENBLAS_NUM_THREADS=1 qemu-aarch64 -L "$SYSROOT" "$DIR/tests/determinism/kvstash_determinism" --threads 1 \
  --splits 1,33 --emit "$emitted" "${subset[@]}" | tee "$DIR/run.log"
echo "aarch64 run: $(( $(date +%s) - t0 ))s"

x86="${KVSTASH_DET_X86_TOOL:-}"
if [[ -z "$x86" ]]; then
  for c in build/tests/determinism/kvstash_determinism build-det/gcc-O3/tests/determinism/kvstash_determinism; do
    [[ -x "$c" ]] && { x86="$c"; break; }
  done
fi
[[ -n "$x86" ]] || { echo "no x86-64 kvstash_determinism built (scripts/build.sh kvstash_determinism)" >&2; exit 1; }
cp tests/determinism/fixtures/spec.kvsa tests/determinism/fixtures/rwkv7.kvss "$emitted/"
echo "-- x86-64 ($x86): manifest, aarch64-encoded payloads and states"
"$x86" --fixtures "$emitted" "${subset[@]}" | tee "$DIR/x86.log"
echo "determinism aarch64: both directions equal the manifest"
