"""The axes a run's tasks are grouped by (``axes``): only those the benchmark file declares, in
every output."""

from __future__ import annotations

import re

import pytest
from helpers import read_json, run_dir

SHORT = ["--benchmark=fake.yaml:short"]


def test_a_benchmark_without_axes_of_its_own_groups_by_split_only(fake: pytest.Pytester) -> None:
    """No generic output names a memory type the benchmark file does not declare."""
    text = (fake.path / "fake.yaml").read_text()
    text = re.sub(r"\n  - \{field: memory_type[^\n]*", "", text)
    fake.makefile(".yaml", fake=re.sub(r", memory_type: \w+", "", text))
    result = fake.runpytest(*SHORT, "-m", "short")
    directory = run_dir(fake)
    summary, alpha = read_json(directory / "summary.json"), read_json(directory / "Alpha-v0.json")
    assert "memory_type" not in alpha and alpha["split"] == "Short"
    assert [a["field"] for a in summary["axes"]] == ["split"] and "sr_per_memory_type" not in summary
    assert set(summary["sr_per_split"]) == {"Short"} and "sr_per_memory_type_ci95" not in summary["ci95_methods"]
    assert "memory" not in result.stdout.str() and "memory" not in (directory / "report.html").read_text()
    assert (directory / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
