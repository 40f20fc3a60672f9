#!/usr/bin/env bash
# The real-size RL runs (benchmarks/rl_real/README.md) on a GPU machine without network, one step at a time:
#
#   bash benchmarks/offline/run_h200_real.sh receive NN        the carried .engine/partNN into /tmp/engine
#   bash benchmarks/offline/run_h200_real.sh install           the engine + verl offline set into /tmp/site
#   bash benchmarks/offline/run_h200_real.sh assets SET        model, tokenizer, data of SET (4b-h200 | 8b-h200x2)
#   bash benchmarks/offline/run_h200_real.sh logprob [CONFIG]  one trainer pass per log-prob path (bench_logprob.py)
#                                                          at CONFIG's shape (default the 4B) -> $OUT/logprob.json
#   bash benchmarks/offline/run_h200_real.sh bare BUNDLE       step 1's generation in a bare vLLM engine, settings,
#                                                          prompts and sampling read from the bundle; one replica
#                                                          per GPU, in parallel -> $OUT/bare-BUNDLE.tgz; the batch
#                                                          runs BARE_REPEATS times (default 2: the last, warm, is
#                                                          the figure; a cold one carries first-use compilation)
#   bash benchmarks/offline/run_h200_real.sh rl BUNDLE [SECONDS]   rl-start, then rl-wait SECONDS (default 480)
#   bash benchmarks/offline/run_h200_real.sh rl-start BUNDLE...   each bundle's own launch.sh, detached, one after
#                                                          another (each takes every GPU of the step), + GPU sampling
#   bash benchmarks/offline/run_h200_real.sh rl-wait SECONDS   wait for it; then (or when out of time: a snapshot,
#                                                          the run goes on) bring back what is there -> $OUT/rl-BUNDLE.tgz;
#                                                          exit 3 at once when this machine holds no run
#
# BUNDLE is a folder under .rl/bundles/ compiled on the CPU machine (README.md), e.g. real-4b-h200-fp8kv.
# GPUS=0 (or 1, or 0,1) pins a step to those GPUs (default: all): on a two-GPU machine two one-GPU bundles run
# side by side (`GPUS=0 ... rl-start A; GPUS=1 ... rl-start B`, each with its own Ray head, ports and temp dir;
# PORT_BASE differs per run: 20000 default, give the second 21000).
# launch.sh gets run_overrides.txt appended (none touches the engine; the file says why each is there).
# RL_SYNC_RUN=1 (rl-start) appends sync_run_overrides.txt too: the weight-sync run (the file says why).
# VLLM_LOGGING_LEVEL=INFO replaces verl's WARN (verl keeps a value the launching shell sets:
# verl/trainer/constants_ppo.py get_ppo_ray_runtime_env), so the engine's own KV-cache lines reach the log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8spec_out}
ROOT=${RL_ROOT:-/tmp/rl-real}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_LOGGING_LEVEL=INFO
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
# the MoE set's Megatron trainer: run_h200_megatron.sh install-megatron's set, where it is installed
[[ -d /tmp/site-megatron ]] && export PYTHONPATH="/tmp/site-megatron:$PYTHONPATH:/tmp/site-te"
step=${1:?step}
shift
ngpu=$(nvidia-smi -L 2> /dev/null | wc -l)
if [[ -n ${GPUS:-} ]]; then
  export CUDA_VISIBLE_DEVICES=$GPUS
  IFS=, read -r -a gpu_list <<< "$GPUS"
else
  mapfile -t gpu_list < <(seq 0 $((ngpu - 1)))
fi

sample_gpus() {  # DIR: this run's GPUs' memory (per process where nvidia-smi shows them) and kernel-busy % every
  # second until DIR/DONE
  local dir=$1 ts pid sel
  sel=$(IFS=,; echo "${gpu_list[*]}")
  declare -A seen=()
  while [[ ! -f $dir/DONE ]]; do
    ts=$(date +%s.%N)
    nvidia-smi -i "$sel" --query-gpu=index,uuid,memory.used,utilization.gpu --format=csv,noheader,nounits 2> /dev/null |
      sed "s/^/$ts, /" >> "$dir/gpu-total.csv"
    nvidia-smi -i "$sel" --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits 2> /dev/null |
      sed "s/^/$ts, /" >> "$dir/gpu-apps.csv"
    for pid in $(nvidia-smi -i "$sel" --query-compute-apps=pid --format=csv,noheader 2> /dev/null); do
      [[ -n ${seen[$pid]:-} ]] && continue
      seen[$pid]=1
      echo "$pid $(tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null | cut -c1-300)" >> "$dir/gpu-pids.txt"
    done
    sleep 1
  done
}

bundle_env() {  # BUNDLE: the bundle's Ray runtime_env env_vars as shell exports (what its engine processes get)
  python3 - "$1" << 'PY'
import shlex, sys, yaml
env = (yaml.safe_load(open(f".rl/bundles/{sys.argv[1]}/runtime_env.yaml", encoding="utf-8")) or {}).get("env_vars") or {}
print("\n".join(f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())))
PY
}

case $step in
  receive) bash benchmarks/offline/run_h200_engine.sh receive "$1" engine ;;
  install)
    bash benchmarks/offline/install_offline.sh /tmp/engine /tmp/site || exit
    python3 -c "import vllm, verl, ray, torch; print('vllm', vllm.__version__, 'verl', verl.__version__, 'ray', ray.__version__, 'torch', torch.__version__)" 2>&1 | tail -n 1 ;;
  assets)
    set_name=${1:?assets SET}; size=${set_name%%-*}
    config=qwen3-$size; [[ $size == moe9l ]] && config=qwen3-30b-a3b-9l  # the specs' model.config_path
    python3 -m benchmarks.rl_real.make_real_assets --out /tmp/fp8spec-real \
      --config "benchmarks/rl_real/models/$config/config.json" --model-dir "model-$size" 2>&1 | tail -n 2 ;;
  logprob)
    mkdir -p "$OUT"
    python3 -m benchmarks.rl_real.bench_logprob --config "${1:-benchmarks/rl_real/models/qwen3-4b/config.json}" \
      --json "$OUT/logprob.json" 2>&1 | grep -v Warning | tail -n 12 ;;
  bare)
    bundle=${1:?bare BUNDLE}; dir=$OUT/bare-$bundle
    mkdir -p "$dir"
    reps=$(python3 -c "from benchmarks.rl_real import bundle_engine as be; print(be.replicas(be.compose(__import__('pathlib').Path('.rl/bundles/$bundle'))))")
    eval "$(bundle_env "$bundle")"
    export PYTHONPATH="$PWD/.rl/bundles/$bundle/lib:$PYTHONPATH"  # as launch.sh: verl imports the patch set
    # the driver has touched CUDA before LLM() starts its worker: a forked worker cannot re-initialise it
    # (seen on the H200, 2026-12-02); verl's server process is spawned by Ray, so its worker never inherits CUDA
    export VLLM_WORKER_MULTIPROC_METHOD=spawn
    # DEBUG: the engine's own split of its profiled memory (weights, peak activation, non-torch, CUDA graphs:
    # vllm/v1/worker/gpu_worker.py:712-722), which the planner's estimates are checked against
    export VLLM_LOGGING_LEVEL=${BARE_LOG_LEVEL:-DEBUG}
    for ((r = 0; r < reps && r < ${#gpu_list[@]}; r++)); do
      CUDA_VISIBLE_DEVICES=${gpu_list[$r]} timeout "${BARE_TIMEOUT_S:-540}" python3 -m benchmarks.engine.bench_rollout \
        --bundle ".rl/bundles/$bundle" --step "${BARE_STEP:-1}" --replica "$r" --repeats "${BARE_REPEATS:-2}" \
        --json "$dir/replica$r.json" \
        > "$dir/replica$r.log" 2>&1 &
    done
    wait
    tail -n 2 "$dir"/replica*.log | cut -c1-600
    tar czf "$OUT/bare-$bundle.tgz" -C "$OUT" "bare-$bundle" && rm -rf "${dir:?}" ;;
  rl-body)  # BUNDLE DIR (rl-start runs this detached)
    bundle=$1 dir=$2 p=${PORT_BASE:-20000}
    mkdir -p "$dir"
    mapfile -t extra < <(grep -v -E '^\s*(#|$)' benchmarks/rl_real/run_overrides.txt)
    # RL_EXTRA: Hydra overrides appended last, for a fallback decided on the machine (e.g.
    # actor_rollout_ref.model.use_fused_kernels=false); they are printed into the run's summary.txt
    if [[ -n ${RL_EXTRA:-} ]]; then
      read -r -a more <<< "$RL_EXTRA"
      extra+=("${more[@]}")
      echo "$bundle: RL_EXTRA ${more[*]}" >> "$dir/summary.txt"
    fi
    if [[ ${RL_SYNC_RUN:-0} == 1 ]]; then  # the weight-sync run: shorter responses, three steps
      mapfile -t -O "${#extra[@]}" extra < <(grep -v -E '^\s*(#|$)' benchmarks/rl_real/sync_run_overrides.txt)
    fi
    sample_gpus "$dir" &
    python3 -m benchmarks.rl_real.sample_cpu "$dir" &  # host CPU of Ray's and vLLM's processes (cpu-procs.csv)
    start=$(date +%s)
    python3 -m ray.scripts.scripts start --head --node-ip-address=127.0.0.1 --port="$p" \
      --ray-client-server-port=$((p + 1)) --dashboard-agent-listen-port=$((p + 2)) \
      --dashboard-agent-grpc-port=$((p + 3)) --metrics-export-port=$((p + 4)) --node-manager-port=$((p + 5)) \
      --object-manager-port=$((p + 6)) --runtime-env-agent-port=$((p + 7)) --min-worker-port=$((p + 100)) \
      --max-worker-port=$((p + 450)) --include-dashboard=false --num-gpus="${#gpu_list[@]}" --num-cpus=16 \
      --temp-dir="/tmp/ray-$bundle" --disable-usage-stats > "$dir/ray-head.log" 2>&1
    RAY_ADDRESS="127.0.0.1:$p" timeout "${RUN_TIMEOUT_S:-1500}" bash ".rl/bundles/$bundle/launch.sh" "${extra[@]}" \
      > "$dir/$bundle.log" 2>&1
    echo "$bundle: bundle=$bundle rc=$? $(( $(date +%s) - start ))s" | tee -a "$dir/summary.txt"
    pkill -f -- "/tmp/ray-$bundle/" > /dev/null 2>&1  # only this run's Ray processes (its temp dir is in their args)
    mkdir -p "$dir/ray-logs" && cp "/tmp/ray-$bundle"/session_latest/logs/*.{out,err,log} "$dir/ray-logs/" 2> /dev/null
    touch "$dir/DONE" ;;
  rl-start)  # BUNDLE...: one after another, so that a machine's GPUs serve one run at a time
    (( $# )) || { echo "rl-start BUNDLE..." >&2; exit 2; }
    for bundle in "$@"; do rm -rf "${ROOT:?}/$bundle" && mkdir -p "$ROOT/$bundle"; done
    setsid nohup bash -c 'script=$1 root=$2; shift 2; for b in "$@"; do bash "$script" rl-body "$b" "$root/$b"; done' \
      _ "$0" "$ROOT" "$@" > "$ROOT/$1.driver.log" 2>&1 < /dev/null &
    echo "rl-start: $* started, one after another; collect with rl-wait" ;;
  rl)
    bash "$0" rl-start "${1:?rl BUNDLE}" && bash "$0" rl-wait "${2:-480}" ;;
  rl-wait)
    # no run folder: this machine never ran rl-start (the machine that did is gone, and this step landed on a
    # fresh one); waiting would only spend the step's seconds on nothing
    if ! compgen -G "$ROOT/*/" > /dev/null; then
      echo "rl-wait: no run under $ROOT on this machine (a fresh machine: the one that ran rl-start is gone)" >&2
      exit 3
    fi
    for _ in $(seq "${1:-540}"); do compgen -G "$ROOT/*/DONE" > /dev/null && break; sleep 1; done
    for dir in "$ROOT"/*/; do
      dir=${dir%/}; bundle=$(basename "$dir")
      grep -h -o -E "step:[0-9]+ - " "$dir/$bundle.log" 2> /dev/null | sort -u | tail -n 8
      if [[ -f $dir/DONE ]]; then
        python3 -m benchmarks.rl_real.summarize_real "$dir" 2>&1 | tail -n 40
        rm -f "$dir/DONE"; tar czf "$OUT/rl-$bundle.tgz" -C "$ROOT" "$bundle" && rm -rf "${dir:?}"
      else  # a snapshot of what is there now (the steps so far), the run goes on while the machine stays warm
        echo "rl-wait: $bundle still running; snapshot in $OUT/rl-$bundle.tgz"
        tail -n 3 "$dir/$bundle.log" 2> /dev/null | cut -c1-300
        python3 -m benchmarks.rl_real.summarize_real "$dir" 2>&1 | tail -n 12
        tar czf "$OUT/rl-$bundle.tgz" -C "$ROOT" "$bundle"
      fi
    done ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
