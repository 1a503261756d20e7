#!/usr/bin/env bash
# The installed client works on its own (ctest install_check_test):
#   1. `cmake --install BUILD --component client` into a scratch prefix;
#   2. every header of client/include/kvstash/ and common/include/kvstash/ is installed,
#      and each installed header stands alone (public_headers_check.cmake);
#   3. tests/client/install_consumer, a project outside the tree, builds with
#      find_package(kvstash 0.1 COMPONENTS client) and again with pkg-config against that
#      prefix only, and both pass their checks against a real kvstash-server (version,
#      key test vectors, PUT/LOOKUP/GET/DELETE, cost model);
#   4. the library exports no Boost or fmt symbol.
# Usage: install_check.sh SOURCE_DIR BUILD_DIR WORK_DIR CXX SERVER_BIN
# Exit: 0 all pass; 1 a check failed.
set -euo pipefail
src=$1 build=$2 work=$3 cxx=$4 server=$5
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" --component client > "$work/install.log"
for h in "$src"/client/include/kvstash/*.h "$src"/common/include/kvstash/*.h; do
  if [[ ! -f $prefix/include/kvstash/$(basename "$h") ]]; then
    echo "install_check: $(basename "$h") is not installed" >&2
    exit 1
  fi
done
cmake -DKVSTASH_INCLUDE_DIR="$prefix/include" -DKVSTASH_CXX="$cxx" \
  -DKVSTASH_WORK_DIR="$work/headers" -P "$src/tests/client/public_headers_check.cmake"

cmake -S "$src/tests/client/install_consumer" -B "$work/consumer" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$work/consumer.log"
cmake --build "$work/consumer" >> "$work/consumer.log" || { cat "$work/consumer.log"; exit 1; }
# The same program through pkg-config, for builds without CMake.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
read -ra pc_flags <<< "$(pkg-config --cflags --libs kvstash)"
"$cxx" -o "$work/install_consumer_pc" "$src/tests/client/install_consumer/main.cc" \
  -DEXPECTED_VERSION="\"$(pkg-config --modversion kvstash)\"" "${pc_flags[@]}" \
  -Wl,-rpath,"$prefix/lib"
# Only kvstash's symbols are exported (client/exported.map): no Boost or fmt.
if nm -DC --defined-only "$prefix/lib/libkvstash_client.so" |
  grep -E '^[0-9a-f]+ [A-Za-z] ((typeinfo( name)?|vtable|guard variable) for )?(boost|fmt)::' | head -3 | grep .; then
  echo "install_check: libkvstash_client.so exports Boost or fmt symbols" >&2
  exit 1
fi

"$server" --port 0 --http-port 0 --ready-file "$work/ready.json" --log-level warn \
  --tenant t=secret --data-dir "$work/db" &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true' EXIT
port=
for _ in $(seq 300); do
  port=$(grep -so '"port": *[0-9]*' "$work/ready.json" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "install_check: kvstash-server exited" >&2; exit 1; }
  sleep 0.05
done
[[ -n $port ]] || { echo "install_check: kvstash-server did not start in 15 s" >&2; exit 1; }
for consumer in "$work/consumer/install_consumer" "$work/install_consumer_pc"; do
  echo "== $consumer"
  "$consumer" "127.0.0.1:$port" t secret "$src/tests/determinism/fixtures/spec-eval0.kvsp"
done
