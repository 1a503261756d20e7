#!/usr/bin/env bash
# Fuzz campaign (not CI): runs libFuzzer targets under fuzz/ (ASan + UBSan builds in
# build-fuzz/) for a fixed number of executions each, one target at a time, on a
# campaign corpus kept in build-fuzz/campaign/<target> (seeded from fuzz/seeds/ and
# CI's build-fuzz/corpus/). Each run is appended to the results file, so a target's
# total can be reached over several sessions; `total_execs` per target is the sum.
# After a run without a finding, fuzz/seeds/<target> (in the working tree: commit it)
# gets a set cover of the edges the committed seeds miss (libFuzzer -set_cover_merge=1
# -use_counters=0: edges, not hit counts, so the seeds stay small), which CI's short
# runs start from; a failed merge is recorded and does not lose the run.
# A run stopped early with SIGINT to the fuzzer (`pkill -INT -f build-fuzz/fuzz/<target>`, e.g.
# when a session must end; under -fork it must reach the workers, which that pattern does)
# is recorded with what it executed and "interrupted": true,
# its corpus merged, and the campaign stops (exit 4).
# A finding stops the campaign: libFuzzer's crash-/leak-/timeout- file is kept in
# build-fuzz/campaign/findings/ and the run is recorded with "finding".
#
# Usage: scripts/fuzz_campaign.sh [EXECS [TARGET...]]
#   EXECS   executions per target per run, 1 .. 10^12. Default: 100000000 (10^8)
#   TARGET  e.g. frame_fuzz (fuzz/<TARGET>.cc); default: every target, fastest first
# Environment: KVSTASH_FUZZ_JSON (default benchmarks/results/fuzz_campaign.json; a
#   relative path is relative to the repository root), KVSTASH_JOBS (build
#   parallelism), KVSTASH_FUZZ_NICE (default 19), KVSTASH_FUZZ_FORK (default 1: one
#   process; N > 1: libFuzzer's -fork=N, N worker processes on one target sharing its
#   corpus, so one slow target can use every core; timeouts and OOMs still count as
#   findings, -ignore_timeouts=0 -ignore_ooms=0).
# -timeout=10 is wall-clock: a campaign at nice 19 beside a build at nice 0 gets ~1.5% of
# a core, so work that is not per-input (fixtures, artifacts) belongs in the target's
# LLVMFuzzerInitialize, which no timeout covers.
# Exit status: 0 every run finished without a finding; 2 usage (bad EXECS, unknown
# target, unreadable results file, a target another campaign is running); 3 a finding;
# 4 a run interrupted (SIGINT);
# 1 a build or other failure. Campaigns on different targets may run at the same time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if (($# >= 1)); then EXECS="$1"; shift; else EXECS=100000000; fi
if [[ ! "$EXECS" =~ ^[1-9][0-9]{0,12}$ ]] || ((EXECS > 1000000000000)); then
  echo "EXECS must be an integer in 1 .. 10^12, got '$EXECS'" >&2; exit 2
fi
JSON="${KVSTASH_FUZZ_JSON:-benchmarks/results/fuzz_campaign.json}"
NICE="${KVSTASH_FUZZ_NICE:-19}"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
FORK="${KVSTASH_FUZZ_FORK:-1}"
if [[ ! "$FORK" =~ ^[1-9][0-9]?$ ]]; then
  echo "KVSTASH_FUZZ_FORK must be an integer in 1 .. 99, got '$FORK'" >&2; exit 2
fi
FORK_FLAGS=()
((FORK > 1)) && FORK_FLAGS=(-fork="$FORK" -ignore_timeouts=0 -ignore_ooms=0 -ignore_crashes=0)

# Fastest first (exec/s measured in this campaign at load 3-5), so short sessions
# finish targets.
ORDER=(meta_record_fuzz payload_fuzz llama_state_fuzz frame_fuzz gguf_fuzz dckv_artifact_fuzz
       dckv_payload_fuzz spec_state_fuzz rans_fuzz spec_kv_fuzz rwkv_file_fuzz)
if (($#)); then TARGETS=("$@"); else TARGETS=("${ORDER[@]}"); fi
for t in "${TARGETS[@]}"; do
  [[ "$t" =~ ^[a-z0-9_]+_fuzz$ && -f "fuzz/$t.cc" ]] || { echo "no fuzz target $t (fuzz/$t.cc)" >&2; exit 2; }
done
if [[ -e "$JSON" ]] && ! .venv/bin/python -c 'import json,sys; json.load(open(sys.argv[1]))["targets"]' "$JSON" 2>/dev/null; then
  echo "$JSON is not a fuzz campaign results file: fix or move it first" >&2; exit 2
fi
BUILD_TARGETS=()
for t in "${TARGETS[@]}"; do BUILD_TARGETS+=(--target "$t"); done
# The tree the binaries are built from (a dirty tree is recorded as such).
COMMIT="$(git rev-parse HEAD)"
DIRTY=0
git diff --quiet HEAD -- . ':!fuzz/seeds' ':!benchmarks/results' || DIRTY=1

# Several campaigns may run at once (one per core), on different targets: the build, each
# target's corpus and the results file are locked (flock), a target busy elsewhere is an error.
mkdir -p build-fuzz/campaign/findings "$(dirname "$JSON")"
for t in "${TARGETS[@]}"; do
  exec {lock}>"build-fuzz/campaign/$t.lock"
  flock -n "$lock" || { echo "another fuzz campaign is running $t" >&2; exit 2; }
done
(
  flock 9
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKVSTASH_FUZZ=ON -DKVSTASH_CUDA=OFF -DKVSTASH_BENCHMARKS=OFF >/dev/null
  cmake --build build-fuzz -j "$JOBS" "${BUILD_TARGETS[@]}" >/dev/null
) 9>build-fuzz/campaign/build.lock

rc=0
for t in "${TARGETS[@]}"; do
  corpus="build-fuzz/campaign/$t"
  mkdir -p "$corpus"
  inputs=("$corpus")
  [[ -d "fuzz/seeds/$t" ]] && inputs+=("fuzz/seeds/$t")
  [[ -d "build-fuzz/corpus/$t" ]] && inputs+=("build-fuzz/corpus/$t")
  log="build-fuzz/campaign/$t.log"
  echo "-- $t: $EXECS executions (log $log)"
  start=$(date +%s.%N)
  status=0
  nice -n "$NICE" "build-fuzz/fuzz/$t" -runs="$EXECS" -print_final_stats=1 -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix=build-fuzz/campaign/findings/ "${FORK_FLAGS[@]}" \
      "${inputs[@]}" >"$log" 2>&1 || status=$?
  secs=$(.venv/bin/python -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$start" "$(date +%s.%N)")
  if ((FORK > 1)); then
    # The parent sums its workers' executions: "INFO: fuzzed for N iterations" when the
    # count is reached, else its last status line "#N: cov: ...".
    execs=$(sed -n 's/^INFO: fuzzed for \([0-9]*\) iterations.*/\1/p' "$log" | tail -n 1)
    [[ -n "$execs" ]] || execs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$log" | tail -n 1)
  else
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  fi
  finding=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -n 1 | sed 's/Test unit written to //' || true)
  merge=skipped
  interrupted=0
  # libFuzzer's exit on SIGINT (-interrupted_exit_code, 72) with its final stats printed;
  # under -fork the parent exits 2 ("INFO: exiting: 2") after a worker reports the
  # interruption (checked with libFuzzer 14: SIGINT to the parent alone is ignored while
  # its workers run, so the pkill above must reach the workers too).
  if [[ -z "$finding" ]] && grep -q 'libFuzzer: run interrupted' "$log" &&
     { ((status == 72)) || { ((FORK > 1 && status == 2)) && grep -q '^INFO: exiting: 2' "$log"; }; }; then
    interrupted=1
  fi
  if ((status != 0 && !interrupted)); then
    rc=3
  else
    ((interrupted)) && rc=4
    mkdir -p "fuzz/seeds/$t"
    if "build-fuzz/fuzz/$t" -set_cover_merge=1 -use_counters=0 -rss_limit_mb=2048 "fuzz/seeds/$t" "${inputs[@]}" \
        >"build-fuzz/campaign/$t.merge.log" 2>&1; then
      merge=ok
    else
      merge="failed (build-fuzz/campaign/$t.merge.log)"
    fi
  fi
  flock build-fuzz/campaign/results.lock .venv/bin/python - "$JSON" "$t" "$EXECS" "${execs:-0}" "$secs" "$status" "$finding" "$COMMIT" "$DIRTY" "$merge" "$FORK" "$interrupted" <<'PY'
import datetime, json, os, sys
out, target, asked, execs, secs, status, finding, commit, dirty, merge, fork, interrupted = sys.argv[1:]
try:
    d = json.load(open(out))
except FileNotFoundError:
    d = {"command": "scripts/fuzz_campaign.sh [EXECS [TARGET...]]",
         "what": "libFuzzer (ASan + UBSan) executions per target; total_execs sums the runs",
         "targets": {}}
seeds = f"fuzz/seeds/{target}"
entry = d["targets"].setdefault(target, {"runs": []})
entry["runs"].append({
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "git_commit": commit, "git_dirty": dirty == "1",
    "execs_asked": int(asked), "execs": int(execs), "seconds": float(secs),
    "execs_per_second": round(int(execs) / max(float(secs), 0.1)),
    "exit_status": int(status), "finding": finding or None, "seed_merge": merge,
    "workers": int(fork), "interrupted": interrupted == "1",
    "machine_load_1m": round(os.getloadavg()[0], 2)})
entry["total_execs"] = sum(r["execs"] for r in entry["runs"])
# A run annotated by hand as a harness artefact ("finding_is_harness_timeout", with its
# note) keeps its file name in the run but is not a finding of the code under test.
entry["findings"] = [r["finding"] for r in entry["runs"]
                     if r["finding"] and not r.get("finding_is_harness_timeout")]
if os.path.isdir(seeds):
    files = os.listdir(seeds)
    entry["seed_files"] = len(files)
    entry["seed_bytes"] = sum(os.path.getsize(os.path.join(seeds, f)) for f in files)
with open(out + ".tmp", "w") as f:   # written whole, then renamed: never a half file
    json.dump(d, f, indent=2)
    f.write("\n")
os.replace(out + ".tmp", out)
PY
  echo "$t: ${execs:-0} executions in ${secs}s, exit $status${finding:+, finding $finding}$( ((interrupted)) && echo ', interrupted'), seed merge $merge"
  ((status == 0)) || break
done
exit $rc
