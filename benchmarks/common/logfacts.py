"""Facts read from an engine's log: a table of ``name -> (regex, cast)``, the last match of each wins."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

FactTable = Mapping[str, "tuple[str, Callable[[str], object]]"]


def parse_facts(text: str, table: FactTable) -> dict:
    facts = {}
    for key, (pattern, cast) in table.items():
        found = re.findall(pattern, text)
        if found:
            facts[key] = cast(found[-1])
    return facts
