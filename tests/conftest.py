"""Fixtures: a pytester directory holding the fake benchmark, and helpers to read a run's output."""

from __future__ import annotations

from pathlib import Path

import cv2  # noqa: F401  (imported once here: pytester's in-process runs must not re-import them)
import matplotlib.pyplot  # noqa: F401
import numpy  # noqa: F401
import pytest

HERE = Path(__file__).parent


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester dir with ``fake.yaml`` and an importable ``fake_env`` (also for xdist workers)."""
    pytester.makefile(".yaml", fake=(HERE / "fake.yaml").read_text())
    pytester.makepyfile(fake_env=(HERE / "fake_env.py").read_text())
    pytester.syspathinsert()
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    return pytester
