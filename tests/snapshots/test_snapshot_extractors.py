"""Extractor, determinism and verify logic on a small synthetic vLLM-shaped wheel (fast, no network)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from fp8spec.engines.vllm import snapshot as vllm
from fp8spec.snapshots import artifacts, core
from fp8spec.snapshots.artifacts import ArtifactError, open_artifact, parse_spec
from fp8spec.snapshots.core import build_snapshot, dumps, refresh, snapshot_path, verify

ARG_UTILS = '''
import argparse
from dataclasses import dataclass
from vllm.config.cache import CacheConfig, CacheDType
from vllm.config.model import ModelConfig

@dataclass
class EngineArgs:
    quantization: QuantizationMethods | str | None = ModelConfig.quantization
    kv_cache_dtype: CacheDType = CacheConfig.cache_dtype
    calculate_kv_scales: bool = CacheConfig.calculate_kv_scales
    enforce_eager: bool = False
    max_num_seqs: int | None = None

    @staticmethod
    def add_cli_args(parser):
        model_kwargs = get_kwargs(ModelConfig)
        cache_kwargs = get_kwargs(CacheConfig)
        parser.add_argument("--quantization", "-q", **model_kwargs["quantization"])
        parser.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        parser.add_argument("--calculate-kv-scales", **cache_kwargs["calculate_kv_scales"])
        parser.add_argument("--enforce-eager", **{**model_kwargs["enforce_eager"], "default": None})
        parser.add_argument("--max-num-seqs", "--max-seqs", dest="max_num_seqs", type=int)

class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False)
'''

MODEL = '''
@config
class ModelConfig:
    quantization: QuantizationMethods | str | None = None
    enforce_eager: bool = False
'''

CACHE = '''
from typing import Literal
CacheDType = Literal["auto", "fp8", "fp8_e4m3"]

@config
class CacheConfig:
    cache_dtype: CacheDType = "auto"
    calculate_kv_scales: bool = False
    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)
'''

QUANT = '''
from typing import Literal
QuantizationMethods = Literal["fp8", "fp8_per_block", "online"]
DEPRECATED_QUANTIZATION_METHODS = ["fbgemm_fp8"]
'''

QUANT_CONFIG = '''
_ONLINE_SHORTHANDS: dict[str, QuantizationConfigArgs] = {"fp8_per_block": X, "fp8_per_tensor": Y}
'''

ENVS = '''
import os
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    VLLM_USE_DEEP_GEMM_E8M0: bool = True
    VLLM_DEEP_GEMM_WARMUP: str = "relax"

environment_variables = {
    "VLLM_USE_DEEP_GEMM_E8M0": lambda: bool(int(os.getenv("VLLM_USE_DEEP_GEMM_E8M0", "1"))),
    "VLLM_DEEP_GEMM_WARMUP": env_with_choices("VLLM_DEEP_GEMM_WARMUP", "relax", ["skip", "full", "relax"]),
}
'''


def make_wheel(directory: Path, version: str = "9.9.9", *, arg_utils: str = ARG_UTILS) -> Path:
    path = directory / f"vllm-{version}-py3-none-any.whl"
    files = {
        "vllm/engine/arg_utils.py": arg_utils,
        "vllm/config/model.py": MODEL,
        "vllm/config/cache.py": CACHE,
        "vllm/config/quantization.py": QUANT_CONFIG,
        "vllm/model_executor/layers/quantization/__init__.py": QUANT,
        "vllm/envs.py": ENVS,
    }
    with zipfile.ZipFile(path, "w") as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            z.writestr(info, files[name])
    return path


@pytest.fixture
def cache(tmp_path):
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    return tmp_path / "cache"


@pytest.fixture
def no_pip(monkeypatch):
    """Fail loudly if anything tries to reach pip (these tests must stay offline)."""

    def _boom(*a, **k):
        raise AssertionError("pip must not be called in this test")

    monkeypatch.setattr(artifacts, "pip_download", _boom)


def test_parse_spec_and_paths(tmp_path):
    assert parse_spec("vllm==0.33.0") == ("vllm", "0.33.0")
    assert parse_spec("Megatron_Core == 0.16.1") == ("megatron-core", "0.16.1")
    with pytest.raises(ValueError):
        parse_spec("vllm>=0.33")
    assert snapshot_path("megatron_core==0.16.1", directory=tmp_path).name == "megatron-core-0.16.1.json"


def test_vllm_extractor_on_synthetic_wheel(cache):
    wheel = make_wheel(cache / "wheels")
    with open_artifact(wheel) as art:
        data = vllm.extract(art)
    fields = data["fields"]["EngineArgs"]
    assert fields["kv_cache_dtype"]["default_value"] == "auto"
    assert fields["kv_cache_dtype"]["default_from"] == "CacheConfig.cache_dtype"
    flags = data["flags"]
    assert flags["-q"]["dest"] == "quantization"
    assert flags["--quantization"]["choices_enforced"] is False  # "| str" -> metavar only
    assert flags["--kv-cache-dtype"]["choices"] == ["auto", "fp8", "fp8_e4m3"]
    assert flags["--kv-cache-dtype"]["choices_enforced"] is True
    assert flags["--no-calculate-kv-scales"]["negated"] is True
    assert flags["--no-enforce-eager"]["dest"] == "enforce_eager"  # **{**kwargs, ...} form
    assert flags["--max-seqs"]["dest"] == "max_num_seqs"
    assert "--no-max-num-seqs" not in flags
    assert flags["--no-enable-log-requests"]["registered_by"] == "AsyncEngineArgs.add_cli_args"
    assert data["choices"]["quantization"] == ["fp8", "fp8_per_block", "online"]
    assert data["choices"]["quantization_online_shorthands"] == ["fp8_per_block", "fp8_per_tensor"]
    assert data["env"]["VLLM_USE_DEEP_GEMM_E8M0"] == {
        "type": "bool",
        "default": "True",
        "default_value": True,
        "raw_default": "1",
    }
    assert data["env"]["VLLM_DEEP_GEMM_WARMUP"]["choices"] == ["skip", "full", "relax"]
    assert data["config_classes"]["CacheConfig"]["gpu_memory_utilization"]["default_value"] == 0.92


def test_build_is_deterministic(cache):
    wheel = make_wheel(cache / "wheels")
    texts = []
    for _ in range(2):
        with open_artifact(wheel) as art:
            texts.append(dumps(build_snapshot("vllm", "9.9.9", art, "3.11")))
    assert texts[0] == texts[1]
    assert '"sha256": "' in texts[0] and '"timestamp"' not in texts[0]


def test_refresh_writes_identical_bytes_twice(cache, tmp_path, monkeypatch):
    wheel = make_wheel(cache / "wheels")
    calls = []

    def fake_pip(request, dest, timeout=0):
        calls.append((request.name, request.version, tuple(request.options())))
        return artifacts.PipResult(path=wheel, command=[])

    monkeypatch.setattr(artifacts, "pip_download", fake_pip)
    out = tmp_path / "snaps"
    p1 = refresh("vllm==9.9.9", cache, out_dir=out)
    first = p1.read_bytes()
    p2 = refresh("vllm==9.9.9", cache, out_dir=out)
    assert p1 == p2 == out / "vllm-9.9.9.json"
    assert p2.read_bytes() == first
    assert calls[0][0] == "vllm" and "--python-version" in calls[0][2]
    raw = json.loads(first)
    assert raw["artifact"]["filename"] == wheel.name
    assert raw["artifact"]["sha256"] == artifacts.sha256_file(wheel)


@pytest.mark.parametrize("what", ["a user's file", "a link", "a dangling link", "a FIFO"])
def test_refresh_never_writes_through_or_over_what_is_not_a_snapshot(cache, tmp_path, monkeypatch, what):
    """The snapshot goes through fp8spec.safe_write: what is at its name stays as it was."""
    import os

    wheel = make_wheel(cache / "wheels")
    monkeypatch.setattr(artifacts, "pip_download", lambda *a, **k: artifacts.PipResult(path=wheel, command=[]))
    out = tmp_path / "snaps"
    out.mkdir()
    path, victim = out / "vllm-9.9.9.json", tmp_path / "victim.txt"
    if what == "a user's file":
        path.write_text("my notes\n")
    elif what == "a FIFO":
        os.mkfifo(path)
    else:
        if what == "a link":
            victim.write_text("victim\n")
        path.symlink_to(victim)
    with pytest.raises(OSError, match="already exists|symbolic link|named pipe"):
        refresh("vllm==9.9.9", cache, out_dir=out)
    assert sorted(p.name for p in out.iterdir()) == ["vllm-9.9.9.json"]
    assert victim.read_text() == "victim\n" if what == "a link" else not victim.exists()
    if what == "a user's file":
        assert path.read_text() == "my notes\n"


def _write_snapshot(cache: Path, out: Path) -> Path:
    wheel = make_wheel(cache / "wheels")
    with open_artifact(wheel) as art:
        snap = build_snapshot("vllm", "9.9.9", art, "3.11")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "vllm-9.9.9.json"
    path.write_text(dumps(snap))
    return path


def test_verify_confirms_an_up_to_date_snapshot_offline(cache, tmp_path, no_pip):
    path = _write_snapshot(cache, tmp_path / "snaps")
    assert verify(path, cache) == []


def test_verify_reports_a_stale_snapshot(cache, tmp_path, no_pip):
    path = _write_snapshot(cache, tmp_path / "snaps")
    raw = json.loads(path.read_text())
    del raw["data"]["flags"]["--calculate-kv-scales"]
    raw["data"]["flags"]["--made-up-flag"] = {"dest": "x"}
    raw["data"]["choices"]["kv_cache_dtype"].append("fp8_e5m2")
    path.write_text(dumps(raw))
    problems = verify(path, cache)
    text = "\n".join(problems)
    assert '["flags"]["--calculate-kv-scales"]: in the artifact but missing from the snapshot' in text
    assert '["flags"]["--made-up-flag"]: in the snapshot but no longer in the artifact' in text
    assert '["choices"]["kv_cache_dtype"]' in text
    assert len(problems) == 3


def test_verify_reports_changed_source(cache, tmp_path, monkeypatch):
    """Same file name, different contents: the cached file no longer matches the recorded sha256,
    so verify asks pip for the pinned hash; pip refusing it is reported as a difference."""
    path = _write_snapshot(cache, tmp_path / "snaps")
    make_wheel(cache / "wheels", arg_utils=ARG_UTILS.replace("calculate_kv_scales", "calc_scales"))

    def pip_refuses(request, dest, timeout=0):
        assert request.expected_sha256 == json.loads(path.read_text())["artifact"]["sha256"]
        raise ArtifactError("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.")

    monkeypatch.setattr(core._art, "pip_download", pip_refuses)
    problems = verify(path, cache)
    assert len(problems) == 1 and "artifact sha256 differs" in problems[0]


def test_verify_flags_an_extractor_version_change(cache, tmp_path, no_pip, monkeypatch):
    path = _write_snapshot(cache, tmp_path / "snaps")
    monkeypatch.setattr(vllm, "EXTRACTOR_VERSION", vllm.EXTRACTOR_VERSION + 1)
    problems = verify(path, cache)
    assert any("extractor version changed" in p for p in problems)


def test_verify_rejects_a_misnamed_file(cache, tmp_path, no_pip):
    path = _write_snapshot(cache, tmp_path / "snaps")
    other = path.with_name("vllm-1.0.0.json")
    path.rename(other)
    assert any("should be 'vllm-9.9.9.json'" in p for p in verify(other, cache))
