"""Read a run's logs into what happened, each thing located at file:line: verl's per-step metric lines, the
runtime patch set's lines, the engine's KV capacity, tracebacks and the progress bar.

Logs of a live or crashed run are partial: a last line cut mid-write is read up to its last complete value
and said so; lines forwarded twice (a worker's own log and the driver's copy of it) count once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from fp8spec.report.names import Names, names
from fp8spec.report.sources import Sources

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Ray's "(Actor pid=N)" in front of a forwarded line, nested when an actor forwards its own child's line
# (vLLM's "(Worker pid=N)" inside "(vLLMHttpServer pid=M)"): all of them go, so a worker's own log line and the
# driver's copy of it read the same.
_RAY_PREFIX = re.compile(r"^\s*(?:\([\w.:-]+ pid=\d+(?:, ip=[\d.]+)?\)\s?)+")
_NUMBER = re.compile(r"^(?:np\.\w+\()?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)\s*\)?$")
_PROGRESS = re.compile(r"Training Progress:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_TRACEBACK = "Traceback (most recent call last):"


@dataclass(frozen=True)
class Loc:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Step:
    step: int
    metrics: dict[str, float]
    loc: Loc


@dataclass(frozen=True)
class Event:
    kind: str  # a LinePattern name (fp8spec/data/report_lines.yaml) or 'kv_cache_size'
    groups: dict
    loc: Loc


@dataclass
class Run:
    sources: list[str] = field(default_factory=list)
    steps: dict[int, Step] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (where, why)
    tracebacks: list[tuple[Loc, str]] = field(default_factory=list)  # (where, the exception line)
    progress: Optional[tuple[int, int, Loc]] = None  # (done, total, where) from the last progress bar
    patches_logged: Optional[tuple[str, Loc]] = None  # the FP8SPEC_RUNTIME_PATCHES the run printed
    total_steps: Optional[int] = None  # from the config verl printed, where the progress bar is not in RUN

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def last_step(self) -> int:
        return max(self.steps, default=0)

    @property
    def total(self) -> Optional[int]:
        return self.progress[1] if self.progress else self.total_steps

    @property
    def finished(self) -> bool:
        """The progress bar reached its total; without a bar (worker logs alone), the last step is the total."""
        if self.progress is not None:
            return self.progress[0] >= self.progress[1] > 0
        return self.total_steps is not None and self.last_step >= self.total_steps


def read_logs(src: Sources) -> Run:
    run = Run(sources=[name for name, _ in src.texts], problems=list(src.problems))
    seen: set[str] = set()
    n = names()
    for name, text in src.texts:
        _read_text(run, name, text, n, seen)
    return run


# verl prints its config at start; the trainer's total_training_steps is the run's length (optimizer sections
# print -1 there until verl fills them in).
_TOTAL_STEPS = re.compile(r"'total_training_steps': (\d+)")
_PATCHES_ENV = re.compile(r"""['"]FP8SPEC_RUNTIME_PATCHES['"]:\s*['"]([\w,]*)['"]""")


def _read_text(run: Run, name: str, text: str, n: Names, seen: set[str]) -> None:
    lines = text.split("\n")
    cut = not text.endswith("\n") and bool(text)
    pending_tb: Optional[Loc] = None
    for i, raw in enumerate(lines, start=1):
        if i == len(lines) and not raw:
            break
        line = _RAY_PREFIX.sub("", _ANSI.sub("", raw.rstrip("\r")))
        loc = Loc(name, i)
        last_cut = cut and i == len(lines)
        if pending_tb is not None and line and not line.startswith((" ", "\t", _TRACEBACK)):
            run.tracebacks.append((pending_tb, line.strip()[:200]))
            pending_tb = None
        if _TRACEBACK in line:
            pending_tb = loc
            continue
        for m in _PROGRESS.finditer(line):
            run.progress = (int(m.group(1)), int(m.group(2)), loc)
        total = _TOTAL_STEPS.search(line)
        if total:
            run.total_steps = max(run.total_steps or 0, int(total.group(1))) or None
        if run.patches_logged is None:
            env = _PATCHES_ENV.search(line)
            if env:
                run.patches_logged = (env.group(1), loc)
        key = line.strip()
        if key in seen:  # the driver's copy of a worker's line, or the same log given twice
            continue
        if line.startswith(n.step_prefix):
            _read_step(run, line, loc, last_cut, n)
            seen.add(key)
            continue
        if "fp8spec " in line or "supports " in line:
            for p in n.lines:
                found = p.regex.search(line)
                if found:
                    run.events.append(Event(p.name, dict(found.groupdict()), loc))
                    seen.add(key)
                    break
        for text, unit in n.kv_cache_lines:
            at = line.find(text)
            if at >= 0:
                count = line[at + len(text) :].split(unit)[0].replace(",", "").strip()
                if count.isdigit():
                    run.events.append(Event("kv_cache_size", {"tokens": int(count)}, loc))
                    seen.add(key)
    if pending_tb is not None:
        run.tracebacks.append((pending_tb, "(the traceback is cut short)"))


def _read_step(run: Run, line: str, loc: Loc, cut: bool, n: Names) -> None:
    parts = line.rstrip().split(n.separator)
    head = parts[0][len(n.step_prefix) :]
    if not head.isdigit():
        run.problems.append((str(loc), f"a step line without a step number: {parts[0][:40]!r}"))
        return
    if cut:  # the last value may be a prefix of the number verl wrote
        parts = parts[:-1]
        run.problems.append(
            (str(loc), "the log ends in the middle of this step's line; its last value is not read")
        )
    metrics: dict[str, float] = {}
    for part in parts[1:]:
        key, sep, value = part.partition(n.pair)
        m = _NUMBER.match(value.strip())
        if sep and m:
            metrics[key.strip()] = float(m.group(1))
    step = int(head)
    if all(k.startswith("val-") for k in metrics):  # step 0 and test_freq steps: validation only
        return
    if step in run.steps:  # not a copy of the same line (those are skipped before): another run, or a resume
        first = run.steps[step]
        run.problems.append(
            (
                str(loc),
                f"step {step} logged again with other values (first at {first.loc}): RUN holds more than "
                "one run or a resumed one; the first is kept, give the report one run's logs",
            )
        )
        return
    run.steps[step] = Step(step, metrics, loc)
