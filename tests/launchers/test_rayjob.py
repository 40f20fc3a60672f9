"""rayjob.yaml: a KubeRay RayJob validated against the RayJob CRD's OpenAPI schema (KubeRay v1.7.0).

The CRD is vendored test data (tests/data/kuberay/, see its SOURCE.md for origin and sha256). The schema
is applied strictly: an object schema with properties rejects fields it does not declare, as `kubectl apply`
does with server-side field validation (Kubernetes would otherwise silently prune a misspelt field).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from ruamel.yaml import YAML

from tests.conftest import REPO, SPECS, dump_yaml, patched, require
from tests.launchers.conftest import compile_bundle

jsonschema = require("jsonschema")

KUBERAY = REPO / "tests" / "data" / "kuberay"
RAYJOB_CRD = KUBERAY / "ray.io_rayjobs.v1.7.0.yaml"
RAYJOB_CRD_SHA256 = "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5"
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
    import hashlib

    assert hashlib.sha256(RAYJOB_CRD.read_bytes()).hexdigest() == RAYJOB_CRD_SHA256, "vendored CRD changed"
    # PyYAML's libyaml reader (the test extra): the same data as ruamel's pure-Python reader, seconds sooner (1.4 MB)
    crd = yaml.load(RAYJOB_CRD.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
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
    from fp8spec.specfile.loader import load_spec

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
    # the image is verl's for the bundle's engine (an SGLang bundle never gets the vLLM image)
    image = {"vllm": "verlai/verl:vllm024.latest", "sglang": "verlai/verl:sgl0512.latest"}[spec.rollout.engine]
    assert spec.cluster.kuberay.image is None
    assert head_container["image"] == image
    assert "nvidia.com/gpu" not in head_container["resources"]["limits"]
    (group,) = cluster["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == spec.hardware.nodes
    assert group["rayStartParams"] == {"num-gpus": str(spec.hardware.gpus_per_node)}
    (worker,) = group["template"]["spec"]["containers"]
    assert worker["image"] == image
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == spec.hardware.gpus_per_node
    assert worker["resources"]["requests"]["nvidia.com/gpu"] == spec.hardware.gpus_per_node
    # the entrypoint runs the preflight and starts training only when it passed, with the spec's extra overrides
    extra = " ".join(shlex.quote(o) for o in spec.cluster.kuberay.extra_overrides)
    assert job["spec"]["entrypoint"] == f"python3 preflight.py && bash launch.sh {extra}".rstrip()
    runtime_env = YAML(typ="safe").load(job["spec"]["runtimeEnvYAML"])
    bundle_env = YAML(typ="safe").load((bundle / "runtime_env.yaml").read_text())
    assert runtime_env["env_vars"] == bundle_env["env_vars"] == expected["env"]
    assert runtime_env["working_dir"] == "/fp8spec/bundle"
    shipped = sorted(str(p.relative_to(bundle)) for p in (bundle / "lib").rglob("*.py")) if (bundle / "lib").is_dir() \
        else []
    if shipped:  # the patch set, uploaded from the submitter pod as py_modules (an absolute path there)
        assert runtime_env["py_modules"] == ["/fp8spec/bundle/lib/fp8spec"]
    else:
        assert "py_modules" not in runtime_env
    # the ConfigMap carries the files the entrypoint runs, byte for byte, mounted where working_dir points
    config_map = docs["ConfigMap"]
    assert config_map["metadata"]["namespace"] == spec.cluster.kuberay.namespace
    submitter = job["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["restartPolicy"] == "Never"
    (volume,) = submitter["volumes"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    paths = {item["key"]: item["path"] for item in volume["configMap"]["items"]}
    assert set(paths) == set(config_map["data"])
    reward = ["custom_reward.py"] if (bundle / "custom_reward.py").is_file() else []  # opened from working_dir
    assert sorted(paths.values()) == sorted(["launch.sh", "preflight.py", "preflight_cpus.py", "preflight_checks.py",
                                             "preflight.json", *shipped, *reward])
    for key, text in config_map["data"].items():
        assert re.fullmatch(r"[-._a-zA-Z0-9]+", key)  # a valid ConfigMap key
        assert text == (bundle / paths[key]).read_text(encoding="utf-8"), key
    mounts = {m["mountPath"]: m["subPath"] for m in submitter["containers"][0]["volumeMounts"]}
    assert mounts == {f"/fp8spec/bundle/{p}": p for p in paths.values()}
    # the spec's volumes and secrets reach the head and every worker pod, by name
    pods = [head["template"]["spec"], group["template"]["spec"]]
    for pod in pods:
        (container,) = pod["containers"]
        mounted = {m["name"]: m for m in container.get("volumeMounts", [])}
        declared = {v["name"]: v for v in pod.get("volumes", [])}
        for v in spec.cluster.kuberay.volumes:
            assert mounted[v.name]["mountPath"] == v.mount_path and mounted[v.name]["readOnly"] == v.read_only
            source = declared[v.name]
            assert (source["hostPath"]["path"] == v.host_path) if v.host_path else \
                (source["persistentVolumeClaim"]["claimName"] == v.pvc)
        env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env", [])}
        assert env == {e.env: {"name": e.secret, "key": e.key} for e in spec.cluster.kuberay.secret_env}


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

    image = 'registry.example:5000/verl:1.0#not-a-comment"q"\'s\'{x:[1]}&a*b!!str'
    override = "trainer.default_local_dir='/ckpt/a b' # $(touch /tmp/pwned) \"q\""
    data = patched(BASE_SPEC, {"name": "hostile_name.v2", "cluster": {"launcher": "kuberay", "kuberay": {
        "image": image, "namespace": "rl-team", "ray_version": "2.49.1", "worker_cpus": "96",
        "worker_memory": "1500Gi", "extra_overrides": [override],
        "volumes": [{"name": "models", "mount_path": "/models", "host_path": "/mnt/my models: x"},
                    {"name": "data", "mount_path": "/data", "pvc": "rl.data"},
                    {"name": "ckpt", "mount_path": "/shared", "pvc": "ckpt"}]}}})
    bundle = compile_bundle(write_spec(data), tmp_path / "out")
    docs = documents(bundle)
    job = docs["RayJob"]
    assert errors(job) == []
    assert job["metadata"]["name"] == "hostile-name-v2-" + hashlib.sha256(b"hostile_name.v2").hexdigest()[:6]
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == "2.49.1"
    containers = [job["spec"]["submitterPodTemplate"]["spec"]["containers"][0],
                  job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0],
                  job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]]
    assert [c["image"] for c in containers] == [image] * 3
    worker = containers[2]["resources"]["limits"]
    assert worker == {"nvidia.com/gpu": 8, "cpu": "96", "memory": "1500Gi"}
    # the override reaches launch.sh as one shell word, never run (from a script in the ConfigMap: the
    # entrypoint is one argument of sh -c, capped at 128 KiB)
    assert job["spec"]["entrypoint"] == "python3 preflight.py && bash extra_overrides.sh"
    script = docs["ConfigMap"]["data"]["extra_overrides.sh"]
    assert shlex.split(script.replace("\\\n", ""), comments=True) == ["exec", "bash", "launch.sh", override]
    volumes = {v["name"]: v for v in job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"]}
    assert volumes["models"]["hostPath"]["path"] == "/mnt/my models: x"
    assert "kuberay" in (bundle / "README.md").read_text()


def test_long_spec_names_fit_kuberay_limits():
    from fp8spec.launchers.kuberay import k8s_name

    assert k8s_name("qwen3-8b-fp8-rollout") == "qwen3-8b-fp8-rollout"
    # a name that had to change carries a digest of the spec name: a_b, a-b and a.b stay three RayJobs
    assert k8s_name("8b_run.v2") == "fp8-8b-run-v2-" + hashlib.sha256(b"8b_run.v2").hexdigest()[:6]
    long = "a" * 63
    short = k8s_name(long)
    assert len(short) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", short)
    assert k8s_name("a" * 62 + "b") != short  # distinct names stay distinct after shortening


def test_spec_rejects_bad_kubernetes_values():
    from pydantic import ValidationError

    from fp8spec.specfile.cluster import KubeRaySettings

    for field, value in (("namespace", "rl_team"), ("namespace", "RL"), ("worker_memory", "lots"),
                         ("head_cpus", "4 cores"), ("image", "x\ny"), ("image", "${oops}")):
        with pytest.raises(ValidationError):
            KubeRaySettings(**{field: value})


def test_crd_source_is_recorded():
    source = (KUBERAY / "SOURCE.md").read_text()
    assert "v1.7.0" in source and "ray.io_rayjobs.yaml" in source and RAYJOB_CRD_SHA256 in source


def dump(data) -> str:  # pragma: no cover - debugging aid
    return dump_yaml(data)


def test_no_rayjob_without_a_known_image(write_spec, tmp_path):
    """verl publishes no image for vLLM 0.33.0: a ray-launched bundle gets no rayjob.yaml (its README says why);
    a kuberay-launched spec must name an image (rule CLU001), and then gets one with that image."""
    from tests.conftest import BASE_SPEC

    bundle = compile_bundle(write_spec(patched(BASE_SPEC, {"name": "v033", "stack": {"vllm": "0.33.0"}})),
                            tmp_path / "a")
    assert not (bundle / "rayjob.yaml").exists()
    assert "not generated: verl publishes no image for vllm\n    0.33.0" in (bundle / "README.md").read_text()
    named = patched(BASE_SPEC, {"name": "v033k", "stack": {"vllm": "0.33.0"}, "cluster": {
        "launcher": "kuberay", "kuberay": {"image": "registry.example/verl:v033", "volumes": [
            {"name": "m", "mount_path": "/models", "pvc": "m"}, {"name": "d", "mount_path": "/data", "pvc": "d"},
            {"name": "c", "mount_path": "/shared", "pvc": "c"}]}}})
    job = documents(compile_bundle(write_spec(named, "k.yaml"), tmp_path / "b"))["RayJob"]
    assert errors(job) == []
    assert job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.example/verl:v033"


def test_spec_rejects_bad_volumes_and_secrets():
    from pydantic import ValidationError

    from fp8spec.specfile.cluster import KubeRaySettings

    for bad in ({"volumes": [{"name": "m", "mount_path": "/m"}]},  # no source
                {"volumes": [{"name": "m", "mount_path": "/m", "pvc": "a", "host_path": "/x"}]},  # two sources
                {"volumes": [{"name": "m", "mount_path": "models", "pvc": "a"}]},  # relative mount
                {"volumes": [{"name": "m", "mount_path": "/a", "pvc": "a"}, {"name": "m", "mount_path": "/b",
                                                                             "pvc": "b"}]},
                {"secret_env": [{"env": "HF TOKEN", "secret": "hf", "key": "token"}]},
                {"secret_env": [{"env": "HF_TOKEN", "secret": "Hf_Token", "key": "token"}]},
                {"extra_overrides": ["not an override"]}, {"extra_overrides": ["x=${oc.env:HOME}"]}):
        with pytest.raises(ValidationError):
            KubeRaySettings(**bad)
