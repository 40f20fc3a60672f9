"""KubeRay: every path the job reads or writes lies on a mounted volume, or the spec is refused where it says so."""

from __future__ import annotations

from fp8spec.resolve.job_paths import NOT_OPENED_BY_JOB, WRITTEN, job_paths, path_fields
from fp8spec.specfile.model import Spec
from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, SPECS, patched

MODELS_AND_DATA = [
    {"name": "models", "mount_path": "/models", "pvc": "models"},
    {"name": "data", "mount_path": "/data", "pvc": "data"},
]


def _kuberay(volumes: list[dict], **more) -> dict:
    return patched(BASE_SPEC, {"cluster": {"launcher": "kuberay", "kuberay": {"volumes": volumes}}}, more)


def _at(result, code: str) -> dict[str, str]:
    return {d.path: d.severity for d in result.diagnostics if d.code == code}


def test_checkpoints_outside_every_volume_are_refused_at_the_field(validate):
    # models and data mounted, checkpoints on /shared: they would land on pod disks deleted after the job
    result = validate(_kuberay(MODELS_AND_DATA, trainer={"checkpoint_dir": "/shared/checkpoints/run"}))
    (d,) = [d for d in result.diagnostics if d.code == "CLU003"]
    assert (d.severity, d.path) == ("error", "trainer.checkpoint_dir")
    assert "/shared/checkpoints/run" in d.message and "deleted with the pod" in d.message
    assert "volume" in d.hint
    assert d.line > 1  # located at the field, not the top of the file


def test_checkpoints_under_a_read_only_volume_are_refused(validate):
    volumes = [*MODELS_AND_DATA, {"name": "ckpt", "mount_path": "/shared", "pvc": "c", "read_only": True}]
    result = validate(_kuberay(volumes))
    assert _at(result, "CLU003") == {"trainer.checkpoint_dir": "error"}
    assert "read_only" in next(d.message for d in result.diagnostics if d.code == "CLU003")


def test_checkpoints_under_a_writable_volume_pass(validate):
    volumes = [*MODELS_AND_DATA, {"name": "ckpt", "mount_path": "/shared/", "pvc": "c"}]
    result = validate(_kuberay(volumes))
    assert not _at(result, "CLU003") and not _at(result, "CLU002")


def test_every_read_path_is_checked_not_only_model_and_data(validate):
    volumes = [*MODELS_AND_DATA, {"name": "ckpt", "mount_path": "/shared", "pvc": "c"}]
    spec = _kuberay(
        volumes,
        data={"train_files": ["/data/a.parquet", "/elsewhere/b.parquet"], "val_files": "/val/v.parquet"},
        trainer={"resume": "resume_path", "resume_from": "/old/global_step_5"},
    )
    assert _at(validate(spec), "CLU002") == {
        "data.train_files.1": "error",
        "data.val_files": "error",
        "trainer.resume_from": "error",
    }


def test_the_image_may_hold_what_is_read_but_nothing_written(validate):
    spec = _kuberay(MODELS_AND_DATA[:1], acknowledge={"CLU002": "the image holds the data"})
    result = validate(spec)
    assert set(_at(result, "CLU002").values()) == {"info"}
    assert _at(result, "CLU003") == {"trainer.checkpoint_dir": "error"}
    ack = patched(spec, {"acknowledge": {"CLU003": "try"}})
    assert any(d.code == "S005" and "CLU003" in d.message for d in validate(ack).diagnostics)


def test_every_path_field_of_the_spec_format_is_classified():
    """A new path field is a path the job opens unless it is named, with the reason, as one it never opens."""
    fields = set(path_fields(Spec))
    assert set(NOT_OPENED_BY_JOB) <= fields and WRITTEN <= fields
    opened = fields - set(NOT_OPENED_BY_JOB)
    assert {"model.path", "data.train_files", "data.val_files", "trainer.checkpoint_dir", "trainer.resume_from"} \
        <= opened


def test_job_paths_give_every_opened_field_of_a_spec(write_spec):
    from fp8spec.specfile.loader import load_spec

    data = patched(BASE_SPEC, {"trainer": {"resume": "resume_path", "resume_from": "/c/global_step_1"}})
    spec = load_spec(write_spec(data)).spec
    got = {(p.field, p.writes) for p in job_paths(spec)}
    assert got == {("model.path", False), ("data.train_files", False), ("data.val_files", False),
                   ("trainer.checkpoint_dir", True), ("trainer.resume_from", False)}
    hub = load_spec(write_spec(patched(data, {"model": {"path": "Qwen/Qwen3-8B-Base", "from_hub": True},
                                              "data": {"train_files": "hdfs://nn/train.parquet"}}))).spec
    assert {p.field for p in job_paths(hub)} == {"data.val_files", "trainer.checkpoint_dir", "trainer.resume_from"}


def test_compile_refuses_and_writes_nothing(write_spec, tmp_path):
    spec = write_spec(_kuberay(MODELS_AND_DATA, trainer={"checkpoint_dir": "/shared/checkpoints/run"}))
    proc = run_cli_here("compile", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "CLU003" in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_shipped_kuberay_example_mounts_everything(validate):
    from fp8spec.rules.runner import validate_path

    result = validate_path(SPECS / "qwen3-8b-sglang.yaml")
    assert not [d for d in result.diagnostics if d.code in ("CLU002", "CLU003")]
