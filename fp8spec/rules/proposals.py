"""Values a hint may propose: only those with which the spec passes every rule.

A rule that knows candidate fixes (rollout tp values, layouts, budgets) does not trust its own arithmetic:
each candidate is applied to the spec and every rule runs again. A candidate is proposed only if it removes
the finding it is proposed for and adds no error: the changed spec may keep errors the spec already has (a
broader problem, another field), but none at the fields it changes and no new one anywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional

from fp8spec.rules.probing import PROBE, Changes, Prober, active_prober

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

ErrorKey = tuple[str, str]  # (code, spec path)


def _prober(ctx: ResolvedSpec) -> Optional[Prober]:
    """The prober for proposals about ``ctx``; None inside a probe."""
    active = active_prober()
    if active is PROBE:
        return None
    if isinstance(active, Prober) and active.ctx is ctx:
        return active
    from fp8spec.rules.runner import findings_of  # a rule checked directly (tests): a prober of its own

    return Prober(ctx, findings_of)


def _inside(path: str, field: str) -> bool:
    """Whether an error at ``path`` is about ``field``: the field itself, a part of it, or a group of fields
    that holds it (an error at training.parallel is about training.parallel.pp). An error at a whole
    section (MEM001 at training: the state does not fit) is not about each field in it."""
    return path == field or path.startswith(field + ".") or ("." in path and field.startswith(path + "."))


def _verdict(prober: Prober, changes: Changes, fixes: ErrorKey | None):
    """(passes, errors left after the change, new errors) for one candidate."""
    after = prober.findings(changes)
    if after is None:
        return False, frozenset(), frozenset()
    if fixes is not None and any(found[:2] == tuple(fixes) for found in after):
        return False, frozenset(), frozenset()
    before = {found[:2] for found in prober.findings({}) or () if found[2] == "error"}
    left = frozenset(found[:2] for found in after if found[2] == "error")
    new = frozenset(e for e in left if e not in before)
    at_changed = any(_inside(path, field) for _, path in left for field in changes)
    return not new and not at_changed, left, new


def _working(prober: Prober, candidates: Iterable[Changes], fixes: ErrorKey | None) -> list[dict[str, Any]]:
    """The candidates (each a set of field changes) that pass every rule, in the order given, deduplicated.
    Of those, only the ones that leave the fewest of the spec's other errors are kept: a candidate after
    which an error remains that another candidate removes too is not proposed."""
    passing: list[tuple[dict, frozenset]] = []
    for changes in candidates:
        changes = dict(changes)
        if any(changes == c for c, _ in passing):
            continue
        ok, left, _ = _verdict(prober, changes, fixes)
        if ok:
            passing.append((changes, left))
    return [c for c, left in passing if not any(other < left for _, other in passing)]


def _blocked(prober: Prober, candidates: Iterable[Changes], fixes: ErrorKey | None) -> str:
    """For a hint when no candidate passes: the candidates that would fix the finding, and the codes of the
    errors each would add ('' when none fixes it)."""
    by_codes: dict[tuple, list] = {}
    for changes in candidates:
        changes = dict(changes)
        after = prober.findings(changes)
        if after is None or (fixes is not None and any(found[:2] == tuple(fixes) for found in after)):
            continue
        _, _, new = _verdict(prober, changes, fixes)
        codes = tuple(sorted({code for code, _ in new}))
        if fixes is not None and fixes[0] in codes:
            continue  # the same problem, reported at the field the change sets: not a fix
        if codes:
            by_codes.setdefault(codes, []).append(changes)
    groups = sorted(by_codes.items(), key=lambda kv: (len(kv[0]), kv[0]))

    def verb(codes: tuple) -> str:
        return "refuses" if len(codes) == 1 else "refuse"

    return "; ".join(
        f"{describe(members)} (then {' and '.join(codes)} {verb(codes)} the spec)"
        for codes, members in groups[:3]
    )


def describe(proposals: Iterable[Changes]) -> str:
    """'rollout.tp: 1 or 2', or 'a: 1, b: 2 or a: 3, b: 4' for proposals that change several fields."""
    groups: dict[tuple, list] = {}
    for changes in proposals:
        groups.setdefault(tuple(changes), []).append(changes)
    parts = []
    for fields, members in groups.items():
        if len(fields) == 1:
            parts.append(f"{fields[0]}: {' or '.join(_shown(m[fields[0]]) for m in members)}")
        else:
            parts.extend(", ".join(f"{f}: {_shown(m[f])}" for f in fields) for m in members)
    return "; or ".join(parts)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def proposal(
    ctx: ResolvedSpec, code: str, path: str, candidates: Iterable[Changes], otherwise: str
) -> tuple[str, tuple]:
    """The hint and proposals for a finding of ``code`` at ``path``: the candidates that pass every rule, or
    ``otherwise`` when none does (with the candidates that fix this finding and the rules that then refuse
    the spec)."""
    prober = _prober(ctx)
    if prober is None or code in ctx.spec.acknowledge:
        return otherwise, ()  # a probe needs no hint; an acknowledged finding is information, not a problem
    candidates = [dict(c) for c in candidates]
    ok = _working(prober, candidates, (code, path))
    if not ok:
        near = _blocked(prober, candidates, (code, path))
        if near:
            near = f"no single change passes every rule: {near}"
        return "; ".join(p for p in (near, otherwise) if p), ()
    return f"set {describe(ok)} (each passes every rule)" if len(
        ok
    ) > 1 else f"set {describe(ok)} (passes every rule)", tuple(ok)


def refusing(ctx: ResolvedSpec, variants: Iterable[Changes]) -> tuple[str, ...]:
    """() when one of ``variants`` (each a set of field changes of ``ctx.spec``) passes every rule without adding
    an error; else the codes of the errors the first variant adds (or keeps at its fields). For views that judge
    alternatives outside a rule (the plan's columns)."""
    prober = _prober(ctx)
    if prober is None:
        return ()
    verdicts = [_verdict(prober, changes, None) for changes in variants]
    if not verdicts or any(ok for ok, _, _ in verdicts):
        return ()
    _, left, new = verdicts[0]
    return tuple(sorted({code for code, _ in (new or left)}))
