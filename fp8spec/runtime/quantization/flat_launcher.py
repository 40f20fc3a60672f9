"""Pre-bound flat launches: one flat plan quantized again and again into fixed output buffers.

The per-launch Python of ``kernel[grid](...)`` (argument binding,
specialization key string, cache lookup, globals check) is replaced, for a plan launched again and
again into the same output buffers, by the compiled kernel's own launcher,
``CompiledKernel.__getitem__(grid)`` -> ``runner(*args)``, which Triton 3.x keeps for launching a
compiled kernel directly. What ``runner`` takes changed across versions (all parameters, constexprs
included, in Triton >= 3.3; only the run-time ones before), so the convention is found once per
process by a bit-exact self-test on a small bucket (``fast_launch_convention``); without one that
passes, or if a runner ever raises, every launch takes ``kernel[grid](...)`` as before. The runner
skips Triton's specialization, so it is used only while the 16-byte alignment of the input and of
the two outputs is the one the kernel was compiled for (the plan's tables never move).

The kernel and ``quantize_flat`` are ``triton_blockquant``'s; this module only binds and launches them.
"""

from __future__ import annotations

from typing import Any

import torch

from fp8spec.runtime.quantization import blockquant as _ref
from fp8spec.runtime.quantization.bucket_plan import (
    SCALE_FMT_CODE,
    check_fmt,
    check_out,
    make_flat_plan,
    same_device,
)
from fp8spec.runtime.quantization.triton_blockquant import get_kernel, quantize_flat

_FAST: dict[str, Any] = {"convention": None, "checked": False, "error": None, "disabled": False}
FAST_STATS = {"fast": 0, "jit": 0, "fallbacks": 0}


def reset_fast_launch() -> None:
    """Forget the runner convention found (it is decided again at the next fast launch)."""
    _FAST.update(convention=None, checked=False, error=None, disabled=False)
    for k in FAST_STATS:
        FAST_STATS[k] = 0


def _kernel_args(flat, y, s, plan, scale_fmt, amax_floor, precise_div):
    """The kernel's parameters in signature order: run-time ones, then the constexprs."""
    rt = (flat, y, s, plan.meta_dev, plan.tile2mat, float(amax_floor), 448.0, 1.0)
    ce = (plan.block[0], plan.block[1], SCALE_FMT_CODE[scale_fmt], precise_div, plan.aligned, 0)
    return rt, ce


def _runner_for(compiled, grid, convention):
    getitem = getattr(type(compiled), "__getitem__", None)
    if getitem is None or convention is None:
        return None
    return compiled[grid]


def fast_launch_convention(kernel: Any = None, device: torch.device | str | None = None) -> str | None:
    """``"all"`` (runner takes every parameter, Triton >= 3.3), ``"runtime"`` (run-time parameters
    only) or None (no usable runner: every launch goes through ``kernel[grid](...)``). Decided once
    per process: a small bucket is quantized through ``kernel[grid](...)`` and through the runner of
    the kernel that launch returned, and the outputs must be equal bit for bit."""
    if _FAST["checked"]:
        return _FAST["convention"]
    _FAST["checked"] = True
    if kernel is None:
        kernel = get_kernel()
        if kernel is None or not torch.cuda.is_available():
            return None
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device)
    try:
        g = torch.Generator(device=device).manual_seed(1234)
        shapes, offs = [(256, 384), (130, 200), (2, 128, 256)], [0, 256 * 384, 256 * 384 + 130 * 200]
        flat = torch.randn(offs[-1] + 2 * 128 * 256, generator=g, device=device).to(torch.bfloat16)
        plan = make_flat_plan(shapes, offs, device=device)
        outs = []
        for _ in range(3):
            outs.append(
                (
                    torch.full((plan.y_total,), 0x7F, dtype=torch.uint8, device=device).view(_ref.FP8_DTYPE),
                    torch.full((plan.s_total,), float("nan"), device=device),
                )
            )
        rt, ce = _kernel_args(flat, *outs[0], plan, "fp32", _ref.DEFAULT_AMAX_FLOOR, kernel.precise_div)
        grid = (plan.n_tiles, 1, 1)
        compiled = kernel[grid](
            *rt, BM=ce[0], BN=ce[1], FMT=ce[2], PRECISE_DIV=ce[3], ALIGNED=ce[4], ROUND=ce[5], num_warps=4
        )
        for conv, out in (("all", outs[1]), ("runtime", outs[2])):
            runner = _runner_for(compiled, grid, conv)
            if runner is None:
                break
            rt2, _ = _kernel_args(flat, *out, plan, "fp32", _ref.DEFAULT_AMAX_FLOOR, kernel.precise_div)
            try:
                runner(*(rt2 + ce if conv == "all" else rt2))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            except TypeError:  # the launcher takes another number of arguments
                continue
            same = torch.equal(out[0].view(torch.uint8), outs[0][0].view(torch.uint8)) and torch.equal(
                out[1], outs[0][1]
            )
            if same:
                _FAST["convention"] = conv
            break
    except Exception as e:  # pragma: no cover - depends on the Triton version
        _FAST["error"] = e
        _FAST["convention"] = None
    return _FAST["convention"]


class FlatLauncher:
    """One plan launched into fixed output buffers ``out=(y, s)``: grid, scalars and output pointers
    bound once; ``launcher(flat)`` quantizes ``flat`` (a contiguous 1-D buffer of the plan's layout).

    ``fast=False`` (default): ``kernel[grid](...)`` every call (Triton's usual launch path).
    ``fast=True``: after the first launch, the compiled kernel's runner (see ``fast_launch_convention``).
    Output bits are the same either way (same compiled kernel, same arguments). Without CUDA/Triton
    the reference fills ``out``."""

    _args: Any  # the compiled runner's arguments after the buffer (None before the first launch)

    __slots__ = (
        "plan",
        "y",
        "s",
        "scale_fmt",
        "amax_floor",
        "num_warps",
        "fast",
        "_runner",
        "_args",
        "_aligned_at_compile",
        "_device",
        "_kernel",
    )

    def __init__(
        self,
        plan,
        out,
        scale_fmt="fp32",
        amax_floor=_ref.DEFAULT_AMAX_FLOOR,
        num_warps=4,
        fast=False,
        kernel=None,
    ):
        check_fmt(scale_fmt)
        if plan.x_offsets is None:
            raise ValueError("FlatLauncher needs a flat plan (make_flat_plan)")
        if not same_device(plan.device, out[0].device):
            raise ValueError("out buffers must be on the plan's device")
        check_out(out, plan, out[0].device)
        self.plan, (self.y, self.s) = plan, out
        self.scale_fmt, self.amax_floor, self.num_warps, self.fast = (
            scale_fmt,
            float(amax_floor),
            num_warps,
            fast,
        )
        self._runner = self._args = self._aligned_at_compile = None
        self._device = out[0].device
        self._kernel = kernel  # tests: a stand-in for the Triton kernel (used on any device)

    def __call__(self, flat: torch.Tensor) -> None:
        plan = self.plan
        if (
            flat.numel() < plan.x_extent
            or flat.device != self._device
            or flat.dim() != 1
            or not flat.is_contiguous()
        ):
            raise ValueError(
                "flat does not hold the plan's layout (too short, not 1-D contiguous, or another device)"
            )
        if not plan.n_tiles:
            return
        runner = self._runner
        if runner is not None and self._alignment(flat) == self._aligned_at_compile and not _FAST["disabled"]:
            try:
                runner(flat, *self._args)
                FAST_STATS["fast"] += 1
                return
            except Exception as e:  # pragma: no cover - a Triton whose runner changed under us
                _FAST["disabled"], _FAST["error"] = True, e
                FAST_STATS["fallbacks"] += 1
                self._runner = None
        self._launch_jit(flat)

    def _launch_jit(self, flat):
        kernel = self._kernel if self._kernel is not None else get_kernel()
        if kernel is None or (self._kernel is None and not flat.is_cuda):
            quantize_flat(
                flat,
                self.plan,
                self.scale_fmt,
                self.amax_floor,
                self.num_warps,
                views=False,
                out=(self.y, self.s),
            )
            return
        rt, ce = _kernel_args(
            flat, self.y, self.s, self.plan, self.scale_fmt, self.amax_floor, kernel.precise_div
        )
        compiled = kernel[(self.plan.n_tiles,)](
            *rt,
            BM=ce[0],
            BN=ce[1],
            FMT=ce[2],
            PRECISE_DIV=ce[3],
            ALIGNED=ce[4],
            ROUND=ce[5],
            num_warps=self.num_warps,
        )
        FAST_STATS["jit"] += 1
        if self.fast and self._runner is None and not _FAST["disabled"]:
            conv = fast_launch_convention(kernel, flat.device)
            if conv is not None:
                self._runner = _runner_for(compiled, (self.plan.n_tiles, 1, 1), conv)
                self._args = rt[1:] + ce if conv == "all" else rt[1:]
                self._aligned_at_compile = self._alignment(flat)

    def _alignment(self, flat):
        """16-byte alignment of the pointers that can move between calls: the input, and the outputs
        (their storage is given back and re-allocated between weight syncs); the kernel the runner
        launches was specialized for the alignment seen at its first launch."""
        return (flat.data_ptr() % 16 == 0, self.y.data_ptr() % 16 == 0, self.s.data_ptr() % 16 == 0)
