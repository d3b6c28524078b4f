"""``report.html``: the run as a person looks at it, built from the canonical records alone.

The headline (split SR, its interval and what that is, completeness, the gate's verdict, what a
paper must report), the group and task tables (sortable, filterable, every task of the
selection, those without a completed episode marked "not evaluated"), each task's episodes with
their videos (failures first), and with a baseline the episodes that flipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_vlaeval.gate.baseline import Baseline
from pytest_vlaeval.gate.stats import task_outcomes
from pytest_vlaeval.report.axes import (
    axes_chart,
    grid_table,
    group_rates,
    interval_points,
    interval_units,
    other_numbers,
    summary_axes,
)
from pytest_vlaeval.report.chart import NOT_EVALUATED
from pytest_vlaeval.report.page import attribute_name, interval, pct, render
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import write_text_atomic
from pytest_vlaeval.schema import RunSummary, TaskResult

OUTCOMES = ("all succeeded", "some failed", "all failed", "errors", NOT_EVALUATED)
"""A task's outcome in the task table's filter."""


def write_report(
    run_dir: RunDir, summary: RunSummary, per_task: list[TaskResult], policy: str, baseline: Baseline | None = None
) -> Path:
    """Write ``report.html`` atomically (a reader never sees half a page)."""
    write_text_atomic(run_dir.report_html, render_report(run_dir, summary, per_task, policy, baseline))
    return run_dir.report_html


def render_report(
    run_dir: RunDir, summary: RunSummary, per_task: list[TaskResult], policy: str, baseline: Baseline | None = None
) -> str:
    gate = summary.get("gate")
    return render(
        "report.html.j2",
        title=f"{summary['benchmark']} {summary['selected_split']}: {policy}",
        s=summary,
        policy=policy,
        gate=gate,
        verdict_class={"PASS": "pass", "FAIL": "fail"}.get(gate["verdict"], "warn") if gate else "",
        completeness=_completeness(summary),
        facts=_facts(summary),
        axis_labels=[a.label for a in summary_axes(summary)],
        groups=[
            {"axis": axis.label, "name": name, "sr": sr, "bounds": bounds}
            for axis in summary_axes(summary)
            for name, sr, bounds in group_rates(axis, summary)
        ],
        **_tasks(summary, per_task),
        chart=axes_chart(summary),
        interval_units=interval_units(summary),
        control=_control(summary),
        grid=grid_table(summary),
        other_numbers=other_numbers(summary),
        flips=_flips(baseline, per_task),
        sections=_episodes(run_dir, summary, per_task),
        not_evaluated=NOT_EVALUATED,
    )


def headline_table(summary: RunSummary, policy: str) -> str:
    """The run's headline as one plain table (for pages with styles of their own)."""
    rows = [
        ("run", f"{summary['benchmark']} {summary['selected_split']} split, policy {policy}"),
        ("split SR", f"{pct(summary['sr_split'])} {interval(summary['sr_split_ci95'])}"),
        *(
            (f"{axis.label} {name}", f"{pct(sr)} {interval(bounds)}")
            for axis in summary_axes(summary)
            for name, sr, bounds in group_rates(axis, summary)
        ),
        (
            "episodes",
            f"{summary['n_completed']} of {summary['n_expected']} completed, {summary['n_errors']} errors, "
            f"{summary['n_missing']} missing" + (" (partial)" if summary["partial"] else ""),
        ),
    ]
    gate = summary.get("gate")
    if gate:
        rows.append(("gate", gate["verdict_line"]))
    return render("headline_table.html.j2", rows=rows)


def task_outcome(result: TaskResult) -> str:
    if result["n_errors"]:
        return "errors"
    if all(result["successes"]):
        return "all succeeded"
    return "all failed" if not any(result["successes"]) else "some failed"


def _completeness(summary: RunSummary) -> str:
    text = (
        f"{summary['n_completed']} of {summary['n_expected']} episodes completed, "
        f"{summary['n_errors']} errors, {summary['n_missing']} missing"
    )
    if summary["tasks_without_results"]:
        text += f"; {len(summary['tasks_without_results'])} tasks {NOT_EVALUATED}"
    return text


def _control(summary: RunSummary) -> dict[str, Any] | None:
    """The control arm's SR and every group's paired difference, as rows of a table."""
    arm = summary.get("control_arm")
    if not arm:
        return None
    labels = {a.field: a.label for a in summary_axes(summary)}
    rows = [
        {
            "axis": labels.get(field, field),
            "group": group,
            **paired,
            "interval": interval_points(paired["difference_ci95"]),
        }
        for field, groups in arm["paired"].items()
        for group, paired in groups.items()
    ]
    return {**arm, "count": len(arm["tasks"]), "rows": rows}


def _facts(summary: RunSummary) -> list[tuple[str, str]]:
    """What a paper must report."""
    model = summary["model"]
    return [
        ("benchmark", f"{summary['benchmark']} {summary['benchmark_version']}"),
        ("benchmark commit", summary["benchmark_commit"] or "not pinned"),
        ("canonical protocol", "yes" if summary["canonical_protocol"] else "no (seeds or episodes differ)"),
        ("seeds", f"{summary['start_seed']} to {summary['start_seed'] + summary['n_episodes_per_task'] - 1}"),
        ("episodes per task", str(summary["n_episodes_per_task"])),
        ("action chunk size", str(summary["action_chunk_size"] or "-")),
        ("render backend", summary["render_backend"] or "-"),
        ("model", ", ".join(f"{k}={v}" for k, v in model.items()) or "-"),
        ("written", summary["written_at"]),
    ]


def _tasks(summary: RunSummary, per_task: list[TaskResult]) -> dict[str, Any]:
    """The task table's rows (every task of the selection, those without a result too) and filters."""
    by_id = {r["env_id"]: r for r in per_task}
    group_axes = [
        {"field": a.field, "label": a.label, "attribute": attribute_name(a.field)} for a in summary_axes(summary)
    ]
    rows = []
    for env_id in [*by_id, *summary["tasks_without_results"]]:
        result = by_id.get(env_id)
        if result is None:
            errors = sum(e["task"] == env_id for e in summary["errored_episodes"])
            rows.append({"env_id": env_id, "result": None, "errors": errors})
            continue
        groups = [(axis, str(result[axis["field"]])) for axis in group_axes]  # type: ignore[literal-required]
        rows.append({"env_id": env_id, "result": result, "groups": groups, "outcome": task_outcome(result)})
    fields = [
        (axis["attribute"], axis["label"], sorted({str(r[axis["field"]]) for r in per_task}))  # type: ignore[literal-required]
        for axis in group_axes
    ]
    return {
        "task_axes": group_axes,
        "tasks": rows,
        "task_filters": [*fields, ("outcome", "outcome", list(OUTCOMES))],
    }


def _flips(baseline: Baseline | None, per_task: list[TaskResult]) -> dict[str, Any] | None:
    """With the gate's baseline: per task, the paired seeds that went from success to failure and back."""
    if baseline is None:
        return None
    rows = []
    for result in per_task:
        if result["env_id"] not in baseline.outcomes:
            continue
        mine, theirs = task_outcomes(result), baseline.outcomes[result["env_id"]]
        paired = sorted(set(mine) & set(theirs))
        rows.append(
            {
                "env_id": result["env_id"],
                "paired": len(paired),
                "lost": [s for s in paired if theirs[s] and not mine[s]],
                "gained": [s for s in paired if mine[s] and not theirs[s]],
            }
        )
    return {"baseline": str(baseline.directory), "rows": rows}


def _episodes(run_dir: RunDir, summary: RunSummary, per_task: list[TaskResult]) -> list[dict[str, Any]]:
    """Each task's episodes, failures and errors first, with their videos where recorded; for a
    task not evaluated, the errors that kept it from being evaluated."""
    sections = []
    for result in per_task:
        env_id = result["env_id"]
        episodes = [
            _episode(run_dir, env_id, seed, success, length, ret, "")
            for seed, success, length, ret in zip(
                result["episode_seeds"], result["successes"], result["episode_lengths"], result["returns"], strict=True
            )
        ]
        episodes += [_episode(run_dir, env_id, e["seed"], None, None, None, e["message"]) for e in result["errors"]]
        episodes.sort(key=lambda e: (e["success"] is not None, e["success"] is True, e["seed"]))
        failed = sum(1 for e in episodes if e["success"] is not True)
        headline = f"{pct(result['sr'])}, {failed} of {len(episodes)} episodes not successful"
        sections.append({"env_id": env_id, "headline": headline, "episodes": episodes})
    for env_id in summary["tasks_without_results"]:
        errors = sorted((e["seed"], e["message"]) for e in summary["errored_episodes"] if e["task"] == env_id)
        episodes = [_episode(run_dir, env_id, seed, None, None, None, message) for seed, message in errors]
        headline = (
            f"{NOT_EVALUATED}, {len(errors)} episodes errored" if errors else f"{NOT_EVALUATED}, no episode ran yet"
        )
        sections.append({"env_id": env_id, "headline": headline, "episodes": episodes})
    return sections


def _episode(
    run_dir: RunDir, env_id: str, seed: int, success: bool | None, length: int | None, ret: float | None, error: str
) -> dict[str, Any]:
    video = run_dir.video(env_id, seed)
    source = video.relative_to(run_dir.path).as_posix() if video.is_file() else None
    return {"seed": seed, "success": success, "length": length, "ret": ret, "error": error, "video": source}
