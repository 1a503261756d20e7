#!/usr/bin/env bash
# Packs executables with the shared libraries they need into a folder that runs on a
# machine without kvstash's build packages: the container image's runtime stage
# (docker/Dockerfile) and a bare GPU machine (scripts/gpu_check.sh --bundle).
#
# Usage: scripts/bundle.sh DEST EXECUTABLE...
#   DEST/bin/   the executables (debug sections stripped)
#   DEST/lib/   every shared library they link except glibc's own (libc, libm, libdl,
#               libpthread, librt, the loader) and the CUDA driver (libcuda, which
#               comes with the machine's driver): run with LD_LIBRARY_PATH=DEST/lib.
# Errors: exits 1 when an executable is missing or a library does not resolve.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: scripts/bundle.sh DEST EXECUTABLE..." >&2; exit 2; }
DEST="$1"; shift
mkdir -p "$DEST/bin" "$DEST/lib"
for f in "$@"; do
  [[ -x "$f" ]] || { echo "bundle: $f is not an executable" >&2; exit 1; }
  cp "$f" "$DEST/bin/"
  strip --strip-debug "$DEST/bin/$(basename "$f")"
  if ldd "$f" | grep -q 'not found'; then
    echo "bundle: unresolved libraries of $f:" >&2; ldd "$f" | grep 'not found' >&2; exit 1
  fi
  ldd "$f" | awk '/=> \//{print $3}' \
    | grep -v -E '/lib(c|m|dl|pthread|rt|cuda|resolv)\.so|/ld-linux' \
    | xargs -r -I{} cp -L {} "$DEST/lib/"
done
du -sh "$DEST"
