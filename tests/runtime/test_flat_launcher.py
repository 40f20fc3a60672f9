"""``triton_blockquant.FlatLauncher``: a plan launched into fixed outputs, optionally through the
compiled kernel's own launcher (``FP8SPEC_QUANT_FAST_LAUNCH``).

On the CPU a stand-in replaces the Triton kernel: it reads the kernel's arguments (META table, tile
map, output pointers, constexprs) and quantizes with the reference exactly where the kernel would,
and its "compiled kernel" has a runner with a chosen argument convention (Triton >= 3.3 passes every
parameter, constexprs included; older versions only the run-time ones; a launcher given the wrong
number of arguments raises TypeError, as Triton's generated C launcher does). The GPU test at the
end checks the real runner against ``kernel[grid](...)`` bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from fp8spec.runtime.quantization import blockquant as bq
from fp8spec.runtime.quantization import flat_launcher as fl
from fp8spec.runtime.quantization import triton_blockquant as tbq

FMT_NAMES = {0: "fp32", 1: "ue8m0", 2: "ue8m0_fixed"}


def _emulate(X, Y, S, META, TILE2MAT, amax_floor, fp8_max, one, BM, BN, FMT, PRECISE_DIV, ALIGNED, ROUND):
    """What the Triton kernel computes, from its arguments only."""
    assert fp8_max == 448.0 and one == 1.0
    rounded = {v: k for k, v in tbq.ROUND_CODE.items()}.get(ROUND)
    yb = Y.view(torch.uint8)
    for x_off, y_off, s_off, mm, nn, ldx, _gn, _ in META.cpu().tolist():
        x = X.as_strided((mm, nn), (ldx, 1), X.storage_offset() + x_off)
        x = x if rounded is None else x.to(rounded)
        q, sc = bq.quantize_blockwise(x, (BM, BN), FMT_NAMES[FMT], amax_floor)
        yb[y_off : y_off + mm * nn] = q.reshape(-1).view(torch.uint8)
        S[s_off : s_off + sc.numel()] = sc.reshape(-1)


class FakeCompiled:
    def __init__(self, convention, constexprs, log, wrong=False, raises=False):
        self.convention, self.constexprs, self.log, self.wrong, self.raises = convention, constexprs, log, wrong, raises

    def __getitem__(self, grid):
        assert len(grid) == 3 and grid[1:] == (1, 1)

        def runner(*args):
            n = 14 if self.convention == "all" else 8
            if len(args) != n:
                raise TypeError(f"launcher takes {n} arguments, got {len(args)}")
            if self.raises:
                raise RuntimeError("runner broke")
            self.log.append(("runner", grid[0]))
            full = args if self.convention == "all" else args + self.constexprs
            _emulate(*full)
            if self.wrong:  # a runner that launches something else
                args[2].fill_(1.0)

        return runner


class FakeKernel:
    """Stands for the @triton.jit kernel: ``kernel[grid](*args, BM=…, …, num_warps=…)``."""

    precise_div = True

    def __init__(self, convention="all", wrong=False, raises=False, compiled=True):
        self.convention, self.wrong, self.raises, self.compiled = convention, wrong, raises, compiled
        self.log = []

    def __getitem__(self, grid):
        def launch(*args, BM, BN, FMT, PRECISE_DIV, ALIGNED, ROUND, num_warps):
            assert len(args) == 8
            self.log.append(("jit", grid[0]))
            ce = (BM, BN, FMT, PRECISE_DIV, ALIGNED, ROUND)
            _emulate(*args, *ce)
            if not self.compiled:
                return None
            return FakeCompiled(self.convention, ce, self.log, self.wrong, self.raises)

        return launch


@pytest.fixture(autouse=True)
def fresh_fast_state():
    fl.reset_fast_launch()
    yield
    fl.reset_fast_launch()


def _flat_bucket(gen, device="cpu", misalign=0):
    shapes = [(300, 200), (2, 129, 100), (128, 256), (7, 5)]
    parts = [(torch.randn(s, generator=gen) * 10 ** torch.empty(1).uniform_(-3, 3, generator=gen)) for s in shapes]
    offs, o = [], misalign
    for p in parts:
        offs.append(o)
        o += p.numel()
    flat = torch.empty(o + 64, dtype=torch.bfloat16)
    for p, off in zip(parts, offs):
        flat[off : off + p.numel()] = p.reshape(-1).to(torch.bfloat16)
    return shapes, offs, flat.to(device)


def _outputs(plan, device="cpu"):
    y = torch.full((plan.y_total,), 0x7F, dtype=torch.uint8, device=device).view(bq.FP8_DTYPE)
    s = torch.full((plan.s_total,), float("nan"), device=device)
    return y, s


def _check(plan, flat, out, fmt):
    for (q, s), off, n, shp in zip(plan.outputs(*out), plan.x_offsets, plan.numel, plan.shapes):
        rq, rs = bq.quantize_blockwise(flat[off : off + n].view(shp), scale_fmt=fmt)
        assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)


@pytest.mark.parametrize("convention", ["all", "runtime"])
def test_convention_found_and_runner_used_after_first_launch(convention):
    gen = torch.Generator().manual_seed(1)
    shapes, offs, flat = _flat_bucket(gen)
    plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    k = FakeKernel(convention)
    for fmt in ("fp32", "ue8m0_fixed"):
        out = _outputs(plan)
        la = fl.FlatLauncher(plan, out, fmt, fast=True, kernel=k)
        for step in range(3):
            flat2 = flat.clone() * (step + 1)
            out[0].view(torch.uint8).fill_(0x7F)
            out[1].fill_(float("nan"))
            la(flat2)
            _check(plan, flat2, out, fmt)
    assert fl._FAST["convention"] == convention
    # per format: one kernel[grid] launch, then the runner; the self-test ran once (a jit launch and
    # the runner calls that convention detection made)
    jit = [e for e in k.log if e[0] == "jit"]
    runs = [e for e in k.log if e[0] == "runner"]
    assert len(jit) == 2 + 1 and len(runs) == 2 * 2 + 1
    assert fl.FAST_STATS["fast"] == 4 and fl.FAST_STATS["jit"] == 2


def test_fast_off_always_takes_kernel_grid():
    gen = torch.Generator().manual_seed(2)
    shapes, offs, flat = _flat_bucket(gen)
    plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    k = FakeKernel("all")
    out = _outputs(plan)
    la = fl.FlatLauncher(plan, out, "fp32", fast=False, kernel=k)
    for _ in range(3):
        la(flat)
    _check(plan, flat, out, "fp32")
    assert [e[0] for e in k.log] == ["jit"] * 3 and not fl._FAST["checked"]


@pytest.mark.parametrize("bad", ["wrong", "no_compiled"])
def test_no_usable_runner_falls_back_to_kernel_grid(bad):
    gen = torch.Generator().manual_seed(3)
    shapes, offs, flat = _flat_bucket(gen)
    plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    k = FakeKernel("all", wrong=bad == "wrong", compiled=bad != "no_compiled")
    out = _outputs(plan)
    la = fl.FlatLauncher(plan, out, "fp32", fast=True, kernel=k)
    for _ in range(3):
        la(flat)
    _check(plan, flat, out, "fp32")
    assert fl._FAST["checked"] and fl._FAST["convention"] is None
    assert fl.FAST_STATS["fast"] == 0 and fl.FAST_STATS["jit"] == 3


def test_runner_error_disables_fast_launch():
    gen = torch.Generator().manual_seed(4)
    shapes, offs, flat = _flat_bucket(gen)
    plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    k = FakeKernel("all")
    out = _outputs(plan)
    la = fl.FlatLauncher(plan, out, "fp32", fast=True, kernel=k)
    la(flat)
    assert fl._FAST["convention"] == "all" and la._runner is not None

    def broken(*args):
        raise RuntimeError("a runner whose Triton changed under it")

    la._runner = broken
    out[1].fill_(float("nan"))
    la(flat)  # the runner raises: this launch and every later one go through kernel[grid]
    _check(plan, flat, out, "fp32")
    assert fl._FAST["disabled"] and fl.FAST_STATS["fallbacks"] == 1 and la._runner is None
    la(flat)
    assert fl.FAST_STATS["fast"] == 0 and fl.FAST_STATS["jit"] == 3


def test_runner_not_used_when_pointer_alignment_changes():
    """The runner skips Triton's specialization (pointer divisible by 16): an input or output whose
    alignment differs from the one the kernel was compiled for goes through kernel[grid]."""
    gen = torch.Generator().manual_seed(5)
    shapes, offs, flat = _flat_bucket(gen)
    plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    k = FakeKernel("all")
    out = _outputs(plan)
    la = fl.FlatLauncher(plan, out, "fp32", fast=True, kernel=k)
    la(flat)
    assert flat.data_ptr() % 16 == 0
    big = torch.empty(flat.numel() + 1, dtype=flat.dtype)
    shifted = big[1:]  # 2-byte offset
    shifted.copy_(flat)
    assert shifted.data_ptr() % 16 != 0
    n_fast = fl.FAST_STATS["fast"]
    la(shifted)
    assert fl.FAST_STATS["fast"] == n_fast and k.log[-1][0] == "jit"
    _check(plan, shifted, out, "fp32")
    la(flat)
    assert fl.FAST_STATS["fast"] == n_fast + 1
    # the outputs' storage moved to a 16-byte-misaligned address (arena re-allocated between syncs)
    raw = torch.empty(plan.y_total + 1, dtype=torch.uint8)
    la.y = raw[1:].view(bq.FP8_DTYPE)
    assert la.y.data_ptr() % 16 != 0
    la(flat)
    assert fl.FAST_STATS["fast"] == n_fast + 1 and k.log[-1][0] == "jit"
    _check(plan, flat, (la.y, out[1]), "fp32")


def test_launcher_refuses_wrong_input_and_outputs():
    gen = torch.Generator().manual_seed(6)
    shapes, offs, flat = _flat_bucket(gen)
    plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    out = _outputs(plan)
    la = fl.FlatLauncher(plan, out, "fp32", fast=True, kernel=FakeKernel())
    with pytest.raises(ValueError):
        la(flat[: plan.x_extent - 1])  # shorter than the layout
    with pytest.raises(ValueError):
        la(flat.view(-1, 2) if flat.numel() % 2 == 0 else flat[:-1].view(-1, 2))
    with pytest.raises(ValueError):
        fl.FlatLauncher(plan, (out[0][:-1], out[1]), "fp32")
    with pytest.raises(ValueError):
        fl.FlatLauncher(plan, out, "e5m2")
    with pytest.raises(ValueError):
        fl.FlatLauncher(tbq.BucketPlan(shapes, (128, 128), "cpu"), out, "fp32")
    assert plan.x_extent == offs[-1] + 35


def test_without_triton_the_reference_fills_the_outputs():
    gen = torch.Generator().manual_seed(7)
    shapes, offs, flat = _flat_bucket(gen)
    plan = tbq.make_flat_plan(shapes, offs, device="cpu")
    out = _outputs(plan)
    fl.FlatLauncher(plan, out, "ue8m0", fast=True)(flat)  # CPU tensors: no Triton launch
    _check(plan, flat, out, "ue8m0")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("misalign", [0, 3])
def test_gpu_fast_launch_bit_identical_to_kernel_grid(misalign):
    if not tbq.triton_available():
        pytest.skip("triton not available")
    conv = fl.fast_launch_convention()
    assert conv in ("all", "runtime"), f"no usable runner in this Triton: {fl._FAST['error']!r}"
    gen = torch.Generator().manual_seed(8)
    shapes, offs, flat = _flat_bucket(gen, "cuda", misalign)
    plan = tbq.make_flat_plan(shapes, offs, device="cuda")
    for fmt in ("fp32", "ue8m0", "ue8m0_fixed"):
        ref = tbq.quantize_flat(flat, plan, scale_fmt=fmt, views=False)
        out = _outputs(plan, "cuda")
        la = fl.FlatLauncher(plan, out, fmt, fast=True)
        n_fast = fl.FAST_STATS["fast"]
        for step in range(3):
            out[0].view(torch.uint8).fill_(0x7F)
            out[1].fill_(float("nan"))
            la(flat)
            torch.cuda.synchronize()
            assert torch.equal(out[0].view(torch.uint8), ref[0].view(torch.uint8)), (fmt, step)
            assert torch.equal(out[1], ref[1]), (fmt, step)
        assert fl.FAST_STATS["fast"] == n_fast + 2  # first launch through kernel[grid], then the runner
        _check(plan, flat, out, fmt)
