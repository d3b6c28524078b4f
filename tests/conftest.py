"""Fixtures: a pytester directory holding the fake benchmark, and helpers to read a run's output."""

from __future__ import annotations

import os
from pathlib import Path

import cv2  # noqa: F401  (imported once here: pytester's in-process runs must not re-import them)
import matplotlib.pyplot  # noqa: F401
import numpy  # noqa: F401
import pytest

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    """Tests that drive the simulator in-process see the same third-party noise an evaluation
    filters (each built-in benchmark's ``env.filterwarnings``); filter it the same way."""
    from pytest_vlaeval.spec import builtin_benchmarks, load_benchmark

    noises = {
        noise: None for path in builtin_benchmarks().values() for noise in load_benchmark(path).env.filterwarnings
    }
    for noise in noises:
        config.addinivalue_line("filterwarnings", noise)


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester dir with ``fake.yaml`` and an importable ``fake_env`` (also for xdist workers)."""
    pytester.makefile(".yaml", fake=(HERE / "fake.yaml").read_text())
    pytester.makepyfile(fake_env=(HERE / "fake_env.py").read_text())
    pytester.syspathinsert()
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)  # an inner session is a top-level one, whether or not this suite runs under -n
    return pytester
