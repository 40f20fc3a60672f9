"""The two- and four-GPU specs (benchmarks/multi_gpu/): generated from one base spec, strict-clean, compiled into
bundles whose launch names the machine's GPUs, and whose Megatron layouts pass megatron-core's own start-up checks
(tests/conformance/test_megatron_layout.py runs them on CPU)."""

from __future__ import annotations

import json
import re

import pytest
from ruamel.yaml import YAML

from tests.cli.inprocess import run_cli_here
from tests.conftest import REPO

HERE = REPO / "benchmarks/multi_gpu"
SPECS = sorted((HERE / "specs").glob("*.yaml"))
GPUS = {"h200x2": 2, "h200x4": 4}  # the name's machine kind -> GPUs per node


def _gpus(spec) -> int:
    return GPUS[spec.stem.split("-", 1)[0]]


def _overrides(bundle) -> dict[str, str]:
    rows = YAML(typ="safe").load((bundle / "overrides.yaml").read_text(encoding="utf-8"))
    return dict(row.split("=", 1) for row in rows if "=" in row and not row.startswith("~"))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    out = tmp_path_factory.mktemp("multi-bundles")
    for spec in SPECS:
        proc = run_cli_here("compile", str(spec), "-o", str(out))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_specs_and_the_shaped_config_are_what_make_specs_writes():
    from benchmarks.multi_gpu import make_specs

    files = make_specs.render()
    assert sorted(files) == sorted([str(make_specs.MOE30_CONFIG), *(f"specs/{p.name}" for p in SPECS)])
    assert [n for n, text in files.items() if (HERE / n).read_text(encoding="utf-8") != text] == []
    assert make_specs.main(["--check"]) == 0


def test_the_layouts_asked_for_are_there():
    specs = {p.stem: YAML(typ="safe").load(p.read_text(encoding="utf-8")) for p in SPECS}
    par = {n: s["training"].get("parallel") for n, s in specs.items()}
    dense = {n: (s["training"]["backend"], s["rollout"]["tp"]) for n, s in specs.items() if n.startswith("h200x2-8b")}
    assert dense == {"h200x2-8b-fsdp-tp2": ("fsdp", 2), "h200x2-8b-fsdp-tp1x2": ("fsdp", 1)}
    assert par["h200x2-moe-megatron-ep2"] == {"tp": 1, "pp": 1, "ep": 2, "etp": 1, "cp": 1}
    for shape in ("moe", "30b30l"):
        assert par[f"h200x4-{shape}-tp2ep2"] == {"tp": 2, "pp": 1, "ep": 2, "etp": 1, "cp": 1}
        assert par[f"h200x4-{shape}-pp2ep2"] == {"tp": 1, "pp": 2, "ep": 2, "etp": 1, "cp": 1}
    for name, s in specs.items():
        # the FP8 rollout (W8A8 + FP8 KV with per-step scales) everywhere, FP8 training on every Megatron layout,
        # at least 3 steps and a checkpoint at the last
        assert s["linear"]["quantize"] and s["kv_cache"] == {"dtype": "fp8_e4m3", "recalibrate": "per_step"}, name
        assert s["training"]["precision"] == ("fp8" if s["training"]["backend"] == "megatron" else "bf16"), name
        assert s["trainer"]["total_steps"] >= 3 and s["trainer"]["save_freq"] == s["trainer"]["total_steps"], name
        assert s["rollout"]["tp"] == 2 or name.endswith("tp1x2"), name


def test_the_30b_shape_is_the_catalogs_with_fewer_layers():
    from benchmarks.common.models import catalog_config
    from benchmarks.multi_gpu.make_specs import MOE30_CONFIG, MOE30_LAYERS

    cfg = json.loads((HERE / MOE30_CONFIG).read_text(encoding="utf-8"))
    full = catalog_config("Qwen/Qwen3-30B-A3B-Base")
    assert cfg.pop("num_hidden_layers") == MOE30_LAYERS < full.pop("num_hidden_layers")
    assert cfg == full


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_validates_strict_and_the_launch_names_the_machines_gpus(spec, bundles):
    proc = run_cli_here("validate", "--strict", str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ov = _overrides(bundles / spec.stem)
    assert ov["trainer.nnodes"] == "1" and ov["trainer.n_gpus_per_node"] == str(_gpus(spec))
    s = YAML(typ="safe").load(spec.read_text(encoding="utf-8"))
    assert ov["actor_rollout_ref.rollout.tensor_model_parallel_size"] == str(s["rollout"]["tp"])
    launch = (bundles / spec.stem / "launch.sh").read_text(encoding="utf-8")
    assert f"trainer.n_gpus_per_node={_gpus(spec)} " in launch
    # the other launchers of the bundle, and the preflight's GPU count on the node
    sbatch = (bundles / spec.stem / "slurm.sbatch").read_text(encoding="utf-8")
    assert f"#SBATCH --gpus-per-node={_gpus(spec)}\n" in sbatch
    preflight = json.loads((bundles / spec.stem / "preflight.json").read_text(encoding="utf-8"))
    assert preflight["hardware"]["gpus_per_node"] == _gpus(spec) and preflight["hardware"]["nodes"] == 1
    if s["training"]["backend"] == "megatron":
        par = s["training"]["parallel"]
        for key, field in (("tensor", "tp"), ("pipeline", "pp"), ("expert", "ep")):
            assert ov[f"actor_rollout_ref.actor.megatron.{key}_model_parallel_size"] == str(par[field])


def test_plan_says_each_spec_fits_its_machine():
    from fp8spec.rules.runner import validate_path

    for spec in SPECS:
        result = validate_path(spec)
        assert not [d.code for d in result.diagnostics if d.code.startswith("MEM")], spec.stem
        assert result.loaded.spec.world_size == _gpus(spec), spec.stem


@pytest.mark.parametrize("layout", ["tp2ep2", "pp2ep2"])
def test_the_30b_shape_has_about_as_many_layers_as_four_h200s_hold(layout, tmp_path):
    """make_specs.MOE30_LAYERS: the plan fits it at both layouts; four layers more, the trainer peak at TP 2 x EP 2
    passes the GPU (MEM005)."""
    from benchmarks.common.models import catalog_config
    from benchmarks.multi_gpu.make_specs import MOE30_LAYERS
    from fp8spec.rules.runner import validate_path

    def failing(layers: int) -> set[str]:
        cfg = tmp_path / f"l{layers}" / "config.json"
        cfg.parent.mkdir()
        cfg.write_text(json.dumps(dict(catalog_config("Qwen/Qwen3-30B-A3B-Base"), num_hidden_layers=layers)))
        y = YAML()
        spec = y.load((HERE / "specs" / f"h200x4-30b30l-{layout}.yaml").read_text(encoding="utf-8"))
        spec["model"]["config_path"] = str(cfg)
        spec["reward"]["custom_function"]["path"] = str(REPO / "specs/rewards/tiny_arith.py")
        path = tmp_path / f"l{layers}.yaml"
        with path.open("w", encoding="utf-8") as fh:
            y.dump(spec, fh)
        return {d.code for d in validate_path(path).diagnostics if d.code.startswith("MEM")}

    assert failing(MOE30_LAYERS) == set()
    if layout == "tp2ep2":  # the tighter of the two
        assert "MEM005" in failing(MOE30_LAYERS + 4)


def test_the_readmes_trainer_peaks_are_the_plans():
    rows = re.findall(r"^\| `(h200x\d-[\w-]+)` \|.*?\| ([\d.]+) GiB \|", (HERE / "README.md").read_text(encoding="utf-8"),
                      re.M)
    assert sorted(name for name, _ in rows) == [p.stem for p in SPECS]
    for name, peak in rows:
        proc = run_cli_here("plan", str(HERE / "specs" / f"{name}.yaml"), "-f", "json")
        assert proc.returncode == 0, proc.stderr
        assert round(json.loads(proc.stdout)["trainer"]["peak"]["value"] / 2**30, 1) == float(peak), name
