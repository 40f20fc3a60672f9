"""Slurm writes its log beside the bundle, not into it, so that `compile --force` can replace the bundle after a
run; a file someone adds inside the bundle is still refused."""

from __future__ import annotations

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, patched

SLURM = patched(BASE_SPEC, {"name": "slurm-run", "cluster": {"launcher": "slurm"}})


def _compile(spec, out):
    return run_cli_here("compile", str(spec), "-o", str(out), "--force")


def _bundles(out):
    return [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]


def _log_path(bundle, job_id: int):
    """Where sbatch writes the log of job ``job_id`` run from the bundle folder (its --output directive)."""
    (directive,) = [line for line in (bundle / "slurm.sbatch").read_text().splitlines()
                    if line.startswith("#SBATCH --output=")]
    pattern = directive.removeprefix("#SBATCH --output=")
    return bundle / pattern.replace("%x", SLURM["name"]).replace("%j", str(job_id))


def test_force_recompiles_after_a_slurm_run(write_spec, tmp_path):
    spec, out = write_spec(SLURM), tmp_path / "bundles"
    assert _compile(spec, out).returncode == 0
    (bundle,) = _bundles(out)
    log = _log_path(bundle, 123)
    assert log.resolve().parent == out.resolve()  # beside the bundle folder, not in it
    log.write_text("slurm output\n")  # what sbatch leaves after a run started from the bundle folder
    proc = _compile(spec, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert log.read_text() == "slurm output\n"  # the job's log is not the bundle's: kept
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted([bundle.name, log.name])


def test_a_file_added_inside_the_bundle_is_still_refused(write_spec, tmp_path):
    spec, out = write_spec(SLURM), tmp_path / "bundles"
    assert _compile(spec, out).returncode == 0
    (bundle,) = _bundles(out)
    (bundle / "slurm-123.out").write_text("x")
    proc = _compile(spec, out)
    assert proc.returncode != 0 and "slurm-123.out" in proc.stdout + proc.stderr
