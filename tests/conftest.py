"""Fixtures: a pytester directory holding the fake benchmark, and helpers to read a run's output."""

from __future__ import annotations

import os
from pathlib import Path

import cv2  # noqa: F401  (imported once here: pytester's in-process runs must not re-import them)
import matplotlib.pyplot  # noqa: F401
import numpy  # noqa: F401
import pytest

HERE = Path(__file__).parent
LEFT_OUT = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    """Tests that drive the simulator in-process see the same third-party noise an evaluation
    filters (each built-in benchmark's ``env.filterwarnings``); filter it the same way. Each
    built-in benchmark's stack is a marker (``-m libero``) for the tests that need it, so a new
    built-in benchmark needs no line in ``pyproject.toml``."""
    from pytest_vlaeval.benchmark.model import builtin_benchmarks, load_benchmark

    benchmarks = [load_benchmark(path) for path in builtin_benchmarks().values()]
    noises = {noise: None for benchmark in benchmarks for noise in benchmark.env.filterwarnings}
    for noise in noises:
        config.addinivalue_line("filterwarnings", noise)
    titles: dict[str, list[str]] = {}
    for benchmark in benchmarks:
        titles.setdefault(benchmark.stack, []).append(benchmark.title or benchmark.name)
    for stack, runs in titles.items():
        config.addinivalue_line(
            "markers", f"{stack}: needs the {stack} stack (`vlaeval install {stack}`), which runs {', '.join(runs)}"
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="also run the cases marked long (CI runs them apart: ./scripts/test.sh --long -m long)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files marked ``minutes`` first, the longest first (xdist hands files out in this order
    under ``--no-loadscope-reorder``, as scripts/test.sh runs: a file of minutes that started last
    would run alone while the other worker idles). Without ``--long``, the cases marked ``long`` are
    then deselected (and counted as such), so the default run stays short; CI runs them in a second
    session."""
    items.sort(key=_minutes_first)
    if config.getoption("--long"):
        return
    kept = [item for item in items if item.get_closest_marker("long") is None]
    if len(kept) < len(items):
        left_out = [item for item in items if item.get_closest_marker("long") is not None]
        config.hook.pytest_deselected(items=left_out)
        config.stash[LEFT_OUT] = len(left_out)
        items[:] = kept


def _minutes_first(item: pytest.Item) -> float:
    marker = item.get_closest_marker("minutes")
    return -marker.args[0] if marker is not None else 0.0


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    left_out = config.stash.get(LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"{left_out} long cases (real lerobot-eval runs, a real Slurm array, long real-simulator sessions) "
            "were left out: ./scripts/test.sh --long -m long runs them, as CI does",
            yellow=True,
        )


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester dir with ``fake.yaml``, and ``fake_env`` and ``spy_policies`` importable in the
    sessions it starts (their workers and servers included)."""
    pytester.makefile(".yaml", fake=(HERE / "fake.yaml").read_text())
    pytester.makepyfile(
        fake_env=(HERE / "fake_env.py").read_text(), spy_policies=(HERE / "spy_policies.py").read_text()
    )
    pytester.syspathinsert()
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)  # an inner session is a top-level one, whether or not this suite runs under -n
    return pytester
