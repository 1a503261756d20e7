#!/usr/bin/env bash
# Prints `kvstash --help` and every subcommand's --help (default build/kvstash), for
# diffing the command line across a refactor: help.sh OLD > a; help.sh NEW > b; diff a b.
K="${1:-build/kvstash}"
"$K" --help
for c in "bench" "bench codec" "bench entropy" "bench prefill" "bench server" "bench state" "bench store" "calibrate" "calibrate dckv" "calibrate spec" "demo" "generate" "get" "inspect" "keys" "lookup" "put" "stats"; do
  echo "=== $c"
  # shellcheck disable=SC2086
  "$K" $c --help
done
