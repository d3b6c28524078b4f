"""The terminal summary (per-task, per-split and per-memory-type success rates, from
``summary.json``), and the commands that complete a partial run.

The terminal summary is rendered with rich into the terminal reporter (plain text when output is
not a terminal), so it sits in pytest's own summary section and never interleaves with progress.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_vlaeval.gate.sequential_gate import SequentialResult
from pytest_vlaeval.gate.verdict import FAIL, UNDECIDED, Verdict
from pytest_vlaeval.printable import command_line, terminal_safe
from pytest_vlaeval.report.axes import group_rates, interval_units, other_numbers, summary_axes
from pytest_vlaeval.report.page import interval, pct
from pytest_vlaeval.results.subset import unfinished_shards
from pytest_vlaeval.run_context import RunContext
from pytest_vlaeval.schema import RunSummary, TaskResult

NARROWING = (
    "--lf",
    "--last-failed",
    "--ff",
    "--failed-first",
    "--vla-resume",
    "-x",
    "--exitfirst",
    "--sw",
    "--stepwise",
)
NARROWING_WITH_VALUE = ("-k", "-m", "--deselect", "--vla-rerun", "--maxfail", "--lfnf", "--last-failed-no-failures")
NARROWING_PREFIXES = (*tuple(f"{option}=" for option in NARROWING_WITH_VALUE if option.startswith("--")), "-k", "-m")
SEQUENTIAL = ("--vla-sequential",)
SEQUENTIAL_WITH_VALUE = ("--vla-min-sr", "--vla-block", "--vla-undecided-exit")
"""The sequential gate's options: a command completing the canonical run after an early stop drops them."""


def render_summary(
    terminalreporter: Any,
    summary: RunSummary,
    per_task: list[TaskResult],
    run: RunContext,
    verdict: Verdict | None,
    args: tuple[str, ...],
    chart: Path | None,
    unwritten: Sequence[str] = (),
    hosts: str | None = None,
) -> None:
    """``hosts``: the line saying the run's sessions ran on hosts that differ in what its floats
    depend on (``results.made_with.hosts_note``), if they did."""
    tr = terminalreporter
    title = f"vlaeval: {summary['benchmark']} {summary['selected_split']} split, policy {run.policy.identity}"
    tr.write_sep("=", terminal_safe(title))
    if per_task:
        tr.write(_tables(tr, summary, per_task))
    tr.write_line(
        f"episodes: {summary['n_completed']} completed, {summary['n_errors']} errors, {summary['n_missing']} missing "
        f"of {summary['n_expected']}; split SR {pct(summary['sr_split'])}; {'; '.join(other_numbers(summary))}"
    )
    for env_id in summary["tasks_without_results"]:
        tr.write_line(f"no completed episode: {env_id}", yellow=True)
    if summary["n_rerolled"]:
        tr.write_line(
            f"rerolled: {summary['n_rerolled']} episodes that failed before succeeded on a rerun (rerolled_failures in summary.json)",
            yellow=True,
            bold=True,
        )
    if isinstance(verdict, SequentialResult) and verdict.stopped:
        tr.write_line(
            f"the sequential gate stopped early: {verdict.saved} episodes not needed (not errors); "
            f"complete the canonical run with: {verdict.resume_command}",
            bold=True,
        )
    elif summary["partial"] and not run.subset.merged_later:
        tr.write_line(
            "partial run: SRs cover completed episodes only (see n_missing / errored_episodes in summary.json)",
            yellow=True,
            bold=True,
        )
        for line in completion_advice(args, run, per_task):
            tr.write_line(line, bold=True)
    tr.write_line(f"results: {terminal_safe(str(run.run_dir))}" + (f" (chart: {chart.name})" if chart else ""))
    failed = sum(len(result["successes"]) - sum(result["successes"]) for result in per_task)
    if failed:
        tr.write_line(failed_episodes_pointer(failed, run.dir.report_html, tr.hasopt("f")))
    if run.subset.merged_later:
        tr.write_line(
            "this shard wrote its episode log only: the run's files are written by: "
            + command_line(["vlaeval", "merge", str(run.run_dir)])
        )
    for line in unwritten:
        tr.write_line(f"not written: {line}", yellow=True, bold=True)
    if hosts is not None:
        tr.write_line(terminal_safe(hosts), yellow=True)
    if verdict is not None:
        outcome = verdict.outcome
        tr.write_line(
            terminal_safe(verdict.verdict()),
            green=verdict.passed,
            red=outcome == FAIL,
            yellow=outcome == UNDECIDED,
            bold=True,
        )


def failed_episodes_pointer(failed: int, page: Path, listed: bool) -> str:
    """Where the failed episodes are, in one line: pytest's short test summary lists them only
    under ``-r`` (``listed``), so that a run of thousands still ends with its results table."""
    them = "it" if failed == 1 else "them"
    where = [f"{page.name} lists {them}"] if page.is_file() else []
    where += [] if listed else [f"-rf lists {them} here"]
    where.append(f"--vla-rerun=failures reruns {them}")
    episodes = "episode" if failed == 1 else "episodes"
    return f"{failed} {episodes} failed (policy failures, counted above): {', '.join(where)}"


def _tables(tr: Any, summary: RunSummary, per_task: list[TaskResult]) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def text(value: object) -> Text:
        """A name from the benchmark file as written: never rich markup, never a control sequence."""
        return Text(terminal_safe(str(value)))

    buffer = io.StringIO()
    width = max(shutil.get_terminal_size().columns, 120)  # the terminal's width, as pytest's own writer sees it
    console = Console(file=buffer, width=width, force_terminal=tr.hasmarkup, highlight=False)

    axes = summary_axes(summary)
    tasks = Table(show_edge=False)
    for column, justify in (
        ("task", "left"),
        *((text(axis.label), "left") for axis in axes),
        ("episodes", "right"),
        ("SR [Wilson 95% CI]", "right"),
        ("mean return", "right"),
        ("errors", "right"),
    ):
        tasks.add_column(column, justify=justify, no_wrap=True)
    for result in per_task:
        tasks.add_row(
            result["env_id"],
            *(text(result[axis.field]) for axis in axes),  # type: ignore[literal-required]
            f"{result['n_episodes']}/{result['n_expected']}",
            f"{pct(result['sr'])} {interval(result['sr_ci95'])}",
            f"{result['mean_return']:.3f}",
            str(result["n_errors"] or ""),
        )
    console.print(tasks)

    rates = Table(show_edge=False)
    rates.add_column("success rate (mean of per-task SRs)", no_wrap=True)
    rates.add_column(f"SR [95% CI, {text(interval_units(summary))} as clusters]", justify="right")
    for axis in axes:
        for group, sr, bounds in group_rates(axis, summary):
            rates.add_row(text(f"{axis.label} {group}"), f"{pct(sr)} {interval(bounds)}")
    console.print(rates)
    return buffer.getvalue()


def completion_advice(args: tuple[str, ...], run: RunContext, per_task: list[TaskResult]) -> list[str]:
    """How to complete a partial run. A shard whose own episodes are all completed points at the
    shards still to run and the merge instead: rerunning it would select nothing."""
    if run.subset.shard is None:
        return [f"complete it with: {completion_command(args)}"]
    index, count = run.subset.shard
    completed = {(result["env_id"], seed) for result in per_task for seed in result["episode_seeds"]}
    pending = unfinished_shards(run.selection, count, completed)
    if index in pending:
        return [f"complete this shard with: {completion_command(args)}"]
    lines = [f"shard {index}/{count} is complete; still to run: {', '.join(f'shard {i}/{count}' for i in pending)}"]
    lines += [f"run shard {i}/{count} with: {completion_command(_with_shard(args, f'{i}/{count}'))}" for i in pending]
    lines.append(
        "then, where shards wrote to other run directories, merge them: "
        f"{command_line(['vlaeval', 'merge', str(run.run_dir)])} OTHER_RUN_DIR... --out MERGED_DIR"
    )
    return lines


def _with_shard(args: tuple[str, ...], value: str) -> tuple[str, ...]:
    """``args`` with ``--vla-shard``'s value replaced."""
    replaced: list[str] = []
    arguments = iter(args)
    for arg in arguments:
        if arg == "--vla-shard":
            next(arguments, None)
            replaced.append(f"--vla-shard={value}")
        elif arg.startswith("--vla-shard="):
            replaced.append(f"--vla-shard={value}")
        else:
            replaced.append(arg)
    return tuple(replaced)


def completion_command(args: tuple[str, ...], *, resume: bool = False) -> str:
    """The same command, selecting what is still missing or errored in the whole universe
    (so narrowing options such as ``-k``, ``-m`` and ``--lf`` are dropped). With ``resume``,
    after the sequential gate stopped early: without the sequential gate, running every episode
    with no record (``--vla-resume``)."""
    dropped = NARROWING + SEQUENTIAL if resume else NARROWING
    with_value = NARROWING_WITH_VALUE + SEQUENTIAL_WITH_VALUE if resume else NARROWING_WITH_VALUE
    prefixes = NARROWING_PREFIXES + tuple(f"{o}=" for o in SEQUENTIAL_WITH_VALUE) if resume else NARROWING_PREFIXES
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
        elif arg in with_value:
            skip_value = True
        elif arg not in dropped and not arg.startswith(prefixes):
            kept.append(arg)
    return command_line(["pytest", *kept, "--vla-resume" if resume else "--vla-rerun=incomplete"])
