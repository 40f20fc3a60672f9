"""Human views of a plan: `explain` (spec field -> settings, with reasons) and `diff` (two plans)."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Optional

from fp8spec.compiler.settings import Setting, SettingsPlan
from fp8spec.resolve.valid import ValidSpec

if TYPE_CHECKING:
    from fp8spec.specfile.model import Spec

_LAYER_NAMES = {
    "hydra": "verl override",
    "ray_init": "ray.init override",
    "env": "env var",
    "engine_arg": "engine flag",
    "patch": "runtime patch",
    "launcher": "launcher",
}


def _rendered(s: Setting) -> str:
    if s.layer in ("hydra", "ray_init"):
        return s.override
    if s.layer == "patch":
        return f"{s.key} ({s.value})"
    if s.layer == "engine_arg":
        return f"{s.key} {s.value}" if s.value is not True else s.key
    return f"{s.key}={s.value}"


def explain_text(valid: ValidSpec, plan: SettingsPlan) -> str:
    spec = valid.spec
    groups: "OrderedDict[str, list[Setting]]" = OrderedDict()
    for s in plan.settings:
        groups.setdefault(s.source, []).append(s)
    lines = [f"{spec.name}: {plan.backend}", ""]
    if valid.retargeted:
        lines[1:1] = [
            f"retargeted from the spec's {', '.join(f'{r.field} {r.spec_value}' for r in valid.retargeted)}"
            " by --backend: every field below is as compiled for this backend"
        ]
    for source in sorted(groups):
        lines.append(f"{source}")
        for s in groups[source]:
            lines.append(f"  {_LAYER_NAMES[s.layer]:<14} {_rendered(s)}")
            lines.append(f"  {'':<14} why: {s.why}")
            if s.evidence:
                lines.append(f"  {'':<14} evidence: {s.evidence}")
        lines.append("")
    if plan.notes:
        lines.append("notes:")
        lines.extend(f"  - {n}" for n in plan.notes)
        lines.append("")
    return "\n".join(lines)


def launcher_settings(spec: Spec) -> dict[str, str]:
    """The spec's cluster section as 'cluster.field' -> value: what the launcher files (submit.sh, slurm.sbatch,
    rayjob.yaml) are made of besides the compiled configuration."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key in sorted(value):
                walk(f"{prefix}.{key}", value[key])
        else:
            out[prefix] = json.dumps(value, sort_keys=True)

    walk("cluster", spec.cluster.model_dump(mode="json"))
    return out


def _table(plan: SettingsPlan, launcher: Optional[dict[str, str]]) -> dict[tuple[str, str], str]:
    table: dict[tuple[str, str], str] = {
        (s.layer, ("+" if s.plus else "") + s.key): _rendered(s) for s in plan.settings
    }
    table.update({("launcher", key): f"{key}: {value}" for key, value in (launcher or {}).items()})
    return table


def _differences(
    a: SettingsPlan,
    b: SettingsPlan,
    launcher_a: Optional[dict[str, str]],
    launcher_b: Optional[dict[str, str]],
) -> list[tuple[tuple[str, str], Optional[str], Optional[str]]]:
    """Each (layer, key) whose rendered setting differs, in key order, with each side's rendering (None where a
    side lacks it): what diff_text and diff_data both show."""
    ta, tb = _table(a, launcher_a), _table(b, launcher_b)
    return [
        (key, ta.get(key), tb.get(key)) for key in sorted(set(ta) | set(tb)) if ta.get(key) != tb.get(key)
    ]


def diff_text(
    a: SettingsPlan,
    b: SettingsPlan,
    name_a: str,
    name_b: str,
    launcher_a: Optional[dict[str, str]] = None,
    launcher_b: Optional[dict[str, str]] = None,
) -> str:
    """Settings that differ, keyed by layer and key, the launcher's (the spec's cluster section) included; the
    names head the two sides (they say the backend)."""
    lines = [f"--- {name_a}", f"+++ {name_b}"]
    for key, in_a, in_b in _differences(a, b, launcher_a, launcher_b):
        if in_a is not None:
            lines.append(f"- [{_LAYER_NAMES[key[0]]}] {in_a}")
        if in_b is not None:
            lines.append(f"+ [{_LAYER_NAMES[key[0]]}] {in_b}")
    if len(lines) == 2:
        lines.append("(no difference in the compiled configuration or the launcher settings)")
    return "\n".join(lines) + "\n"


# ---- the same views as data (--format json) -------------------------------------------------------------------


def _setting_record(s: Setting) -> dict:
    return {
        "layer": s.layer,
        "key": ("+" if s.plus else "") + s.key,
        "value": s.value,
        "rendered": _rendered(s),
        "why": s.why,
        "evidence": s.evidence,
    }


def explain_data(valid: ValidSpec, plan: SettingsPlan) -> dict:
    """explain_text as data: each spec field (source) with the settings it became, in the same order."""
    groups: "OrderedDict[str, list[Setting]]" = OrderedDict()
    for s in plan.settings:
        groups.setdefault(s.source, []).append(s)
    return {
        "spec": valid.spec.name,
        "backend": plan.backend,
        "retargeted_from": [{"field": r.field, "value": r.spec_value} for r in valid.retargeted],
        "fields": [
            {"source": source, "settings": [_setting_record(s) for s in groups[source]]}
            for source in sorted(groups)
        ],
        "notes": list(plan.notes),
    }


def diff_data(
    a: SettingsPlan,
    b: SettingsPlan,
    name_a: str,
    name_b: str,
    launcher_a: Optional[dict[str, str]] = None,
    launcher_b: Optional[dict[str, str]] = None,
) -> dict:
    """diff_text as data: every (layer, key) whose rendered setting differs; null where a side lacks it."""
    changes = [
        {"layer": layer, "key": key, "a": in_a, "b": in_b}
        for (layer, key), in_a, in_b in _differences(a, b, launcher_a, launcher_b)
    ]
    return {"a": name_a, "b": name_b, "same": not changes, "differences": changes}
