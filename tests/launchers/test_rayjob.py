"""rayjob.yaml: a KubeRay RayJob validated against the RayJob CRD's OpenAPI schema (KubeRay v1.7.0).

The CRD files are test data kept outside the project (../shared/data/kuberay/, see its SOURCE.md). The schema
is applied strictly: an object schema with properties rejects fields it does not declare, as `kubectl apply`
does with server-side field validation (Kubernetes would otherwise silently prune a misspelt field).
"""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import REPO, SPECS, dump_yaml, patched
from tests.launchers.conftest import compile_bundle

jsonschema = pytest.importorskip("jsonschema")

KUBERAY = REPO.parent / "shared" / "data" / "kuberay"
RAYJOB_CRD = KUBERAY / "ray.io_rayjobs.v1.7.0.yaml"
EXAMPLES = sorted(SPECS.glob("*.yaml"))


def _strict(schema):
    """Copy of an OpenAPI v3 schema where objects with declared properties forbid undeclared ones."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=1)
def rayjob_validator():
    if not RAYJOB_CRD.is_file():
        pytest.skip(f"KubeRay CRD test data not found at {RAYJOB_CRD} (see ../shared/data/kuberay/SOURCE.md)")
    crd = YAML(typ="safe").load(RAYJOB_CRD.read_text(encoding="utf-8"))
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == "RayJob"
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict(v1["schema"]["openAPIV3Schema"])
    # metadata is validated by the API server itself (ObjectMeta), the CRD schema declares it as a bare object
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def errors(doc) -> list[str]:
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in rayjob_validator().iter_errors(doc))


def documents(bundle: Path) -> dict[str, dict]:
    docs = list(YAML(typ="safe").load_all((bundle / "rayjob.yaml").read_text(encoding="utf-8")))
    assert [d["kind"] for d in docs] == ["ConfigMap", "RayJob"]
    return {d["kind"]: d for d in docs}


@pytest.fixture(scope="module", params=EXAMPLES, ids=lambda p: p.stem)
def example(request, tmp_path_factory):
    from fp8spec.spec.loader import load_spec

    spec = load_spec(request.param).spec
    return spec, compile_bundle(request.param, tmp_path_factory.mktemp(request.param.stem))


def test_rayjob_validates_against_the_crd(example):
    _, bundle = example
    assert errors(documents(bundle)["RayJob"]) == []


def test_rayjob_is_sized_from_the_spec(example):
    spec, bundle = example
    docs = documents(bundle)
    job = docs["RayJob"]
    expected = json.loads((bundle / "preflight.json").read_text())
    assert job["apiVersion"] == "ray.io/v1"
    name = job["metadata"]["name"]
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 47  # KubeRay: DNS-1035, <= 47
    assert job["metadata"]["namespace"] == spec.cluster.kuberay.namespace
    assert job["spec"]["jobId"] == expected["submission_id"]
    assert job["spec"]["submissionMode"] == "K8sJobMode"
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["backoffLimit"] == 0
    cluster = job["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"] == {"num-cpus": "0", "num-gpus": "0"}
    (head_container,) = head["template"]["spec"]["containers"]
    assert head_container["image"] == spec.cluster.kuberay.image
    assert "nvidia.com/gpu" not in head_container["resources"]["limits"]
    (group,) = cluster["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == spec.hardware.nodes
    assert group["rayStartParams"] == {"num-gpus": str(spec.hardware.gpus_per_node)}
    (worker,) = group["template"]["spec"]["containers"]
    assert worker["image"] == spec.cluster.kuberay.image
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == spec.hardware.gpus_per_node
    assert worker["resources"]["requests"]["nvidia.com/gpu"] == spec.hardware.gpus_per_node
    # the entrypoint runs the preflight and starts training only when it passed
    assert job["spec"]["entrypoint"] == "python3 preflight.py && bash launch.sh"
    runtime_env = YAML(typ="safe").load(job["spec"]["runtimeEnvYAML"])
    bundle_env = YAML(typ="safe").load((bundle / "runtime_env.yaml").read_text())
    assert runtime_env["env_vars"] == bundle_env["env_vars"] == expected["env"]
    assert runtime_env["working_dir"] == "/fp8spec/bundle"
    # the ConfigMap carries the files the entrypoint runs, byte for byte, mounted where working_dir points
    config_map = docs["ConfigMap"]
    assert config_map["metadata"]["namespace"] == spec.cluster.kuberay.namespace
    for file_name, text in config_map["data"].items():
        assert text == (bundle / file_name).read_text(encoding="utf-8"), file_name
    assert set(config_map["data"]) == {"launch.sh", "preflight.py", "preflight.json"}
    submitter = job["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["restartPolicy"] == "Never"
    (volume,) = submitter["volumes"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    mounts = {m["mountPath"]: m["subPath"] for m in submitter["containers"][0]["volumeMounts"]}
    assert mounts == {f"/fp8spec/bundle/{f}": f for f in config_map["data"]}


def test_strict_validation_catches_typos_and_wrong_types(bundle_30b):
    """The check has teeth: a misspelt field, a string count and a missing required field all fail."""
    job = documents(bundle_30b)["RayJob"]
    assert errors(job) == []
    typo = copy.deepcopy(job)
    typo["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 2
    assert any("'replica' was unexpected" in e for e in errors(typo))
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "2"
    assert any("replicas" in e and "not of type 'integer'" in e for e in errors(wrong_type))
    missing = copy.deepcopy(job)
    del missing["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"]
    assert any("'groupName' is a required property" in e for e in errors(missing))
    bad_start_param = copy.deepcopy(job)
    bad_start_param["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]["num-gpus"] = 8
    assert any("num-gpus" in e for e in errors(bad_start_param))


def test_hostile_values_stay_data(write_spec, tmp_path):
    """Image and settings from the spec are quoted YAML scalars: they come back exactly, as one value."""
    from tests.conftest import BASE_SPEC

    image = 'registry.example:5000/verl:1.0 # not a comment "q" \'s\' {x: [1]} &a *b !!str'
    data = patched(BASE_SPEC, {"name": "hostile_name.v2", "cluster": {"launcher": "kuberay", "kuberay": {
        "image": image, "namespace": "rl-team", "ray_version": "2.49.1", "worker_cpus": "96",
        "worker_memory": "1500Gi"}}})
    bundle = compile_bundle(write_spec(data), tmp_path / "out")
    docs = documents(bundle)
    job = docs["RayJob"]
    assert errors(job) == []
    assert job["metadata"]["name"] == "hostile-name-v2"
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == "2.49.1"
    containers = [job["spec"]["submitterPodTemplate"]["spec"]["containers"][0],
                  job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0],
                  job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]]
    assert [c["image"] for c in containers] == [image] * 3
    worker = containers[2]["resources"]["limits"]
    assert worker == {"nvidia.com/gpu": 8, "cpu": "96", "memory": "1500Gi"}
    assert "kuberay" in (bundle / "README.md").read_text()


def test_long_spec_names_fit_kuberay_limits():
    from fp8spec.compiler.launchers import k8s_name

    assert k8s_name("qwen3-8b-fp8-rollout") == "qwen3-8b-fp8-rollout"
    assert k8s_name("8b_run.v2") == "fp8-8b-run-v2"
    long = "a" * 63
    short = k8s_name(long)
    assert len(short) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", short)
    assert k8s_name("a" * 62 + "b") != short  # distinct names stay distinct after shortening


def test_spec_rejects_bad_kubernetes_values():
    from pydantic import ValidationError

    from fp8spec.spec.model import KubeRaySettings

    for field, value in (("namespace", "rl_team"), ("namespace", "RL"), ("worker_memory", "lots"),
                         ("head_cpus", "4 cores"), ("image", "x\ny"), ("image", "${oops}")):
        with pytest.raises(ValidationError):
            KubeRaySettings(**{field: value})


def test_crd_source_is_recorded():
    if not KUBERAY.is_dir():
        pytest.skip(f"{KUBERAY} not present")
    source = (KUBERAY / "SOURCE.md").read_text()
    assert "v1.7.0" in source and "ray.io_rayjobs.yaml" in source


def dump(data) -> str:  # pragma: no cover - debugging aid
    return dump_yaml(data)
