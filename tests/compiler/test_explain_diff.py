"""explain tells where each FP8 setting went; diff shows two specs as compiled configuration."""

from __future__ import annotations

from tests.cli.inprocess import run_cli_here
from tests.conftest import BASE_SPEC, SPECS, patched


def test_explain_maps_fields_to_layers():
    proc = run_cli_here("explain", str(SPECS / "qwen3-8b.yaml"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    block = out.split("\nkv_cache.dtype\n", 1)[1].split("\n\n", 1)[0]
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype='fp8_e4m3'" in block
    recal = out.split("\nkv_cache.recalibrate\n", 1)[1].split("\n\n", 1)[0]
    assert "runtime patch" in recal and "kv_scales" in recal
    # the activation env var serves every field that needs a patch, so it is listed under all of them
    both = out.split("\nlinear.sync_quantizer, kv_cache.recalibrate, trainer\n", 1)[1].split("\n\n", 1)[0]
    assert "FP8SPEC_RUNTIME_PATCHES=fast_block_quant,kv_scales,replay_poll" in both
    scale = out.split("\nlinear.scale_dtype\n", 1)[1].split("\n\n", 1)[0]
    assert "VLLM_USE_DEEP_GEMM_E8M0=0" in scale and "evidence:" in scale


def test_explain_megatron_training():
    out = run_cli_here("explain", str(SPECS / "qwen3-30b.yaml")).stdout
    assert "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8='hybrid'" in out
    assert "NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1" in out


def test_diff_shows_only_changes(write_spec):
    a = write_spec(BASE_SPEC, "a.yaml")
    b = write_spec(patched(BASE_SPEC, {"kv_cache": {"dtype": "fp8_e4m3"}, "correction": {"clip": 3.0}}), "b.yaml")
    proc = run_cli_here("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "- [verl override] algorithm.rollout_correction.rollout_is_threshold=2.0" in lines
    assert "+ [verl override] algorithm.rollout_correction.rollout_is_threshold=3.0" in lines
    assert "+ [verl override] +actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype='fp8_e4m3'" in lines
    assert not any("rollout.name" in ln for ln in lines)
    same = run_cli_here("diff", str(a), str(a))
    assert "(no difference" in same.stdout


def test_diff_two_specs_each_on_its_own_backend():
    """The reported case: a vLLM spec against an SGLang spec used to be refused (B forced onto A's backend)."""
    proc = run_cli_here("diff", str(SPECS / "qwen3-8b.yaml"), str(SPECS / "qwen3-8b-sglang.yaml"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"--- {SPECS / 'qwen3-8b.yaml'} (fsdp+vllm)",
                         f"+++ {SPECS / 'qwen3-8b-sglang.yaml'} (fsdp+sglang)"]
    assert "- [verl override] actor_rollout_ref.rollout.name='vllm'" in lines
    assert "+ [verl override] actor_rollout_ref.rollout.name='sglang'" in lines


def test_diff_one_spec_on_two_backends():
    spec = str(SPECS / "qwen3-30b.yaml")
    proc = run_cli_here("diff", spec, "--backend", "megatron+vllm", "--backend", "megatron+sglang")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == f"+++ {spec} (megatron+sglang, retargeted from megatron+vllm)"
    assert "+ [verl override] actor_rollout_ref.rollout.name='sglang'" in lines
    assert not any("override_transformer_config" in ln for ln in lines)  # the trainer side is the same
    # across trainers: the FSDP side of a spec written for FSDP against its Megatron retarget
    base = str(SPECS / "qwen3-8b-sglang.yaml")
    proc = run_cli_here("diff", base, "-b", "fsdp+sglang", "-b", "sglang")
    assert proc.returncode == 0, proc.stderr
    assert "- [verl override] actor_rollout_ref.rollout.name='sglang'" in proc.stdout
    assert any(ln.startswith("+ [engine flag]") for ln in proc.stdout.splitlines())


def test_diff_both_specs_on_one_backend():
    # (qwen3-8b on SGLang is refused: its per-step FP8 KV scales meet KV007; the other way round compiles)
    proc = run_cli_here("diff", str(SPECS / "qwen3-8b-sglang.yaml"), str(SPECS / "qwen3-8b.yaml"),
                   "-b", "fsdp+vllm")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith("(fsdp+vllm, retargeted from fsdp+sglang)")
    assert "actor_rollout_ref.rollout.name" not in proc.stdout


def test_diff_refused_target_and_bad_usage():
    spec = str(SPECS / "qwen3-30b.yaml")
    proc = run_cli_here("diff", spec, "-b", "megatron+vllm", "-b", "fsdp+vllm")
    assert proc.returncode == 1 and " error TRN001 " in proc.stderr and not proc.stdout
    for args in ((spec,), (spec, "-b", "fsdp+vllm"), (spec, spec, spec), (spec, "-b", "vllm", "-b", "sglang",
                                                                           "-b", "fsdp+vllm")):
        proc = run_cli_here("diff", *args)
        assert proc.returncode == 2 and "fp8spec diff SPEC --backend A --backend B" in proc.stderr, args


def test_explain_a_retargeted_spec():
    proc = run_cli_here("explain", str(SPECS / "qwen3-8b-sglang.yaml"), "--backend", "fsdp+vllm")
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[:2]
    assert head == ["qwen3-8b-sglang-fp8-rollout: fsdp+vllm",
                    "retargeted from the spec's rollout.engine sglang by --backend: every field below is as compiled "
                    "for this backend"]
    block = proc.stdout.split("\nrollout.engine\n", 1)[1].split("\n\n", 1)[0]
    assert "actor_rollout_ref.rollout.name='vllm'" in block and "sglang" not in block


# --- --format json: the same views as data -------------------------------------------------------------------


def _json(*args):
    import json

    proc = run_cli_here(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_explain_json_matches_the_text():
    path = str(SPECS / "qwen3-8b.yaml")
    data = _json("explain", path, "--format", "json")
    text = run_cli_here("explain", path).stdout
    assert data["spec"] == "qwen3-8b-fp8-rollout" and data["backend"] == "fsdp+vllm"
    assert data["retargeted_from"] == []
    fields = {f["source"]: f["settings"] for f in data["fields"]}
    # every field and every rendered setting of the text view is in the data, and nothing else
    assert [f["source"] for f in data["fields"]] == sorted(fields)
    for source, settings in fields.items():
        block = text.split(f"\n{source}\n", 1)[1].split("\n\n", 1)[0]
        for s in settings:
            assert s["rendered"] in block and s["why"] in block
    (kv,) = fields["kv_cache.dtype"]
    assert kv["layer"] == "hydra" and kv["value"] == "fp8_e4m3"
    assert kv["key"] == "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype"


def test_explain_json_retargeted_and_refused():
    import json

    data = _json("explain", str(SPECS / "qwen3-8b-sglang.yaml"), "-b", "fsdp+vllm", "-f", "json")
    assert data["backend"] == "fsdp+vllm"
    assert data["retargeted_from"] == [{"field": "rollout.engine", "value": "sglang"}]
    # a spec the target refuses: exit 1, its diagnostics as JSON on stdout, nothing else there
    refused = run_cli_here("explain", str(SPECS / "qwen3-30b.yaml"), "-b", "fsdp+vllm", "-f", "json")
    assert refused.returncode == 1
    diags = json.loads(refused.stdout)
    assert "TRN001" in refused.stdout and isinstance(diags, dict)


def test_diff_json_lists_only_changes(write_spec):
    a = write_spec(BASE_SPEC, "a.yaml")
    b = write_spec(patched(BASE_SPEC, {"correction": {"clip": 3.0}}), "b.yaml")
    data = _json("diff", str(a), str(b), "--format", "json")
    assert data["same"] is False and data["a"].startswith(str(a)) and data["b"].startswith(str(b))
    assert {"layer": "hydra", "key": "algorithm.rollout_correction.rollout_is_threshold",
            "a": "algorithm.rollout_correction.rollout_is_threshold=2.0",
            "b": "algorithm.rollout_correction.rollout_is_threshold=3.0"} in data["differences"]
    assert all(d["a"] != d["b"] for d in data["differences"])
    same = _json("diff", str(a), str(a), "-f", "json")
    assert same["same"] is True and same["differences"] == []


def test_bad_format_is_a_usage_error():
    for command in (["explain", str(SPECS / "qwen3-8b.yaml")], ["rules"]):
        proc = run_cli_here(*command, "--format", "xml")
        assert proc.returncode == 2 and "--format must be text or json, not 'xml'" in proc.stderr


def test_diff_shows_a_difference_of_the_launcher_only(write_spec):
    a = write_spec(BASE_SPEC, "a.yaml")
    slurm = {"cluster": {"launcher": "slurm", "slurm": {"partition": "long", "time_limit": "48:00:00"}}}
    b = write_spec(patched(BASE_SPEC, slurm), "b.yaml")
    proc = run_cli_here("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert '- [launcher] cluster.launcher: "ray"' in lines and '+ [launcher] cluster.launcher: "slurm"' in lines
    assert '+ [launcher] cluster.slurm.partition: "long"' in lines
    assert not any("no difference" in line for line in lines)
    data = run_cli_here("diff", str(a), str(b), "--format", "json")
    import json

    changes = json.loads(data.stdout)
    assert not changes["same"]
    assert {"layer": "launcher", "key": "cluster.launcher", "a": 'cluster.launcher: "ray"',
            "b": 'cluster.launcher: "slurm"'} in changes["differences"]


def test_diff_on_a_backend_the_spec_does_not_compile_for_says_so():
    spec = str(SPECS / "qwen3-8b.yaml")  # per-step KV scales: refused on SGLang (KV007)
    proc = run_cli_here("diff", spec, "-b", "fsdp+vllm", "-b", "fsdp+sglang")
    assert proc.returncode == 1
    assert "KV007" in proc.stderr and "nothing written" not in proc.stderr
    assert "does not compile for fsdp+sglang, so there is nothing to compare" in proc.stderr
