"""Located diagnostics, shaped like compiler errors: ``path:line:col: severity CODE message``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Iterable, Literal, Optional

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}

# Exit codes, documented in the README and `fp8spec --help`.
EXIT_OK = 0
EXIT_RULE_ERRORS = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    code: str
    message: str
    file: str
    line: int
    col: int
    path: str = ""
    hint: Optional[str] = None

    def sort_key(self) -> tuple:
        return (self.file, self.line, self.col, SEVERITY_ORDER[self.severity], self.code, self.message)

    def render(self) -> str:
        where = f"{printable(self.file)}:{self.line}:{self.col}"
        head = f"{where}: {self.severity} {self.code} {_one_line(self.message)}"
        if self.hint:
            return f"{head}\n    hint: {_one_line(self.hint)}"
        return head

    def to_dict(self) -> dict:
        return asdict(self)


def _one_line(text: str) -> str:
    return printable(" ".join(str(text).split()))


def printable(text: str) -> str:
    """``text`` with every character a terminal would not show as itself (controls, bidi and other format
    characters, line separators, undecodable file-name bytes) written as a Python escape, so one
    diagnostic is always one honest line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def render_text(diagnostics: Iterable[Diagnostic]) -> str:
    return "\n".join(d.render() for d in diagnostics)


def render_json(results: dict[str, list[Diagnostic]], extra: Optional[dict[str, dict]] = None) -> str:
    """JSON for CI: one entry per file with its diagnostics and counts (and ``extra[file]``'s keys)."""
    files = []
    for file, diags in results.items():
        files.append(
            {
                "file": file,
                "errors": sum(d.severity == "error" for d in diags),
                "warnings": sum(d.severity == "warning" for d in diags),
                "diagnostics": [d.to_dict() for d in diags],
                **(extra or {}).get(file, {}),
            }
        )
    return json.dumps({"files": files}, indent=2, sort_keys=True)


def summary_line(diags: list[Diagnostic]) -> str:
    errors = sum(d.severity == "error" for d in diags)
    warnings = sum(d.severity == "warning" for d in diags)
    return f"{errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}"
