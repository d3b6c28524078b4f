"""Session wiring for ``--benchmark``: options -> selection -> the plugins that do the work, by role.

Every process reads the options into one ``RunContext`` (``options``) and collects the episodes
(``episodes``); the controller, the process the user started, also checks the machine, claims the
run directory and registers what stores, judges and reports (``controller_process``). The role is decided
here, once. Bad input stops here with one line (pytest's usage error), before any episode runs.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from pytest_vlaeval import termination
from pytest_vlaeval.configure import episodes, options
from pytest_vlaeval.distribute.policy_placement import BESIDE_KEY
from pytest_vlaeval.envs.cpu_share import share_cpu_threads
from pytest_vlaeval.episodes.deadline import keep_session_stderr
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.lerobot.checkpoint import LeRobotCheckpoint
from pytest_vlaeval.policy.sources import register_policy_source
from pytest_vlaeval.printable import terminal_safe
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.store import RunStore
from pytest_vlaeval.run_context import WORKER_PLAN, RunContext

register_policy_source(LeRobotCheckpoint.PREFIX, LeRobotCheckpoint.parse)  # the package's policy sources

RUN_CONTEXT = pytest.StashKey[RunContext]()
"""The session's ``RunContext`` on ``config.stash``, for tools that drive a session (``vlaeval slurm``
reads the run directory a command line names from a collect-only session)."""


def start(config: pytest.Config) -> None:
    """Every process collects the episodes; the controller also checks, stores and reports."""
    if not hasattr(config, "workerinput"):
        _forget_enclosing_worker(config)
    try:
        worker_plan = getattr(config, "workerinput", {}).get(WORKER_PLAN)
        on_worker = worker_plan is not None  # this process's role, decided here once
        run = options.run_context(config, on_worker)
        if on_worker:  # the controller chose; every worker runs the same list
            chosen = frozenset((task, seed) for task, seed in worker_plan)
            run = dataclasses.replace(run, subset=dataclasses.replace(run.subset, episodes=chosen))
        else:
            store = RunStore(run.run_dir, run.subset.store_label)
            # Read once: it plans this session and feeds the controller. Only the run's episodes are
            # kept: a log received into the run may hold any number of others.
            latest = LatestRecords.read(store.dir, run.selection.episode_ids)
            for skipped in latest.skipped:
                config.issue_config_time_warning(pytest.PytestWarning(skipped), stacklevel=2)
            run = options.narrowed(run, latest)
    except SpecError as exc:
        raise pytest.UsageError(terminal_safe(str(exc))) from None  # a value given may hold anything
    config.stash[RUN_CONTEXT] = run
    keep_session_stderr()
    share_cpu_threads(policy_beside=getattr(config, "workerinput", {}).get(BESIDE_KEY, False))
    config.add_cleanup(termination.interrupt_on_termination())
    episodes.register_markers(config, run.selection)
    for noise in run.selection.benchmark.env.filterwarnings:  # the simulator stack's, from its file
        config.addinivalue_line("filterwarnings", noise)
    if on_worker or config.option.collectonly:
        episodes.register(config, run, episodes.policy_to_run(config, run, None), on_worker)
        return
    from pytest_vlaeval.configure import controller_process  # the controller's half: gates, stores, reports

    prepared = controller_process.prepare(config, run, store)
    episodes.register(config, run, episodes.policy_to_run(config, run, prepared.served), on_worker)
    controller_process.register(config, run, store, latest, prepared)


XDIST_WORKER_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")


def _forget_enclosing_worker(config: pytest.Config) -> None:
    """A session that is no xdist worker is its own controller, even when started from inside one
    (a test suite that runs evaluations): the worker name and count it inherited would name its
    records' worker and size its thread pools. Put back when the session ends (``evaluate()`` in a
    worker of the caller's own suite)."""
    inherited = {name: os.environ.pop(name) for name in XDIST_WORKER_VARIABLES if name in os.environ}
    if inherited:
        config.add_cleanup(lambda: os.environ.update(inherited))
