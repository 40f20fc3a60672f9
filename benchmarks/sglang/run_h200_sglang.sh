#!/usr/bin/env bash
# The SGLang 0.5.12 runs on the H200 (issue 22; benchmarks/sglang/README.md), one step per device call:
#
#   bash benchmarks/sglang/run_h200_sglang.sh receive NN SET       the carried .SET/partNN into /tmp/SET
#   bash benchmarks/sglang/run_h200_sglang.sh install-engine       the engine + verl set into /tmp/site (vLLM, verl)
#   bash benchmarks/sglang/run_h200_sglang.sh install-sglang [PARTS]  the sglang set into /tmp/site-sglang (+ sglang-fa3
#                                                                  when its parts were received), the view of /tmp/site
#                                                                  without vLLM, and an import check of both paths
#   bash benchmarks/sglang/run_h200_sglang.sh bench GPU ITEMS...   SGLang engine throughput/KV (run_sglang_configs.py)
#   bash benchmarks/sglang/run_h200_sglang.sh vbench GPU ITEMS...  vLLM 0.24.0 on the same batch (engine/run_configs.py)
#   bash benchmarks/sglang/run_h200_sglang.sh kvprobe GPU [BACKENDS]   KV-scale probe (kv_scales_probe_sglang.py)
#   bash benchmarks/sglang/run_h200_sglang.sh wsprobe GPU [CASES]  weight sync through verl's SGLang path
#   bash benchmarks/sglang/run_h200_sglang.sh rl RUN...            compiled bundles' own launch.sh (FSDP + SGLang)
#   bash benchmarks/sglang/run_h200_sglang.sh rl-start RUN...; ... rl-wait SECONDS   the same, detached
#   bash benchmarks/sglang/run_h200_sglang.sh jit-save             the JIT caches (FlashInfer, tvm-ffi) into $OUT
#
# SGLang runs see PYTHONPATH=/tmp/site-sglang:/tmp/site-ev: the sglang set first (its pins of apache-tvm-ffi and
# openai shadow the engine set's), then the engine + verl install without vllm, xgrammar, llguidance and
# openai-harmony (SGLang imports vllm inside try blocks; the rest are pinned differently by sglang and not on its
# path). DeepGEMM is off unless SGLANG_ENABLE_JIT_DEEPGEMM=1 is exported (its start-up precompile takes 10-20 min).
# RUN is LABEL=BUNDLE[,OVERRIDE...] as in benchmarks/megatron/run_h200_megatron.sh; RUN>>RUN runs one after the
# other. Each step packs its logs into $OUT/<step>.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8spec_out}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
export SGLANG_ENABLE_JIT_DEEPGEMM=${SGLANG_ENABLE_JIT_DEEPGEMM:-0} VLLM_USE_FLASHINFER_SAMPLER=0
SGL_PATH="/tmp/site-sglang:/tmp/site-ev:$PWD:$PWD/benchmarks/sglang:$PWD/benchmarks/engine"
# sgl_kernel's common_ops needs libnuma.so.1 (readelf NEEDED); the set carries one for an image without it
if ! ldconfig -p 2> /dev/null | grep -q "libnuma.so.1 "; then
  export LD_LIBRARY_PATH="/tmp/site-sglang/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# torch-memory-saver's LD_PRELOAD hook (verl sets enable_memory_saver) needs libcudart.so.13 at exec time, before
# torch loads its own copy, and has no RUNPATH: point the loader at torch's (nvidia/*/lib) when ldconfig lacks it
if ! ldconfig -p 2> /dev/null | grep -q "libcudart.so.13 "; then
  tsite=$(python3 -c "import importlib.util, os; print(os.path.dirname(os.path.dirname(importlib.util.find_spec('torch').origin)))" 2> /dev/null)
  cudart=$(ls "$tsite"/nvidia/*/lib/libcudart.so.13 "$tsite"/nvidia/*/*/lib/libcudart.so.13 /usr/local/cuda/lib64/libcudart.so.13 2> /dev/null | head -n 1)
  [[ -n $cudart ]] && export LD_LIBRARY_PATH="$(dirname "$cudart")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
step=${1:?step}
# Two run sets (this script's and another's) may share one lease: each has its own folder, ports and Ray temp dirs.
RL_TAG=${RL_TAG:-} RL_DIR=${RL_DIR:-/tmp/rl} PORT_BASE=${PORT_BASE:-30000}
shift
pack() { tar czf "$OUT/$1.tgz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"; }
case $step in
  receive)  # NN SET
    bash benchmarks/engine/run_h200_engine.sh receive "$@" ;;
  install-engine)
    bash benchmarks/engine/install_offline.sh /tmp/engine /tmp/site || exit
    PYTHONPATH=/tmp/site python3 -c "import vllm, verl; print('vllm', vllm.__version__, 'verl', verl.__version__)" 2>&1 |
      tail -n 1 ;;
  install-sglang)  # [PARTS_DIR]: /tmp/sglang (set sglang, beside install-engine's /tmp/site) or /tmp/sglang-rl (the
                   # one-archive build of everything SGLang's path needs, no vLLM: README.md "Builds")
    bash benchmarks/engine/install_offline.sh "${1:-/tmp/sglang}" /tmp/site-sglang || exit
    if [[ -f /tmp/sglang-fa3/offline.sha256 ]]; then  # optional FA3 (set sglang-fa3): linked into sgl_kernel/
      bash benchmarks/engine/install_offline.sh /tmp/sglang-fa3 /tmp/site-fa3 &&
        ln -sf /tmp/site-fa3/sgl_kernel/flash_ops.abi3.so /tmp/site-sglang/sgl_kernel/flash_ops.abi3.so
    fi
    rm -rf /tmp/site-ev && mkdir -p /tmp/site-ev
    [[ -d /tmp/site ]] || echo "install-sglang: no /tmp/site (install-engine): the sglang folder must hold verl too"
    for f in /tmp/site/*; do
      [[ -e $f ]] || continue
      case ${f##*/} in
        vllm|vllm-*|xgrammar|xgrammar-*|llguidance|llguidance-*|openai_harmony|openai_harmony-*) ;;
        openai|openai-*|tvm_ffi|apache_tvm_ffi-*) ;;  # the sglang set's own pins
        *) ln -s "$f" "/tmp/site-ev/${f##*/}" ;;
      esac
    done
    ldconfig -p | grep -q "libnuma.so.1 " && echo "libnuma.so.1: the image's" || echo "libnuma.so.1: the set's copy"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    LD_PRELOAD=/tmp/site-sglang/torch_memory_saver_hook_mode_preload_cu13.abi3.so python3 -c \
      "import torch; torch.zeros(1, device='cuda'); print('torch-memory-saver preload hook loads')" 2>&1 | tail -n 2
    PYTHONPATH=$SGL_PATH python3 - << 'EOF' 2>&1 | grep -v -i warn | tail -n 12
import importlib.metadata as md
import sglang, sgl_kernel, flashinfer, torch_memory_saver, tvm_ffi, torch  # noqa: F401 (import = the check)
import sglang.srt.entrypoints.engine, sglang.srt.entrypoints.http_server  # noqa: F401
import verl.workers.rollout.sglang_rollout.async_sglang_server  # noqa: F401
print("sglang", sglang.__version__, "sglang-kernel", md.version("sglang-kernel"), "flashinfer",
      flashinfer.__version__, "tvm-ffi", md.version("apache-tvm-ffi"), "openai", md.version("openai"),
      "torch", torch.__version__)
try:
    import vllm  # noqa: F401
    print("ERROR: vllm is visible on the SGLang path")
except ImportError:
    print("vllm hidden from the SGLang path: ok")
try:
    import sgl_kernel.flash_attn  # noqa: F401
    print("FA3 (sgl_kernel.flash_ops): present")
except ImportError as e:
    print("FA3 (sgl_kernel.flash_ops): absent (set sglang-fa3 not installed):", str(e)[:80])
EOF
    ;;
  bench)  # GPU ITEMS...: SGLang
    gpu=$1; shift
    mkdir -p "$OUT/sbench$gpu"
    CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH=$SGL_PATH timeout "${CALL_TIMEOUT_S:-570}" \
      python3 benchmarks/sglang/run_sglang_configs.py --out "$OUT/sbench$gpu" --budget-s "${BUDGET_S:-540}" "$@" \
      2>&1 | tee "$OUT/sbench$gpu/driver.log"
    pack "sbench$gpu" ;;
  vbench)  # GPU ITEMS...: vLLM 0.24.0, the same workload (benchmarks/engine/run_configs.py)
    gpu=$1; shift
    mkdir -p "$OUT/vbench$gpu"
    CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH="/tmp/site:$PWD:$PWD/benchmarks/engine" timeout "${CALL_TIMEOUT_S:-570}" \
      python3 benchmarks/engine/run_configs.py --out "$OUT/vbench$gpu" --budget-s "${BUDGET_S:-540}" "$@" 2>&1 |
      tee "$OUT/vbench$gpu/driver.log"
    pack "vbench$gpu" ;;
  kvprobe)  # GPU [BACKENDS]
    mkdir -p "$OUT/kvprobe"
    CUDA_VISIBLE_DEVICES=$1 PYTHONPATH=$SGL_PATH timeout "${CALL_TIMEOUT_S:-570}" \
      python3 benchmarks/sglang/kv_scales_probe_sglang.py --out "$OUT/kvprobe" --backends "${2:-flashinfer,triton}" \
      2>&1 | tee "$OUT/kvprobe/driver.log"
    pack kvprobe ;;
  wsprobe)  # GPU [CASES] (WS_PATHS: engines per case; WS_DTYPE=fp32: FSDP's float32 weights)
    mkdir -p "$OUT/wsprobe"
    CUDA_VISIBLE_DEVICES=$1 PYTHONPATH=$SGL_PATH timeout "${CALL_TIMEOUT_S:-570}" \
      python3 benchmarks/sglang/weight_sync_probe_sglang.py --out "$OUT/wsprobe" --cases "${2:-tiny-dense,tiny-moe}" \
      ${WS_PATHS:+--paths "$WS_PATHS"} 2>&1 | tee "$OUT/wsprobe/driver.log"
    pack wsprobe ;;
  rl-body)  # DIR RUN...: the runs, their logs into DIR (rl and rl-start call this)
    dir=$1; shift
    mkdir -p "$dir"
    export PYTHONPATH=$SGL_PATH
    python3 benchmarks/rl_run/make_assets.py --out /tmp/fp8spec-rl 2>&1 | tail -n 1 | tee "$dir/assets.log"
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
      CUDA_VISIBLE_DEVICES=${RL_GPU:-0} RAY_ADDRESS="127.0.0.1:$p" timeout "${RUN_TIMEOUT_S:-420}" \
        bash ".rl/bundles/$bundle/launch.sh" "${parts[@]:1}" > "$dir/$label.log" 2>&1
      echo "$label: bundle=$bundle rc=$? $(( $(date +%s) - start ))s" | tee -a "$dir/summary.txt"
      pkill -f -- "/tmp/ray-$RL_TAG$label/" > /dev/null 2>&1  # this run's Ray processes only (its own temp dir)
      cp -r "/tmp/ray-$RL_TAG$label/session_latest/logs" "$dir/ray-logs-$label" 2> /dev/null
    }
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
      sleep "${STAGGER_S:-45}"  # SGLang sizes its pool from the free memory at its start: one engine at a time
    done
    sleep 30; nvidia-smi --query-gpu=memory.used,memory.total --format=csv > "$dir/gpu-mem.txt" 2>&1
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
  rl-wait)  # SECONDS
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
  jit-save)  # the compiled JIT modules (FlashInfer, tvm-ffi: SGLang's jit_kernel) for a later session to carry
    mkdir -p "$OUT/jit"
    du -sh ~/.cache/flashinfer ~/.cache/tvm-ffi ~/.triton/cache 2> /dev/null | tee "$OUT/jit/sizes.txt"
    tar czf "$OUT/sglang-jit-cache.tgz" -C ~ $(cd ~ && ls -d .cache/flashinfer .cache/tvm-ffi 2> /dev/null) 2> /dev/null
    ls -la "$OUT/sglang-jit-cache.tgz"; pack jit ;;
  jit-restore)  # the carried .sglang-jit/sglang-jit-cache.tgz back into ~ (before the first engine start)
    [[ -f .sglang-jit/sglang-jit-cache.tgz ]] && tar xzf .sglang-jit/sglang-jit-cache.tgz -C ~ && echo "jit cache restored" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
