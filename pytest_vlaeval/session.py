"""Session wiring for ``--benchmark``: options -> selection -> the plugins that do the work.

Bad input stops here with one line (pytest's usage error), before any episode runs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.policy import BUILTIN_POLICIES
from pytest_vlaeval.spec import Selection, resolve_benchmark, select

THIRD_PARTY_WARNINGS = (
    "ignore:The pynvml package is deprecated:FutureWarning",
    "ignore:.*to get variables from other wrappers is deprecated:UserWarning",
    "ignore:diffuse_texture is renamed to base_color_texture:DeprecationWarning",
)
"""Warnings the simulator stack emits on every env, which say nothing about the policy."""


@dataclass(frozen=True)
class RunContext:
    selection: Selection
    policy_spec: str
    render: str
    run_dir: Path


def start(config: pytest.Config) -> None:
    try:
        run = _run_context(config)
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    _register_markers(config, run.selection)
    for noise in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", noise)

    from pytest_vlaeval.collect import BenchmarkCollection, EpisodeReports
    from pytest_vlaeval.runner import EpisodeRunner

    runner = EpisodeRunner(run.selection, run.policy_spec, run.render)
    config.pluginmanager.register(BenchmarkCollection(run.selection, runner), "vlaeval-collection")
    config.pluginmanager.register(EpisodeReports(), "vlaeval-reports")
    if hasattr(config, "workerinput") or config.option.collectonly:
        return

    from pytest_vlaeval import render
    from pytest_vlaeval.controller import ResultsController
    from pytest_vlaeval.store import RunStore, fingerprint

    render.set_cache_env(os.path.join(tempfile.gettempdir(), "pytest-vlaeval-cache"))
    _preflight(run)
    store = RunStore(run.run_dir)
    try:
        store.claim(fingerprint(run.selection, run.policy_spec, run.render))
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(ResultsController(run, store), "vlaeval-controller")


def _run_context(config: pytest.Config) -> RunContext:
    from pytest_vlaeval.store import run_dir_name

    benchmark, split = resolve_benchmark(config.getoption("benchmark"))
    tasks = config.getoption("vla_tasks")
    selection = select(
        benchmark,
        split,
        env_ids=[t.strip() for t in tasks.split(",") if t.strip()] if tasks else None,
        start_seed=config.getoption("vla_start_seed"),
        episodes=config.getoption("episodes"),
    )
    policy_spec = config.getoption("policy") or config.getini("vla_policy")
    _check_policy_spec(policy_spec)
    render = config.getoption("vla_render") or config.getini("vla_render")
    results_root = Path(config.getoption("vla_results") or config.getini("vla_results"))
    if not results_root.is_absolute():
        results_root = config.invocation_params.dir / results_root
    return RunContext(selection, policy_spec, render, results_root / run_dir_name(selection, policy_spec))


def _check_policy_spec(spec: str) -> None:
    """Catch a typo'd policy before any worker starts, without importing the user's module."""
    if spec in BUILTIN_POLICIES:
        return
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise SpecError(f"--policy {spec!r}: expected module:attr or one of {', '.join(BUILTIN_POLICIES)}")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise SpecError(
            f"--policy {spec!r}: module {module!r} is not importable from {os.getcwd()} (is it installed or on sys.path?)"
        )


def _register_markers(config: pytest.Config, selection: Selection) -> None:
    benchmark = selection.benchmark
    for split in benchmark.splits:
        config.addinivalue_line("markers", f"{split}: {benchmark.title} episodes of the {split} split")
    for memory_type in benchmark.memory_types:
        config.addinivalue_line(
            "markers", f"{memory_type.lower()}: {benchmark.title} episodes of {memory_type} memory tasks"
        )


def _preflight(run: RunContext) -> None:
    """Check the render backend in a throwaway process, so a broken machine fails in one line."""
    module = run.selection.benchmark.env.preflight
    if not module:
        return
    check = subprocess.run([sys.executable, "-m", module, run.render], capture_output=True, text=True, timeout=300)
    if check.returncode != 0:
        lines = (check.stdout.strip() or check.stderr.strip() or "no output").splitlines()
        raise pytest.UsageError(f"render backend check failed: {lines[-1]}")
