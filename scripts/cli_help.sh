#!/usr/bin/env bash
# Prints the --help of the three tools and of every subcommand (default build/kvstash;
# kvstash-bench and kvstash-demo are taken from the same folder), for diffing the
# command line across a refactor: cli_help.sh OLD > a; cli_help.sh NEW > b; diff a b.
K="${1:-build/kvstash}"
B="$(dirname "$K")/kvstash-bench"
D="$(dirname "$K")/kvstash-demo"
"$K" --help
for c in "calibrate" "calibrate dckv" "calibrate spec" "generate" "get" "inspect" "keys" "lookup" "put" "stats"; do
  echo "=== kvstash $c"
  # shellcheck disable=SC2086
  "$K" $c --help
done
echo "=== kvstash-bench"
"$B" --help
for c in "codec" "entropy" "link" "prefill" "server" "state" "store" "trace"; do
  echo "=== kvstash-bench $c"
  "$B" "$c" --help
done
echo "=== kvstash-demo"
"$D" --help
