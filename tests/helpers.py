"""Helpers to read what a run wrote, and where the suite's own files are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
"""The suite's root folder: the fake benchmark and the shared test modules live here."""
ROOT = TESTS.parent
"""The repository."""


def run_dir(pytester: pytest.Pytester) -> Path:
    (directory,) = [p for p in (pytester.path / "results").iterdir() if p.is_dir()]
    return directory


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def episode_records(directory: Path) -> dict[tuple[str, int], dict]:
    """The latest record of each episode in a run's store."""
    records = {}
    for log in sorted((directory / "episodes").glob("*.jsonl")):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            records[(record["task"], record["seed"])] = record
    return records


def assert_one_line_usage_error(result: pytest.RunResult, expected: str) -> None:
    """The session stopped before any episode with exactly one ``ERROR:`` line containing ``expected``."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and expected in errors[0], result.errlines
