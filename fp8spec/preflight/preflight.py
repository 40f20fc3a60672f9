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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # preflight_cpus.py ships beside this file
import preflight_cpus  # noqa: E402

PASS, FAIL, SKIP, INFO = "PASS", "FAIL", "SKIP", "INFO"
RESULT_TAG = "FP8SPEC_PREFLIGHT_RESULT"
FORMAT = 2

# config.json keys for each model fact; the first key present wins, a missing one takes the default.
MODEL_KEYS = {
    "hidden_size": (("hidden_size",), None),
    "num_hidden_layers": (("num_hidden_layers",), None),
    "num_attention_heads": (("num_attention_heads",), None),
    "num_key_value_heads": (("num_key_value_heads",), "num_attention_heads"),
    "num_experts": (("num_experts", "n_routed_experts", "num_local_experts"), 0),
    "vocab_size": (("vocab_size",), None),
}


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


# --- checks: pure functions of (expected, facts) -> rows ----------------------------------------------------


def _row(check: str, expected, found, status: str) -> dict:
    return {"check": check, "expected": _text(expected), "found": _text(found), "status": status}


def _text(value) -> str:
    return "(unset)" if value is None else str(value)


def same_version(found: str | None, pin: str) -> bool:
    """Installed ``found`` satisfies ``pin`` when equal, ignoring a local label ('0.24.0+cu129'); a '>=X.Y.Z'
    pin (a package the run needs at some version, e.g. flash-attn) when its release is at least X.Y.Z."""
    if not found:
        return False
    if pin.startswith(">="):
        return _release(found, 3) >= _release(pin[2:], 3)
    return found == pin or found.split("+", 1)[0] == pin


def gpu_name_matches(device_name: str, token: str) -> bool:
    """'NVIDIA H200' matches H200, 'NVIDIA H200 NVL' too; 'NVIDIA H20' and 'NVIDIA GB200' match neither."""
    pattern = r"(?<![A-Za-z0-9])" + re.escape(token) + r"(?![0-9])"
    return re.search(pattern, device_name, flags=re.IGNORECASE) is not None


def check_node(expected: dict, facts: dict, skip_gpu: bool) -> list:
    rows = []
    hw = expected["hardware"]
    torch_facts = facts.get("torch") or {}
    devices = torch_facts.get("devices") or []
    want_gpu = f"{hw['device_name']} (compute capability {hw['compute_capability']})"
    if not torch_facts.get("installed"):
        seen_gpu = seen_count = seen_cuda = "torch not importable: " + torch_facts.get("error", "?")
    else:
        names = sorted({f"{d['name']} ({d['cc']})" for d in devices})
        seen_gpu = ", ".join(names) if names else "no CUDA device (torch.cuda.is_available() is False)"
        seen_count = str(len(devices))
        seen_cuda = torch_facts.get("cuda") or "none (CPU build of torch)"
        if torch_facts.get("error"):
            seen_gpu += f" [{torch_facts['error']}]"
    if skip_gpu:
        rows.append(_row("gpu", want_gpu, seen_gpu, SKIP))
        rows.append(_row("gpu count", hw["gpus_per_node"], seen_count, SKIP))
        rows.append(_row("torch cuda", hw["cuda"], seen_cuda, SKIP))
    else:
        good = bool(devices) and all(
            d["cc"] == hw["compute_capability"] and gpu_name_matches(d["name"], hw["device_name"])
            for d in devices
        )
        rows.append(_row("gpu", want_gpu, seen_gpu, PASS if good else FAIL))
        rows.append(_row("gpu count", hw["gpus_per_node"], seen_count,
                         PASS if len(devices) == hw["gpus_per_node"] else FAIL))
        cuda = torch_facts.get("cuda")
        rows.append(_row("torch cuda", hw["cuda"], seen_cuda, PASS if cuda and _release(cuda) ==
                         _release(hw["cuda"]) else FAIL))
    if torch_facts.get("installed"):
        rows.append(_row("torch", "(any)", torch_facts.get("version"), INFO))
    else:
        rows.append(_row("torch", "installed", "not importable", FAIL))
    for pkg in expected["packages"]:
        seen = (facts.get("packages") or {}).get(pkg["name"]) or {}
        version = seen.get("version")
        found = version if version else "not installed"
        if seen.get("error"):
            found += f" [{seen['error']}]"
        rows.append(_row(f"pkg {pkg['name']}", pkg["version"], found,
                         PASS if same_version(version, pkg["version"]) else FAIL))
    if expected.get("runtime"):
        rows.append(_runtime_row(expected["runtime"], facts.get("runtime") or {}))
    seen_env = facts.get("env") or {}
    for name, value in sorted(expected["env"].items()):
        got = seen_env.get(name)
        rows.append(_row(f"env {name}", value, got, PASS if got == value else FAIL))
    rows.append(_model_row(expected.get("model") or {}, facts.get("model") or {}))
    seen_data = facts.get("data") or {}
    for path in (expected.get("data") or {}).get("files", []):
        seen = seen_data.get(path) or {}
        if seen.get("status") == "file":
            rows.append(_row(f"data {path}", "a file", f"{seen.get('size')} bytes", PASS))
        elif seen.get("status") == "remote":
            rows.append(_row(f"data {path}", "a file", "a remote URL, read by verl", SKIP))
        else:
            found = "a folder, not a file" if seen.get("folder") else "missing (not mounted?)"
            rows.append(_row(f"data {path}", "a file", found, FAIL))
    return rows


def _runtime_row(runtime: dict, seen: dict) -> dict:
    module = runtime["package"] + ".runtime"
    want = f"sha256 {runtime['sha256'][:16]} ({len(runtime['files'])} files from the bundle's lib/)"
    if seen.get("error") and "sha256" not in seen:
        return _row(f"runtime {module}", want, seen["error"], FAIL)
    found = f"sha256 {seen.get('sha256', '?')[:16]} at {seen.get('path')}"
    have = seen.get("files") or {}
    wanted = runtime["files"]
    differ = sorted(p for p in set(have) | set(wanted) if have.get(p) != wanted.get(p))
    if differ:
        found += " (differs: " + ", ".join(differ[:3]) + (", ..." if len(differ) > 3 else "") + ")"
    if seen.get("error"):
        found += f" [import: {seen['error']}]"
    good = seen.get("sha256") == runtime["sha256"] and not differ and not seen.get("error")
    return _row(f"runtime {module}", want, found, PASS if good else FAIL)


def _release(text: str, n: int = 2) -> tuple:
    return tuple(int(p) for p in re.findall(r"[0-9]+", str(text).split("+", 1)[0])[:n])


def _model_text(values: dict) -> str:
    short = {"hidden_size": "hidden", "num_hidden_layers": "layers", "num_attention_heads": "heads",
             "num_key_value_heads": "kv_heads", "num_experts": "experts", "vocab_size": "vocab"}
    return " ".join(f"{short[k]}={values.get(k)}" for k in MODEL_KEYS)


def _model_row(model: dict, seen: dict) -> dict:
    want = model.get("config") or {}
    if seen.get("status") == "read":
        got = seen.get("values") or {}
        bad = [k for k in MODEL_KEYS if got.get(k) != want.get(k)]
        found = _model_text(got)
        if bad:
            found += "  (differs: " + ", ".join(bad) + ")"
        return _row("model config.json", _model_text(want), found, FAIL if bad else PASS)
    if seen.get("status") == "folder":
        return _row("model config.json", "-", seen.get("reason"), PASS)
    if seen.get("status") in ("error", "absent"):
        return _row("model config.json", _model_text(want), seen.get("reason"), FAIL)
    return _row("model config.json", _model_text(want) if want else "-", seen.get("reason", "not checked"),
                SKIP)


def check_cluster(expected: dict, node_count: int, skip_gpu: bool, local: bool) -> list:
    nodes = expected["hardware"]["nodes"]
    if local:
        rows = [_row("gpu nodes", nodes, "--local checks this machine only", SKIP)]
    elif skip_gpu:
        rows = [_row("gpu nodes", nodes, f"{node_count} alive node(s), checked without GPU checks", SKIP)]
    else:
        found = f"{node_count}" if node_count else "0 (no alive Ray node has a GPU resource)"
        rows = [_row("gpu nodes", nodes, found, PASS if node_count == nodes else FAIL)]
    return rows + credential_rows(expected)


def credential_rows(expected: dict) -> list:
    """The credentials the run's loggers need, as the job's driver sees them (the job's runtime env included):
    a logger without its key fails when the trainer starts, after the cluster was allocated."""
    rows = []
    for cred in expected.get("credentials") or []:
        name, logger = cred["env"], cred["logger"]
        want = f"set (the {logger} logger)"
        mode = os.environ.get(cred.get("mode_env") or "", "")
        if os.environ.get(name):
            rows.append(_row(f"credential {name}", want, "set", PASS))
        elif mode in (cred.get("modes_without_key") or []):
            rows.append(_row(f"credential {name}", want, f"unset, {cred['mode_env']}={mode}", PASS))
        elif cred.get("netrc_host") and _in_netrc(cred["netrc_host"]):
            rows.append(_row(f"credential {name}", want, f"unset, ~/.netrc has {cred['netrc_host']}", PASS))
        else:
            rows.append(_row(f"credential {name}", want, "(unset)", FAIL))
    return rows


def _in_netrc(host: str) -> bool:
    try:
        with open(os.path.join(os.path.expanduser("~"), ".netrc"), encoding="utf-8") as fh:
            return host in fh.read().split()
    except (OSError, UnicodeDecodeError):
        return False


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
