"""Every process: the session's options read once into a ``RunContext``, each group checked where
it is built, and the checks that span groups here."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import pytest

from pytest_vlaeval.benchmark.model import Benchmark, resolve_benchmark, select
from pytest_vlaeval.distribute.indexed import AUTO, shard_from_environment
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.settings import GateSettings
from pytest_vlaeval.policy.loading import parse_local_policy, parse_policy
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import checked_run_name
from pytest_vlaeval.results.store import run_dir_name
from pytest_vlaeval.results.subset import RERUN_MODES, parse_shard, read_episode_list, shard, still_to_run
from pytest_vlaeval.run_context import Execution, RunContext, Subset, reference_order_refusal

if TYPE_CHECKING:
    from pytest_vlaeval.policy.loading import PolicySpec
    from pytest_vlaeval.policy.sources import PolicySource


def run_context(config: pytest.Config, on_worker: bool) -> RunContext:
    """What the session was asked to do. A worker is handed its episodes by the controller, so it
    reads neither the scheduler's environment (``--vla-shard=auto``) nor ``--vla-episode-list``:
    a worker on another host has neither."""
    benchmark, split = resolve_benchmark(config.getoption("benchmark"))
    tasks = config.getoption("vla_tasks")
    selection = select(
        benchmark,
        split,
        env_ids=[t.strip() for t in tasks.split(",") if t.strip()] if tasks else None,
        start_seed=config.getoption("vla_start_seed"),
        episodes=config.getoption("episodes"),
        control_arm=config.getoption("vla_control_arm"),
    )
    policy = _policy(config, benchmark)
    results_root = Path(config.getoption("vla_results") or config.getini("vla_results"))
    if not results_root.is_absolute():
        results_root = config.invocation_params.dir / results_root
    given = config.getoption("vla_run_name")
    run_name = checked_run_name(given) if given else run_dir_name(selection, policy.identity)
    rerun, shard_arg, from_scheduler, listed = _subset_options(config, on_worker)
    if config.getoption("vla_reference_order"):
        _check_whole_sequences(config, rerun, shard_arg)
    execution = Execution.checked(
        config.getoption("vla_render") or config.getini("vla_render"),
        retries=config.getoption("vla_retries"),
        timeout=config.getoption("vla_timeout"),
        video=config.getoption("vla_video"),
        lockstep=config.getoption("vla_lockstep") or 1,
        reference_order=bool(config.getoption("vla_reference_order")),
    )
    subset = Subset(
        shard=parse_shard(shard_arg) if shard_arg else None,
        merged_later=from_scheduler,
        episode_list=tuple(read_episode_list(Path(listed), selection)) if listed else None,
        rerun=rerun,
    )
    return RunContext(selection, policy, results_root / run_name, execution, subset, _gate_settings(config))


def _subset_options(config: pytest.Config, on_worker: bool) -> tuple[str | None, str | None, bool, str | None]:
    """Which episodes, as given: the rerun mode, the shard (an array's, read from its scheduler),
    whether the shard is an array's, and the episode list's file; files are read once the
    options' conflicts are known."""
    rerun = config.getoption("vla_rerun")
    if rerun is not None and rerun not in RERUN_MODES:
        raise SpecError(f"--vla-rerun {rerun!r}; valid: {', '.join(RERUN_MODES)}")
    if config.getoption("vla_resume"):
        if rerun not in (None, "missing"):
            raise SpecError(
                f"--vla-resume runs the episodes with no record; it does not combine with --vla-rerun={rerun}"
            )
        rerun = "missing"
    shard_arg = None if on_worker else config.getoption("vla_shard")
    from_scheduler = shard_arg == AUTO
    listed = None if on_worker else config.getoption("vla_episode_list")
    if from_scheduler:
        shard_arg = shard_from_environment(os.environ)
        if config.getoption("vla_baseline") and not config.getoption("vla_sequential"):
            raise SpecError(
                "--vla-baseline judges a whole run; a shard of an array (--vla-shard=auto) sees part of it: "
                "give the baseline to the merge (vlaeval merge RUN_DIR --baseline DIR)"
            )
    return rerun, shard_arg, from_scheduler, listed


def _check_whole_sequences(config: pytest.Config, rerun: str | None, shard: str | None) -> None:
    """``--vla-reference-order`` runs a task's seeds as one sequence, from its first: what would
    run part of a sequence, or split one, is refused (the execution's own conflicts are its)."""
    conflicts = [
        ("--vla-resume" if config.getoption("vla_resume") else f"--vla-rerun={rerun}", rerun),
        ("--vla-shard", shard),
        ("--vla-episode-list", config.getoption("vla_episode_list")),
        ("--lf", config.getoption("lf", False)),
        ("--ff", config.getoption("failedfirst", False)),
        ("--vla-sequential", config.getoption("vla_sequential")),
    ]
    named = [name for name, given in conflicts if given]
    if named:
        raise SpecError(reference_order_refusal(named[0]))


def _gate_settings(config: pytest.Config) -> GateSettings:
    return GateSettings.checked(
        baseline=config.getoption("vla_baseline"),
        sequential=config.getoption("vla_sequential"),
        min_sr=config.getoption("vla_min_sr"),
        block=config.getoption("vla_block"),
        shard=config.getoption("vla_shard"),
        max_drop=config.getoption("vla_max_drop"),
        alpha=config.getoption("vla_gate_alpha"),
        assume=config.getoption("vla_gate_assume"),
        undecided_exit=config.getoption("vla_undecided_exit"),
        plan_probability=config.getoption("vla_gate_plan_probability"),
    )


def _policy(config: pytest.Config, benchmark: Benchmark) -> PolicySpec:
    """``--vla-serve``'s or ``--policy``'s spec, parsed; a local one is checked against the
    benchmark (a typo'd module, an unusable checkpoint) before any worker starts."""
    served = config.getoption("vla_serve")
    if served and config.getoption("policy"):
        raise SpecError("--vla-serve serves the policy it names; it does not combine with --policy")
    text = served or config.getoption("policy") or config.getini("vla_policy")
    option = "--vla-serve" if served else "--policy"
    policy: PolicySpec
    if served or "://" not in text:
        source = parse_local_policy(text, option, benchmark)
        source.check(benchmark)
        policy = source
    else:
        policy = parse_policy(text)
    if config.getoption("vla_serve_python") and not may_serve(policy, config):
        raise SpecError("--vla-serve-python names the interpreter a served policy runs in: add --vla-serve=SPEC")
    return policy


def may_serve(policy: PolicySpec, config: pytest.Config) -> TypeGuard[PolicySource]:
    """Whether the session may serve its policy from a server process of its own: ``--vla-serve``,
    or a policy that runs in an interpreter of its own (which the controller serves unless it runs
    beside the env: ``distribute.policy_placement``). Either is a source, never a server's address."""
    return bool(config.getoption("vla_serve")) or policy.interpreter is not None


def narrowed(run: RunContext, records: LatestRecords) -> RunContext:
    """The controller narrows the universe to this session's episodes: a shard, then what the store says."""
    subset, universe = run.subset, run.selection.episode_ids
    listed = list(subset.episode_list) if subset.episode_list is not None else None
    chosen = shard(run.selection, *subset.shard, listed) if subset.shard else listed if listed is not None else universe
    notes = [f"--vla-episode-list: {len(listed)} of {len(universe)} episodes"] if listed is not None else []
    if subset.shard:
        notes.append(
            f"shard {subset.shard[0]}/{subset.shard[1]}: {len(chosen)} of {len(universe if listed is None else listed)} episodes"
        )
    if subset.rerun:
        before = len(chosen)
        chosen = still_to_run(chosen, records, subset.rerun)
        done = sum(1 for key in universe if key in records)
        notes.append(
            f"--vla-rerun={subset.rerun}: {len(chosen)} of {before} episodes selected ({done} of {len(universe)} already recorded in {run.run_dir})"
        )
    note = "vlaeval: " + "; ".join(notes) if notes else None
    return dataclasses.replace(run, subset=dataclasses.replace(subset, episodes=frozenset(chosen), note=note))
