"""``report.html``: the run as a person looks at it, built from the canonical records alone.

The headline (split SR, its interval and what that is, completeness, the gate's verdict, what a
paper must report), the group and task tables (sortable, filterable, every task of the
selection, those without a completed episode marked "not evaluated"), each task's episodes with
their videos (failures first), and with a baseline the episodes that flipped.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.baseline import load_baseline
from pytest_vlaeval.gate.stats import task_outcomes
from pytest_vlaeval.report.axes import group_rates, summary_axes
from pytest_vlaeval.report.page import filters, interval, page, pct, sr_bar
from pytest_vlaeval.results.chart import NOT_EVALUATED
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.schema import Summary, TaskResult
from pytest_vlaeval.results.store import write_text_atomic

OUTCOMES = ("all succeeded", "some failed", "all failed", "errors", NOT_EVALUATED)
"""A task's outcome in the task table's filter."""


def write_report(run_dir: RunDir, summary: Summary, per_task: list[TaskResult], policy: str) -> Path:
    """Write ``report.html`` atomically (a reader never sees half a page)."""
    write_text_atomic(run_dir.report_html, render_report(run_dir, summary, per_task, policy))
    return run_dir.report_html


def render_report(run_dir: RunDir, summary: Summary, per_task: list[TaskResult], policy: str) -> str:
    title = f"{summary['benchmark']} {summary['selected_split']}: {policy}"
    body = [
        _headline(summary, policy),
        _groups(summary),
        _tasks(summary, per_task),
        _flips(summary, per_task),
        _episodes(run_dir, summary, per_task),
    ]
    return page(title, "\n".join(part for part in body if part))


def headline_table(summary: Summary, policy: str) -> str:
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
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table id="vlaeval-headline">{cells}</table>'


def task_outcome(result: TaskResult) -> str:
    if result["n_errors"]:
        return "errors"
    if all(result["successes"]):
        return "all succeeded"
    return "all failed" if not any(result["successes"]) else "some failed"


def _headline(summary: Summary, policy: str) -> str:
    gate = summary.get("gate")
    verdict = ""
    if gate:
        css = {"PASS": "pass", "FAIL": "fail"}.get(gate["verdict"], "warn")
        verdict = f'<p class="{css}" id="verdict">{escape(gate["verdict_line"])}</p>'
    completeness = (
        f"{summary['n_completed']} of {summary['n_expected']} episodes completed, "
        f"{summary['n_errors']} errors, {summary['n_missing']} missing"
    )
    if summary["tasks_without_results"]:
        completeness += f"; {len(summary['tasks_without_results'])} tasks {NOT_EVALUATED}"
    partial = '<span class="warn">partial run: SRs cover completed episodes only</span>' if summary["partial"] else ""
    sr = summary["sr_split"]
    model = summary["model"]
    facts = {
        "benchmark": f"{summary['benchmark']} {summary['benchmark_version']}",
        "benchmark commit": summary["benchmark_commit"] or "not pinned",
        "canonical protocol": "yes" if summary["canonical_protocol"] else "no (seeds or episodes differ)",
        "seeds": f"{summary['start_seed']} to {summary['start_seed'] + summary['n_episodes_per_task'] - 1}",
        "episodes per task": str(summary["n_episodes_per_task"]),
        "action chunk size": str(summary["action_chunk_size"] or "-"),
        "render backend": summary["render_backend"] or "-",
        "model": ", ".join(f"{k}={v}" for k, v in model.items()) or "-",
        "written": summary["written_at"],
    }
    return (
        f"<h1>{escape(summary['benchmark'])}: {escape(summary['selected_split'])} split, "
        f"policy <code>{escape(policy)}</code></h1>\n"
        f'<div class="headline"><div><div class="big" id="split-sr">{pct(sr)}</div><div class="muted">split SR</div></div>'
        f"<div>{sr_bar(sr, summary['sr_split_ci95']) if sr is not None and summary['sr_split_ci95'] else ''} "
        f'{interval(summary["sr_split_ci95"])}<br><span class="muted">95% interval: '
        f"{escape(summary['ci95_methods']['sr_split_ci95'])}</span></div></div>\n"
        f'<p id="completeness">{escape(completeness)} {partial}</p>\n{verdict}\n'
        f'<details><summary>What a paper must report</summary><dl class="facts">'
        + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts.items())
        + "</dl></details>"
    )


def _groups(summary: Summary) -> str:
    rows = [
        f'<tr data-name="{escape(name)}" data-axis="{escape(axis.label)}"><td>{escape(axis.label)}</td>'
        f'<td>{escape(name)}</td><td class="num" data-value="{sr}">{pct(sr)}</td>'
        f'<td data-value="{bounds[0]}">{sr_bar(sr, bounds)} {interval(bounds)}</td></tr>'
        for axis in summary_axes(summary)
        for name, sr, bounds in group_rates(axis, summary)
    ]
    if not rows:
        return ""
    return (
        "<h2>Groups</h2>"
        + filters("groups", [("axis", "axis", [a.label for a in summary_axes(summary)])], "filter groups by name")
        + '<table id="groups" class="sortable"><thead><tr><th>axis</th><th>group</th><th>SR</th>'
        "<th>95% interval (seeds as clusters)</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _tasks(summary: Summary, per_task: list[TaskResult]) -> str:
    by_id = {r["env_id"]: r for r in per_task}
    group_axes = summary_axes(summary)
    rows = []
    for env_id in [*by_id, *summary["tasks_without_results"]]:
        result = by_id.get(env_id)
        data = "".join(f' data-{a.field}="{escape(str(result[a.field]))}"' for a in group_axes if result)
        if result is None:
            rows.append(
                f'<tr class="not-evaluated" data-name="{escape(env_id)}" data-outcome="{NOT_EVALUATED}">'
                f'<td>{escape(env_id)}</td>{"<td></td>" * len(group_axes)}<td class="num" data-value="0">0</td>'
                f'<td class="num" data-value="-1">{NOT_EVALUATED}</td><td data-value="-1"></td>'
                f'<td class="num" data-value="-1e9"></td><td class="num">{_errors_of(summary, env_id)}</td></tr>'
            )
            continue
        cells = "".join(f"<td>{escape(str(result[a.field]))}</td>" for a in group_axes)
        rows.append(
            f'<tr data-name="{escape(env_id)}"{data} data-outcome="{task_outcome(result)}">'
            f'<td><a href="#task-{escape(env_id)}">{escape(env_id)}</a></td>{cells}'
            f'<td class="num" data-value="{result["n_episodes"]}">{result["n_episodes"]}/{result["n_expected"]}</td>'
            f'<td class="num" data-value="{result["sr"]}">{pct(result["sr"])}</td>'
            f'<td data-value="{result["sr_ci95"][0]}">{sr_bar(result["sr"], result["sr_ci95"])} '
            f"{interval(result['sr_ci95'])}</td>"
            f'<td class="num" data-value="{result["mean_return"]}">{result["mean_return"]:.3f}</td>'
            f'<td class="num">{result["n_errors"] or ""}</td></tr>'
        )
    fields = [(a.field, a.label, sorted({str(r[a.field]) for r in per_task})) for a in group_axes]  # type: ignore[literal-required]
    headers = "".join(f"<th>{escape(a.label)}</th>" for a in group_axes)
    return (
        "<h2>Tasks</h2>"
        + filters("tasks", [*fields, ("outcome", "outcome", list(OUTCOMES))], "filter tasks by name")
        + f'<table id="tasks" class="sortable"><thead><tr><th>task</th>{headers}<th>episodes</th><th>SR</th>'
        "<th>Wilson 95% interval</th><th>mean return</th><th>errors</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _errors_of(summary: Summary, env_id: str) -> str:
    count = sum(e["task"] == env_id for e in summary["errored_episodes"])
    return str(count or "")


def _flips(summary: Summary, per_task: list[TaskResult]) -> str:
    """With a baseline: per task, the paired seeds that went from success to failure and back."""
    gate: dict[str, Any] = summary.get("gate") or {}
    if not gate.get("baseline"):
        return ""
    seeds = sorted({s for r in per_task for s in r["episode_seeds"]})
    try:
        baseline = load_baseline(Path(gate["baseline"]), [r["env_id"] for r in per_task], seeds).outcomes
    except (OSError, ValueError, SpecError) as exc:
        return f'<h2>Against the baseline</h2><p class="warn">cannot read the baseline: {escape(str(exc))}</p>'
    rows = []
    for result in per_task:
        if result["env_id"] not in baseline:
            continue
        mine, theirs = task_outcomes(result), baseline[result["env_id"]]
        paired = sorted(set(mine) & set(theirs))
        lost = [s for s in paired if theirs[s] and not mine[s]]
        gained = [s for s in paired if mine[s] and not theirs[s]]
        rows.append(
            f'<tr data-name="{escape(result["env_id"])}"><td>{escape(result["env_id"])}</td>'
            f'<td class="num">{len(paired)}</td><td class="num no" data-value="{len(lost)}">{_seeds(lost)}</td>'
            f'<td class="num ok" data-value="{len(gained)}">{_seeds(gained)}</td></tr>'
        )
    return (
        f'<h2>Against the baseline</h2><p class="muted">baseline {escape(gate["baseline"])}: per task, the '
        "seeds both runs completed, and which of them flipped.</p>"
        '<table id="flips" class="sortable"><thead><tr><th>task</th><th>paired seeds</th>'
        "<th>success to failure</th><th>failure to success</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _seeds(seeds: list[int]) -> str:
    return f"{len(seeds)}: {', '.join(map(str, seeds))}" if seeds else "0"


def _episodes(run_dir: RunDir, summary: Summary, per_task: list[TaskResult]) -> str:
    """Each task's episodes, failures and errors first, with their videos where recorded; for a
    task not evaluated, the errors that kept it from being evaluated."""
    sections = []
    for result in per_task:
        env_id = result["env_id"]
        episodes = [
            (seed, success, length, ret, "")
            for seed, success, length, ret in zip(
                result["episode_seeds"], result["successes"], result["episode_lengths"], result["returns"], strict=True
            )
        ]
        episodes += [(e["seed"], None, None, None, e["message"]) for e in result["errors"]]
        episodes.sort(key=lambda e: (e[1] is not None, e[1] is True, e[0]))  # errors, failures, successes
        rows = "".join(_episode_row(run_dir, env_id, *episode) for episode in episodes)
        failed = sum(1 for e in episodes if e[1] is not True)
        sections.append(
            _episode_table(env_id, f"{pct(result['sr'])}, {failed} of {len(episodes)} episodes not successful", rows)
        )
    for env_id in summary["tasks_without_results"]:
        errors = sorted((e["seed"], e["message"]) for e in summary["errored_episodes"] if e["task"] == env_id)
        rows = "".join(_episode_row(run_dir, env_id, seed, None, None, None, message) for seed, message in errors)
        if errors:
            sections.append(_episode_table(env_id, f"{NOT_EVALUATED}, {len(errors)} episodes errored", rows))
        else:
            sections.append(f'<p id="task-{escape(env_id)}">{escape(env_id)}: {NOT_EVALUATED}, no episode ran yet</p>')
    return "<h2>Episodes</h2>" + "".join(sections) if sections else ""


def _episode_table(env_id: str, headline: str, rows: str) -> str:
    return (
        f'<details id="task-{escape(env_id)}"><summary>{escape(env_id)}: {headline}</summary>'
        '<table class="episodes"><thead><tr><th>seed</th><th>outcome</th><th>length</th><th>return</th>'
        f"<th>error / video</th></tr></thead><tbody>{rows}</tbody></table></details>"
    )


def _episode_row(
    run_dir: RunDir, env_id: str, seed: int, success: bool | None, length: int | None, ret: float | None, error: str
) -> str:
    if success is None:
        outcome = '<span class="err">error</span>'
    else:
        outcome = '<span class="ok">success</span>' if success else '<span class="no">failure</span>'
    video = run_dir.video(env_id, seed)
    detail = escape(error)
    if video.is_file():
        source = escape(video.relative_to(run_dir.path).as_posix())
        detail += f'<video controls preload="metadata" src="{source}"></video>'
    return (
        f'<tr data-seed="{seed}"><td class="num">{seed}</td><td>{outcome}</td>'
        f'<td class="num">{"" if length is None else length}</td>'
        f'<td class="num">{"" if ret is None else f"{ret:.3f}"}</td><td>{detail}</td></tr>'
    )
