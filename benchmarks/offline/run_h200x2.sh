#!/usr/bin/env bash
# The two-GPU runs (benchmarks/multi_gpu/README.md) on a machine with two H200s and no network, one step per call;
# each step calls the one-GPU step scripts beside this one with both GPUs:
#
#   bash benchmarks/offline/run_h200x2.sh receive NN [SET]   the carried .SET/partNN into /tmp/SET (engine | megatron)
#   bash benchmarks/offline/run_h200x2.sh install            the engine + verl set into /tmp/site; the megatron set
#                                                          into /tmp/site-megatron when it was carried
#   bash benchmarks/offline/run_h200x2.sh wsprobe [CASES]    weight sync at rollout TP 2 (default qwen3-8b, then
#                                                          qwen3-30b-a3b): verl's path, the direct path and a fresh
#                                                          TP 2 engine from the reference quantization, per rank
#   bash benchmarks/offline/run_h200x2.sh assets             Qwen3-8B-shaped model, tokenizer and data (rl_real's
#                                                          8b-h200x2 set)
#   bash benchmarks/offline/run_h200x2.sh rl-start           the 8B bundles one after another (rollout TP 2, then
#                                                          TP 1 x 2), and beside them the tiny MoE at Megatron EP 2
#   bash benchmarks/offline/run_h200x2.sh rl-wait SECONDS    wait for them; bring back what is there
#                                                          ($OUT/rl-<bundle>.tgz, $OUT/rl-ep2.tgz)
#
# Bundles: .rl/bundles/h200x2-* compiled on the CPU machine from benchmarks/multi_gpu/specs/. WS_PATHS, WS_SYNCS,
# WS_BUCKET_MB and WS_DTYPE pass through to the probe (benchmarks/engine/weight_sync_probe.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
step=${1:?step}
shift
case $step in
  receive) bash benchmarks/offline/run_h200_engine.sh receive "$@" ;;
  install)
    bash benchmarks/offline/run_h200_engine.sh install || exit
    if [[ -d /tmp/megatron ]]; then bash benchmarks/offline/run_h200_megatron.sh install-megatron || exit; fi ;;
  wsprobe)  # both GPUs, one case after another, each in its own packed folder
    for case in $(tr , ' ' <<< "${1:-qwen3-8b,qwen3-30b-a3b}"); do
      WS_TP=2 WS_TAG=tp2_$case WS_PATHS=${WS_PATHS:-verl,direct,fresh-ref} WS_SYNCS=${WS_SYNCS:-3} \
        bash benchmarks/offline/run_h200_engine.sh wsprobe 0,1 "$case"
    done ;;
  assets) bash benchmarks/offline/run_h200_real.sh assets 8b-h200x2 ;;  # the tiny MoE's: run_h200_megatron.sh's rl-body
  rl-start)
    # beside the 8B runs the tiny MoE's engine gets a fixed KV size (vLLM's start-up memory profile would count
    # the 8B run's allocations as its own), and no validation pass (the seconds go to training)
    kv=+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=${KV_BYTES:-4294967296}
    RL_GPU=0,1 RL_NUM_GPUS=2 RL_TAG=-ep2 RL_DIR=/tmp/rl-ep2 PORT_BASE=24000 \
      bash benchmarks/offline/run_h200_megatron.sh rl-start "ep2=h200x2-moe-megatron-ep2,trainer.test_freq=-1,$kv"
    bash benchmarks/offline/run_h200_real.sh rl-start h200x2-8b-fsdp-tp2 h200x2-8b-fsdp-tp1x2 ;;
  rl-wait)
    RL_TAG=-ep2 RL_DIR=/tmp/rl-ep2 bash benchmarks/offline/run_h200_megatron.sh rl-wait 1
    bash benchmarks/offline/run_h200_real.sh rl-wait "${1:-540}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
