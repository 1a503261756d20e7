#!/usr/bin/env bash
# The x86-64 variants table of the determinism manifest (issue 21, docs/determinism.md):
# small decoder-only builds (cmake -DKVSTASH_DECODER_ONLY=ON: common, codec, model,
# model/rwkv7 and tests/determinism, no CUDA) with gcc and clang at -O0 and -O3, one
# with -march=x86-64-v4 (AVX-512: the compiler may vectorise the portable code with it),
# each run with the hand-written SIMD paths capped by KVSTASH_CPU_PATH (auto: the widest
# the CPU has, AMX / AVX-512 / AVX2; avx512: no AMX; avx2: no AVX-512; scalar; a cap
# above what the CPU has runs its widest path), 1 and 2 threads and several batch splits.
# Every row must equal tests/determinism/manifest.json; the table goes to stdout and to
# build-det/variants.md. Exit status 1 if any row differs.
#
# A build whose code generation needs an ISA extension (x86-64-v4: AVX-512 F/BW/CD/DQ/VL)
# is neither built nor run on a CPU that lacks it: its rows print
# "SKIPPED: <row> needs AVX-512 (this CPU: <model>, missing: <flags>)" and count as
# passed, so the same command passes on an AMD Zen 3 (AVX2 only) and a Zen 4.
#
# Usage: scripts/determinism_variants.sh [ROW_FILTER]   (a grep -E on the row's build name)
# Environment: KVSTASH_JOBS (parallel build jobs, default nproc).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
FILTER="${1:-.}"
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
OUTDIR=build-det
mkdir -p "$OUTDIR"

# CPU flags (/proc/cpuinfo) each ISA level a build targets needs; a build not listed
# needs nothing beyond x86-64.
declare -A needs_flags=(
  [gcc-O3-x86-64-v4]="avx512f avx512bw avx512cd avx512dq avx512vl"
)
declare -A needs_name=([gcc-O3-x86-64-v4]="AVX-512")
cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"
cpu_flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1) "
# Prints the flags build $1 needs that this CPU lacks (nothing: it can run here).
# KVSTASH_CPU_FLAGS (a space-separated flag list, non-empty) replaces the CPU's flags,
# to check this skip on a CPU that has them (the SKIPPED line still names this CPU's
# model).
missing_flags() {
  local f have="${KVSTASH_CPU_FLAGS:+ $KVSTASH_CPU_FLAGS }"
  have="${have:-$cpu_flags}"
  for f in ${needs_flags[$1]:-}; do
    [[ "$have" == *" $f "* ]] || printf '%s ' "$f"
  done
}

# build name | CC | CXX | CMAKE_BUILD_TYPE | extra CXX flags
builds=(
  "gcc-O0|gcc|g++|Debug|-O0"
  "gcc-O3|gcc|g++|Release|-O3"
  "gcc-O3-x86-64-v4|gcc|g++|Release|-O3 -march=x86-64-v4"
  "clang-O0|clang|clang++|Debug|-O0"
  "clang-O3|clang|clang++|Release|-O3"
)
# build name | KVSTASH_CPU_PATH | threads | splits ("-": one batch)
runs=(
  "gcc-O0|auto|1|-"
  "gcc-O0|scalar|2|1,33"
  "gcc-O3|auto|1|-"
  "gcc-O3|scalar|1|7,40"
  "gcc-O3|auto|2|1,2,3,57"
  "gcc-O3|avx2|2|1,33"
  "gcc-O3|avx512|1|-"
  "gcc-O3-x86-64-v4|scalar|1|-"
  "gcc-O3-x86-64-v4|auto|2|33"
  "clang-O0|auto|2|-"
  "clang-O3|auto|1|-"
  "clang-O3|scalar|2|1,33"
  "clang-O3|avx2|1|7,40"
  "clang-O3|avx512|2|-"
)

declare -A build_s skipped
for b in "${builds[@]}"; do
  IFS='|' read -r name cc cxx type flags <<<"$b"
  [[ "$name" =~ $FILTER ]] || continue
  lacking="$(missing_flags "$name")"
  if [[ -n "$lacking" ]]; then
    skipped[$name]="SKIPPED: $name needs ${needs_name[$name]} (this CPU: ${cpu_model:-unknown}, missing: ${lacking% })"
    echo "${skipped[$name]}"
    continue
  fi
  dir="$OUTDIR/$name"
  t0=$(date +%s)
  CC=$cc CXX=$cxx cmake -S . -B "$dir" -G Ninja -DKVSTASH_DECODER_ONLY=ON -DCMAKE_BUILD_TYPE="$type" \
    -DCMAKE_CXX_FLAGS_DEBUG="$flags" -DCMAKE_CXX_FLAGS_RELEASE="$flags" >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; exit 1; }
  cmake --build "$dir" -j "$JOBS" --target kvstash_determinism >"$dir.build.log" 2>&1 \
    || { tail -n 40 "$dir.build.log"; exit 1; }
  build_s[$name]=$(( $(date +%s) - t0 ))
  echo "built $name in ${build_s[$name]}s"
done

table="$OUTDIR/variants.md"
{
  echo "| build | KVSTASH_CPU_PATH | threads | splits | items | digest of all items | vs manifest | run s |"
  echo "|---|---|---|---|---|---|---|---|"
} >"$table"
fail=0
for r in "${runs[@]}"; do
  IFS='|' read -r name path threads splits <<<"$r"
  [[ "$name" =~ $FILTER ]] || continue
  if [[ -n "${skipped[$name]:-}" ]]; then
    echo "| $name | $path | $threads | $splits | - | - | ${skipped[$name]} | 0 |" >>"$table"
    continue
  fi
  args=(--threads "$threads" --json "$OUTDIR/$name-$path-$threads-$splits.json")
  [[ "$splits" != - ]] && args+=(--splits "$splits")
  t0=$(date +%s)
  set +e
  KVSTASH_CPU_PATH=$path "$OUTDIR/$name/tests/determinism/kvstash_determinism" "${args[@]}" \
    >"$OUTDIR/$name-$path-$threads-$splits.log" 2>&1
  rc=$?
  set -e
  secs=$(( $(date +%s) - t0 ))
  log="$OUTDIR/$name-$path-$threads-$splits.log"
  items=$(grep -c -E '^(ok|DIFFERS) ' "$log" || true)
  all=$(python3 -c 'import json,sys,hashlib; d=json.load(open(sys.argv[1]))["items"]; print(hashlib.sha256(json.dumps(d,sort_keys=True).encode()).hexdigest()[:16])' \
        "$OUTDIR/$name-$path-$threads-$splits.json" 2>/dev/null || echo "-")
  verdict="equal"
  if [[ $rc -ne 0 ]]; then
    verdict="DIFFERS: $(grep '^DIFFERS' "$log" | awk '{print $2}' | tr '\n' ' ')"
    [[ $rc -ne 1 ]] && verdict="FAILED (rc $rc): $(tail -n 1 "$log")"
    fail=1
  fi
  grep -q '^SKIPPED' "$log" && verdict="$verdict ($(grep '^SKIPPED' "$log" | cut -c1-40)...)"
  echo "| $name | $path | $threads | $splits | $items | $all | $verdict | $secs |" >>"$table"
done
cat "$table"
n_skipped=$(grep -c '| SKIPPED: ' "$table" || true)
if [[ $(($(wc -l <"$table") - 2)) -eq 0 ]]; then
  echo "determinism variants: no row matches '$FILTER' (rows: build names of this script)"
  exit 1
fi
[[ $fail -eq 0 ]] && echo "determinism variants: every row that ran equals the manifest ($n_skipped rows SKIPPED)" \
                  || echo "determinism variants: ROWS DIFFER (logs in $OUTDIR/)"
exit $fail
