#!/usr/bin/env bash
# On a GPU machine, the verl hook's flat-bucket path: the whole tests/runtime suite (CPU + GPU; the
# flat-bucket and launcher GPU tests included), then the end-to-end hook benchmark with every knob
# combination, the per-bucket profile and the micro-measurements. Logs go to $OUT.
# Needs .whl/verl-0.9.1-py3-none-any.whl (carried; verl's kernel and split_buffer_updates are read
# from it by file path).
set -u
OUT=${OUT:-/tmp/fp8spec_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  git log -1 --format='code %h %s' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  grep -m1 'model name' /proc/cpuinfo; nproc; uname -r
} 2>&1 | tee "$OUT/env.txt"
timeout 100 python3 -m pytest tests/runtime --noconftest -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest.log"
timeout ${BENCH_TIMEOUT:-230} python3 -m benchmarks.bench_verl_hook --verl-wheel .whl/verl-0.9.1-py3-none-any.whl \
  --out "$OUT" --reps ${REPS:-7} 2>&1 | tee "$OUT/bench_verl_hook.log"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$OUT/env.txt"
