#!/usr/bin/env bash
# Fault campaign (not CI): faults injected into a real kvstash-server under a mixed
# PUT/GET/LOOKUP load: T1 on a tmpfs filled to the brim (then restarts on the full and
# on a grown filesystem), T1's filesystem remounted read-only after a kill -9 (then
# read-write again), Redis (T2) killed and restarted, garbage and trickling
# clients, SIGTERM during load (5 rounds). Counts requests, ok, errors, misses, wrong
# and lost per phase (tests/campaign/fault_campaign.cc says exactly what is counted);
# wrong and lost must be 0. Needs root for the tmpfs mounts (full_disk and read_only_filesystem are skipped,
# with the reason in the JSON, otherwise) and redis-server.
#
# Usage: scripts/fault_campaign.sh [SECONDS]
#   SECONDS  load per phase. Default: 6
# Environment: KVSTASH_BUILD_DIR (default build), KVSTASH_FAULT_JSON (default
# benchmarks/results/fault_campaign.json).
# Exit status: 0 when every wrong and lost count is 0; 3 otherwise; 1 when a scenario
# could not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECS="${1:-6}"
BUILD_DIR="${KVSTASH_BUILD_DIR:-build}"
JSON="${KVSTASH_FAULT_JSON:-benchmarks/results/fault_campaign.json}"
KVSTASH_BUILD_DIR="$BUILD_DIR" scripts/build.sh fault_campaign kvstash-server >/dev/null
mkdir -p "$(dirname "$JSON")"
rc=0
"$BUILD_DIR/tests/campaign/fault_campaign" --server-bin "$BUILD_DIR/kvstash-server" --seconds "$SECS" \
  --work-dir "$(mktemp -d /tmp/kvstash-fault-XXXXXX)" --json "$JSON.tmp" >/dev/null || rc=$?
[[ -f "$JSON.tmp" ]] || exit "$rc"
.venv/bin/python - "$JSON.tmp" "$JSON" "$SECS" <<'PY'
import json, os, subprocess, sys
tmp, out, secs = sys.argv[1:]
d = json.load(open(tmp))
d["command"] = f"scripts/fault_campaign.sh {secs}"
d["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
d["machine_load_1m"] = os.getloadavg()[0]
json.dump(d, open(out, "w"), indent=2)
open(out, "a").write("\n")
PY
rm -f "$JSON.tmp"
echo "fault campaign: results in $JSON (clean: $(.venv/bin/python -c "import json;print(json.load(open('$JSON'))['clean'])"))"
exit $rc
