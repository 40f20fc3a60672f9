"""A finding about a field the spec does not write (its default applies) points at the section that would hold it,
not at the first value inside that section, and names the field in the text output."""

from __future__ import annotations

from tests.conftest import BASE_SPEC, MOE, patched


def _spec_without(data: dict, section: str, key: str) -> dict:
    data[section].pop(key, None)
    return data


def test_a_memory_finding_on_an_unwritten_field_points_at_its_section(validate, write_spec):
    data = _spec_without(patched(BASE_SPEC, MOE, {"rollout": {"tp": 2}}), "rollout", "gpu_memory_utilization")
    path = write_spec(data)
    v = validate(data)
    found = [d for d in v.diagnostics if d.path == "rollout.gpu_memory_utilization"]
    assert found, [d.render() for d in v.diagnostics]
    lines = path.read_text().splitlines()
    for d in found:
        assert lines[d.line - 1].startswith("rollout:") and d.col == 1, (d.line, lines[d.line - 1])
        assert "[rollout.gpu_memory_utilization: not set in the spec" in d.render()


def test_a_written_field_keeps_its_own_location(validate, write_spec):
    data = patched(BASE_SPEC, MOE, {"rollout": {"tp": 2, "gpu_memory_utilization": 0.6}})
    path = write_spec(data)
    found = [d for d in validate(data).diagnostics if d.path == "rollout.gpu_memory_utilization"]
    assert found
    lines = path.read_text().splitlines()
    assert all("gpu_memory_utilization" in lines[d.line - 1] and "not set in the spec" not in d.message
               for d in found)
