"""Rendering the bundle's templates (templates/*.j2) with strict undefined variables and quoting filters."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2

from fp8spec.quoting import json_scalar, md_code, md_code_cell, md_fence, md_text, shell_word
from fp8spec.resources import data_dir


@lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    """The one Jinja environment of the package's templates (bundle files and `fp8spec init` specs)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sh"] = shell_word
    env.filters["json"] = json_scalar
    env.filters["code"] = md_code
    env.filters["codecell"] = md_code_cell
    env.filters["mdtext"] = md_text
    env.filters["fence"] = md_fence
    return env


def render(template: str, **values: Any) -> str:
    return template_environment().get_template(template).render(**values)
