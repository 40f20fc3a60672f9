#!/usr/bin/env bash
# On the H200 (no network): build TransformerEngine's torch extension from the sdist the megatron offline set
# carries, against the device's torch (2.11.0+cu130), and install it into the set's site folder.
#
#   bash benchmarks/megatron/build_te_torch.sh SITE [WHEEL_DIR]   # SITE: where install_offline.sh put the set
#
# With WHEEL_DIR holding a transformer_engine_torch wheel built earlier (a device build brought back), that wheel
# is installed instead of building again.
# The extension is C++ only (a torch CppExtension; the CUDA kernels ship in transformer-engine-cu13), so the
# build is quick (103 s with 16 jobs on an H200 machine). The wheel is left in /tmp/te-wheel (the folder is
# TE_BUILD_DIR, default /tmp) for the caller to bring back ($OUT), so that the next offline set carries it
# instead of the source. Idempotent: a SITE that already imports transformer_engine_torch is left alone.
# TE_BUILD_ONLY=1 builds the wheel and stops (a build started before the offline set is there: SITE then holds
# only the sdist under .sdists/ and the build's needs, nvidia-cudnn-frontend; run_h200_megatron.sh te-prebuild).
# Exit codes: 0 installed (or already there), 3 neither a prebuilt wheel nor the source archive, 4 the archive
# unpacked to no single source folder, 5 the build failed or left no wheel; each with a message on stderr.
set -euo pipefail
site=${1:?usage: build_te_torch.sh SITE}
export PYTHONPATH="$site:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G "$site/transformer_engine/wheel_lib/transformer_engine_torch*.so" > /dev/null; then
  echo "build_te_torch: $site already has the extension"; exit 0
fi
install_wheel() {  # pip --target skips a package folder that already exists (transformer_engine/): unzip instead
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$1" "$site"
}
# Globs through nullglob arrays, never `$(ls GLOB)`: under `set -o pipefail` a glob that matches nothing made
# `ls` fail inside `$(...)`, and `set -e` ended the script with exit 2 and no message (no prebuilt wheel was the
# normal case on a fresh machine, so the build never ran).
shopt -s nullglob
prebuilt=()
if [[ -n ${2:-} ]]; then
  [[ -d $2 ]] || echo "build_te_torch: no wheel folder $2; building from source"
  prebuilt=("$2"/transformer_engine_torch-*.whl)
fi
if (( ${#prebuilt[@]} > 0 )); then
  install_wheel "${prebuilt[0]}"; echo "build_te_torch: installed the prebuilt $(basename "${prebuilt[0]}")"; exit 0
fi
sdists=("$site"/.sdists/transformer_engine_torch-*.tar.gz)
if (( ${#sdists[@]} == 0 )); then
  echo "build_te_torch: no prebuilt wheel${2:+ in $2} and no source archive $site/.sdists/transformer_engine_torch-*.tar.gz" \
    "(is the megatron offline set installed in $site?)" >&2
  exit 3
fi
sdist=${sdists[0]}
echo "build_te_torch: building $(basename "$sdist")"
work=${TE_BUILD_DIR:-/tmp}  # the build folder, the wheel folder and the pip log go here
rm -rf "$work/te-build" "$work/te-wheel" && mkdir -p "$work/te-build" "$work/te-wheel"
tar xzf "$sdist" -C "$work/te-build"
srcs=("$work"/te-build/transformer_engine_torch-*/)
(( ${#srcs[@]} == 1 )) || { echo "build_te_torch: $(basename "$sdist") unpacked to ${#srcs[@]} source folders" >&2; exit 4; }
cd "${srcs[0]}"
start=$(date +%s)
# FORCE_BUILD: setup.py would first try to download a prebuilt wheel from GitHub (no network here).
rc=0
NVTE_PYTORCH_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-16} NVTE_CUDA_ARCHS=90 \
  python3 -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$work/te-wheel" . > "$work/te-build-pip.log" 2>&1 || rc=$?
grep -v -i warning "$work/te-build-pip.log" || true
wheels=("$work"/te-wheel/transformer_engine_torch-*.whl)
if (( rc != 0 || ${#wheels[@]} == 0 )); then
  echo "build_te_torch: pip wheel exited $rc and left ${#wheels[@]} wheel(s) in $work/te-wheel (log: $work/te-build-pip.log)" >&2
  exit 5
fi
wheel=${wheels[0]}
echo "build_te_torch: built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $(( $(date +%s) - start ))s"
if [[ ${TE_BUILD_ONLY:-0} == 1 ]]; then echo "build_te_torch: TE_BUILD_ONLY=1, $site left as it was"; exit 0; fi
install_wheel "$wheel"
python3 -c "import transformer_engine.pytorch as te; print('build_te_torch: transformer_engine', te.__version__ if hasattr(te, '__version__') else '', 'imports')"
