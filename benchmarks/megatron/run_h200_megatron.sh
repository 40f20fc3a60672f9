#!/usr/bin/env bash
# The Megatron + TransformerEngine runs on the H200 (issue 21; benchmarks/megatron/README.md), one step per call:
#
#   bash benchmarks/megatron/run_h200_megatron.sh install-megatron   the megatron set into /tmp/site-megatron; TE's
#                                                             torch extension builds in the background
#   bash benchmarks/megatron/run_h200_megatron.sh install-engine     the engine + verl set into /tmp/site
#   bash benchmarks/megatron/run_h200_megatron.sh bench       wait for TE, then the layer benchmark -> $OUT/bench.tgz
#   bash benchmarks/megatron/run_h200_megatron.sh rl RUN...   compiled bundles' own launch.sh, all at once on GPU 0
#   bash benchmarks/megatron/run_h200_megatron.sh rl-start RUN...; ... rl-wait SECONDS   the same, detached, for
#                                                             runs longer than one device call
#
# RUN is LABEL=BUNDLE[,OVERRIDE...]: the bundle .rl/bundles/BUNDLE run by its launch.sh with the OVERRIDEs
# appended (launch.sh passes "$@" to verl after its own overrides); RUN>>RUN runs one after the other (a stop and
# a resume from its checkpoint). Several RUNs share the one GPU, each with its
# own Ray head, temp dir and ports; then each engine gets a fixed KV size (kv_cache_memory_bytes), since vLLM's
# start-up memory profile reads the whole GPU's use and would count the other runs' allocations as its own.
# Logs, checkpoint listings and summarize.py's tables come back in $OUT/rl.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8spec_out}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
export VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONPATH="/tmp/site-megatron:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
step=${1:?step}
# Two run sets (this script's and another's) may share one lease: each has its own folder, ports and Ray temp dirs.
RL_TAG=${RL_TAG:-} RL_DIR=${RL_DIR:-/tmp/rl} PORT_BASE=${PORT_BASE:-20000}
shift
case $step in
  install-megatron)  # the megatron set into /tmp/site-megatron; TE's torch extension builds in the background
    bash benchmarks/engine/install_offline.sh /tmp/megatron /tmp/site-megatron || exit
    if [[ -n $(compgen -G "/tmp/site-megatron/.sdists/transformer_engine_torch-*") && ! -f /tmp/te-build.log ]]; then
      setsid nohup bash benchmarks/megatron/build_te_torch.sh /tmp/site-megatron .whl > /tmp/te-build.log 2>&1 < /dev/null &
      echo "TE torch extension: building in the background (/tmp/te-build.log)"
    fi ;;
  install-engine)  # the engine + verl set into /tmp/site
    bash benchmarks/engine/install_offline.sh /tmp/engine /tmp/site || exit
    python3 -c "import vllm, verl, megatron.core, mbridge; print('vllm', vllm.__version__, 'verl', verl.__version__, 'megatron-core', megatron.core.__version__)" 2>&1 | tail -n 2 ;;
  bench)
    mkdir -p "$OUT/bench"
    for _ in $(seq 240); do python3 -c "import transformer_engine.pytorch" 2> /dev/null && break; sleep 1; done
    cp /tmp/te-build.log "$OUT/bench/" 2> /dev/null
    timeout 120 python3 -m pytest tests/runtime/test_te_report.py -q -p no:cacheprovider --noconftest -x 2>&1 |
      grep -E "^E |passed|failed|skipped" | cut -c1-400 | tail -n 8 | tee "$OUT/bench/te_report_test.log"
    cp /tmp/te-wheel/*.whl "$OUT/" 2> /dev/null  # the device-built extension, for the next offline set
    timeout "${BENCH_TIMEOUT_S:-300}" python3 benchmarks/megatron/bench_te_layer.py --out "$OUT/bench" "$@" 2>&1 |
      grep -v -E "Warning|warnings.warn" | tee "$OUT/bench/bench.log" | tail -n 20
    tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench" ;;
  rl-body)  # DIR RUN...: the runs, their logs into DIR (rl and rl-start call this)
    dir=$1; shift
    mkdir -p "$dir"
    python3 benchmarks/rl_run/make_assets.py --out /tmp/fp8spec-rl 2>&1 | tail -n 1 | tee "$dir/assets.log"
    python3 benchmarks/rl_run/make_assets.py --out /tmp/fp8spec-rl --config specs/models/tiny-qwen3-moe/config.json \
      --model-dir model-moe 2>&1 | tail -n 1 | tee -a "$dir/assets.log"
    shared=()
    (( $# > 1 )) && shared=("+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=${KV_BYTES:-4294967296}")
    one_run() {  # PORT LABEL=BUNDLE[,OVERRIDE...]
      local p=$1 run=$2 label rest bundle start parts
      label=${run%%=*}; rest=${run#*=}; IFS=, read -r -a parts <<< "$rest"; bundle=${parts[0]}
      start=$(date +%s)
      python3 -m ray.scripts.scripts start --head --node-ip-address=127.0.0.1 --port="$p" \
        --ray-client-server-port=$((p + 1)) --dashboard-agent-listen-port=$((p + 2)) \
        --dashboard-agent-grpc-port=$((p + 3)) --metrics-export-port=$((p + 4)) --node-manager-port=$((p + 5)) \
        --object-manager-port=$((p + 6)) --runtime-env-agent-port=$((p + 7)) --min-worker-port=$((p + 100)) \
        --max-worker-port=$((p + 450)) --include-dashboard=false --num-gpus=1 --num-cpus=16 \
        --temp-dir="/tmp/ray-$RL_TAG$label" --disable-usage-stats > "$dir/ray-head-$label.log" 2>&1
      CUDA_VISIBLE_DEVICES=0 RAY_ADDRESS="127.0.0.1:$p" timeout "${RUN_TIMEOUT_S:-420}" \
        bash ".rl/bundles/$bundle/launch.sh" "${parts[@]:1}" "${shared[@]}" > "$dir/$label.log" 2>&1
      echo "$label: bundle=$bundle rc=$? $(( $(date +%s) - start ))s" | tee -a "$dir/summary.txt"
      # only this run's head: 'ray stop' would stop every Ray process on the machine, the other runs' too
      pkill -f -- "/tmp/ray-$RL_TAG$label/" > /dev/null 2>&1
      cp -r "/tmp/ray-$RL_TAG$label/session_latest/logs" "$dir/ray-logs-$label" 2> /dev/null
    }
    # A RUN of several runs joined by '>>' is a lane: its runs go one after the other (a resume after its start).
    i=0
    for lane in "$@"; do
      (
        j=0
        while IFS= read -r run; do
          [[ -n $run ]] && one_run $((PORT_BASE + 1000 * i + 500 * j)) "$run"
          j=$((j + 1))
        done < <(printf '%s\n' "${lane//>>/$'\n'}")
      ) &
      i=$((i + 1))
      sleep "${STAGGER_S:-20}"
    done
    sleep 60; nvidia-smi --query-gpu=memory.used,memory.total --format=csv > "$dir/gpu-mem.txt" 2>&1
    wait
    { ls -lR /tmp/fp8spec-rl/checkpoints 2>&1 | head -n 300; du -sh /tmp/fp8spec-rl/checkpoints/* 2>&1; } \
      > "$dir/checkpoints.txt"
    for f in "$dir"/*.log; do
      echo "== $f"; grep -E "Traceback|Error|error:" "$f" | grep -v -E "Warning|warn" | cut -c1-300 | tail -n 6
    done > "$dir/errors.txt"
    python3 benchmarks/rl_run/summarize.py "$dir" --json "$dir/summary.json" > "$dir/tables.md" 2>&1
    touch "$dir/DONE" ;;
  rl)  # RUN...: in the foreground, logs back in $OUT/rl.tgz
    bash "$0" rl-body "$OUT/rl$RL_TAG" "$@"
    cat "$OUT/rl$RL_TAG/errors.txt" "$OUT/rl$RL_TAG/tables.md"
    rm -f "$OUT/rl$RL_TAG/DONE"; tar czf "$OUT/rl$RL_TAG.tgz" -C "$OUT" "rl$RL_TAG" && rm -rf "${OUT:?}/rl$RL_TAG" ;;
  rl-start)  # RUN...: detached (survives this call while the machine stays warm); collect with rl-wait
    rm -rf "$RL_DIR" && mkdir -p "$RL_DIR"
    setsid nohup bash "$0" rl-body "$RL_DIR" "$@" > "$RL_DIR/driver.log" 2>&1 < /dev/null &
    echo "rl-start: $# lanes started" ;;
  rl-wait)  # SECONDS: wait for rl-start's runs; then (or when out of time) bring back what is there
    for _ in $(seq "${1:-500}"); do [[ -f $RL_DIR/DONE ]] && break; sleep 1; done
    grep -h -o -E "step:[0-9]+ - " $RL_DIR/*.log 2> /dev/null | sort | uniq -c | tail -n 20
    cat $RL_DIR/summary.txt 2> /dev/null
    if [[ -f $RL_DIR/DONE ]]; then
      cat $RL_DIR/errors.txt $RL_DIR/tables.md
      rm -rf "$OUT/rl$RL_TAG" && cp -r "$RL_DIR" "$OUT/rl$RL_TAG" && rm -f "$OUT/rl$RL_TAG/DONE"
      tar czf "$OUT/rl$RL_TAG.tgz" -C "$OUT" "rl$RL_TAG" && rm -rf "${OUT:?}/rl$RL_TAG"
    else
      echo "rl-wait: still running"; tail -n 3 $RL_DIR/*.log 2> /dev/null | cut -c1-200
    fi ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
