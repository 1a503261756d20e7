#!/usr/bin/env bash
# Crash campaign (not CI): rounds of kill -9 of a real kvstash-server during a mixed
# PUT/GET/DELETE/PIN load with T0, T1 (RocksDB) and T2 (a real redis-server) on; after
# each restart every acknowledged PUT must be present and byte-exact, nothing
# unacknowledged half-visible, and no GET ever returns wrong bytes
# (tests/campaign/crash_campaign.cc says exactly what is counted).
#
# Usage: scripts/crash_campaign.sh [ROUNDS] [SECONDS]
#   ROUNDS   rounds to run. Default: 1000
#   SECONDS  stop starting new rounds after this long (0: no limit). Default: 0
# Environment: KVSTASH_BUILD_DIR (default build), KVSTASH_JOBS, KVSTASH_CRASH_SEED
# (default 1), KVSTASH_CRASH_JSON (default benchmarks/results/crash_campaign.json).
# Exit status: 0 when lost, half_visible and wrong_bytes are all 0; 3 otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${1:-1000}"
SECONDS_LIMIT="${2:-0}"
BUILD_DIR="${KVSTASH_BUILD_DIR:-build}"
JSON="${KVSTASH_CRASH_JSON:-benchmarks/results/crash_campaign.json}"
KVSTASH_BUILD_DIR="$BUILD_DIR" scripts/build.sh crash_campaign kvstash-server >/dev/null
mkdir -p "$(dirname "$JSON")"
rc=0
"$BUILD_DIR/tests/campaign/crash_campaign" --server-bin "$BUILD_DIR/kvstash-server" \
  --rounds "$ROUNDS" --seconds "$SECONDS_LIMIT" --seed "${KVSTASH_CRASH_SEED:-1}" \
  --json "$JSON.tmp" || rc=$?
[[ -f "$JSON.tmp" ]] || exit "$rc"
.venv/bin/python - "$JSON.tmp" "$JSON" "$ROUNDS" "$SECONDS_LIMIT" "${KVSTASH_CRASH_SEED:-1}" <<'PY'
import json, subprocess, sys
tmp, out, rounds, secs, seed = sys.argv[1:]
d = json.load(open(tmp))
d["command"] = (f"KVSTASH_CRASH_SEED={seed} nice -n 10 scripts/crash_campaign.sh {rounds} {secs}")
d["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()
json.dump(d, open(out, "w"), indent=2)
open(out, "a").write("\n")
PY
rm -f "$JSON.tmp"
echo "crash campaign: results in $JSON"
exit $rc
