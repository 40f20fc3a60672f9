"""The real runs kept in tests/data/report/ and damaged copies of them made in a test's folder: each damage
takes the real lines and cuts, drops or scales them, so the verdict that should fire has a real run around it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

from tests.conftest import REPO

DATA = REPO / "tests/data/report"
# A compiled bundle's preflight.json (direct_sync, kv_scales): the tiny FSDP + vLLM golden as fp8spec compiled it
# before the runtime patch replay_poll (2026-12-04), as the bundles of the runs kept here were; today's golden also
# lists replay_poll, which those runs never had.
BUNDLE_DIRECT = DATA / "bundle-direct"
SPEC_4B = REPO / "tests/data/rl_real/real-4b-h200-fp8kv/spec.yaml"  # the spec the committed 4B run used
LOGS = {
    "real-4b": "real-4b/real-4b-h200-fp8kv.log",
    "fsdp-vllm": "fsdp-vllm/tiny-qwen3-h200-fp8.log",
    "megatron-te": "megatron-te/tiny-qwen3-moe-megatron-fp8.log",
    "sglang": "sglang/tiny-qwen3-h200-sglang-fp8.log",
    "moe-direct": "moe-direct/tiny-qwen3-moe-h200-direct.log",
    "window-bf16": "window-bf16/real-4b-h200-bf16.log",
    "window-fp8kv": "window-fp8kv/real-4b-h200-fp8kv.log",
}
# The window pair: the same base spec, BF16 and FP8 W8A8 + FP8 KV rollouts, one window (each folder has its spec).
WINDOW_SPEC = {"window-bf16": DATA / "window-bf16/spec.yaml", "window-fp8kv": DATA / "window-fp8kv/spec.yaml"}
STEP = re.compile(r"step:(\d+) - ")
SPEC_PATH = re.compile(r"^(\s*(?:config_path|path): )(\.\./\S+)", re.M)


def spec_4b_copy(tmp: Path, old: str = "", new: str = "") -> Path:
    """The 4B run's spec written into ``tmp`` with ``old`` replaced by ``new``, its relative paths made absolute."""
    text = SPEC_PATH.sub(
        lambda m: m[1] + str((SPEC_4B.parent / m[2]).resolve()), SPEC_4B.read_text(encoding="utf-8")
    )
    assert old in text, old
    out = tmp / "spec.yaml"
    out.write_text(text.replace(old, new), encoding="utf-8")
    return out


def log_copy(tmp: Path, topic: str, damage: Callable[[list[str]], list[str]] | None = None) -> Path:
    """The run's driver log copied into ``tmp`` (damaged by ``damage``, a function of its lines)."""
    lines = (DATA / LOGS[topic]).read_text(encoding="utf-8").splitlines(keepends=True)
    out = tmp / f"{topic}.log"
    out.write_text("".join(damage(lines) if damage else lines), encoding="utf-8")
    return out


def folder_copy(tmp: Path, topic: str) -> Path:
    dest = tmp / topic
    shutil.copytree(DATA / topic, dest)
    return dest


def bundle_of(tmp: Path, topic: str) -> Path:
    """A bundle folder whose preflight.json lists the patches the run itself printed in its runtime env."""
    text = (DATA / LOGS[topic]).read_text(encoding="utf-8")
    patches = re.search(r"FP8SPEC_RUNTIME_PATCHES': '([\w,]*)'", text).group(1)
    folder = tmp / f"bundle-{topic}"
    folder.mkdir()
    env = {"FP8SPEC_RUNTIME_PATCHES": patches}
    (folder / "preflight.json").write_text(json.dumps({"env": env}), encoding="utf-8")
    return folder


def step_of(line: str) -> int | None:
    m = STEP.search(line)
    return int(m.group(1)) if m else None


def drop(pattern: str) -> Callable[[list[str]], list[str]]:
    return lambda lines: [ln for ln in lines if not re.search(pattern, ln)]


def drop_after_step(pattern: str, step: int) -> Callable[[list[str]], list[str]]:
    """Drop the lines matching ``pattern`` that come after the line of ``step``."""

    def damage(lines: list[str]) -> list[str]:
        out, after = [], False
        for ln in lines:
            after = after or step_of(ln) == step
            if not (after and re.search(pattern, ln)):
                out.append(ln)
        return out

    return damage


def set_metric(key: str, value: Callable[[int, float], float]) -> Callable[[list[str]], list[str]]:
    """Rewrite one metric of every step line: ``value(step, old)``."""
    pat = re.compile(rf"( - {re.escape(key)}:)([-+0-9.e]+)")

    def damage(lines: list[str]) -> list[str]:
        out = []
        for ln in lines:
            step = step_of(ln)
            if step is not None:
                ln = pat.sub(lambda m, s=step: m.group(1) + repr(value(s, float(m.group(2)))), ln)
            out.append(ln)
        return out

    return damage


def end_after_step(step: int, tail: list[str] = ()) -> Callable[[list[str]], list[str]]:
    """The log as it was just after ``step``'s line (a job still running, or killed), plus ``tail``."""

    def damage(lines: list[str]) -> list[str]:
        at = next(i for i, ln in enumerate(lines) if step_of(ln) == step)
        return lines[: at + 1] + list(tail)

    return damage


def cut_mid_line(step: int) -> Callable[[list[str]], list[str]]:
    """The log cut in the middle of ``step``'s line (a copy taken while verl was writing it)."""

    def damage(lines: list[str]) -> list[str]:
        at = next(i for i, ln in enumerate(lines) if step_of(ln) == step)
        return lines[:at] + [lines[at][: len(lines[at]) // 2]]

    return damage


def real_traceback() -> list[str]:
    """The Megatron run's real crash: its traceback lines, to be put after another run's step."""
    lines = (DATA / LOGS["megatron-te"]).read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if "Traceback (most recent call last)" in ln)
    return lines[at:]
