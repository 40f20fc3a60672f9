"""Quote values for each target language, so no spec value can run as code or change type.

Hydra: strings are always single-quoted (Hydra's grammar keeps them strings; '${' is refused upstream by
the spec model so OmegaConf never interpolates); numbers and booleans are rendered from typed values.
Shell: every word is quoted; a word with a character a terminal would not show as itself is written with
bash's $'...' and byte escapes, so a generated script never carries a raw control or bidi character.
YAML: every scalar is a double-quoted JSON string or a number; characters that YAML 1.1 readers take as line
breaks (NEL, U+2028, U+2029), refuse (C1 controls, DEL, U+FFFE/U+FFFF, surrogates) or that would hide text
(bidi and other format characters) are escaped, so PyYAML and ruamel read back exactly the same value.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

# fullmatch, never ^...$: Python's $ also matches before a final newline ("0\n" would pass as plain).
_SHELL_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_DOUBLE_QUOTE_SAFE = re.compile(r'[^$`\\"!\n]*')


def hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        # Hydra quoted strings: a quote is escaped with a backslash, and backslashes need doubling only
        # where they precede a quote or the closing quote.
        body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
        body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
        return "'" + body + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
                raise ValueError(f"dict key {key!r} cannot be written as a Hydra override key")
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as a Hydra value")


def hydra_override(key: str, value: Any, prefix: str = "") -> str:
    """``key=value`` in Hydra's override grammar; ``prefix`` is '+' for keys verl's YAML does not declare."""
    return f"{prefix}{key}={hydra_value(value)}"


def shell_word(word: str) -> str:
    """One bash word: bare when plain, double-quoted when only single quotes need protecting, $'...' with
    byte escapes when it holds an unprintable character, else single-quoted."""
    if _SHELL_PLAIN.fullmatch(word):
        return word
    if "\x00" in word:
        raise ValueError("a NUL character cannot be part of a shell word")
    if not word.isprintable():
        return "$'" + "".join(_ansi_c(ch) for ch in word) + "'"
    if _DOUBLE_QUOTE_SAFE.fullmatch(word):
        return '"' + word + '"'
    return shlex.quote(word)


def _ansi_c(ch: str) -> str:
    if ch in "\\'":
        return "\\" + ch
    if ch.isprintable():
        return ch
    # Bytes, not \u: bash turns \u into the current locale's encoding, \x is the same byte everywhere.
    return "".join(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))


def json_scalar(value: Any) -> str:
    """A double-quoted YAML scalar in JSON syntax (a number, boolean or null as JSON writes it); every
    character that is not printable is a \\u escape (\\U for one beyond the Basic Multilingual Plane, which
    YAML reads and JSON does not: this is for YAML files)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _yaml_escape(ch) for ch in text)


def _yaml_escape(ch: str) -> str:
    return f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}"


def yaml_string_list(items: list[str], indent: int = 0) -> str:
    pad = " " * indent
    return "".join(f"{pad}- {json_scalar(str(item))}\n" for item in items) or f"{pad}[]\n"


def yaml_string_map(mapping: dict[str, str], indent: int = 0) -> str:
    pad = " " * indent
    if not mapping:
        return f"{pad}{{}}\n"
    return "".join(f"{pad}{json_scalar(str(k))}: {json_scalar(str(v))}\n" for k, v in mapping.items())
