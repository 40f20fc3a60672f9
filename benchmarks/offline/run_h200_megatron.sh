#!/usr/bin/env bash
# The Megatron + TransformerEngine benchmarks and runs on a GPU machine without network (benchmarks/megatron/README.md),
# one step per call:
#
#   bash benchmarks/offline/run_h200_megatron.sh te-prebuild DIR    before the set arrives: TE's torch extension
#                                                             from DIR (its sdist, nvidia-cudnn-frontend, and TE's
#                                                             pydantic wheels) builds in the background
#   bash benchmarks/offline/run_h200_megatron.sh install-megatron   the megatron set into /tmp/site-megatron; TE's
#                                                             torch extension: the prebuilt wheel, else built in
#                                                             the background
#   bash benchmarks/offline/run_h200_megatron.sh install-engine     the engine + verl set into /tmp/site
#   bash benchmarks/offline/run_h200_megatron.sh bench       wait for TE, then the layer benchmark -> $OUT/bench.tgz
#   bash benchmarks/offline/run_h200_megatron.sh layout ARGS...  wait for TE, then benchmarks.megatron.bench_te_layout ARGS -> $OUT/layout/
#   bash benchmarks/offline/run_h200_megatron.sh grouped ARGS...  wait for TE, then benchmarks.megatron.bench_grouped_splits
#                                                             ARGS, plain and --cutlass -> $OUT/grouped/
#   bash benchmarks/offline/run_h200_megatron.sh rl RUN...   compiled bundles' own launch.sh, all at once on GPU 0
#   bash benchmarks/offline/run_h200_megatron.sh rl-start RUN...; ... rl-wait SECONDS   the same, detached, for
#                                                             runs longer than one device call
#
# RUN is LABEL=BUNDLE[,OVERRIDE...] (benchmarks/rl_run/lanes.sh runs them): the bundle .rl/bundles/BUNDLE run by its launch.sh with the OVERRIDEs
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
export PYTHONPATH="/tmp/site-megatron:/tmp/site:/tmp/site-te${PYTHONPATH:+:$PYTHONPATH}"
step=${1:?step}
# Two run sets (this script's and another's) may share one machine: each has its own folder, ports and Ray temp dirs.
RL_TAG=${RL_TAG:-} RL_DIR=${RL_DIR:-/tmp/rl} PORT_BASE=${PORT_BASE:-20000} STAGGER_S=${STAGGER_S:-20}
source benchmarks/rl_run/lanes.sh
shift
wait_te_prebuild() {  # a te-prebuild still running: wait for it (SECONDS at most)
  [[ -f /tmp/te-prebuild.pid ]] || return 0
  local pid; pid=$(cat /tmp/te-prebuild.pid)
  for _ in $(seq "${1:-300}"); do kill -0 "$pid" 2> /dev/null || break; sleep 1; done
  tail -n 3 /tmp/te-prebuild.log
}
case $step in
  te-prebuild)  # DIR: TE's torch extension built from DIR before the offline set is there (it needs only the sdist,
    # nvidia-cudnn-frontend's headers and the device's torch), so the build overlaps the set's transfer calls; TE's
    # pydantic wheels (the megatron set lacks them) go into /tmp/site-te, which stays on PYTHONPATH
    # (DIR holding a transformer_engine_torch wheel built here before: that wheel is used, nothing is built)
    dir=${1:?te-prebuild DIR}
    mkdir -p /tmp/site-te/.sdists /tmp/te-wheel
    shopt -s nullglob
    small=(); for w in "$dir"/*.whl; do [[ $(basename "$w") == transformer_engine_torch-* ]] || small+=("$w"); done
    (( ${#small[@]} )) && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-te \
      "${small[@]}" 2>&1 | grep -v -i warning
    prebuilt=("$dir"/transformer_engine_torch-*.whl)
    if (( ${#prebuilt[@]} )); then
      cp "${prebuilt[0]}" /tmp/te-wheel/ && echo "TE torch extension: the prebuilt $(basename "${prebuilt[0]}")"
    else
      cp "$dir"/transformer_engine_torch-*.tar.gz /tmp/site-te/.sdists/ || exit
      TE_BUILD_ONLY=1 setsid nohup bash benchmarks/megatron/build_te_torch.sh /tmp/site-te > /tmp/te-prebuild.log 2>&1 < /dev/null &
      echo $! > /tmp/te-prebuild.pid
      echo "TE torch extension: building in the background (/tmp/te-prebuild.log, wheel to /tmp/te-wheel)"
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
    python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" ;;
  install-megatron)  # the megatron set into /tmp/site-megatron; TE's torch extension: the prebuilt wheel if a
    # te-prebuild made one, else built from the set's sdist in the background
    bash benchmarks/offline/install_offline.sh /tmp/megatron /tmp/site-megatron || exit
    wait_te_prebuild 300
    wheels=.whl
    compgen -G "/tmp/te-wheel/transformer_engine_torch-*.whl" > /dev/null && wheels=/tmp/te-wheel
    if [[ -n $(compgen -G "/tmp/site-megatron/.sdists/transformer_engine_torch-*") && ! -f /tmp/te-build.log ]]; then
      setsid nohup bash benchmarks/megatron/build_te_torch.sh /tmp/site-megatron "$wheels" > /tmp/te-build.log 2>&1 < /dev/null &
      echo "TE torch extension: from $wheels, else built in the background (/tmp/te-build.log)"
    fi ;;
  install-engine)  # the engine + verl set into /tmp/site
    bash benchmarks/offline/install_offline.sh /tmp/engine /tmp/site || exit
    python3 -c "import vllm, verl, megatron.core, mbridge; print('vllm', vllm.__version__, 'verl', verl.__version__, 'megatron-core', megatron.core.__version__)" 2>&1 | tail -n 2 ;;
  bench)
    mkdir -p "$OUT/bench"
    for _ in $(seq 240); do python3 -c "import transformer_engine.pytorch" 2> /dev/null && break; sleep 1; done
    cp /tmp/te-build.log "$OUT/bench/" 2> /dev/null
    timeout 120 python3 -m pytest tests/runtime/test_te_report.py -q -p no:cacheprovider --noconftest -x 2>&1 |
      grep -E "^E |passed|failed|skipped" | cut -c1-400 | tail -n 8 | tee "$OUT/bench/te_report_test.log"
    cp /tmp/te-wheel/*.whl "$OUT/" 2> /dev/null  # the device-built extension, for the next offline set
    timeout "${BENCH_TIMEOUT_S:-300}" python3 -m benchmarks.megatron.bench_te_layer --out "$OUT/bench" "$@" 2>&1 |
      grep -v -E "Warning|warnings.warn" | tee "$OUT/bench/bench.log" | tail -n 20
    tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench" ;;
  layout)  # ARGS...: benchmarks.megatron.bench_te_layout (the per-layout benchmark on RL-shaped batches) -> $OUT/layout/
    mkdir -p "$OUT/layout"
    for _ in $(seq 240); do python3 -c "import transformer_engine.pytorch" 2> /dev/null && break; sleep 1; done
    cat /tmp/te-prebuild.log /tmp/te-build.log 2> /dev/null | grep -v -i warning | tail -n 20 > "$OUT/layout/te-build.log"
    cp /tmp/te-wheel/transformer_engine_torch-*.whl "$OUT/" 2> /dev/null  # the device-built extension, for the next set
    timeout "${BENCH_TIMEOUT_S:-560}" python3 -m benchmarks.megatron.bench_te_layout --out "$OUT/layout" "$@" 2>&1 |
      grep -v -E "Warning|warnings.warn" | tee "$OUT/layout/bench.log" | tail -n 60 ;;
  grouped)  # ARGS...: benchmarks.megatron.bench_grouped_splits with TE's per-expert cuBLASLt GEMMs, then with its
    # CUTLASS grouped GEMM (--cutlass), one process each -> $OUT/grouped/
    mkdir -p "$OUT/grouped"
    for _ in $(seq 240); do python3 -c "import transformer_engine.pytorch" 2> /dev/null && break; sleep 1; done
    for extra in "" --cutlass; do
      timeout "${BENCH_TIMEOUT_S:-240}" python3 -m benchmarks.megatron.bench_grouped_splits --out "$OUT/grouped" $extra "$@" 2>&1 |
        grep -v -E "Warning|warnings.warn" | tee -a "$OUT/grouped/bench.log" | tail -n 12
    done ;;
  rl-body)  # DIR RUN...: the runs, their logs into DIR (rl and rl-start call this)
    dir=$1; shift
    mkdir -p "$dir"
    python3 -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl 2>&1 | tail -n 1 | tee "$dir/assets.log"
    python3 -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl --config specs/models/tiny-qwen3-moe/config.json \
      --model-dir model-moe 2>&1 | tail -n 1 | tee -a "$dir/assets.log"
    RL_EXTRA=()
    (( $# > 1 )) && RL_EXTRA=("+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=${KV_BYTES:-4294967296}")
    rl_lanes "$dir" "$@" ;;
  rl) rl_foreground "$0" "$@" ;;  # RUN...: in this call, logs back in $OUT/rl$RL_TAG.tgz
  rl-start) rl_start "$0" "$@" ;;  # RUN...: detached; collect with rl-wait
  rl-wait) rl_wait "${1:-500}" ;;  # SECONDS
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
