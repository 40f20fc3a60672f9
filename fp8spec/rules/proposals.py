"""Values a hint may propose: only those that remove the finding and add no error.

A rule that knows candidate fixes (rollout tp values, layouts, budgets) does not trust its own arithmetic:
each candidate is applied to the spec and every rule runs again. A candidate is proposed only if it removes
the finding it is proposed for and adds no error: the changed spec may keep errors the spec already has (a
broader problem, another field), but none at the fields it changes and no new one anywhere. A warning's
proposal adds no warning of a rule in force either: that rule would propose undoing it (see _verdict).

Each hint says what it promises, and the promise is kept (tests/rules/test_hint_promises.py holds it over the
shipped specs, the rule examples and a generated corpus): "(passes every rule)" when the changed spec has no
error or warning left at all; "(clears CODE)" when it only removes that finding and adds no error (others the
spec had remain).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

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
    """(passes, errors left after the change, findings it adds) for one candidate.

    A proposal is a promise: the change removes the finding and adds none of the same or a higher severity from
    a rule in force (acknowledged findings are info). An error's fix may leave a warning (that is progress); a
    warning's fix may not trade it for another warning, whose rule would propose undoing it (MEM004's FP8 KV
    cache draws KV008, which proposes bf16). So each applied proposal lowers (errors, warnings), and
    `fp8spec init`, which applies them, cannot go back and forth. Without ``fixes`` (judging alternatives, not
    fixing a finding) only errors count."""
    after = prober.findings(changes)
    if after is None:
        return False, frozenset(), frozenset()
    if fixes is not None and any(found[:2] == tuple(fixes) for found in after):
        return False, frozenset(), frozenset()
    now = prober.findings({}) or frozenset()
    fixed = next((found[2] for found in now if fixes is not None and found[:2] == tuple(fixes)), "warning")
    counted = ("error",) if fixes is None or fixed == "error" else ("error", "warning")
    before = {found[:2] for found in now}
    left = frozenset(found[:2] for found in after if found[2] == "error")
    new = frozenset(found for found in after if found[2] in counted and found[:2] not in before)
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
    errors each would add and of the rules in force that would then warn ('' when none fixes it)."""
    by_codes: dict[tuple, list] = {}
    for changes in candidates:
        changes = dict(changes)
        after = prober.findings(changes)
        if after is None or (fixes is not None and any(found[:2] == tuple(fixes) for found in after)):
            continue
        _, _, new = _verdict(prober, changes, fixes)
        errors = tuple(sorted({code for code, _, severity in new if severity == "error"}))
        warns = tuple(sorted({code for code, _, severity in new if severity == "warning"} - set(errors)))
        if fixes is not None and fixes[0] in errors + warns:
            continue  # the same problem, reported at the field the change sets: not a fix
        if errors or warns:
            by_codes.setdefault((errors, warns), []).append(changes)
    groups = sorted(by_codes.items(), key=lambda kv: (len(kv[0][0]) + len(kv[0][1]), kv[0]))
    # one refusal per set of fields changed: describe() joins different sets with '; or ', which would leave a
    # refusal after the last one reading as if it were that set's alone
    return "; ".join(
        f"{describe(same)} ({_then(*codes)})" for codes, members in groups[:3] for same in _by_fields(members)
    )


def _by_fields(members: list[Changes]) -> list[list[Changes]]:
    """``members`` grouped by the fields each changes, in first-seen order."""
    out: dict[tuple, list[Changes]] = {}
    for changes in members:
        out.setdefault(tuple(changes), []).append(changes)
    return list(out.values())


def _then(errors: tuple, warns: tuple) -> str:
    """'then KV007 refuses the spec', 'then KV008 warns', or both joined by 'and'."""
    parts = []
    if errors:
        parts.append(f"{' and '.join(errors)} {'refuses' if len(errors) == 1 else 'refuse'} the spec")
    if warns:
        parts.append(f"{' and '.join(warns)} {'warns' if len(warns) == 1 else 'warn'}")
    return "then " + " and ".join(parts)


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


def _unique(candidates: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidates in order, each once (two that differ only in a field the spec already holds are one)."""
    out: list[dict[str, Any]] = []
    for c in candidates:
        if c not in out:
            out.append(c)
    return out


def _combined(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of candidates on different fields: what may pass where no single change does."""
    out = []
    for i, a in enumerate(candidates):
        for b in candidates[i + 1 :]:
            if not set(a) & set(b):
                out.append({**a, **b})
    return out


Costs = Mapping[tuple, str]  # cost_key(changes) -> what the change costs the run ('' unknown)


def cost_key(changes: Changes) -> tuple:
    return tuple(sorted(changes.items(), key=lambda kv: kv[0]))


def _clean(prober: Prober, changes: Changes) -> bool:
    """Whether the spec with ``changes`` has no error and no warning of a rule in force left."""
    after = prober.findings(changes)
    return after is not None and not any(severity in ("error", "warning") for _, _, severity in after)


def _set(ok: list, prober: Optional[Prober] = None, code: str = "", costs: Optional[Costs] = None) -> str:
    """'set X (passes every rule)' where each proposal leaves a spec without findings; else 'set X (clears
    CODE)': the promise each proposal keeps. With ``costs``, each proposal is shown with its cost."""
    clean = prober is None or all(_clean(prober, c) for c in ok)
    each = "each " if len(ok) > 1 else ""
    promise = f"{each}passes every rule" if clean else f"{each}clears {code}, adds no error"
    named = {cost_key(c): costs.get(cost_key(c), "") for c in ok} if costs else {}
    if any(named.values()):
        listed = "; or ".join(
            describe([c]) + (f" ({named[cost_key(c)]})" if named[cost_key(c)] else "") for c in ok
        )
        return f"set {listed} ({promise})"
    return f"set {describe(ok)} ({promise})"


def proposal(
    ctx: ResolvedSpec,
    code: str,
    path: str,
    candidates: Iterable[Changes],
    otherwise: str,
    fallbacks: Iterable[Changes] = (),
    costs: Optional[Costs] = None,
) -> tuple[str, tuple]:
    """The hint and proposals for a finding of ``code`` at ``path``: the candidates that pass every rule; else
    the ``fallbacks`` (several fields changed together) or pairs of candidates that do; else ``otherwise``
    (general advice, no values), after the candidates that fix this finding and the rules that then refuse
    the spec. A value the spec already has is never proposed."""
    prober = _prober(ctx)
    if prober is None:
        return otherwise, ()  # a probe needs no hint
    fresh: list[dict[str, Any]] = _unique(c for c in (new_values(ctx, c) for c in candidates) if c)
    ok = _working(prober, fresh, (code, path))
    if code in ctx.spec.acknowledge:
        # an acknowledged finding is information: only what would remove it and passes every rule is named
        return (_set(ok, prober, code, costs) if ok else otherwise), tuple(ok)
    if ok:
        return _set(ok, prober, code, costs), tuple(ok)
    # where no single change passes: the caller's combined changes (a memory share with offload), then pairs
    more = _unique(c for c in (new_values(ctx, c) for c in fallbacks) if c)
    pairs = _working(prober, more, (code, path))[:3] or _working(prober, _combined(fresh), (code, path))[:3]
    near = _blocked(prober, fresh, (code, path))
    near = f"no single change passes every rule: {near}" if near else ""
    if pairs:
        together = _set(pairs, prober, code, costs).replace("set ", "together: set ", 1)
        return "; ".join(p for p in (near, together) if p), tuple(pairs)
    return "; ".join(p for p in (near, otherwise) if p), ()


def current_findings(ctx: ResolvedSpec) -> frozenset:
    """(code, path, severity) of every finding of ``ctx`` as it stands (empty inside a probe, where nothing is
    proposed)."""
    prober = _prober(ctx)
    if prober is None:
        return frozenset()
    return prober.findings({}) or frozenset()


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
    return tuple(sorted({found[0] for found in (new or left)}))
