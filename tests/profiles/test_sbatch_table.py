"""backends/slurm: sbatch's option table as data, and getopt_long's lookup over it."""

from __future__ import annotations

import re

import pytest

from fp8spec.profiles.sbatch import SbatchTable, load_sbatch, resolve
from fp8spec.resources import data_dir


def test_table_loads_and_every_option_is_judged_once():
    table = load_sbatch()
    assert len(table.options) > 100 and table.source.commit
    assert all(re.fullmatch(r"src/common/slurm_opt\.c:[0-9]+", o.evidence) for o in table.options.values())


def test_a_table_with_an_unjudged_option_is_refused():
    data = load_sbatch().model_dump()
    data["allowed"] = data["allowed"][1:]
    with pytest.raises(ValueError, match="not judged"):
        SbatchTable.model_validate(data)


def test_launcher_options_match_the_template():
    """Every #SBATCH option slurm.sbatch.j2 writes is listed as written by the launcher or as a default the spec's
    extra_sbatch may name again, and nothing else."""
    text = (data_dir("templates") / "slurm.sbatch.j2").read_text()
    written = set(re.findall(r"^#SBATCH --([a-z-]+)", text, re.M))
    table = load_sbatch()
    assert written == set(table.written_by_launcher) | set(table.launcher_defaults)
    assert set(table.launcher_defaults) <= set(table.allowed)


def test_aliases_of_launcher_options_are_not_allowed():
    table = load_sbatch()
    vals = {table.options[o].val for o in table.written_by_launcher}
    aliases = {name for name, o in table.options.items() if o.val in vals} - set(table.written_by_launcher)
    assert aliases == {"tasks-per-node"} and aliases <= set(table.refused)


@pytest.mark.parametrize("text, options", [
    ("nodes", ("nodes",)),                     # exact
    ("partitio", ("partition",)),              # unique prefix
    ("mem", ("mem",)),                         # exact wins over mem-per-cpu, mem-per-gpu, ...
    ("nod", ("nodefile", "nodelist", "nodes")),  # ambiguous, in table order
    ("tasks", ("tasks-per-node",)),
    ("nosuch", ()),
])
def test_getopt_long_lookup(text, options):
    assert resolve(text).options == options


def test_prefixes_that_agree_pick_the_first():
    """glibc: several candidates that agree in has_arg and val are one option (the first in table order)."""
    data = load_sbatch().model_dump()
    data["options"]["tasks-per-nodex"] = dict(data["options"]["tasks-per-node"])
    data["refused"]["tasks-per-nodex"] = "test"
    table = SbatchTable.model_validate(data)
    assert resolve("tasks-per", table).options == ("tasks-per-node",)
    assert resolve("tasks-per-nodex", table).exact
