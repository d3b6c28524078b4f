"""The canonical files from the run's records: per-task results and the summary (their types:
``schema``; their formulas: ``stats``).

Per task ``<ENV_ID>.json`` and ``summary.json`` carry every field of the benchmark's reference
runner under the same names; our extra fields (coverage, errors, intervals) are additions.
Success rates count completed episodes only: an episode the harness could not evaluate is
reported as an error, never as a failure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import chain
from typing import Any, cast

from pytest_vlaeval.benchmark.model import Axis, Controls, Extra, Grid, Reporting, Selection, Task
from pytest_vlaeval.finite import finite_mean
from pytest_vlaeval.gate.stats import (
    clustered_difference_interval,
    clustered_sr_interval,
    group_sr,
    seed_clustered_interval,
    success_rate,
    task_outcomes,
    wilson,
)
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.record import SUCCESS, EpisodeRecord
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import write_json_atomic
from pytest_vlaeval.schema import Canonical, ControlArm, GridSummary, PairedGroup, RunSummary, TaskResult

CI95_METHODS = {
    "per_task_sr_ci95": "Wilson score interval over the task's seeds",
    "sr_pooled_ci95": "Wilson score interval over every completed episode (ignores that tasks share seeds)",
    "sr_split_ci95": "mean of task SRs; variance with seeds as clusters (tasks share seeds, so they correlate), "
    "Wilson interval at the effective number of independent episodes, t quantile on seeds - 1 degrees of freedom",
}
"""What each interval in ``summary.json`` is (the formulas: ``stats``); the axes' are added per benchmark."""


def ci95_methods(axes: tuple[Axis, ...], clusters: Axis | None = None) -> dict[str, str]:
    """The interval methods of a benchmark's summary: the fixed ones (the split's with the
    benchmark's clusters), then one per axis."""
    along = {
        a.intervals: "as sr_split_ci95" if a == axes[0] else f"as sr_split_ci95, over the {a.label}'s tasks"
        for a in axes
    }
    fixed = dict(CI95_METHODS)
    if clusters is not None:
        fixed["sr_split_ci95"] = (
            f"mean of task SRs; variance with the {clusters.label} as clusters (its tasks share what makes "
            f"their episodes alike), Wilson interval at the effective number of independent episodes, t "
            f"quantile on {clusters.label} groups - 1 degrees of freedom"
        )
    return {**fixed, **along}


def task_result(task: Task, records: list[EpisodeRecord], selection: Selection) -> TaskResult:
    """One task's canonical JSON from its records (one per seed, any order)."""
    benchmark = selection.benchmark
    done = sorted((r for r in records if r.completed), key=lambda r: r.seed)
    errors = sorted((r for r in records if not r.completed), key=lambda r: r.seed)
    successes = [bool(r.success) for r in done]
    returns = [float(r.episode_return) for r in done]
    described = next((r for r in done + errors if r.model is not None), None)
    # The benchmark file names some keys; load refuses one that would clash (``benchmark_file.keys_made``).
    result = dict(
        chain(
            [("env_id", task.env_id)],
            ((axis.field, task.group(axis)) for axis in benchmark.axes),
            {
                "start_seed": selection.start_seed,
                "n_episodes": len(done),
                "successes": successes,
                "returns": returns,
                "sr": success_rate(sum(successes), len(successes)),
                "mean_return": finite_mean(returns),
                "benchmark_commit": benchmark.benchmark_commit,
            }.items(),
            ((name, benchmark.env.options[name]) for name in benchmark.reporting.result_fields),
            {
                "action_chunk_size": described.chunk_size if described else None,
                "model": described.model if described else {},
                "episode_lengths": [int(r.length) for r in done],
                "episode_seeds": [r.seed for r in done],
                # Additions to the reference schema.
                "sr_ci95": list(wilson(sum(successes), len(successes))),
                "n_expected": selection.episodes,
                "n_errors": len(errors),
                "errors": [{"seed": r.seed, "message": r.message} for r in errors],
                "complete": len(done) == selection.episodes,
                "render_backend": described.render_backend if described else None,
            }.items(),
            ((extra.summary, extra.reduced(extra_values(done, extra))) for extra in benchmark.reporting.extras),
        )
    )
    return cast(TaskResult, result)


def extra_values(records: list[EpisodeRecord], extra: Extra) -> list[float]:
    """An extra's numbers over completed episodes, those whose adapter gave it (an old record may lack it)."""
    values = ((r.extras or {}).get(extra.field) for r in records)
    return [float(v) for v in values if isinstance(v, (int, float))]


def finished_task(selection: Selection, latest: LatestRecords, task: Task) -> TaskResult | None:
    """One task's canonical JSON from the run's latest records, None while it has no completed episode."""
    records = [latest[key] for seed in selection.seeds if (key := (task.env_id, seed)) in latest]
    return task_result(task, records, selection) if any(r.completed for r in records) else None


def summary(selection: Selection, latest: LatestRecords, *, interrupted: bool) -> Canonical:
    """Summary and per-task results over the run's whole episode universe, from the latest
    attempt of each of its episodes.

    The SR of a group along any axis (a split, a memory type) is the mean of its per-task SRs
    (not pooled over episodes), over the tasks that have at least one completed episode;
    ``partial`` says when that is not all. The split's groups keep the tasks' order, every other
    axis's are sorted by name. The benchmark's control tasks (``controls``) are in no SR but their
    own, in ``control_arm``, beside each group's paired difference against them.
    """
    universe = selection.episode_ids
    records = {key: latest[key] for key in universe if key in latest}
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for record in records.values():
        by_task[record.task].append(record)
    per_task = [
        task_result(task, by_task[task.env_id], selection)
        for task in selection.tasks
        if any(r.completed for r in by_task[task.env_id])
    ]
    per_task_sr = {r["env_id"]: r["sr"] for r in per_task}
    benchmark = selection.benchmark
    controls = {t.env_id: t for t in selection.tasks if benchmark.controls and benchmark.controls.is_control(t)}
    measured = [r for r in per_task if r["env_id"] not in controls]
    clusters = benchmark.interval_clusters
    axes = benchmark.axes
    by_axis = {axis: _grouped(axis, measured, by_name=axis != axes[0]) for axis in axes}
    done = [r for r in records.values() if r.completed]
    completed = [r for r in done if r.task not in controls]
    n_successes = sum(bool(r.success) for r in completed)
    errored = [r for r in records.values() if not r.completed]
    n_missing = len(universe) - len(records)
    rerolled = [
        {"task": r.task, "seed": r.seed} for r in records.values() if r.outcome == SUCCESS and latest.failed_once(r.key)
    ]
    splits = {result["split"] for result in measured}
    first = per_task[0] if per_task else {}
    reporting = selection.benchmark.reporting
    pooled = pooled_fields(reporting, completed, n_successes)
    means = _mean_of_groups(reporting, by_axis)
    body = dict(
        chain(
            {
                "split": splits.pop() if len(splits) == 1 else "Custom",
                "sr_split": group_sr(r["sr"] for r in measured) if measured else None,
                "tasks": list(per_task_sr),
                "per_task_sr": per_task_sr,
                "per_task_mean_return": {r["env_id"]: r["mean_return"] for r in per_task},
                # Additions to the reference schema.
                "benchmark": selection.benchmark.title,
                "benchmark_version": selection.benchmark.version,
                "benchmark_commit": selection.benchmark.benchmark_commit,
                "selected_split": selection.split,
                "sr_split_ci95": group_interval(measured, clusters) if measured else None,
            }.items(),
            ((a.summary, {g: group_sr(r["sr"] for r in group) for g, group in by_axis[a].items()}) for a in axes),
            ((a.intervals, {g: group_interval(group, clusters) for g, group in by_axis[a].items()}) for a in axes),
            {
                "axes": [
                    {"field": a.field, "label": a.label, "summary": a.summary, "intervals": a.intervals} for a in axes
                ],
                "per_task_sr_ci95": {r["env_id"]: r["sr_ci95"] for r in per_task},
                "ci95_methods": ci95_methods(axes, clusters),
                **({"interval_clusters": clusters.field} if clusters else {}),
                "start_seed": selection.start_seed,
                "n_episodes_per_task": selection.episodes,
                "canonical_protocol": selection.is_canonical,
                "action_chunk_size": first.get("action_chunk_size"),
                "model": first.get("model", {}),
                "render_backend": first.get("render_backend"),
                "sr_pooled": success_rate(n_successes, len(completed)) if completed else None,
                "sr_pooled_ci95": list(wilson(n_successes, len(completed))) if completed else None,
            }.items(),
            pooled,
            means,
            {
                "benchmark_metrics": [key for key, _ in (*pooled, *means)],
                **(
                    {"grid": grid_summary(grid, measured, benchmark.unavailable_splits, clusters)}
                    if (grid := reporting.grid)
                    else {}
                ),
                **(
                    {"control_arm": control_arm(benchmark.controls, measured, per_task, selection, clusters)}
                    if benchmark.controls and any(r["env_id"] in controls for r in per_task)
                    else {}
                ),
                "privileged_info_to_policy": False,
                "n_tasks_expected": len(selection.tasks),
                "tasks_without_results": [t.env_id for t in selection.tasks if t.env_id not in per_task_sr],
                "n_expected": len(universe),
                "n_completed": len(done),
                "n_errors": len(errored),
                "n_missing": n_missing,
                "errored_episodes": [{"task": r.task, "seed": r.seed, "message": r.message} for r in errored],
                "rerolled_failures": rerolled,
                "n_rerolled": len(rerolled),
                "partial": interrupted or len(done) != len(universe),
                "interrupted": interrupted,
                "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }.items(),
        )
    )
    return cast(RunSummary, body), per_task


def pooled_fields(reporting: Reporting, completed: list[EpisodeRecord], n_successes: int) -> list[tuple[str, Any]]:
    """The benchmark's own summary numbers pooled over every completed episode: its extras
    (``avg_max_reward``) and its key for the pooled success percentage (``pc_success``)."""
    fields = [(e.summary, e.reduced(extra_values(completed, e))) for e in reporting.extras]
    if reporting.pooled_success_key:
        fields.append((reporting.pooled_success_key, 100 * n_successes / len(completed) if completed else None))
    return fields


def _mean_of_groups(reporting: Reporting, by_axis: dict[Axis, dict[str, list[TaskResult]]]) -> list[tuple[str, Any]]:
    """``sr_mean_of_<axis field>``: the unweighted mean of the axis's group SRs, where the file asks."""
    axis, key = reporting.mean_of_groups, reporting.mean_of_groups_key
    if axis is None or key is None:
        return []
    groups = [group_sr(r["sr"] for r in results) for results in by_axis[axis].values()]
    return [(key, group_sr(groups) if groups else None)]


def grid_summary(
    grid: Grid, per_task: list[TaskResult], unavailable: dict[str, str], clusters: Axis | None = None
) -> GridSummary:
    """The grid's cells (each the mean of its tasks' SRs, as any group's SR), and its total: the
    unweighted mean of the cells with results, which is the benchmark's own headline only when no
    cell is missing (``missing_cells`` says which are; ``unavailable_splits``, what cannot run here)."""
    cells: dict[str, dict[str, list[TaskResult]]] = defaultdict(lambda: defaultdict(list))
    for result in per_task:
        cells[result[grid.rows.field]][result[grid.columns.field]].append(result)  # type: ignore[literal-required]
    table = {row: {col: group_sr(r["sr"] for r in cells[row][col]) if cells[row][col] else None
                   for col in grid.column_groups} for row in grid.row_groups}  # fmt: skip
    present = [results for row in grid.row_groups for col in grid.column_groups if (results := cells[row][col])]
    sizes = {len(results) for results in present}
    return {
        "rows": grid.rows.field,
        "columns": grid.columns.field,
        "cells": table,
        "total": group_sr(group_sr(r["sr"] for r in results) for results in present) if present else None,
        # Equal cells: the total is the mean of their tasks' SRs, whose interval is the split's.
        "total_ci95": group_interval([r for results in present for r in results], clusters)
        if len(sizes) == 1
        else None,
        "total_definition": grid.total,
        "missing_cells": [
            f"{row}/{col}" for row in grid.row_groups for col in grid.column_groups if not cells[row][col]
        ],
        "complete": len(present) == len(grid.row_groups) * len(grid.column_groups),
        "unavailable_splits": dict(unavailable),
    }


def _grouped(axis: Axis, per_task: list[TaskResult], *, by_name: bool) -> dict[str, list[TaskResult]]:
    """The task results by their group along ``axis``; sorted by group name when ``by_name``."""
    groups: dict[str, list[TaskResult]] = defaultdict(list)
    for result in per_task:
        groups[result[axis.field]].append(result)  # type: ignore[literal-required]
    return dict(sorted(groups.items())) if by_name else dict(groups)


def group_interval(results: list[TaskResult], clusters: Axis | None = None) -> list[float]:
    """The 95% interval of a group's SR (the mean of its tasks' SRs), with seeds as clusters, or
    the groups along the benchmark's ``interval_clusters`` axis."""
    if clusters is None:
        return list(seed_clustered_interval([task_outcomes(r) for r in results]))
    return list(clustered_sr_interval([(r[clusters.field], task_outcomes(r)) for r in results]))  # type: ignore[literal-required]


CONTROL_METHOD = (
    "per task, its SR minus its control's on the seeds both completed; a group's difference is the mean over "
    "its tasks whose control has results, its interval the mean +- t(0.975, clusters - 1) x the cluster-robust "
    "standard error, clusters as for the group SRs"
)


@dataclass(frozen=True)
class _Pair:
    """A task and its control on the seeds both completed."""

    result: TaskResult
    differences: dict[int, float]
    """seed -> the task's success minus its control's."""
    sr: float
    control_sr: float


def control_arm(
    controls: Controls,
    measured: list[TaskResult],
    per_task: list[TaskResult],
    selection: Selection,
    clusters: Axis | None,
) -> ControlArm:
    """The control tasks' SR and, along every axis but the pairing one, each group's paired
    difference against the controls of its tasks (``CONTROL_METHOD``)."""
    by_id = {r["env_id"]: r for r in per_task}
    tasks = {t.env_id: t for t in selection.tasks}
    own = [r for r in per_task if controls.is_control(tasks[r["env_id"]])]
    pairs = []
    for result in measured:
        control = by_id.get(controls.control_of(tasks[result["env_id"]]))
        mine, theirs = task_outcomes(result), task_outcomes(control) if control else {}
        seeds = sorted(set(mine) & set(theirs))
        if seeds:
            differences = {s: float(mine[s]) - float(theirs[s]) for s in seeds}
            sr, control_sr = (sum(outcomes[s] for s in seeds) / len(seeds) for outcomes in (mine, theirs))
            pairs.append(_Pair(result, differences, sr, control_sr))
    along: dict[str, dict[str, PairedGroup]] = {}
    for axis in selection.benchmark.axes:
        if axis != controls.pair_by:
            groups: dict[str, list[_Pair]] = defaultdict(list)
            for pair in pairs:
                groups[pair.result[axis.field]].append(pair)  # type: ignore[literal-required]
            along[axis.field] = {group: _paired_group(groups[group], clusters) for group in sorted(groups)}
    return {
        "field": controls.axis.field,
        "group": controls.group,
        "pair_by": controls.pair_by.field,
        "tasks": [r["env_id"] for r in own],
        "sr": group_sr(r["sr"] for r in own),
        "sr_ci95": group_interval(own, clusters),
        "paired": along,
        "method": CONTROL_METHOD,
    }


def _paired_group(pairs: list[_Pair], clusters: Axis | None) -> PairedGroup:
    """A group's SR, its controls' and the mean paired difference with its interval."""
    keyed = [(p.result[clusters.field] if clusters else None, p.differences) for p in pairs]  # type: ignore[literal-required]
    return {
        "n_tasks": len(pairs),
        "sr": group_sr(p.sr for p in pairs),
        "control_sr": group_sr(p.control_sr for p in pairs),
        "difference": group_sr(sum(p.differences.values()) / len(p.differences) for p in pairs),
        "difference_ci95": list(clustered_difference_interval(keyed)),
    }


def write_task(run_dir: RunDir, result: TaskResult) -> None:
    """``<ENV_ID>.json`` (a namespaced id's folder never a link: ``RunDir.confined``)."""
    write_json_atomic(run_dir.confined(run_dir.task(result["env_id"])), result)


def write_canonical(run_dir: RunDir, body: RunSummary, per_task: list[TaskResult]) -> None:
    """``<ENV_ID>.json`` for every task with results, then ``summary.json``."""
    for result in per_task:
        write_task(run_dir, result)
    write_summary(run_dir, body)


def write_summary(run_dir: RunDir, body: RunSummary) -> None:
    """``summary.json``."""
    write_json_atomic(run_dir.summary, body)
