"""What the bundle README tells a KubeRay user: the CPU knob is cluster.kuberay.worker_cpus (there is no `ray
start` to give --num-cpus to), and a Megatron run needs an image with the trainer's packages."""

from __future__ import annotations

import math

from fp8spec.rules.examples import MEGATRON_FP8, MOE, fragment
from tests.conftest import BASE_SPEC, patched
from tests.launchers.conftest import HEAD_CPUS, compile_bundle

VOLUMES = [{"name": "models", "mount_path": "/models", "pvc": "m"}, {"name": "data", "mount_path": "/data", "pvc": "d"},
           {"name": "ckpt", "mount_path": "/shared", "pvc": "c"}]
KUBERAY = {"cluster": {"launcher": "kuberay", "kuberay": {"volumes": VOLUMES}}}


def _readme(write_spec, tmp_path, data) -> str:
    return (compile_bundle(write_spec(data), tmp_path / "out") / "README.md").read_text()


def test_kuberay_names_the_worker_cpus_knob(write_spec, tmp_path):
    from fp8spec.profiles import load_profile

    readme = _readme(write_spec, tmp_path, patched(BASE_SPEC, KUBERAY))
    per_gpu = load_profile("verl", "0.9.1").value("requirement.ray_cpus_per_gpu")
    need = HEAD_CPUS + per_gpu * 8
    assert f"this run needs {need} logical CPUs in all" in readme
    assert f"set `cluster.kuberay.worker_cpus`\n  to at least {math.ceil(need / 1)}" in readme
    assert "start Ray with `--num-cpus`" not in readme


def test_ray_and_slurm_keep_the_num_cpus_advice(write_spec, tmp_path):
    readme = _readme(write_spec, tmp_path, BASE_SPEC)
    assert "start Ray with `--num-cpus` of at least" in readme and "worker_cpus" not in readme


def test_a_megatron_bundle_on_the_default_image_says_what_the_image_needs(write_spec, tmp_path):
    megatron = fragment(BASE_SPEC, MOE, MEGATRON_FP8, {"training": {"parallel": {"ep": 8}}, "hardware": {"gpu": "h200"},
                                                     "rollout": {"gpu_memory_utilization": 0.4}},
                        KUBERAY)
    readme = _readme(write_spec, tmp_path, megatron)
    assert "the image must also hold the Megatron trainer's" in readme
    assert "megatron-core" in readme and "`training.bridge`" in readme
    own = _readme(write_spec, tmp_path / "own",
                  patched(megatron, {"cluster": {"kuberay": {"image": "registry.example/verl-mcore:1"}}}))
    assert "the image must also hold" not in own
    fsdp = _readme(write_spec, tmp_path / "fsdp", patched(BASE_SPEC, KUBERAY))
    assert "the image must also hold" not in fsdp
