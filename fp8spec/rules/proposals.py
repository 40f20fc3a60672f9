"""Values a hint may propose: only those with which the spec passes every rule.

A rule that knows candidate fixes (rollout tp values, layouts, budgets) does not trust its own arithmetic:
each candidate is applied to the spec and every rule runs again. A candidate is proposed only if it removes
the finding it is proposed for and adds no error: the changed spec may keep errors the spec already has (a
broader problem, another field), but none at the fields it changes and no new one anywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from fp8spec.resolve.context import ResolvedSpec

Changes = Mapping[str, Any]
ErrorKey = tuple[str, str]  # (code, spec path)
Found = tuple[str, str, str]  # (code, spec path, severity)


def _inside(path: str, field: str) -> bool:
    """Whether an error at ``path`` is about ``field``: the field itself, a part of it, or a group of fields
    that holds it (an error at training.parallel is about training.parallel.pp). An error at a whole
    section (MEM001 at training: the state does not fit) is not about each field in it."""
    return path == field or path.startswith(field + ".") or ("." in path and field.startswith(path + "."))


def findings_of(ctx: ResolvedSpec) -> frozenset[Found]:
    """(code, path, severity) of every finding a validation of ``ctx.spec`` reports (acknowledged: info)."""
    from fp8spec.rules.engine import run_rules

    acknowledged = set(ctx.spec.acknowledge)
    out = set()
    for rule, findings in run_rules(ctx):
        if isinstance(findings, Exception):
            out.add((rule.code, "", "error"))
            continue
        severity = "info" if rule.acknowledgeable and rule.code in acknowledged else rule.severity
        out.update((rule.code, f.path, severity) for f in findings)
    return frozenset(out)


def _probe(ctx: ResolvedSpec, changes: Changes):
    """Findings of the spec with ``changes`` applied; None when a changed value is not one the field takes."""
    from fp8spec.resolve.context import derived_context
    from fp8spec.specfile.edit import EditError, with_values

    key = tuple(sorted(changes.items(), key=lambda kv: kv[0]))
    if key not in ctx.probes:
        try:
            spec = with_values(ctx.spec, changes)
        except EditError:
            ctx.probes[key] = None
        else:
            ctx.probes[key] = findings_of(derived_context(ctx, spec))
    return ctx.probes[key]


def _verdict(ctx: ResolvedSpec, changes: Changes, fixes: ErrorKey | None):
    """(passes, errors left after the change, new errors) for one candidate."""
    after = _probe(ctx, changes)
    if after is None:
        return False, frozenset(), frozenset()
    if fixes is not None and any(found[:2] == tuple(fixes) for found in after):
        return False, frozenset(), frozenset()
    before = {found[:2] for found in _probe(ctx, {}) if found[2] == "error"}
    left = frozenset(found[:2] for found in after if found[2] == "error")
    new = frozenset(e for e in left if e not in before)
    at_changed = any(_inside(path, field) for _, path in left for field in changes)
    return not new and not at_changed, left, new


def passes(ctx: ResolvedSpec, changes: Changes, fixes: ErrorKey | None = None) -> bool:
    """Whether ``changes`` remove ``fixes`` (the finding they are proposed for), add no error, and leave none
    at the changed fields."""
    if ctx.probing:
        return True  # a probe only needs to know whether this rule fires, not which fixes work
    return _verdict(ctx, changes, fixes)[0]


def working(
    ctx: ResolvedSpec, candidates: Iterable[Changes], fixes: ErrorKey | None = None
) -> list[dict[str, Any]]:
    """The candidates (each a set of field changes) that pass every rule, in the order given, deduplicated.
    Of those, only the ones that leave the fewest of the spec's other errors are kept: a candidate after
    which an error remains that another candidate removes too is not proposed."""
    if ctx.probing:
        return [dict(c) for c in candidates]
    passing: list[tuple[dict, frozenset]] = []
    for changes in candidates:
        changes = dict(changes)
        if any(changes == c for c, _ in passing):
            continue
        ok, left, _ = _verdict(ctx, changes, fixes)
        if ok:
            passing.append((changes, left))
    return [c for c, left in passing if not any(other < left for _, other in passing)]


def blocked(ctx: ResolvedSpec, candidates: Iterable[Changes], fixes: ErrorKey | None = None) -> str:
    """For a hint when no candidate passes: the candidates that would fix the finding, and the codes of the
    errors each would add ('' when none fixes it)."""
    if ctx.probing:
        return ""
    by_codes: dict[tuple, list] = {}
    for changes in candidates:
        changes = dict(changes)
        after = _probe(ctx, changes)
        if after is None or (fixes is not None and any(found[:2] == tuple(fixes) for found in after)):
            continue
        _, _, new = _verdict(ctx, changes, fixes)
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


def join(values: Iterable[Any]) -> str:
    return ", ".join(map(str, values))


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


def current(spec: Any, dotted: str) -> Any:
    """The value of a dotted field of ``spec`` (AttributeError for a path the spec does not have)."""
    node = spec
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def new_values(ctx: ResolvedSpec, changes: Changes) -> dict[str, Any]:
    """``changes`` without the fields that already hold the value: a hint never proposes what is set."""
    out = {}
    for field, value in changes.items():
        try:
            if current(ctx.spec, field) == value and type(current(ctx.spec, field)) is type(value):
                continue
        except AttributeError:
            pass  # not a field: with_values refuses it, and so the candidate fails
        out[field] = value
    return out


def _combined(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of candidates on different fields: what may pass where no single change does."""
    out = []
    for i, a in enumerate(candidates):
        for b in candidates[i + 1 :]:
            if not set(a) & set(b):
                out.append({**a, **b})
    return out


def _set(ok: list) -> str:
    return (
        f"set {describe(ok)} (each passes every rule)"
        if len(ok) > 1
        else f"set {describe(ok)} (passes every rule)"
    )


def proposal(
    ctx: ResolvedSpec,
    code: str,
    path: str,
    candidates: Iterable[Changes],
    otherwise: str,
    fallbacks: Iterable[Changes] = (),
) -> tuple[str, tuple]:
    """The hint and proposals for a finding of ``code`` at ``path``: the candidates that pass every rule; else
    the ``fallbacks`` (several fields changed together) or pairs of candidates that do; else ``otherwise``
    (general advice, no values), after the candidates that fix this finding and the rules that then refuse
    the spec. A value the spec already has is never proposed."""
    if ctx.probing:
        return otherwise, ()  # a probe needs no hint
    fresh: list[dict[str, Any]] = [c for c in (new_values(ctx, c) for c in candidates) if c]
    if code in ctx.spec.acknowledge:
        # an acknowledged finding is information: only what would remove it and passes every rule is named
        ok = working(ctx, fresh, (code, path))
        return (_set(ok) if ok else otherwise), tuple(ok)
    ok = working(ctx, fresh, (code, path))
    if ok:
        return _set(ok), tuple(ok)
    # where no single change passes: the caller's combined changes (a memory share with offload), then pairs
    more = [c for c in (new_values(ctx, c) for c in fallbacks) if c]
    pairs = working(ctx, more, (code, path))[:3] or working(ctx, _combined(fresh), (code, path))[:3]
    near = blocked(ctx, fresh, (code, path))
    near = f"no single change passes every rule: {near}" if near else ""
    if pairs:
        return "; ".join(p for p in (near, _set(pairs).replace("set ", "together: set ", 1)) if p), tuple(
            pairs
        )
    return "; ".join(p for p in (near, otherwise) if p), ()
