"""Which characters a spec may contain: one rule, used by the file reader and by every string field.

Refused everywhere: control characters (C0, DEL, C1 — NEL U+0085 among them), the Unicode line and paragraph
separators U+2028/U+2029, format characters (bidi controls U+202A-202E, U+2066-2069, U+200E/U+200F, U+061C,
zero-width characters, a byte order mark inside the text, ...), lone surrogates and noncharacters. YAML 1.1
readers (PyYAML, Kubernetes tooling) end a line at NEL/U+2028/U+2029 where YAML 1.2 readers do not, so
such a character can turn a value into new YAML; bidi and zero-width characters make a file display
differently from what it says. A spec's paths, names and addresses never need them.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Optional

_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Inside a file, the line structure itself is allowed: tab, line feed, carriage return.
FILE_WHITESPACE = frozenset("\t\n\r")


def _refused(ch: str) -> bool:
    code = ord(ch)
    if (code & 0xFFFE) == 0xFFFE or 0xFDD0 <= code <= 0xFDEF:  # Unicode noncharacters
        return True
    return unicodedata.category(ch) in _REFUSED_CATEGORIES


# Only characters outside printable ASCII need a look; a typical spec has none.
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")


def first_refused(text: str, allow: frozenset = frozenset()) -> Optional[int]:
    """Index of the first refused character in ``text`` (characters in ``allow`` excepted), or None."""
    for match in _NOT_PRINTABLE_ASCII.finditer(text):
        ch = match.group()
        if ch not in allow and _refused(ch):
            return match.start()
    return None


def describe(ch: str) -> str:
    """``U+2028 (LINE SEPARATOR)``: how a message names a character."""
    name = _CONTROL_NAMES.get(ch) or unicodedata.name(ch, "")
    if not name and unicodedata.category(ch) == "Cc":
        name = "control character"
    return f"U+{ord(ch):04X} ({name})" if name else f"U+{ord(ch):04X}"


_CONTROL_NAMES = {
    "\x00": "NUL",
    "\t": "TAB",
    "\n": "LINE FEED",
    "\r": "CARRIAGE RETURN",
    "\x1b": "ESCAPE",
    "\x7f": "DELETE",
    "\x85": "NEXT LINE",
}


def check_value(value: str) -> str:
    """The rule for every spec string: raises ValueError naming the first refused character."""
    index = first_refused(value)
    if index is not None:
        raise ValueError(
            f"character {describe(value[index])} at position {index + 1} is not allowed: control, "
            "line/paragraph separator, bidi and other invisible format characters are refused in spec values"
        )
    if "${" in value:
        raise ValueError("'${' is not allowed: OmegaConf would interpolate it on the cluster")
    return value
