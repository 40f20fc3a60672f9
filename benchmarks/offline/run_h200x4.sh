#!/usr/bin/env bash
# The four-GPU runs (benchmarks/multi_gpu/README.md) on a machine with four H200s and no network, one step per
# call; each step calls the one-GPU step scripts beside this one with all four GPUs:
#
#   bash benchmarks/offline/run_h200x4.sh receive NN [SET]   the carried .SET/partNN into /tmp/SET (engine | megatron)
#   bash benchmarks/offline/run_h200x4.sh install            the engine + verl set, then the megatron set
#   bash benchmarks/offline/run_h200x4.sh wsprobe            the bundles' sync path (fast_block_quant) at rollout TP 2
#                                                          on the probe's tiny MoE against verl's and a fresh TP 2
#                                                          engine, per rank, on GPUs 0,1
#   bash benchmarks/offline/run_h200x4.sh rl-start           the tiny MoE at Megatron TP 2 x EP 2 and at PP 2 x EP 2,
#                                                          side by side on the four GPUs: 3 steps and the checkpoint,
#                                                          then a resume from it for a fourth step
#   bash benchmarks/offline/run_h200x4.sh rl-wait SECONDS    wait for them; bring back what is there ($OUT/rl-x4.tgz)
#   bash benchmarks/offline/run_h200x4.sh shape-assets       Qwen3-30B-A3B's layers, 30 of 48: random model,
#                                                          tokenizer, data (a machine budget of its own, README.md)
#   bash benchmarks/offline/run_h200x4.sh shape-start LAYOUT  h200x4-30b30l-LAYOUT (tp2ep2 | pp2ep2), detached
#   bash benchmarks/offline/run_h200x4.sh shape-wait SECONDS wait for it; bring back what is there
#
# Bundles: .rl/bundles/h200x4-* compiled on the CPU machine from benchmarks/multi_gpu/specs/.
set -uo pipefail
cd "$(dirname "$0")/../.."
step=${1:?step}
shift
lane() {  # NAME BUNDLE: 3 steps and the checkpoint, then a resume from it for one step more
  echo "$1=$2,trainer.test_freq=-1>>$1-resume=$2,trainer.test_freq=-1,trainer.total_training_steps=4"
}
case $step in
  receive) bash benchmarks/offline/run_h200_engine.sh receive "$@" ;;
  install)
    bash benchmarks/offline/run_h200_engine.sh install || exit
    bash benchmarks/offline/run_h200_megatron.sh install-megatron ;;
  wsprobe)
    WS_TP=2 WS_TAG=tp2_tiny-moe WS_PATHS=${WS_PATHS:-patch,verl,fresh-ref} WS_SYNCS=${WS_SYNCS:-3} \
      bash benchmarks/offline/run_h200_engine.sh wsprobe 0,1 tiny-moe ;;
  rl-start)
    RL_GPU=0,1,2,3 RL_NUM_GPUS=4 RL_TAG=-x4 RL_DIR=/tmp/rl-x4 bash benchmarks/offline/run_h200_megatron.sh rl-start \
      "$(lane tp2ep2 h200x4-moe-tp2ep2)" "$(lane pp2ep2 h200x4-moe-pp2ep2)" ;;
  rl-wait) RL_TAG=-x4 RL_DIR=/tmp/rl-x4 bash benchmarks/offline/run_h200_megatron.sh rl-wait "${1:-540}" ;;
  shape-assets)
    python3 -m benchmarks.rl_real.make_real_assets --out /tmp/fp8spec-real \
      --config benchmarks/multi_gpu/models/qwen3-30b-a3b-30l/config.json --model-dir model-30b-30l 2>&1 | tail -n 2 ;;
  shape-start) bash benchmarks/offline/run_h200_real.sh rl-start "h200x4-30b30l-${1:?shape-start tp2ep2|pp2ep2}" ;;
  shape-wait) bash benchmarks/offline/run_h200_real.sh rl-wait "${1:-540}" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
