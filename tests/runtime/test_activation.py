import json
import os
import subprocess
import sys
import textwrap

import pytest

import fp8spec.runtime as rt
from fp8spec.runtime import _importhook, envs, manifest, version_guard

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code: str, env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8SPEC_")}
    env.update(env_extra)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


CHECK = """
import sys, json
import fp8spec.runtime as rt
from fp8spec.runtime import _importhook
bad = sorted(m for m in sys.modules if m.split('.')[0] in
             ('pydantic', 'typer', 'rich', 'ruamel', 'jinja2', 'yaml', 'hydra', 'omegaconf', 'vllm', 'sglang', 'verl')
             or (m.startswith('fp8spec.') and not m.startswith('fp8spec.runtime')))
print(json.dumps({'active': sorted(rt.active_patches()), 'pending': _importhook.pending(), 'bad': bad,
                  'torch': 'torch' in sys.modules}))
"""


def test_import_without_env_does_nothing():
    r = _run(CHECK, {})
    assert r == {"active": [], "pending": {}, "bad": [], "torch": False}


def test_import_with_env_registers_hooks_only():
    r = _run(CHECK, {"FP8SPEC_RUNTIME_PATCHES": "kv_scales,fast_block_quant"})
    assert r["active"] == ["fast_block_quant", "kv_scales"]
    assert set(r["pending"]) == {
        "verl.workers.engine_workers",
        "verl.workers.rollout.vllm_rollout.utils",
        "verl.utils.vllm.vllm_quant_utils",
        "verl.utils.fp8_utils",
    }  # no hook on verl's bucket transfer: the sync timing line is measurement, only with sync_timing
    assert r["bad"] == []


def test_unknown_patch_name_is_rejected():
    with pytest.raises(ValueError, match="unknown patch"):
        rt.requested_patches("kv_scales,fp4_everything")
    assert rt.requested_patches(" kv_scales , kv_scales ,") == ["kv_scales"]


def test_manifest_contract():
    assert manifest.PATCHSET_NAME == "fp8spec-runtime"
    assert manifest.PATCHSET_VERSION == rt.__version__
    assert set(manifest.PATCHES) == {
        "kv_scales", "ue8m0_scales", "fast_block_quant", "te_report", "mbridge_compat", "te_extra_state_compat",
        "direct_sync", "sync_timing", "module_precision", "replay_poll",
    }
    for name, p in manifest.PATCHES.items():
        assert p["description"] and set(p["engines"]) == {"vllm", "sglang"}, name
    # what an engine must be told to load a patch is the engine's own (fp8spec/engines/<name>/adapter.py), named
    # by profile fact ids, never by the engine's own key names; SGLang loads the runtime's KV-scale loader by its
    # import path
    from fp8spec.compiler.adapters.engine import engine_adapter

    assert engine_adapter("sglang").patch_engine_args("kv_scales") == {
        "engine_arg.custom_weight_loader": [manifest.SGLANG_KV_LOADER]
    }
    assert all(engine_adapter(e).patch_engine_args(p) == {} for e in ("vllm", "sglang") for p in manifest.PATCHES
               if (e, p) != ("sglang", "kv_scales"))
    # the manifest is plain data: importing it must not pull torch
    r = _run(
        "import sys, json; import fp8spec.runtime.manifest; print(json.dumps({'t': 'torch' in sys.modules}))",
        {},
    )
    assert r == {"t": False}


def test_loader_paths_in_manifest_resolve():
    import importlib

    mod, fn = manifest.SGLANG_KV_LOADER.rsplit(".", 1)
    assert callable(getattr(importlib.import_module(mod), fn))
    mod, attr = manifest.VLLM_PLUGIN_ENTRY_POINT[2].split(":")
    assert callable(getattr(importlib.import_module(mod), attr))
    mod, cls = manifest.VLLM_WORKER_EXTENSION.rsplit(".", 1)
    assert hasattr(getattr(importlib.import_module(mod), cls), "fp8spec_set_kv_scales")


def test_version_guard(monkeypatch):
    monkeypatch.delenv(envs.ALLOW_UNKNOWN_VERSIONS.name, raising=False)
    version_guard.check("vllm", "0.24.0")
    version_guard.check("vllm", "0.33.0+cu130")
    version_guard.check("verl", "0.9.1")
    with pytest.raises(version_guard.UnsupportedVersionError) as e:
        version_guard.check("vllm", "0.25.1", "kv_scales")
    msg = str(e.value)
    assert "\n" not in msg and "0.25.1" in msg and "kv_scales" in msg and "0.24.0" in msg
    with pytest.raises(version_guard.UnsupportedVersionError, match="not installed"):
        version_guard.check("sglang", None)
    with pytest.raises(version_guard.UnsupportedVersionError):
        version_guard.require("definitely-not-a-real-dist-fp8spec")
    monkeypatch.setenv(envs.ALLOW_UNKNOWN_VERSIONS.name, "1")
    version_guard.check("vllm", "0.25.1")
    # the installed verl is the one the patches were written against
    assert version_guard.installed_version("verl") in (None, "0.9.1")


def test_activation_rejects_unknown_installed_verl(monkeypatch):
    monkeypatch.delenv(envs.ALLOW_UNKNOWN_VERSIONS.name, raising=False)
    monkeypatch.setattr(version_guard, "installed_version", lambda d: "0.8.0" if d == "verl" else None)
    monkeypatch.setattr(rt, "_ACTIVE", set())
    with pytest.raises(version_guard.UnsupportedVersionError, match="verl 0.9.1 but 0.8.0"):
        rt.activate(["kv_scales"])
    assert rt.active_patches() == frozenset()


def test_import_hook_fires_after_module_body(tmp_path, monkeypatch):
    pkg = tmp_path / "fp8spec_fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "target.py").write_text("VALUE = 1\ndef f():\n    return VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def patch(mod):
        seen.append(mod.VALUE)
        mod.f = lambda: 42

    _importhook.when_imported("fp8spec_fakepkg.target", patch)
    assert "fp8spec_fakepkg.target" in _importhook.pending()
    import fp8spec_fakepkg.target as t  # noqa: E402

    assert seen == [1] and t.f() == 42
    assert "fp8spec_fakepkg.target" not in _importhook.pending()
    # already imported: runs at once
    _importhook.when_imported("fp8spec_fakepkg.target", lambda m: seen.append("now"))
    assert seen == [1, "now"]
    for m in ("fp8spec_fakepkg.target", "fp8spec_fakepkg"):
        sys.modules.pop(m, None)


def test_vllm_plugin_register_activates_from_env(monkeypatch):
    from fp8spec.runtime import vllm_plugin

    monkeypatch.setattr(rt, "_ACTIVE", set())
    monkeypatch.delenv("FP8SPEC_RUNTIME_PATCHES", raising=False)
    vllm_plugin.register()
    assert rt.active_patches() == frozenset()
    monkeypatch.setattr(version_guard, "installed_version", lambda d: None)
    monkeypatch.setattr(_importhook, "when_imported", lambda name, cb: None)
    monkeypatch.setenv("FP8SPEC_RUNTIME_PATCHES", "ue8m0_scales")
    vllm_plugin.register()
    assert rt.active_patches() == frozenset({"ue8m0_scales"})


LOG_LINE = """
import logging, json
import fp8spec.runtime
logging.getLogger('fp8spec.runtime.verl_patch').info('sync seen')
logging.getLogger('fp8spec.runtime.verl_patch').debug('detail seen')
print(json.dumps({}))
"""


def _stderr(env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8SPEC_")}
    env.update(env_extra)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", LOG_LINE], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stderr


def test_active_patch_set_logs_at_info_on_stderr():
    # In a Ray worker nobody configures the root logger: the per-sync lines must not depend on it.
    err = _stderr({"FP8SPEC_RUNTIME_PATCHES": "kv_scales", "FP8SPEC_RUNTIME_ALLOW_UNKNOWN_VERSIONS": "1"})
    assert "INFO fp8spec.runtime.verl_patch: sync seen" in err
    assert "detail seen" not in err


def test_log_level_comes_from_the_environment():
    err = _stderr(
        {
            "FP8SPEC_RUNTIME_PATCHES": "kv_scales",
            "FP8SPEC_RUNTIME_ALLOW_UNKNOWN_VERSIONS": "1",
            "FP8SPEC_LOG_LEVEL": "debug",
        }
    )
    assert "detail seen" in err
    assert "sync seen" not in _stderr({})  # patch set inactive: no handler, Python's default (WARNING)
