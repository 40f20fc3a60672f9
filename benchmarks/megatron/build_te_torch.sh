#!/usr/bin/env bash
# On the H200 (no network): build TransformerEngine's torch extension from the sdist the megatron offline set
# carries, against the device's torch (2.11.0+cu130), and install it into the set's site folder.
#
#   bash benchmarks/megatron/build_te_torch.sh SITE [WHEEL_DIR]   # SITE: where install_offline.sh put the set
#
# With WHEEL_DIR holding a transformer_engine_torch wheel built earlier (a device build brought back), that wheel
# is installed instead of building again.
# The extension is C++ only (a torch CppExtension; the CUDA kernels ship in transformer-engine-cu13), so the
# build is quick (103 s with 16 jobs, shared/engine notes). The wheel is left in /tmp/te-wheel for the caller to
# bring back ($OUT), so that the next offline set carries it instead of the source. Idempotent: a SITE that
# already imports transformer_engine_torch is left alone.
set -euo pipefail
site=${1:?usage: build_te_torch.sh SITE}
export PYTHONPATH="$site:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G "$site/transformer_engine/wheel_lib/transformer_engine_torch*.so" > /dev/null; then
  echo "build_te_torch: $site already has the extension"; exit 0
fi
install_wheel() {  # pip --target skips a package folder that already exists (transformer_engine/): unzip instead
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$1" "$site"
}
prebuilt=$(ls "${2:-/nonexistent}"/transformer_engine_torch-*.whl 2> /dev/null | head -n 1)
if [[ -n $prebuilt ]]; then
  install_wheel "$prebuilt"; echo "build_te_torch: installed the prebuilt $(basename "$prebuilt")"; exit 0
fi
sdist=$(ls "$site"/.sdists/transformer_engine_torch-*.tar.gz)
rm -rf /tmp/te-build /tmp/te-wheel && mkdir -p /tmp/te-build /tmp/te-wheel
tar xzf "$sdist" -C /tmp/te-build
cd /tmp/te-build/transformer_engine_torch-*
start=$(date +%s)
# FORCE_BUILD: setup.py would first try to download a prebuilt wheel from GitHub (no network here).
NVTE_PYTORCH_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-16} NVTE_CUDA_ARCHS=90 \
  python3 -m pip wheel -q --no-deps --no-build-isolation --no-index -w /tmp/te-wheel . 2>&1 | grep -v -i warning || true
wheel=$(ls /tmp/te-wheel/transformer_engine_torch-*.whl)
echo "build_te_torch: built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $(( $(date +%s) - start ))s"
install_wheel "$wheel"
python3 -c "import transformer_engine.pytorch as te; print('build_te_torch: transformer_engine', te.__version__ if hasattr(te, '__version__') else '', 'imports')"
