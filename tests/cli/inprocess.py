"""The CLI run in the test's own process, for tests that check only what a command prints and its exit code: the
same entry point as the console script (fp8spec.cli.main, its error handling included), without a Python start and
the package's import per call (seconds each on a loaded 2-core machine). Process behaviour (signals, broken pipes,
environment isolation, completion) stays with the subprocess tests (tests/specfile/test_bad_inputs.run_cli)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

from tests.conftest import REPO


def run_cli_here(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``fp8spec ARGS`` as run_cli runs it, returning its exit code and output in the same shape."""
    from fp8spec.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv, here = sys.argv, os.getcwd()
    code: int | str | None = 0
    try:
        sys.argv = ["fp8spec", *args]
        os.chdir(cwd or REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
        os.chdir(here)
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(["fp8spec", *args], returncode, out.getvalue(), err.getvalue())
