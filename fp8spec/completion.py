"""`fp8spec --install-completion` and `--show-completion`: shell completion for bash, zsh and fish.

Typer's own installer writes straight onto ~/.bashrc (a folder there, or a read-only home, is a traceback),
follows links and exits 1, the spec-error code, for a shell it does not know. This one writes through
fp8spec.safe_write: the completion script is replaced only when it is fp8spec's own (it names
_FP8SPEC_COMPLETE), the rc file gets its one line by an atomic replace that keeps its permission bits, a link or
special file at either name is refused (the message says which line to add by hand), and any failure is one
line with exit 2 and leaves both files as they were.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fp8spec.bounded_read import ReadError, read_regular
from fp8spec.safe_write import Target, WriteError, check, prepare_folder, remove_created, write_files

SHELLS = ("bash", "zsh", "fish")
PROG = "fp8spec"
COMPLETE_VAR = "_FP8SPEC_COMPLETE"
_MAX_RC = 16 * 1024 * 1024  # an rc file larger than this is not one to edit automatically


class CompletionError(Exception):
    """Completion cannot be shown or installed (exit 2); the message is for users."""


def register_shells() -> None:
    """Let `_FP8SPEC_COMPLETE=complete_bash fp8spec ...` (what the scripts run at each Tab) answer: typer
    registers its shell classes only when it adds its own install options, which fp8spec replaces."""
    from typer._completion_classes import completion_init

    completion_init()


def detect_shell() -> Optional[str]:
    """The shell that started fp8spec (its parent processes), else $SHELL's name; None when neither says."""
    try:
        import shellingham

        name, _ = shellingham.detect_shell()
        return str(name).lower()
    except Exception:  # not installed, or no shell among the parents (a script, a container's init)
        shell = os.environ.get("SHELL", "")
        return os.path.basename(shell).lower() or None


def script(shell: Optional[str]) -> str:
    """The completion script for ``shell``; CompletionError for a shell fp8spec has none for."""
    if shell not in SHELLS:
        raise CompletionError(
            f"shell {shell or '(not detected)'!r} is not supported; fp8spec completes in {', '.join(SHELLS)} "
            "(run it from one of them)"
        )
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell)


@dataclass(frozen=True)
class _Plan:
    script_path: Path
    rc_path: Optional[Path]
    rc_lines: tuple[str, ...]


def _plan(shell: str, home: Path) -> _Plan:
    if shell == "bash":
        path = home / ".bash_completions" / f"{PROG}.sh"
        return _Plan(path, home / ".bashrc", (f"source {shlex.quote(str(path))}",))
    if shell == "zsh":
        return _Plan(
            home / ".zfunc" / f"_{PROG}",
            home / ".zshrc",
            ("fpath+=~/.zfunc; autoload -Uz compinit; compinit",),
        )
    return _Plan(home / ".config" / "fish" / "completions" / f"{PROG}.fish", None, ())


def _home() -> Path:
    try:
        home = Path.home()
    except (RuntimeError, KeyError) as err:  # no HOME and no password entry
        raise CompletionError(f"cannot find the home folder: {err}") from None
    if not home.is_absolute():
        raise CompletionError(f"HOME {str(home)!r} is not an absolute path")
    try:
        if not home.is_dir():
            raise CompletionError(f"HOME {home} is not a folder")
    except OSError as err:
        raise CompletionError(f"HOME {home}: {err.strerror or err}") from None
    return home


def _rc_target(rc: Path, lines: tuple[str, ...], by_hand: str) -> Optional[Target]:
    """The rc file with ``lines`` added (None when it has them), keeping its permission bits."""
    try:
        st = check(Target(rc, b""))
    except WriteError as err:
        raise CompletionError(f"{err}; {by_hand}") from None
    old = b""
    if st is not None:
        try:
            old = read_regular(rc, _MAX_RC, rc.name)
        except ReadError as err:
            raise CompletionError(f"{rc}: {err}; {by_hand}") from None
    text = old.decode("utf-8", errors="surrogateescape")
    missing = [line for line in lines if line not in text.splitlines()]
    if not missing:
        return None
    if text and not text.endswith("\n"):
        text += "\n"
    text += "".join(f"{line}\n" for line in missing)
    mode = None if st is None else st.st_mode & 0o7777
    return Target(rc, text.encode("utf-8", errors="surrogateescape"), True, None, mode)


def install(shell: Optional[str]) -> tuple[str, Path]:
    """Install completion for ``shell`` (detected when None): returns (shell, the script's path)."""
    shell = shell or detect_shell()
    text = script(shell)
    assert shell is not None
    home = _home()
    plan = _plan(shell, home)
    by_hand = (
        f"add {' and '.join(repr(line) for line in plan.rc_lines)} to {plan.rc_path} yourself"
        if plan.rc_path
        else "nothing was installed"
    )
    data = (text + "\n").encode("utf-8")
    targets = [
        Target(plan.script_path, data, False, _is_ours, refused="it is not fp8spec's: move it away first")
    ]
    if plan.rc_path is not None:
        rc = _rc_target(plan.rc_path, plan.rc_lines, by_hand)
        if rc is not None:
            targets.append(rc)
    created = None
    try:
        created = prepare_folder(plan.script_path.parent)
        write_files(targets)
    except WriteError as err:
        remove_created(created, plan.script_path.parent)
        raise CompletionError(f"{err}; nothing installed") from None
    except BaseException:
        remove_created(created, plan.script_path.parent)
        raise
    return shell, plan.script_path


def _is_ours(old: bytes) -> bool:
    return COMPLETE_VAR.encode("ascii") in old
