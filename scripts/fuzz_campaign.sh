#!/usr/bin/env bash
# Fuzz campaign (not CI): runs libFuzzer targets under fuzz/ (ASan + UBSan builds in
# build-fuzz/) for a fixed number of executions each, one target at a time, on a
# campaign corpus kept in build-fuzz/campaign/<target> (seeded from fuzz/seeds/ and
# CI's build-fuzz/corpus/). Each run is appended to the results file, so a target's
# total can be reached over several sessions; `total_execs` per target is the sum.
# After a clean run the campaign corpus is merged into fuzz/seeds/<target>, which CI's
# short runs start from: the committed seeds stay, and a set cover of the edges they
# miss is added (libFuzzer -set_cover_merge=1 -use_counters=0: edges, not hit counts,
# so the seeds stay small: 384 KB for gguf after 10^8 executions).
# A finding stops the campaign: libFuzzer's crash-/leak-/timeout- file is kept in
# build-fuzz/campaign/findings/ and the run is recorded with "finding".
#
# Usage: scripts/fuzz_campaign.sh [EXECS [TARGET...]]
#   EXECS   executions per target per run. Default: 100000000 (10^8)
#   TARGET  e.g. frame_fuzz; default: every target, fastest first
# Environment: KVSTASH_FUZZ_JSON (default benchmarks/results/fuzz_campaign.json),
#   KVSTASH_JOBS (build parallelism), KVSTASH_FUZZ_NICE (default 19).
# Exit status: 0 when every run finished without a finding; 3 on a finding.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXECS="${1:-100000000}"
shift || true
[[ "$EXECS" =~ ^[1-9][0-9]*$ ]] || { echo "EXECS must be a positive integer, got '$EXECS'" >&2; exit 2; }
JSON="${KVSTASH_FUZZ_JSON:-benchmarks/results/fuzz_campaign.json}"
NICE="${KVSTASH_FUZZ_NICE:-19}"
JOBS="${KVSTASH_JOBS:-$(nproc)}"

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKVSTASH_FUZZ=ON -DKVSTASH_CUDA=OFF -DKVSTASH_BENCHMARKS=OFF >/dev/null
cmake --build build-fuzz -j "$JOBS" --target kvstash_fuzzers >/dev/null

# Fastest first (exec/s measured in CI's 60 s runs), so short sessions finish targets.
ORDER=(payload_fuzz llama_state_fuzz gguf_fuzz frame_fuzz dckv_artifact_fuzz spec_state_fuzz
       rans_fuzz rwkv_file_fuzz)
if (($#)); then TARGETS=("$@"); else TARGETS=("${ORDER[@]}"); fi
for t in "${TARGETS[@]}"; do
  [[ -x "build-fuzz/fuzz/$t" ]] || { echo "no fuzz target build-fuzz/fuzz/$t" >&2; exit 2; }
done

mkdir -p build-fuzz/campaign/findings "$(dirname "$JSON")"
rc=0
for t in "${TARGETS[@]}"; do
  corpus="build-fuzz/campaign/$t"
  mkdir -p "$corpus"
  inputs=("$corpus")
  [[ -d "fuzz/seeds/$t" ]] && inputs+=("fuzz/seeds/$t")
  [[ -d "build-fuzz/corpus/$t" ]] && inputs+=("build-fuzz/corpus/$t")
  log="build-fuzz/campaign/$t.log"
  echo "-- $t: $EXECS executions (log $log)"
  start=$(date +%s)
  status=0
  nice -n "$NICE" "build-fuzz/fuzz/$t" -runs="$EXECS" -print_final_stats=1 -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix=build-fuzz/campaign/findings/ "${inputs[@]}" \
      >"$log" 2>&1 || status=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  finding=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -n 1 | sed 's/Test unit written to //' || true)
  if ((status != 0)); then rc=3; fi
  if ((status == 0)); then
    # Inputs that add coverage to the committed seeds join them.
    mkdir -p "fuzz/seeds/$t"
    "build-fuzz/fuzz/$t" -set_cover_merge=1 -use_counters=0 "fuzz/seeds/$t" "${inputs[@]}" \
        >"build-fuzz/campaign/$t.merge.log" 2>&1
  fi
  .venv/bin/python - "$JSON" "$t" "$EXECS" "${execs:-0}" "$secs" "$status" "$finding" <<'PY'
import json, os, subprocess, sys, datetime
out, target, asked, execs, secs, status, finding = sys.argv[1:]
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
    "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "execs_asked": int(asked), "execs": int(execs), "seconds": int(secs),
    "execs_per_second": round(int(execs) / max(int(secs), 1)),
    "exit_status": int(status), "finding": finding or None,
    "machine_load_1m": round(os.getloadavg()[0], 2)})
entry["total_execs"] = sum(r["execs"] for r in entry["runs"])
entry["findings"] = [r["finding"] for r in entry["runs"] if r["finding"]]
if os.path.isdir(seeds):
    files = os.listdir(seeds)
    entry["seed_files"] = len(files)
    entry["seed_bytes"] = sum(os.path.getsize(os.path.join(seeds, f)) for f in files)
json.dump(d, open(out, "w"), indent=2)
open(out, "a").write("\n")
PY
  echo "$t: ${execs:-0} executions in ${secs}s, exit $status${finding:+, finding $finding}"
  ((status == 0)) || break
done
exit $rc
