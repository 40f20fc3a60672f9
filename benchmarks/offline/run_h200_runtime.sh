#!/usr/bin/env bash
# On a GPU machine: GPU + CPU tests of fp8spec.runtime, then the kernel benchmarks (bench_blockquant,
# bench_kv_calibration; verl's wheel in .whl/). Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/fp8spec_out}
mkdir -p "$OUT"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/env.txt"
timeout 150 python3 -m pytest tests/runtime --noconftest -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest.log"
timeout 300 python3 -m benchmarks.bench_blockquant --verl-wheel .whl/verl-0.9.1-py3-none-any.whl \
  --out "$OUT" --ref-stride 10 2>&1 | tee "$OUT/bench_blockquant.log"
[ "${SKIP_KV:-0}" = 1 ] || timeout 150 python3 -m benchmarks.bench_kv_calibration --out "$OUT" 2>&1 | tee "$OUT/bench_kv_calibration.log"
