"""An engine's descriptor is data; its memory model and adapter are found by the engine's name in the layer that
uses them (fp8spec.plan.engine_memory, fp8spec.compiler.adapters.engine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fp8spec.compiler.adapters.engine import EngineAdapter, engine_adapter
from fp8spec.engines import engine_names
from fp8spec.plan.engine_memory import EngineMemoryModel, memory_model


@pytest.mark.parametrize("name", engine_names())
def test_every_engine_has_a_memory_model_and_an_adapter(name):
    assert isinstance(memory_model(name), EngineMemoryModel) and memory_model(name).memory_source
    assert isinstance(engine_adapter(name), EngineAdapter)


def test_listing_engines_imports_none_of_their_parts():
    code = (
        "import sys\n"
        "from fp8spec.engines import all_engines\n"
        "all_engines()\n"
        "print(sorted(m for m in sys.modules if m.startswith('fp8spec.') and m.rsplit('.', 1)[-1] in "
        "('memory', 'adapter', 'rules')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
