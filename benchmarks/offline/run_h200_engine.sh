#!/usr/bin/env bash
# The vLLM benchmarks (benchmarks/engine/README.md) on a GPU machine without network, one step at a time
# (benchmarks/offline/README.md): each step runs the plain command with the offline install on PYTHONPATH.
#
#   bash benchmarks/offline/run_h200_engine.sh receive NN [SET]  copy the carried .SET/partNN into /tmp/SET (SET: engine)
#   bash benchmarks/offline/run_h200_engine.sh install        check + unpack the offline set into /tmp/site
#   bash benchmarks/offline/run_h200_engine.sh gputests       the GPU test suite of fp8spec.runtime
#   bash benchmarks/offline/run_h200_engine.sh bench GPU ITEMS...   rollout throughput (run_configs.py) on GPU
#   bash benchmarks/offline/run_h200_engine.sh kvprobe GPU    KV-scale probe (kv_scales_probe.py) on GPU
#   bash benchmarks/offline/run_h200_engine.sh sendfill GPU [ARGS]   the trainer side of a weight sync, no engine
#   bash benchmarks/offline/run_h200_engine.sh wsprobe GPU [CASES]   weight-sync probe on GPU
#                                            (WS_PATHS: engines per case; WS_DTYPE=fp32: FSDP's float32 weights;
#                                             WS_SYNCS=N syncs per engine; WS_BREAKDOWN=1 per-stage timers;
#                                             WS_BUCKET_MB bucket
#                                             size (default 2048); WS_SYNC_TIMING=0 no sender split (default 1); WS_EAGER=0 CUDA graphs (as main_ppo);
#                                             WS_SEND_CAST_BF16=1 float32 weights sent as BF16;
#                                             WS_TP=2 engines at rollout TP 2, GPU 0,1;
#                                             WS_TIMEOUT seconds for the step, default 570)
#
# Logs and results go to $OUT/<step>/ (what comes back is packed into $OUT/<step>.tar.gz as well).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8spec_out}
SITE=/tmp/site
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
step=${1:?step}
shift
# Each step packs its folder into one archive, so a step's output is one file to bring back.
pack() { tar czf "$OUT/$1.tgz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"; }
case $step in
  receive)  # NN [SET]: the carried .SET/partNN (default SET engine) into /tmp/SET
    set_dir=${2:-engine}
    mkdir -p "/tmp/$set_dir" && cp -v ".$set_dir/part$1"/* "/tmp/$set_dir/" && ls -la "/tmp/$set_dir" | tail -n +2 ;;
  install)
    bash benchmarks/offline/install_offline.sh /tmp/engine "$SITE" &&
      python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" ;;
  gputests)
    mkdir -p "$OUT/gputests"
    { date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
      python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"
    } 2>&1 | tee "$OUT/gputests/env.txt"
    # the tests import ruamel.yaml, which the image lacks: take it from whichever offline install this machine has;
    # the image has no pytest-xdist, so pyproject's addopts (-n auto) is dropped
    site=$(ls -d /tmp/site /tmp/site-sglang 2> /dev/null | head -n 1)
    PYTHONPATH="$PWD${site:+:$site}" timeout 240 python3 -m pytest tests/runtime --noconftest -q -p no:cacheprovider \
      -o addopts= -rs 2>&1 |
      tee "$OUT/gputests/pytest.log" | tail -n 15
    pack gputests ;;
  bench)
    gpu=$1; shift
    mkdir -p "$OUT/bench$gpu"
    CUDA_VISIBLE_DEVICES=$gpu timeout "${CALL_TIMEOUT_S:-570}" python3 -m benchmarks.engine.run_configs --out "$OUT/bench$gpu" \
      --budget-s "${BUDGET_S:-540}" "$@" 2>&1 | tee "$OUT/bench$gpu/driver.log"
    pack "bench$gpu" ;;
  kvprobe)
    mkdir -p "$OUT/kvprobe"
    CUDA_VISIBLE_DEVICES=$1 timeout "${CALL_TIMEOUT_S:-570}" python3 -m benchmarks.engine.kv_scales_probe --out "$OUT/kvprobe" 2>&1 |
      tee "$OUT/kvprobe/driver.log"
    pack kvprobe ;;
  sendfill)  # GPU [ARGS...]: the trainer side alone, no engine (benchmarks/weight_sync/bench_send_fill.py)
    gpu=$1; shift
    sf=sendfill${WS_TAG:+_$WS_TAG}
    mkdir -p "$OUT/$sf"
    CUDA_VISIBLE_DEVICES=$gpu timeout "${WS_TIMEOUT:-300}" python3 -m benchmarks.weight_sync.bench_send_fill \
      --out "$OUT/$sf" "$@" 2>&1 | tee "$OUT/$sf/driver.log"
    pack "$sf" ;;
  wsprobe)  # one folder per WS_DTYPE / WS_TAG, so two runs in one call come back side by side
    ws=wsprobe${WS_DTYPE:+_$WS_DTYPE}${WS_TAG:+_$WS_TAG}
    mkdir -p "$OUT/$ws"
    CUDA_VISIBLE_DEVICES=$1 timeout "${WS_TIMEOUT:-570}" python3 -m benchmarks.engine.weight_sync_probe \
      --out "$OUT/$ws" ${2:+--cases "$2"} ${WS_PATHS:+--paths "$WS_PATHS"} 2>&1 | tee "$OUT/$ws/driver.log"
    for f in "$OUT/$ws"/*_breakdown.md; do [ -e "$f" ] && cat "$f"; done
    pack "$ws" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
