"""Helpers to read what a run wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


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
