#!/usr/bin/env python3
"""fp8spec preflight: check every GPU node of a Ray cluster against the bundle before training starts.

Shipped in every fp8spec trainer bundle beside its expected values (preflight.json). Self-contained: it
needs the Python standard library, torch for the GPU facts and ray for the cluster mode; never fp8spec.

    python3 preflight.py                     # as a Ray job: one task on every GPU node (what submit.sh runs)
    python3 preflight.py --skip-gpu-checks   # dry run on CPU nodes: one task on every alive node
    python3 preflight.py --local             # this machine only, in-process, without Ray, with the bundle's env
    eval "$(python3 preflight.py --print-env)"   # export the bundle's environment into this shell

On every node it checks: the GPUs (count, name and compute capability against hardware.gpu), the CUDA version
torch was built with, the installed versions of the pinned packages (and flash-attn when the FSDP trainer asks for
flash_attention_2), the runtime patch set the workers import (the files the bundle ships in lib/, by sha256),
every environment variable the bundle sets (as the worker sees it), the model folder and its config.json (unless a
hub id), every data file, and the credentials the run's loggers need (WANDB_API_KEY for wandb). One table,
node by node; exit 1 on any mismatch, 2 when it could not run.
Before any node task it checks the Ray cluster's logical CPUs (preflight_cpus.py, shipped beside it): exit 3.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # preflight_cpus.py and preflight_checks.py ship beside it
import preflight_cpus  # noqa: E402
from preflight_checks import FAIL, INFO, MODEL_KEYS, PASS, SKIP, _row, check_cluster, check_node  # noqa: E402

RESULT_TAG = "FP8SPEC_PREFLIGHT_RESULT"
FORMAT = 2

class PreflightError(Exception):
    """The preflight could not run (bad preflight.json, no Ray): exit code 2."""


# --- facts: what one node sees (runs inside a Ray task, or in-process with --local) -------------------------


def node_facts(expected: dict, skip_gpu: bool = False) -> dict:
    """Everything the checks need from the machine this runs on. Never raises: problems become facts."""
    facts = {"hostname": socket.gethostname(), "python": platform.python_version(), "skip_gpu": skip_gpu}
    try:
        facts["ip"] = _node_ip()
    except Exception:  # pragma: no cover - best effort
        facts["ip"] = ""
    facts["torch"] = _torch_facts()
    facts["packages"] = {p["name"]: _installed_version(p["distributions"]) for p in expected["packages"]}
    facts["env"] = {name: os.environ.get(name) for name in expected["env"]}
    facts["model"] = _model_facts(expected.get("model") or {})
    if expected.get("runtime"):
        facts["runtime"] = _runtime_facts(expected["runtime"])
    facts["data"] = {path: _data_fact(path) for path in (expected.get("data") or {}).get("files", [])}
    return facts


def runtime_fileset(package_dir: str) -> dict:
    """sha256 of package/__init__.py and of every .py file under package/runtime, by path relative to the
    folder holding the package (the bundle's lib/): the set fp8spec ships, computed as fp8spec.patchset does."""
    files = {}
    paths = [os.path.join(package_dir, "__init__.py")]
    for root, dirs, names in os.walk(os.path.join(package_dir, "runtime")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        paths += [os.path.join(root, n) for n in sorted(names) if n.endswith(".py")]
    for path in paths:
        with open(path, "rb") as fh:
            rel = os.path.relpath(path, os.path.dirname(package_dir)).replace(os.sep, "/")
            files[rel] = hashlib.sha256(fh.read()).hexdigest()
    return files


def fileset_digest(files: dict) -> str:
    lines = "".join(f"{sha}  {path}\n" for path, sha in sorted(files.items()))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def _runtime_facts(runtime: dict) -> dict:
    """Where the workers import the patch set from, that file set, and whether it imports (torch only)."""
    import importlib.util  # binds importlib too

    package = runtime["package"]
    try:
        spec = importlib.util.find_spec(package)
    except Exception as err:
        return {"error": f"{type(err).__name__}: {err}"}
    if spec is None or not spec.submodule_search_locations:
        return {"error": f"{package} is not importable here (sys.path has no {package} package)"}
    package_dir = list(spec.submodule_search_locations)[0]
    out: dict = {"path": package_dir}
    try:
        out["files"] = runtime_fileset(package_dir)
        out["sha256"] = fileset_digest(out["files"])
        importlib.import_module(package + ".runtime")
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def _data_fact(path: str) -> dict:
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
        return {"status": "remote"}
    if os.path.isfile(path):
        return {"status": "file", "size": os.path.getsize(path)}
    return {"status": "missing", "folder": os.path.isdir(path)}


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:
        pass
    return ""


def _torch_facts() -> dict:
    try:
        import torch
    except Exception as err:  # ImportError, or a broken CUDA install raising at import
        return {"installed": False, "error": f"{type(err).__name__}: {err}"}
    out: dict = {"installed": True, "version": getattr(torch, "__version__", "?"),
           "cuda": getattr(torch.version, "cuda", None), "available": False, "devices": []}
    try:
        out["available"] = bool(torch.cuda.is_available())
        if out["available"]:
            for i in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(i)
                out["devices"].append({"name": torch.cuda.get_device_name(i), "cc": f"{major}.{minor}"})
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    out["visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    return out


def _installed_version(distributions: list) -> dict:
    from importlib import metadata

    for name in distributions:
        for spelling in dict.fromkeys((name, name.replace("-", "_"), name.replace("_", "-"))):
            try:
                return {"distribution": spelling, "version": metadata.version(spelling)}
            except metadata.PackageNotFoundError:
                continue
            except Exception as err:  # a broken dist-info
                return {"distribution": spelling, "version": None, "error": f"{type(err).__name__}: {err}"}
    return {"distribution": None, "version": None}


def _model_facts(model: dict) -> dict:
    path = model.get("path")
    if not path:
        return {"status": "none", "reason": "the bundle names no model path"}
    if model.get("from_hub"):
        return {"status": "hub", "reason": f"{path} is a hub id (model.from_hub): verl downloads it"}
    if not os.path.isdir(path):
        return {"status": "absent", "reason": f"{path} is not a folder on this node (not mounted?)"}
    config_path = os.path.join(path, "config.json")
    if not model.get("config"):
        return {"status": "folder", "reason": f"{path} is a folder (no model facts to compare)"}
    if not os.path.isfile(config_path):
        return {"status": "absent", "reason": f"{config_path} does not exist"}
    try:
        with open(config_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as err:
        return {"status": "error", "reason": f"cannot read {config_path}: {err}"}
    if not isinstance(config, dict):
        return {"status": "error", "reason": f"{config_path} is not a JSON object"}
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]  # multimodal wrappers keep the language model's facts here
    values: dict = {}
    for fact, (keys, default) in MODEL_KEYS.items():
        value = next((config[k] for k in keys if config.get(k) is not None), None)
        if value is None:
            value = values.get(default) if isinstance(default, str) else default
        values[fact] = value
    return {"status": "read", "path": config_path, "values": values}


# --- running: in-process (--local) or one Ray task per node -------------------------------------------------


def run_local(expected: dict, skip_gpu: bool) -> list:
    # What runtime_env.yaml gives every worker, and launch.sh exports when run by hand: without it every env row
    # would fail in a plain shell, and the runtime patch set would be checked as no worker imports it. A value
    # the shell already sets is kept, so that a different one is still reported.
    for name, value in expected["env"].items():
        os.environ.setdefault(name, value)
    facts = node_facts(expected, skip_gpu)
    label = facts["hostname"] + " (local)"
    return [("cluster", check_cluster(expected, 1, skip_gpu, local=True)),
            (label, check_node(expected, facts, skip_gpu))]


def run_ray(expected: dict, skip_gpu: bool, address: str | None, timeout: float) -> list:
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as err:
        raise PreflightError(f"ray is not importable ({err}); use --local to check this machine alone") from err
    init = {"address": address} if address else {}
    try:
        ray.init(log_to_driver=True, logging_level="WARNING", **init)  # type: ignore[arg-type]  # a name works
    except Exception as err:
        raise PreflightError(f"cannot join the Ray cluster ({type(err).__name__}: {err}); "
                             "run it as a Ray job (submit.sh) or pass --address") from err
    preflight_cpus.require_cpus(ray, expected)  # seconds: a cluster short of CPUs would hang verl silently
    alive = [n for n in ray.nodes() if n.get("Alive")]
    if skip_gpu:
        targets = [(n, 0) for n in alive]
    else:
        targets = [(n, int((n.get("Resources") or {}).get("GPU", 0))) for n in alive]
        targets = [(n, gpus) for n, gpus in targets if gpus > 0]
    targets.sort(key=lambda t: (t[0].get("NodeManagerAddress", ""), t[0]["NodeID"]))
    results = [("cluster", check_cluster(expected, len(targets), skip_gpu, local=False))]
    remote = ray.remote(node_facts)
    pending = {}
    for node, gpus in targets:
        ref = remote.options(
            num_cpus=0, num_gpus=gpus, max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False),
        ).remote(expected, skip_gpu)
        pending[ref] = node
    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout) if pending else ([], [])
    done = set(ready)
    for ref, node in pending.items():
        label = f"{node.get('NodeManagerAddress', '?')} {node['NodeID'][:8]}"
        if ref not in done:
            results.append((label, [_row("node task", "answers", f"no answer within {timeout:g} s "
                                         "(GPUs held by another job, or the node is unhealthy)", FAIL)]))
            continue
        try:
            facts = ray.get(ref)
        except Exception as err:
            results.append((label, [_row("node task", "answers", f"{type(err).__name__}: {err}", FAIL)]))
            continue
        label = f"{facts.get('hostname', '?')} {node.get('NodeManagerAddress', '?')}"
        results.append((label, check_node(expected, facts, skip_gpu)))
    return results


# --- output -------------------------------------------------------------------------------------------------


def render(expected: dict, results: list, mode: str) -> str:
    header = ("NODE", "CHECK", "EXPECTED", "FOUND", "STATUS")
    lines = []
    for node, rows in results:
        for i, r in enumerate(rows):
            lines.append((node if i == 0 else "", r["check"], r["expected"], r["found"], r["status"]))
    widths = [max(len(header[c]), *(len(line[c]) for line in lines)) if lines else len(header[c])
              for c in range(5)]
    fmt = "  ".join("{:<%d}" % w for w in widths[:4]) + "  {}"
    spec = expected.get("spec") or {}
    out = [f"fp8spec preflight for {spec.get('name', '?')} ({expected.get('backend', '?')}), "
           f"bundle spec sha256 {str(spec.get('sha256', '?'))[:12]}, mode: {mode}",
           fmt.format(*header), fmt.format(*("-" * w for w in widths[:4]), "-" * 6)]
    previous = None
    for node, rows in results:
        if previous is not None:
            out.append("")
        previous = node
        for i, r in enumerate(rows):
            out.append(fmt.format(node if i == 0 else "", r["check"], r["expected"], r["found"],
                                  r["status"]).rstrip())
    return "\n".join(out)


def summarize(results: list) -> tuple:
    failures = [(node, r) for node, rows in results for r in rows if r["status"] == FAIL]
    counts = {s: sum(r["status"] == s for _, rows in results for r in rows) for s in (PASS, FAIL, SKIP, INFO)}
    nodes = len(results) - 1
    if failures:
        detail = "; ".join(f"{node}: {r['check']} expected {r['expected']!r}, found {r['found']!r}"
                           for node, r in failures)
        return False, f"PREFLIGHT FAILED: {len(failures)} mismatch(es) on {nodes} node(s): {detail}"
    return True, (f"PREFLIGHT PASSED: {nodes} node(s), {counts[PASS]} checks passed, "
                  f"{counts[SKIP]} skipped")


def load_expected(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as err:
        raise PreflightError(f"cannot read {path}: {err.strerror or err}") from err
    except ValueError as err:
        raise PreflightError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PreflightError(f"{path} is not an fp8spec preflight file of format {FORMAT}")
    for key in ("hardware", "packages", "env"):
        if key not in data:
            raise PreflightError(f"{path} lacks {key!r}")
    return data


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expected", default=os.path.join(here, "preflight.json"),
                        help="the bundle's expected values (default: preflight.json beside this file)")
    parser.add_argument("--skip-gpu-checks", action="store_true",
                        help="dry run: report GPU facts without judging them; check every alive node")
    parser.add_argument("--local", action="store_true", help="check this machine in-process, without Ray")
    parser.add_argument("--address", default=None,
                        help="Ray address for ray.init (default: the job's cluster)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds to wait for every node task to be scheduled and answer (default 600)")
    parser.add_argument("--print-env", action="store_true",
                        help="print the bundle's environment as shell export lines and exit")
    args = parser.parse_args(argv)
    try:
        expected = load_expected(args.expected)
        if args.print_env:
            for name, value in sorted(expected["env"].items()):
                print(f"export {name}={shlex.quote(value)}")
            return 0
        mode = ("local" if args.local else "ray") + (", GPU checks skipped" if args.skip_gpu_checks else "")
        started = time.time()
        if args.local:
            results = run_local(expected, args.skip_gpu_checks)
        else:
            results = run_ray(expected, args.skip_gpu_checks, args.address, args.timeout)
    except PreflightError as err:
        print(f"preflight: error: {err}", file=sys.stderr)
        return 2
    except preflight_cpus.CpuShortage as err:
        print(f"preflight: error: {err}", file=sys.stderr)
        return preflight_cpus.EXIT_CPU_SHORTAGE
    ok, summary = summarize(results)
    print(render(expected, results, mode))
    print()
    print(summary + f" ({time.time() - started:.1f} s)")
    print(RESULT_TAG + " " + json.dumps({"ok": ok, "mode": mode,
                                         "nodes": [{"node": n, "rows": rows} for n, rows in results]},
                                        sort_keys=True))
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
