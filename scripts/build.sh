#!/usr/bin/env bash
# Configure and build kvstash: the one build step shared by the test command
# (scripts/test.sh), the demo (scripts/demo.sh) and the container image
# (docker/Dockerfile).
#
# Usage: scripts/build.sh [TARGET...]      no target: everything (tests, benchmarks)
# Environment:
#   KVSTASH_BUILD_DIR   build folder. Default: build
#   KVSTASH_BUILD_TYPE  CMAKE_BUILD_TYPE. Default: RelWithDebInfo
#   KVSTASH_CUDA        ON / OFF: force CUDA kernels on or off. Default: ON when nvcc
#                       is found (CMakeLists.txt decides)
#   KVSTASH_JOBS        parallel jobs. Default: nproc
#   KVSTASH_CMAKE_ARGS  extra configure arguments (word-split)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${KVSTASH_BUILD_DIR:-build}"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
# ccache (when installed): paths relative to the clone so any clone folder hits.
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"

args=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${KVSTASH_BUILD_TYPE:-RelWithDebInfo}")
[[ -n "${KVSTASH_CUDA:-}" ]] && args+=(-DKVSTASH_CUDA="$KVSTASH_CUDA")
# shellcheck disable=SC2206
[[ -n "${KVSTASH_CMAKE_ARGS:-}" ]] && args+=($KVSTASH_CMAKE_ARGS)
cmake "${args[@]}"

targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
