#!/usr/bin/env bash
# On the H200, after `run_h200_engine.sh install`: make the assets, run both compiled bundles' own launch.sh
# (FP8 and BF16), keep the logs in $OUT/rl.tgz. Bundles come compiled from the CPU machine in .rl/bundles/
# (see README.md).
#
#   bash benchmarks/offline/run_h200_rl.sh            # both runs, in parallel on GPUs 0 and 1 when there are two
#
# Each run gets its own Ray head (its own GPU, temp dir and loopback ports) and the bundle's launch.sh is run
# by hand on it (RAY_ADDRESS set): the path the bundle README documents for a Ray head. The heads are stopped
# at the end (`ray stop --force`: the machine is ours alone).
# After a run, `AFTER_GPU0` / `AFTER_GPU1` (commands) run on that GPU, e.g. the DeepGEMM benches.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8spec_out}
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RAY_USAGE_STATS_ENABLED=0
mkdir -p "$OUT/rl"
t0=$(date +%s)
# Wheels the offline set lacks, carried in .whl/ (e.g. vLLM's API server needs prometheus-fastapi-instrumentator).
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v -i warning
fi
python3 -c "import verl, vllm, ray, torch; print('verl', verl.__version__, 'vllm', vllm.__version__, 'ray', ray.__version__, 'torch', torch.__version__)" 2>&1 | tail -n 1 | tee "$OUT/rl/env.txt"
python3 -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl 2>&1 | tail -n 2 | tee "$OUT/rl/assets.log"
# An MoE bundle (name with "moe", e.g. benchmarks/weight_sync/tiny-qwen3-moe-h200-direct.yaml) reads model-moe/.
if [[ "${RL_RUNS:-}" == *moe* ]]; then
  python3 -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl --config specs/models/tiny-qwen3-moe/config.json \
    --model-dir model-moe 2>&1 | tail -n 1 | tee -a "$OUT/rl/assets.log"
fi
ngpu=$(nvidia-smi -L | wc -l)

head_start() {  # GPU BASEPORT: a Ray head on 127.0.0.1 that sees one GPU
  local gpu=$1 p=$2
  CUDA_VISIBLE_DEVICES=$gpu python3 -m ray.scripts.scripts start --head --node-ip-address=127.0.0.1 \
    --port="$p" --ray-client-server-port=$((p + 1)) --dashboard-agent-listen-port=$((p + 2)) \
    --dashboard-agent-grpc-port=$((p + 3)) --metrics-export-port=$((p + 4)) --node-manager-port=$((p + 5)) \
    --object-manager-port=$((p + 6)) --runtime-env-agent-port=$((p + 7)) --min-worker-port=$((p + 100)) \
    --max-worker-port=$((p + 600)) --include-dashboard=false --num-gpus=1 --num-cpus=14 \
    --temp-dir="/tmp/ray$gpu" --disable-usage-stats > "$OUT/rl/ray-head-$gpu.log" 2>&1
}

run_one() {  # GPU NAME BASEPORT
  local gpu=$1 name=$2 p=$3 start rc
  start=$(date +%s)
  if head_start "$gpu" "$p"; then
    CUDA_VISIBLE_DEVICES=$gpu RAY_ADDRESS="127.0.0.1:$p" timeout "${RUN_TIMEOUT_S:-420}" \
      bash ".rl/bundles/$name/launch.sh" > "$OUT/rl/$name.log" 2>&1
    rc=$?
  else
    rc="ray-start-failed"
  fi
  echo "$name: gpu=$gpu rc=$rc $(( $(date +%s) - start ))s" | tee -a "$OUT/rl/summary.txt"
  { ls -lR "/tmp/fp8spec-rl/checkpoints/$name" 2>&1 | head -n 60; du -sh "/tmp/fp8spec-rl/checkpoints/$name" 2>&1; } \
    > "$OUT/rl/$name.checkpoint.txt"
  cp -r "/tmp/ray$gpu/session_latest/logs" "$OUT/rl/ray-logs-$gpu" 2>/dev/null
}

# RL_RUNS: the compiled bundles (.rl/bundles/<name>) to run, default the FP8 and the BF16 one; one name per call
# fits a one-GPU machine's 10-minute call (e.g. RL_RUNS=tiny-qwen3-h200-direct, benchmarks/weight_sync/README.md).
read -r -a runs <<< "${RL_RUNS:-tiny-qwen3-h200-fp8 tiny-qwen3-h200-bf16}"
if (( ngpu >= 2 && ${#runs[@]} == 2 )); then
  ( run_one 0 "${runs[0]}" 20000; eval "${AFTER_GPU0:-true}" ) &
  ( run_one 1 "${runs[1]}" 21000; eval "${AFTER_GPU1:-true}" ) &
  wait
else
  port=20000
  for name in "${runs[@]}"; do
    run_one 0 "$name" "$port"
    python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
    port=$((port + 1000))
  done
fi
python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
for name in "${runs[@]}"; do
  echo "== $name"; grep -E "Traceback|Error" "$OUT/rl/$name.log" | cut -c1-300 | tail -n 8
done
python3 -m benchmarks.rl_run.summarize "$OUT/rl" --json "$OUT/rl/summary.json"
echo "total $(( $(date +%s) - t0 ))s"
tar czf "$OUT/rl.tgz" -C "$OUT" rl && rm -rf "${OUT:?}/rl"
