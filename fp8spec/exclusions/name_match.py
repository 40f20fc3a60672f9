"""Match exclusion patterns against checkpoint module names in time linear in each name, whatever the pattern.

Python's ``re`` backtracks: the glob ``**********X`` as a regex takes seconds per name and ``re:(\\w+\\.?)+\\.gate``
about two. Here a pattern becomes a Thompson NFA (a glob directly; ``re:`` through Python's own regex parser,
its regular part only: no backreferences, lookarounds, atomic groups, possessive repeats or inline flags) and
runs as a DFA built lazily, with bounded sizes. A name is read in runs (digits / other text) and the step
over a run is remembered, so names that share text share work; a whole family of names that differ only in
their numbers (``model.layers.N.mlp.experts.M.gate_proj``) is first tried at once, with each number standing
for any digits, and only families that can match are read name by name.

Every cost is counted in steps against a bound; past it, or past the size bounds, matching raises
``PatternError`` with a message for the user instead of running on. Counting steps, not seconds, keeps the
answer the same on every machine.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Callable, Iterable, Optional

from fp8spec.no_gc import paused_gc

try:  # Python >= 3.11 names the parser re._parser; sre_parse is its deprecated alias
    _p: Any = importlib.import_module("re._parser")
    _c: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.10
    _p = importlib.import_module("sre_parse")
    _c = importlib.import_module("sre_constants")

MAX_NFA_STATES = 5_000  # a pattern of at most a few hundred characters, repeats counted out
MAX_DFA_STATES = 5_000
MAX_STEPS = 500_000  # name runs read, summed over every pattern of one spec (about half a second)

Pred = Callable[[str], bool]
_RUNS = re.compile(r"\d+|\D+")


class PatternError(ValueError):
    """The pattern cannot be matched within the bounds (or is not a regular expression); the message says why."""


class _NFA:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[Pred, int]]] = []

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA_STATES:
            raise PatternError(f"the pattern is too large to match (over {MAX_NFA_STATES} automaton states)")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def char(self, pred: Pred) -> tuple[int, int]:
        a, b = self.state(), self.state()
        self.edges[a].append((pred, b))
        return a, b

    def empty(self) -> tuple[int, int]:
        a = self.state()
        return a, a

    def seq(self, parts: list[tuple[int, int]]) -> tuple[int, int]:
        if not parts:
            return self.empty()
        for (_, end), (start, _) in zip(parts, parts[1:]):
            self.eps[end].append(start)
        return parts[0][0], parts[-1][1]

    def star(self, build: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        hub = self.state()
        a, b = build()
        self.eps[hub].append(a)
        self.eps[b].append(hub)
        return hub, hub

    def optional(self, frag: tuple[int, int]) -> tuple[int, int]:
        a, b = frag
        start = self.state()
        self.eps[start] += [a, b]
        return start, b


# --- globs ---------------------------------------------------------------------------------------------


def _any(ch: str) -> bool:
    return True


def _not_dot(ch: str) -> bool:
    return ch != "."


def _glob_nfa(text: str) -> tuple[_NFA, tuple[int, int]]:
    """``(?:.*\\.)?`` then the glob: '*' any text (dots too), '?' one character but a dot."""
    nfa = _NFA()
    text = re.sub(r"\*+", "*", text)  # '**' means '*': one state, not a chain
    prefix = nfa.optional(nfa.seq([nfa.star(lambda: nfa.char(_any)), nfa.char(_is("."))]))
    parts = [prefix]
    for ch in text:
        if ch == "*":
            parts.append(nfa.star(lambda: nfa.char(_any)))
        elif ch == "?":
            parts.append(nfa.char(_not_dot))
        else:
            parts.append(nfa.char(_is(ch)))
    return nfa, nfa.seq(parts)


@lru_cache(maxsize=None)
def _is(ch: str) -> Pred:
    return ch.__eq__


# --- re: patterns, from Python's own parser ----------------------------------------------------------------

_NOT_REGULAR = {
    "GROUPREF": "a backreference",
    "GROUPREF_EXISTS": "a conditional group",
    "ASSERT": "a lookahead or lookbehind",
    "ASSERT_NOT": "a negative lookahead or lookbehind",
    "ATOMIC_GROUP": "an atomic group",
    "POSSESSIVE_REPEAT": "a possessive repeat",
}
_CATEGORIES: dict[str, Pred] = {
    "CATEGORY_DIGIT": str.isdecimal,
    "CATEGORY_NOT_DIGIT": lambda c: not c.isdecimal(),
    "CATEGORY_SPACE": str.isspace,
    "CATEGORY_NOT_SPACE": lambda c: not c.isspace(),
    "CATEGORY_WORD": lambda c: c.isalnum() or c == "_",
    "CATEGORY_NOT_WORD": lambda c: not (c.isalnum() or c == "_"),
}


def _class(items: list) -> Pred:
    negate = bool(items) and str(items[0][0]) == "NEGATE"
    preds: list[Pred] = []
    for op, arg in items[1:] if negate else items:
        name = str(op)
        if name == "LITERAL":
            preds.append(_is(chr(arg)))
        elif name == "RANGE":
            preds.append(_between(chr(arg[0]), chr(arg[1])))
        elif name == "CATEGORY" and str(arg) in _CATEGORIES:
            preds.append(_CATEGORIES[str(arg)])
        else:
            raise PatternError(f"the character class item {name} {arg} is not supported in exclusions")

    def member(c: str) -> bool:
        return any(p(c) for p in preds) != negate

    return member


def _between(lo: str, hi: str) -> Pred:
    def inside(c: str) -> bool:
        return lo <= c <= hi

    return inside


def _other_than(x: str) -> Pred:
    def other(c: str) -> bool:
        return c != x

    return other


def _not_newline(c: str) -> bool:
    return c != "\n"


def _build(nfa: _NFA, items: Iterable, top: bool = False) -> tuple[int, int]:
    parts = []
    seq = list(items)
    for i, (op, arg) in enumerate(seq):
        name = str(op)
        if name in _NOT_REGULAR:
            raise PatternError(
                f"{_NOT_REGULAR[name]} cannot be matched in linear time; write the pattern without it"
            )
        if name == "LITERAL":
            parts.append(nfa.char(_is(chr(arg))))
        elif name == "NOT_LITERAL":
            parts.append(nfa.char(_other_than(chr(arg))))
        elif name == "ANY":
            parts.append(nfa.char(_not_newline))
        elif name == "IN":
            parts.append(nfa.char(_class(arg)))
        elif name == "BRANCH":
            start, end = nfa.state(), nfa.state()
            for alt in arg[1]:
                a, b = _build(nfa, alt)
                nfa.eps[start].append(a)
                nfa.eps[b].append(end)
            parts.append((start, end))
        elif name == "SUBPATTERN":
            _group, add_flags, del_flags, body = arg
            if add_flags or del_flags:
                raise PatternError("inline flags such as (?i:...) are not supported in exclusions")
            parts.append(_build(nfa, body))
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):  # greedy or lazy: the same for a whole-name match
            low, high, body = arg
            copies = [_build(nfa, body) for _ in range(low)]
            if high == _c.MAXREPEAT:
                copies.append(nfa.star(partial(_build, nfa, body)))
            else:
                copies += [nfa.optional(_build(nfa, body)) for _ in range(high - low)]
            parts.append(nfa.seq(copies))
        elif (
            name == "AT"
            and top
            and (
                (i == 0 and str(arg) in ("AT_BEGINNING", "AT_BEGINNING_STRING"))
                or (i == len(seq) - 1 and str(arg) in ("AT_END", "AT_END_STRING"))
            )
        ):
            continue  # '^' first and '$' last say what a whole-name match means anyway
        else:
            what = {"AT": "an anchor or word boundary inside the pattern"}.get(name, name)
            raise PatternError(f"{what} is not supported in exclusions")
    return nfa.seq(parts)


def _regex_nfa(text: str) -> tuple[_NFA, tuple[int, int]]:
    try:
        parsed = _p.parse(text, 0)
    except re.error as err:
        raise PatternError(f"invalid regex: {err}") from None
    except RecursionError:
        raise PatternError("the regex is nested too deeply") from None
    if parsed.state.flags & ~(_c.SRE_FLAG_UNICODE):
        raise PatternError("inline flags such as (?i) are not supported in exclusions")
    nfa = _NFA()
    try:
        return nfa, _build(nfa, parsed, top=True)
    except RecursionError:
        raise PatternError("the regex is nested too deeply") from None


# --- the lazy DFA ----------------------------------------------------------------------------------------


class Pattern:
    """One exclusion pattern as a DFA built on demand. ``digit_blind``: whether every run of digits is
    alike to it (a glob without digits or '?'), so that a name family decides for all its names."""

    def __init__(self, text: str):
        self.text = text
        if text.startswith("re:"):
            nfa, (start, accept) = _regex_nfa(text[3:])
            self.digit_blind = False
        else:
            nfa, (start, accept) = _glob_nfa(text)
            self.digit_blind = not any(c.isdigit() or c == "?" for c in text)
        self._nfa = nfa
        self._live = self._coreachable(accept)
        self._accept = accept
        self._sets: list[frozenset[int]] = []
        self._ids: dict[frozenset[int], int] = {}
        self._moves: dict[tuple[int, str], int] = {}
        self._reads: dict[tuple[int, str], int] = {}
        self._digit_runs: dict[int, int] = {}
        self.start = self._id(self._closure([start]))

    def _coreachable(self, accept: int) -> frozenset[int]:
        back: list[list[int]] = [[] for _ in self._nfa.eps]
        for a, outs in enumerate(self._nfa.eps):
            for b in outs:
                back[b].append(a)
        for a, edges in enumerate(self._nfa.edges):
            for _, b in edges:
                back[b].append(a)
        seen, todo = {accept}, [accept]
        while todo:
            for a in back[todo.pop()]:
                if a not in seen:
                    seen.add(a)
                    todo.append(a)
        return frozenset(seen)

    def _closure(self, states: Iterable[int]) -> frozenset[int]:
        seen = set(states)
        todo = list(seen)
        while todo:
            for b in self._nfa.eps[todo.pop()]:
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return frozenset(s for s in seen if s in self._live)  # states that cannot accept are dropped

    def _id(self, states: frozenset[int]) -> int:
        found = self._ids.get(states)
        if found is None:
            if len(self._sets) >= MAX_DFA_STATES:
                raise PatternError(
                    f"the pattern is too complex to match (over {MAX_DFA_STATES} automaton states)"
                )
            found = self._ids[states] = len(self._sets)
            self._sets.append(states)
        return found

    def dead(self, state: int) -> bool:
        return not self._sets[state]

    def accepts(self, state: int) -> bool:
        return self._accept in self._sets[state]

    def _move(self, state: int, ch: str) -> int:
        key = (state, ch)
        found = self._moves.get(key)
        if found is None:
            targets = [b for a in self._sets[state] for pred, b in self._nfa.edges[a] if pred(ch)]
            found = self._moves[key] = self._id(self._closure(targets))
        return found

    def read(self, state: int, run: str) -> int:
        key = (state, run)
        found = self._reads.get(key)
        if found is None:
            found = state
            for ch in run:
                found = self._move(found, ch)
            self._reads[key] = found
        return found

    def any_digits(self, state: int) -> int:
        """The states after some run of one or more digits (any of them): over-approximates every number."""
        found = self._digit_runs.get(state)
        if found is None:
            reached: set[int] = set()
            frontier = {state}
            while frontier:
                nxt = {self._move(s, d) for s in frontier for d in "0123456789"}
                merged = {n for n in nxt if n not in reached}
                reached |= merged
                frontier = merged
            union = frozenset().union(*(self._sets[s] for s in reached))
            found = self._digit_runs[state] = self._id(union)
        return found


Trie = dict  # run -> Trie, or run -> name index at a name's last run


@dataclass(frozen=True)
class NameIndex:
    """Module names split into runs (digits / other text) and grouped into families that differ only in
    their numbers, each family a trie of its runs, so that a pattern reads a shared prefix once."""

    names: tuple[str, ...]
    families: tuple[tuple[tuple[Optional[str], ...], Trie, tuple[int, ...]], ...]  # (key, trie, members)


def name_index(names: Iterable[str]) -> NameIndex:
    with paused_gc():
        return _name_index(tuple(names))


def _name_index(names: tuple[str, ...]) -> NameIndex:
    families: dict[tuple[Optional[str], ...], tuple[Trie, list[int]]] = {}
    for i, name in enumerate(names):
        runs = _RUNS.findall(name) or [""]
        key = tuple(None if r[0:1].isdigit() else r for r in runs)
        trie, members = families.setdefault(key, ({}, []))
        members.append(i)
        for run in runs[:-1]:
            trie = trie.setdefault(run, {})
        trie[runs[-1]] = i
    return NameIndex(names, tuple((k, t, tuple(m)) for k, (t, m) in families.items()))


class Budget:
    """Steps left for one spec's patterns (MAX_STEPS in all): a step is one run of a name read."""

    def __init__(self, steps: int = MAX_STEPS):
        self.left = steps

    def spend(self, steps: int, count: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise PatternError(
                f"matching the exclusions against the model's {count} module names takes more than "
                f"{MAX_STEPS} steps; use fewer patterns, or patterns that name whole components"
            )


def match(pattern: Pattern, index: NameIndex, budget: Budget) -> list[int]:
    """Indexes of the names the pattern matches (whole name; a glob also a whole dotted suffix), in name order."""
    hits: list[int] = []
    count = len(index.names)
    for key, trie, members in index.families:
        state = pattern.start
        for run in key:
            state = pattern.any_digits(state) if run is None else pattern.read(state, run)
            if pattern.dead(state):
                break
        budget.spend(len(key), count)
        if not pattern.accepts(state):
            continue  # no number makes a name of this family match
        if pattern.digit_blind:
            hits.extend(members)
        else:
            _walk(pattern, key, trie, budget, count, hits)
    hits.sort()
    return hits


def _walk(
    pattern: Pattern, key: tuple[Optional[str], ...], trie: Trie, budget: Budget, count: int, hits: list[int]
) -> None:
    """Walk one family's trie; a branch is cut where even "any digits" for the numbers still to come cannot
    reach a match."""
    read, dead, accepts = pattern.read, pattern.dead, pattern.accepts
    finish: dict[tuple[int, int], bool] = {}

    def can_finish(state: int, depth: int) -> bool:
        known = finish.get((state, depth))
        if known is None:
            s = state
            for run in key[depth:]:
                s = pattern.any_digits(s) if run is None else read(s, run)
                if dead(s):
                    break
            known = finish[(state, depth)] = accepts(s)
        return known

    steps = 0
    stack: list[tuple[Trie, int, int]] = [(trie, pattern.start, 0)]
    while stack:
        node, state, depth = stack.pop()
        steps += len(node)
        for run, child in node.items():
            after = read(state, run)
            if isinstance(child, int):
                if accepts(after):
                    hits.append(child)
            elif not dead(after) and can_finish(after, depth + 1):
                stack.append((child, after, depth + 1))
        if steps > 4096:
            budget.spend(steps, count)
            steps = 0
    budget.spend(steps, count)
