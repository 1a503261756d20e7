#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer over the integration tests of the store,
# the server (the kvstash-server processes they start are ASan builds too), the CLI
# against a server, and the hybrid server (not CI: CI runs the unit label under ASan;
# this is the campaign issue 19 asks for). Builds in build-asan/ (Debug,
# -fsanitize=address,undefined -fno-sanitize-recover=all, as scripts/test.sh's step 2),
# runs each binary with every process's reports going to build-asan/asan/<name>.<pid>,
# and writes the counts to the results file. Exit status 0 when every test passed and
# no process reported; 3 otherwise (a failed test, a binary that died without its gtest
# report, e.g. a sanitizer abort, or any report); 1 when the build fails.
# LeakSanitizer runs in a process only when it exits normally: the tests' own processes
# and the servers they stop with SIGTERM; the servers their fixtures SIGKILL (most of
# them: crashes are what those tests exercise) are checked for memory errors, not leaks.
#
# Usage: scripts/asan_integration.sh
# Environment: KVSTASH_JOBS (build parallelism, default nproc), KVSTASH_ASAN_JSON
#   (default benchmarks/results/asan_integration.json).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${KVSTASH_JOBS:-$(nproc)}"
JSON="${KVSTASH_ASAN_JSON:-benchmarks/results/asan_integration.json}"
BINARIES=(tests/store/store_integration_tests tests/server/server_e2e_tests tests/server/server_loopback_tests
          tests/server/server_cli_tests tests/model/hybrid/hybrid_server_e2e_tests)
targets=(kvstash-server kvstash kvstash-bench)
for b in "${BINARIES[@]}"; do targets+=("$(basename "$b")"); done

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVSTASH_SANITIZE=ON \
      -DKVSTASH_CUDA=OFF -DKVSTASH_BENCHMARKS=OFF >/dev/null
commit="$(git rev-parse HEAD)"   # the tree the build compiles
t0=$(date +%s)
cmake --build build-asan -j "$JOBS" --target "${targets[@]}" >build-asan/asan_integration.build.log 2>&1 \
  || { tail -n 40 build-asan/asan_integration.build.log; exit 1; }
build_s=$(( $(date +%s) - t0 ))
rm -rf build-asan/asan && mkdir -p build-asan/asan
# log_path: the tests and every server they start report into build-asan/asan/.
export ASAN_OPTIONS="detect_leaks=1:log_path=$ROOT/build-asan/asan/report"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$ROOT/build-asan/asan/report"
rows=()
rc=0
for b in "${BINARIES[@]}"; do
  name="$(basename "$b")"
  echo "-- $name"
  t1=$(date +%s)
  status=0
  "build-asan/$b" --gtest_brief=1 --gtest_output="json:build-asan/asan/$name.json" \
    >"build-asan/asan/$name.log" 2>&1 || status=$?
  tail -n 3 "build-asan/asan/$name.log"
  ((status == 0)) || rc=3
  rows+=("$name|$status|$(( $(date +%s) - t1 ))")
done
unset ASAN_OPTIONS UBSAN_OPTIONS
reports=$(find build-asan/asan -name 'report.*' | wc -l)
if ((reports > 0)); then
  rc=3
  head -n 60 build-asan/asan/report.*
fi
.venv/bin/python - "$JSON" "$commit" "$build_s" "$reports" "${rows[@]}" <<'PY'
import json, os, sys
out, commit, build_s, reports, *rows = sys.argv[1:]
runs = {}
for r in rows:
    name, status, secs = r.split("|")
    try:
        g = json.load(open(f"build-asan/asan/{name}.json"))
    except (OSError, ValueError):   # died before gtest wrote its report (a sanitizer abort)
        runs[name] = {"tests": None, "failures": None, "exit_status": int(status), "wall_s": int(secs),
                      "failed": [f"no gtest report: the binary died (log build-asan/asan/{name}.log)"]}
        continue
    cases = [t for s in g["testsuites"] for t in s["testsuite"]]
    failed = [f"{t['classname']}.{t['name']}" for t in cases if t.get("failures")]
    skipped = [f"{t['classname']}.{t['name']}" for t in cases if t.get("result") == "SKIPPED"]
    runs[name] = {"tests": g["tests"], "failures": g["failures"], "errors": g.get("errors", 0),
                  "disabled": g.get("disabled", 0), "skipped": skipped,
                  "exit_status": int(status), "wall_s": int(secs), "failed": failed}
d = {"campaign": "ASan + UBSan over the store, server, CLI and hybrid-server integration tests "
                 "(gcc Debug, -fsanitize=address,undefined -fno-sanitize-recover=all; the kvstash-server "
                 "processes they start are the same ASan build)",
     "command": "scripts/asan_integration.sh",
     "git_commit": commit,
     "build_s": int(build_s), "machine_load_1m": round(os.getloadavg()[0], 2),
     "sanitizer_reports": int(reports), "runs": runs,
     "leak_checks": "only processes that exit normally (the tests, SIGTERMed servers); SIGKILLed servers "
                    "are checked for memory errors only",
     "clean": int(reports) == 0 and all(r["failures"] == 0 and r["exit_status"] == 0 and not r["failed"]
                                        for r in runs.values())}
with open(out + ".tmp", "w") as f:
    json.dump(d, f, indent=2)
    f.write("\n")
os.replace(out + ".tmp", out)
PY
echo "asan integration: $reports sanitizer reports; results in $JSON"
exit $rc
