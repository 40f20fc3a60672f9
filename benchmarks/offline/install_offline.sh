#!/usr/bin/env bash
# Install the offline set on the H200 (no network there): bash install_offline.sh PARTS_DIR TARGET
#
# PARTS_DIR holds offline.sha256 and offline.tar.xz.partNN, copied there one part at a time
# (run_h200_engine.sh receive NN copies the carried .engine/partNN into PARTS_DIR). Checks every checksum, unpacks the
# filtered wheels (site/: vLLM, sglang-kernel, ... without their stripped files) into TARGET, installs the other
# wheels into TARGET with pip --no-index --no-deps, keeps shared libraries in TARGET/.libs and source packages in
# TARGET/.sdists, and prints the PYTHONPATH to use. Idempotent: a TARGET that already holds this archive's install is kept.
set -euo pipefail
parts=${1:?usage: install_offline.sh PARTS_DIR TARGET}
target=${2:?usage: install_offline.sh PARTS_DIR TARGET}
cd "$parts"
[[ -f offline.sha256 ]] || { echo "install_offline: $parts/offline.sha256 is missing" >&2; exit 2; }
want=$(awk '$2 == "offline.tar.xz" { print $1 }' offline.sha256)
if [[ -f $target/.offline.sha256 && $(cat "$target/.offline.sha256") == "$want" ]]; then
  echo "install_offline: $target already holds $want"
  exit 0
fi
grep -v ' offline.tar.xz$' offline.sha256 | sha256sum -c --quiet -
cat offline.tar.xz.part* > /tmp/offline.tar.xz
echo "$want  /tmp/offline.tar.xz" | sha256sum -c --quiet -
rm -rf "$target" /tmp/offline-unpacked && mkdir -p "$target" /tmp/offline-unpacked
tar -xJf /tmp/offline.tar.xz -C /tmp/offline-unpacked
if [[ -d /tmp/offline-unpacked/site ]]; then cp -a /tmp/offline-unpacked/site/. "$target/"; fi
if compgen -G "/tmp/offline-unpacked/wheels/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$target" \
    /tmp/offline-unpacked/wheels/*.whl 2>&1 | grep -v -i "warning" || true
fi
# Shared libraries from Debian packages (deb lines of offline_set.txt): TARGET/.libs, for LD_LIBRARY_PATH.
if [[ -d /tmp/offline-unpacked/libs ]]; then mkdir -p "$target/.libs" && cp -a /tmp/offline-unpacked/libs/. "$target/.libs/"; fi
# Source-only packages (sdist lines of offline_set.txt) are built on the device by their own script.
if [[ -d /tmp/offline-unpacked/sdists ]]; then mkdir -p "$target/.sdists" && cp -a /tmp/offline-unpacked/sdists/. "$target/.sdists/"; fi
echo "$want" > "$target/.offline.sha256"
rm -rf /tmp/offline.tar.xz /tmp/offline-unpacked
echo "install_offline: installed into $target; export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH}"
