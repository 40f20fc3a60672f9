#!/usr/bin/env bash
# One device call for the verl hook's flat-bucket path: its GPU tests first (quick sanity), the
# end-to-end hook benchmark, then the whole tests/runtime suite (CPU + GPU). Logs go to $OUT.
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
  grep -m1 'model name' /proc/cpuinfo; nproc
} 2>&1 | tee "$OUT/env.txt"
timeout 90 python3 -m pytest tests/runtime/test_verl_flat_bucket.py --noconftest -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest_flat.log"
timeout 200 python3 benchmarks/bench_verl_hook.py --verl-wheel .whl/verl-0.9.1-py3-none-any.whl --out "$OUT" 2>&1 \
  | tee "$OUT/bench_verl_hook.log"
timeout 100 python3 -m pytest tests/runtime --noconftest -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/pytest.log"
