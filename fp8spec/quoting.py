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


# ------------------------------------------------------------------------------------------------ Markdown
# CommonMark (and GitHub's tables and strikethrough): a value goes into the bundle README either as a code
# span, whose fence is longer than any run of backticks in it (so nothing in it can close it), or as text with
# every character that could open a construct (emphasis, link, image, HTML, entity, table cell, autolink)
# backslash-escaped. Characters a reader would not see as themselves, line breaks included (a line break
# could start a new block: a heading, a list), are written as Python-style escapes in both.
_MD_ESCAPE = re.compile(r"[\\`*\[\]<>&!|~#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|:(?=//)|(?<=www)\.")


def _visible(text: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def md_code(value: Any) -> str:
    """``value`` as one CommonMark code span that shows exactly its text."""
    text = _visible(str(value))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    if not text:
        return "` `"  # CommonMark has no empty code span; a blank one is the nearest
    # Readers strip one space inside each end when both ends are spaces (and not all is space): a space is
    # added at both ends where the text starts or ends with a backtick (it would join the fence) or starts
    # and ends with a space (one would be stripped).
    if text[0] == "`" or text[-1] == "`" or (text[0] == text[-1] == " " and text.strip(" ")):
        text = f" {text} "
    return f"{fence}{text}{fence}"


def md_code_cell(value: Any) -> str:
    """A code span inside a table cell: GitHub splits cells at every unescaped '|', code spans included."""
    return md_code(value).replace("|", "\\|")


def md_text(value: Any) -> str:
    """``value`` as CommonMark text that shows exactly its characters."""
    return _MD_ESCAPE.sub(lambda m: "\\" + m.group(0), _visible(str(value)))


def md_fence(text: str) -> str:
    """A fence for a fenced code block holding ``text``: longer than any backtick run in it, at least 3."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)
