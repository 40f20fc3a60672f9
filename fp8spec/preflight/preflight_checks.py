"""The preflight's checks: pure functions of (expected, facts) -> table rows, run where the facts are gathered
(the driver of the preflight job, or this machine with --local); the credentials the run's loggers need are
read from the driver's own environment.

Shipped beside preflight.py in every trainer bundle and imported by it; standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import re

PASS, FAIL, SKIP, INFO = "PASS", "FAIL", "SKIP", "INFO"

# config.json keys for each model fact; the first key present wins, a missing one takes the default.
MODEL_KEYS = {
    "hidden_size": (("hidden_size",), None),
    "num_hidden_layers": (("num_hidden_layers",), None),
    "num_attention_heads": (("num_attention_heads",), None),
    "num_key_value_heads": (("num_key_value_heads",), "num_attention_heads"),
    "num_experts": (("num_experts", "n_routed_experts", "num_local_experts"), 0),
    "vocab_size": (("vocab_size",), None),
}


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
        rows.append(
            _row(
                "gpu count",
                hw["gpus_per_node"],
                seen_count,
                PASS if len(devices) == hw["gpus_per_node"] else FAIL,
            )
        )
        cuda = torch_facts.get("cuda")
        rows.append(
            _row(
                "torch cuda",
                hw["cuda"],
                seen_cuda,
                PASS if cuda and _release(cuda) == _release(hw["cuda"]) else FAIL,
            )
        )
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
        rows.append(
            _row(
                f"pkg {pkg['name']}",
                pkg["version"],
                found,
                PASS if same_version(version, pkg["version"]) else FAIL,
            )
        )
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
    short = {
        "hidden_size": "hidden",
        "num_hidden_layers": "layers",
        "num_attention_heads": "heads",
        "num_key_value_heads": "kv_heads",
        "num_experts": "experts",
        "vocab_size": "vocab",
    }
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
    return _row(
        "model config.json", _model_text(want) if want else "-", seen.get("reason", "not checked"), SKIP
    )


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
