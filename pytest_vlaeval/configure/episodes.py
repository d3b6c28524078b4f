"""Every process: the episodes as pytest items, run by the execution mode chosen here, once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_vlaeval.benchmark.model import Selection
from pytest_vlaeval.configure.options import may_serve
from pytest_vlaeval.episodes.collect import BenchmarkCollection, EpisodeReports, Plan
from pytest_vlaeval.episodes.lockstep_groups import LockstepGroups
from pytest_vlaeval.episodes.lone import LoneEpisodes
from pytest_vlaeval.episodes.reference_order import ReferenceOrder
from pytest_vlaeval.episodes.runner import EpisodeRunner
from pytest_vlaeval.episodes.worker import Worker
from pytest_vlaeval.policy.loading import parse_policy
from pytest_vlaeval.run_context import RunContext

if TYPE_CHECKING:
    from pytest_vlaeval.policy.loading import PolicySpec


def register(config: pytest.Config, run: RunContext, policy: PolicySpec, on_worker: bool) -> None:
    note = None if on_worker else run.subset.note  # said once, by the process the user watches
    sequential = run.gate if run.gate.sequential else None
    plan = Plan(run.selection, run.subset.episodes, runner(run, policy), run.execution.retries, note, sequential)
    config.pluginmanager.register(BenchmarkCollection(plan), "vlaeval-collection")
    config.pluginmanager.register(EpisodeReports(), "vlaeval-reports")


def runner(run: RunContext, policy: PolicySpec) -> EpisodeRunner:
    """The execution mode, chosen once: lockstep groups, the reference order, or lone episodes."""
    execution = run.execution
    worker = Worker(run.selection, policy, execution.render)
    if execution.lockstep > 1:
        return LockstepGroups(worker, execution.lockstep, execution.timeout)
    mode = ReferenceOrder if execution.reference_order else LoneEpisodes
    return mode(worker, execution.timeout, (execution.video, run.dir.videos))


def policy_to_run(config: pytest.Config, run: RunContext, served_here: str | None) -> PolicySpec:
    """What this process's episodes build: the run's policy, or the session's server where the
    controller serves it (started here, or reaching an xdist worker through its ``workerinput``;
    none under ``--co``, nor where the policy runs beside the env)."""
    if not may_serve(run.policy, config):
        return run.policy
    from pytest_vlaeval.serving.url import SERVED_URL_KEY  # serving code loads only when a session may serve

    served = served_here or getattr(config, "workerinput", {}).get(SERVED_URL_KEY)
    return parse_policy(served) if served else run.policy


def register_markers(config: pytest.Config, selection: Selection) -> None:
    """One marker per split and per group along every other axis; a name on two axes (LIBERO-PRO's
    ``object``: a base suite and a perturbation) is one marker that selects both, and says so."""
    benchmark = selection.benchmark
    meanings: dict[str, list[str]] = {split: [f"the {split} split"] for split in benchmark.splits}
    for axis in benchmark.axes[1:]:
        for group in benchmark.groups(axis):
            meanings.setdefault(group.lower(), []).append(f"{axis.label} {group}")
    for name, what in meanings.items():
        config.addinivalue_line("markers", f"{name}: {benchmark.title} episodes of {' and of '.join(what)}")
