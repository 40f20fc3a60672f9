#!/usr/bin/env bash
# The SGLang 0.5.12 benchmarks (benchmarks/sglang/README.md) on a GPU machine without network, one step at a time:
#
#   bash benchmarks/offline/run_h200_sglang.sh receive NN SET       the carried .SET/partNN into /tmp/SET
#   bash benchmarks/offline/run_h200_sglang.sh install-engine       the engine + verl set into /tmp/site (vLLM, verl)
#   bash benchmarks/offline/run_h200_sglang.sh install-sglang [PARTS]  the sglang set into /tmp/site-sglang (+ sglang-fa3
#                                                                  when its parts were received), the view of /tmp/site
#                                                                  without vLLM, and an import check of both paths
#   bash benchmarks/offline/run_h200_sglang.sh bench GPU ITEMS...   SGLang engine throughput/KV (run_sglang_configs.py)
#   bash benchmarks/offline/run_h200_sglang.sh vbench GPU ITEMS...  vLLM 0.24.0 on the same batch (engine/run_configs.py)
#   bash benchmarks/offline/run_h200_sglang.sh kvprobe GPU [BACKENDS]   KV-scale probe (kv_scales_probe_sglang.py)
#   bash benchmarks/offline/run_h200_sglang.sh wsprobe GPU [CASES]  weight sync through verl's SGLang path
#   bash benchmarks/offline/run_h200_sglang.sh rl RUN...            compiled bundles' own launch.sh (FSDP + SGLang)
#   bash benchmarks/offline/run_h200_sglang.sh rl-start RUN...; ... rl-wait SECONDS   the same, detached
#                                                                  (RL_MEGATRON=1: Megatron + SGLang bundles, after
#                                                                  run_h200_megatron.sh install-megatron)
#   bash benchmarks/offline/run_h200_sglang.sh jit-save             the JIT caches (FlashInfer, tvm-ffi) into $OUT
#
# SGLang runs see PYTHONPATH=/tmp/site-sglang:/tmp/site-ev: the sglang set first (its pins of apache-tvm-ffi and
# openai shadow the engine set's), then the engine + verl install without vllm, xgrammar, llguidance and
# openai-harmony (SGLang imports vllm inside try blocks; the rest are pinned differently by sglang and not on its
# path). DeepGEMM is off unless SGLANG_ENABLE_JIT_DEEPGEMM=1 is exported (its start-up precompile takes 10-20 min).
# RUN is LABEL=BUNDLE[,OVERRIDE...] as in benchmarks/offline/run_h200_megatron.sh; RUN>>RUN runs one after the
# other. Each step packs its logs into $OUT/<step>.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8spec_out}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
export SGLANG_ENABLE_JIT_DEEPGEMM=${SGLANG_ENABLE_JIT_DEEPGEMM:-0} VLLM_USE_FLASHINFER_SAMPLER=0
SGL_PATH="/tmp/site-sglang:/tmp/site-ev:$PWD"
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
# Two run sets (this script's and another's) may share one machine: each has its own folder, ports and Ray temp dirs.
# SGLang sizes its KV pool from the free memory at its start: lanes start 45 s apart, one engine at a time.
RL_TAG=${RL_TAG:-} RL_DIR=${RL_DIR:-/tmp/rl} PORT_BASE=${PORT_BASE:-30000} STAGGER_S=${STAGGER_S:-45}
source benchmarks/rl_run/lanes.sh
shift
pack() { tar czf "$OUT/$1.tgz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"; }
case $step in
  receive)  # NN SET
    bash benchmarks/offline/run_h200_engine.sh receive "$@" ;;
  install-engine)
    bash benchmarks/offline/install_offline.sh /tmp/engine /tmp/site || exit
    PYTHONPATH=/tmp/site python3 -c "import vllm, verl; print('vllm', vllm.__version__, 'verl', verl.__version__)" 2>&1 |
      tail -n 1 ;;
  install-sglang)  # [PARTS_DIR]: /tmp/sglang (set sglang, beside install-engine's /tmp/site) or /tmp/sglang-rl (the
                   # one-archive build of everything SGLang's path needs, no vLLM: README.md "Builds")
    bash benchmarks/offline/install_offline.sh "${1:-/tmp/sglang}" /tmp/site-sglang || exit
    if [[ -f /tmp/sglang-fa3/offline.sha256 ]]; then  # optional FA3 (set sglang-fa3): linked into sgl_kernel/
      bash benchmarks/offline/install_offline.sh /tmp/sglang-fa3 /tmp/site-fa3 &&
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
      python3 -m benchmarks.sglang.run_sglang_configs --out "$OUT/sbench$gpu" --budget-s "${BUDGET_S:-540}" "$@" \
      2>&1 | tee "$OUT/sbench$gpu/driver.log"
    pack "sbench$gpu" ;;
  vbench)  # GPU ITEMS...: vLLM 0.24.0, the same workload (benchmarks/engine/run_configs.py)
    gpu=$1; shift
    mkdir -p "$OUT/vbench$gpu"
    CUDA_VISIBLE_DEVICES=$gpu PYTHONPATH="/tmp/site:$PWD" timeout "${CALL_TIMEOUT_S:-570}" \
      python3 -m benchmarks.engine.run_configs --out "$OUT/vbench$gpu" --budget-s "${BUDGET_S:-540}" "$@" 2>&1 |
      tee "$OUT/vbench$gpu/driver.log"
    pack "vbench$gpu" ;;
  kvprobe)  # GPU [BACKENDS]
    mkdir -p "$OUT/kvprobe"
    CUDA_VISIBLE_DEVICES=$1 PYTHONPATH=$SGL_PATH timeout "${CALL_TIMEOUT_S:-570}" \
      python3 -m benchmarks.sglang.kv_scales_probe_sglang --out "$OUT/kvprobe" --backends "${2:-flashinfer,triton}" \
      2>&1 | tee "$OUT/kvprobe/driver.log"
    pack kvprobe ;;
  wsprobe)  # GPU [CASES] (WS_PATHS: engines per case; WS_DTYPE=fp32: FSDP's float32 weights)
    mkdir -p "$OUT/wsprobe"
    CUDA_VISIBLE_DEVICES=$1 PYTHONPATH=$SGL_PATH timeout "${CALL_TIMEOUT_S:-570}" \
      python3 -m benchmarks.sglang.weight_sync_probe_sglang --out "$OUT/wsprobe" --cases "${2:-tiny-dense,tiny-moe}" \
      ${WS_PATHS:+--paths "$WS_PATHS"} 2>&1 | tee "$OUT/wsprobe/driver.log"
    pack wsprobe ;;
  rl-body)  # DIR RUN...: the runs, their logs into DIR (rl and rl-start call this)
    dir=$1; shift
    mkdir -p "$dir"
    export PYTHONPATH=$SGL_PATH
    python3 -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl 2>&1 | tail -n 1 | tee "$dir/assets.log"
    if [[ ${RL_MEGATRON:-0} == 1 ]]; then  # Megatron + SGLang bundles: run_h200_megatron.sh install-megatron's
      # set after the SGLang path (it shares no package with it), and the tiny MoE model
      export PYTHONPATH="$SGL_PATH:/tmp/site-megatron:/tmp/site-te"
      python3 -m benchmarks.rl_run.make_assets --out /tmp/fp8spec-rl --config specs/models/tiny-qwen3-moe/config.json \
        --model-dir model-moe 2>&1 | tail -n 1 | tee -a "$dir/assets.log"
    fi
    RL_EXTRA=()
    rl_lanes "$dir" "$@" ;;
  rl) rl_foreground "$0" "$@" ;;  # RUN...: in this call, logs back in $OUT/rl$RL_TAG.tgz
  rl-start) rl_start "$0" "$@" ;;  # RUN...: detached; collect with rl-wait
  rl-wait) rl_wait "${1:-500}" ;;  # SECONDS
  jit-save)  # the compiled JIT modules (FlashInfer, tvm-ffi: SGLang's jit_kernel) for a later machine to carry
    mkdir -p "$OUT/jit"
    du -sh ~/.cache/flashinfer ~/.cache/tvm-ffi ~/.triton/cache 2> /dev/null | tee "$OUT/jit/sizes.txt"
    tar czf "$OUT/sglang-jit-cache.tgz" -C ~ $(cd ~ && ls -d .cache/flashinfer .cache/tvm-ffi 2> /dev/null) 2> /dev/null
    ls -la "$OUT/sglang-jit-cache.tgz"; pack jit ;;
  jit-restore)  # the carried .sglang-jit/sglang-jit-cache.tgz back into ~ (before the first engine start)
    [[ -f .sglang-jit/sglang-jit-cache.tgz ]] && tar xzf .sglang-jit/sglang-jit-cache.tgz -C ~ && echo "jit cache restored" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
