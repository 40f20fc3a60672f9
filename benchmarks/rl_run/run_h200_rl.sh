#!/usr/bin/env bash
# On the H200, after `run_h200_engine.sh install`: make the assets, run both compiled bundles' own launch.sh,
# keep the logs in $OUT/rl.tgz. Bundles come compiled from the CPU machine in .rl/bundles/ (see README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8spec_out}
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT/rl"
python3 benchmarks/rl_run/make_assets.py --out /tmp/fp8spec-rl 2>&1 | tail -n 2 | tee "$OUT/rl/assets.log"
for name in tiny-qwen3-h200-fp8 tiny-qwen3-h200-bf16; do
  start=$(date +%s)
  timeout "${RUN_TIMEOUT_S:-280}" bash ".rl/bundles/$name/launch.sh" > "$OUT/rl/$name.log" 2>&1
  echo "$name: rc=$? $(( $(date +%s) - start ))s" | tee -a "$OUT/rl/summary.txt"
  grep -E "step:|rollout_corr|timing_s|fp8spec" "$OUT/rl/$name.log" | tail -n 40
done
tar czf "$OUT/rl.tgz" -C "$OUT" rl && rm -rf "${OUT:?}/rl"
