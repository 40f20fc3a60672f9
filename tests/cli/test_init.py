"""`fp8spec init`: a commented starter spec that validates clean as written, or nothing at all."""

from __future__ import annotations

import pytest

from fp8spec.rules.runner import validate_path
from fp8spec.specfile.loader import load_spec
from tests.cli.inprocess import run_cli_here

# (template, model, gpu, nodes, gpus per node): the templates' defaults and hardware they were not written for
CASES = [
    ("dense-vllm", None, None, None, 8),
    ("moe-megatron", None, None, None, 8),
    ("sglang", None, None, None, 8),
    ("dense-vllm", "meta-llama/Llama-3.1-8B-Instruct", "h200", 2, 8),
    ("dense-vllm", "Qwen/Qwen2.5-7B", "b200", 1, 4),
    ("dense-vllm", "Qwen/Qwen3-8B", "l40s", 1, 8),
    ("moe-megatron", "Qwen/Qwen3-30B-A3B", "h200", 1, 8),
    ("moe-megatron", "Qwen/Qwen3-30B-A3B-Base", "b200", 4, 8),
    ("sglang", "Qwen/Qwen3-30B-A3B", "h100", 2, 8),
    ("sglang", "meta-llama/Llama-3.1-8B", "gb200", 1, 4),
]


def _args(template, model, gpu, nodes, gpn) -> list[str]:
    args = ["init", "--template", template, "--gpus-per-node", str(gpn)]
    args += ["--model", model] if model else []
    args += ["--gpu", gpu] if gpu else []
    args += ["--nodes", str(nodes)] if nodes else []
    return args


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x) for x in c if x))
def test_init_output_validates_clean(case, tmp_path):
    from fp8spec.starter import DEFAULTS, starter_spec

    template, model, gpu, nodes, gpn = case
    out = tmp_path / "spec.yaml"
    result = starter_spec(template, model, gpu, nodes, gpn, file=str(out), spec_dir=tmp_path)
    noted = tuple(code for code, _ in result.unacknowledged)
    if noted:  # init accepts no warning on its own: each is a note naming the flag, and nothing is clean yet
        assert not result.clean and not result.validation.loaded.spec.acknowledge
        assert all(f"--acknowledge {code}" in note for code, note in result.unacknowledged)
        result = starter_spec(template, model, gpu, nodes, gpn, file=str(out), spec_dir=tmp_path,
                              acknowledge=noted)
        assert result.validation.loaded.spec.acknowledge.keys() == set(noted)  # exactly what was chosen
    assert result.clean, [d.render() for d in result.validation.diagnostics]
    out.write_text(result.text, encoding="utf-8")
    validation = validate_path(out)  # the file as written, from scratch
    assert not [d for d in validation.diagnostics if d.severity != "info"], \
        [d.render() for d in validation.diagnostics]
    spec = validation.loaded.spec
    d_model, d_gpu, d_nodes = DEFAULTS[template]
    assert spec.model.name == (model or d_model) and spec.hardware.gpu == (gpu or d_gpu)
    assert (spec.hardware.nodes, spec.hardware.gpus_per_node) == (nodes or d_nodes, gpn)
    assert result.text.startswith(f"# {spec.name}: written by `fp8spec init --template {template}`.")
    assert spec.trainer.checkpoint_dir.startswith("/shared/checkpoints/") and spec.data.val_files
    backend = {"dense-vllm": "fsdp+vllm", "moe-megatron": "megatron+vllm", "sglang": "fsdp+sglang"}[template]
    assert f"{spec.training.backend}+{spec.rollout.engine}" == backend


def test_cli_init_writes_a_spec_that_validates_and_compiles(tmp_path):
    out = tmp_path / "mine.yaml"
    proc = run_cli_here(*_args("moe-megatron", "Qwen/Qwen3-30B-A3B-Base", "h200", 2, 8), "-o", str(out),
                   "--acknowledge", "TRN007")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "# Check: fp8spec validate " in text and "parallel: {tp:" in text  # comments and layout kept
    for line in proc.stderr.splitlines():  # each change init made is reported with the rule behind it
        assert line.startswith("init: ") and "(" in line
    # a value that fits, applied, with what it costs and how to keep the concurrency instead
    assert "init: rollout.max_num_seqs null -> 51 (MEM004: concurrency 256 -> 51 per replica (-80 %)" in proc.stderr
    assert "`--acknowledge MEM004` keeps the warning instead)" in proc.stderr
    assert "init: acknowledge.TRN007 (--acknowledge" in proc.stderr
    assert run_cli_here("validate", "--strict", str(out)).returncode == 0
    proc = run_cli_here("compile", str(out), "-o", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b" / load_spec(out).spec.name / "launch.sh").exists()


def test_cli_init_prints_to_stdout_by_default(tmp_path):
    proc = run_cli_here("init", "--template", "sglang", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# qwen3-8b-sglang-fp8-rollout: written by")
    assert not list(tmp_path.iterdir())


def test_cli_init_refuses_what_cannot_be_clean(tmp_path):
    out = tmp_path / "ds.yaml"
    proc = run_cli_here(*_args("moe-megatron", "deepseek-ai/DeepSeek-V3", "h200", 4, 8), "-o", str(out))
    assert proc.returncode == 1 and " error MEM001 " in proc.stderr and "nothing written" in proc.stderr
    assert not out.exists()
    # located in the draft's own text, which is quoted, not in the file that was never written
    assert "ds.yaml:" not in proc.stderr
    lines = proc.stderr.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("draft:") and " error MEM001 " in line)
    line_no = int(lines[i].split(":")[1])
    quoted = next(x for x in lines[i + 1:] if not x.startswith("    hint:"))
    assert quoted.startswith(f"    {line_no:>4} | ") and "backend: megatron" in quoted


def test_cli_init_acknowledges_only_what_the_user_chose(tmp_path):
    """The moe-megatron template's long responses preempt on 2 x 8 H200 (MEM004: init applies the max_num_seqs
    that fits) and FP8 training was measured slower for this class (TRN007, which no change removes): init says
    so and writes nothing until the user accepts it by name."""
    out = tmp_path / "m.yaml"
    args = _args("moe-megatron", "Qwen/Qwen3-30B-A3B-Base", "h200", 2, 8) + ["-o", str(out)]
    proc = run_cli_here(*args)
    assert proc.returncode == 1 and not out.exists()
    assert "(MEM004: concurrency" in proc.stderr and "init: note: MEM004" not in proc.stderr
    assert "init: note: TRN007 fp8-training-measured-slower:" in proc.stderr
    assert "`--acknowledge TRN007`" in proc.stderr
    one = run_cli_here(*args, "--acknowledge", "trn007")
    assert one.returncode == 0, one.stderr
    acks = load_spec(out).spec.acknowledge
    assert set(acks) == {"TRN007"}
    assert all(reason.startswith(f"accepted with fp8spec init --acknowledge {code}") for code, reason in acks.items())
    bad = run_cli_here(*args, "--force", "--acknowledge", "BLK001")
    assert bad.returncode == 2 and "not an acknowledgeable rule" in bad.stderr


@pytest.mark.parametrize("args,text", [
    (["--model", "org/unknown"], "is not in the catalog"),
    (["--gpu", "h300"], "--gpu 'h300' is not one of"),
    (["--template", "moe-sglang"], "unknown template"),
    (["--name", "Has Space"], "--name 'Has Space'"),
])
def test_cli_init_bad_usage(args, text, tmp_path):
    out = tmp_path / "s.yaml"
    proc = run_cli_here("init", *args, "-o", str(out))
    assert proc.returncode == 2 and text in proc.stderr and not out.exists()


def test_cli_init_keeps_an_existing_file_without_force(tmp_path):
    out = tmp_path / "s.yaml"
    out.write_text("mine\n")
    proc = run_cli_here("init", "-o", str(out))
    assert proc.returncode == 2 and "--force" in proc.stderr and out.read_text() == "mine\n"
    assert run_cli_here("init", "-o", str(out), "--force").returncode == 0 and out.read_text().startswith("# ")


def test_init_draft_hints_propose_nothing_already_set(tmp_path):
    """The reported case: a fresh dense-vllm draft for DeepSeek-V3 has FP8 linears; its MEM002 hint used to
    propose linear.quantize: true, which the draft already has."""
    out = tmp_path / "d.yaml"
    proc = run_cli_here(*_args("dense-vllm", "deepseek-ai/DeepSeek-V3", "h200", 4, 8), "-o", str(out))
    assert proc.returncode == 1 and " error MEM002 " in proc.stderr and not out.exists()
    lines = proc.stderr.splitlines()
    mem002 = next(lines[i + 1] for i, line in enumerate(lines) if " error MEM002 " in line)
    assert "hint: " in mem002
    assert "linear.quantize" not in mem002 and "quantize the linears" not in mem002


# a Qwen3-shaped model of a size the catalog does not have (a user's own pretraining run)
LOCAL_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 3072,
               "intermediate_size": 8192, "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
               "num_hidden_layers": 30, "vocab_size": 151936, "tie_word_embeddings": False,
               "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16"}


def test_init_config_path_writes_a_valid_spec_for_a_model_outside_the_catalog(tmp_path):
    import json

    from fp8spec.catalog import catalog_ids, model_from_config

    folder = tmp_path / "my-qwen3-5b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LOCAL_QWEN3))
    assert not [i for i in catalog_ids() if i.lower().endswith("qwen3-5b")]
    out = tmp_path / "s.yaml"
    proc = run_cli_here("init", "--config-path", str(folder), "--gpu", "h200", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert run_cli_here("validate", "--strict", str(out)).returncode == 0
    validation = validate_path(out)
    spec = validation.loaded.spec
    assert spec.model.config_path == str(folder / "config.json") and spec.model.path == str(folder)
    assert spec.model.name == "my-qwen3-5b" and spec.name == "my-qwen3-5b-fp8-rollout"
    assert validation.context.model == model_from_config(folder / "config.json")  # what validate reads
    # a config.json path works the same, and --model names it
    named = run_cli_here("init", "--config-path", str(folder / "config.json"), "--model", "me/qwen3-5b-sft",
                    "--gpu", "h200")
    assert named.returncode == 0 and 'name: "me/qwen3-5b-sft"' in named.stdout


def test_init_config_path_reads_facts_as_the_catalog_does(tmp_path):
    import dataclasses
    import json

    from fp8spec.catalog import get_model, model_from_config
    from fp8spec.catalog._store import load_entry

    (tmp_path / "config.json").write_text(json.dumps(load_entry("Qwen/Qwen3-8B")["config"]))
    local = model_from_config(tmp_path / "config.json", "Qwen/Qwen3-8B")
    catalog = get_model("Qwen/Qwen3-8B")
    skip = {"source", "path"}
    assert {f.name: getattr(local, f.name) for f in dataclasses.fields(local) if f.name not in skip} == \
        {f.name: getattr(catalog, f.name) for f in dataclasses.fields(catalog) if f.name not in skip}
    proc = run_cli_here("init", "--config-path", str(tmp_path), "--model", "Qwen/Qwen3-8B")
    assert proc.returncode == 0, proc.stderr


def test_init_config_path_bad_input_is_one_line(tmp_path):
    missing = run_cli_here("init", "--config-path", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.startswith("fp8spec: error: --config-path ")
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr
    (tmp_path / "config.json").write_text('{"architectures": ["NoSuchForCausalLM"], "hidden_size": 8}')
    odd = run_cli_here("init", "--config-path", str(tmp_path))
    assert odd.returncode == 2 and "--config-path" in odd.stderr and "Traceback" not in odd.stderr


def test_init_on_a_gpu_without_fp8_says_so_in_name_and_comments(tmp_path):
    from fp8spec.starter import starter_spec

    fp8 = starter_spec("dense-vllm", gpu="h100", spec_dir=tmp_path)
    assert "blockwise 128x128 E4M3" in fp8.text and fp8.validation.loaded.spec.name.endswith("-fp8-rollout")
    for template in ("dense-vllm", "sglang"):
        result = starter_spec(template, gpu="a100", spec_dir=tmp_path)
        spec = result.validation.loaded.spec
        assert result.clean and not spec.linear.quantize
        assert "linear.quantize true -> false (HW002)" in result.changes
        assert "fp8-rollout" not in result.text and "E4M3 linears" not in result.text
        assert f"# The {template} template without FP8 linears: a100 (compute capability 8.0)" in result.text
        assert spec.name == ("qwen3-8b-base-bf16-rollout-fp8kv" if template == "dense-vllm"
                             else "qwen3-8b-sglang-bf16-rollout")
        assert spec.trainer.checkpoint_dir.endswith(spec.name)
    named = starter_spec("dense-vllm", gpu="a100", name="mine", spec_dir=tmp_path)
    assert named.validation.loaded.spec.name == "mine"  # a name the user chose is kept


# a Mistral-7B-shaped local model (no QK-norm): with the dense-vllm template's FP8 KV cache, KV008 proposed bf16
# and MEM004 proposed fp8_e4m3 again, and init went back and forth until it gave up
MISTRAL_LIKE = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
                "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                "num_hidden_layers": 32, "vocab_size": 32768, "tie_word_embeddings": False,
                "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16"}


def _changed_fields(lines) -> list[str]:
    """The fields init changed, one per applied change ('init: rollout.tp 1 -> 2 (BLK001)')."""
    return [line.split()[0] for line in lines if " -> " in line]


def _mistral(tmp_path):
    import json

    folder = tmp_path / "my-mistral"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MISTRAL_LIKE))
    return folder


def test_init_config_path_mistral_like_writes_a_valid_spec(tmp_path):
    """The regression: init --config-path on a Mistral-like model used to go back and forth between KV008's
    bf16 and MEM004's fp8_e4m3. Now KV008's proposal is a BF16 KV cache with the max_num_seqs it holds at full
    length (bf16 alone would bring MEM004 back): each field set once, and the spec validates --strict."""
    folder = _mistral(tmp_path)
    out = tmp_path / "s.yaml"
    proc = run_cli_here("init", "--config-path", str(folder), "--gpu", "h200", "-o", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    changed = _changed_fields(line.removeprefix("init: ") for line in proc.stderr.splitlines())
    # the BF16 cache keeps no FP8 recalibration, and the cap names the rule it is for (MEM004) and its cost
    assert changed == ["kv_cache.dtype", "kv_cache.recalibrate", "rollout.max_num_seqs"], proc.stderr
    assert "init: kv_cache.dtype fp8_e4m3 -> bf16 (KV008)" in proc.stderr
    assert "(MEM004, which KV008's change alone would bring: concurrency" in proc.stderr
    assert run_cli_here("validate", "--strict", str(out)).returncode == 0
    spec = load_spec(out).spec
    assert spec.kv_cache.dtype == "bf16" and spec.rollout.max_num_seqs and not spec.acknowledge


def test_acknowledge_reason_keeps_a_summary_s_capitals():
    from fp8spec.starter import _lowered

    assert _lowered("FP8 KV cache on a model") == "FP8 KV cache on a model"  # was 'fP8 KV cache'
    assert _lowered("The KV cache holds") == "the KV cache holds"


def test_init_never_undoes_its_own_change(tmp_path, monkeypatch):
    """The guard, on its own: with proposals checked for errors only (the check before a proposal became a
    promise), KV008 proposes bf16 and MEM004 then proposes fp8_e4m3 back. init applies the first, does not
    apply the second, names MEM004 in a comment of the draft and a note, and ends unclean (exit 1)."""
    import fp8spec.rules.proposals as proposals
    from fp8spec.starter import starter_spec

    checked = proposals._verdict

    def errors_only(prober, changes, fixes):
        after = prober.findings(changes)
        if after is not None and fixes is not None and any(found[:2] == tuple(fixes) for found in after):
            return False, frozenset(), frozenset()
        return checked(prober, changes, None)

    monkeypatch.setattr(proposals, "_verdict", errors_only)
    result = starter_spec("dense-vllm", gpu="h200", config_path=_mistral(tmp_path), spec_dir=tmp_path)
    assert result.changes == ["kv_cache.dtype fp8_e4m3 -> bf16 (KV008)", "kv_cache.recalibrate per_step -> none (KV008)"]
    assert result.kept == ["MEM004 heavy-preemption left unfixed: kv_cache.dtype: fp8_e4m3 would undo the change "
                           "kv_cache.dtype fp8_e4m3 -> bf16 (KV008)"]
    assert result.text.endswith(f"# init: {result.kept[0]}\n")
    assert not result.clean and result.validation.loaded.spec.kv_cache.dtype == "bf16"
    assert [code for code, _ in result.unacknowledged] == ["MEM004"]
    assert "its proposal would undo an earlier change" in result.unacknowledged[0][1]
