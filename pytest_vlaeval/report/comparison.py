"""Runs compared across checkpoints: split, group and task SRs of every run with their intervals,
and each run's paired difference to the first on the seeds both completed.

A lerobot-eval output directory (or its ``eval_info.json``: ``lerobot.eval_info``) is a run too: its
episodes become records, summarised by the same code as ours (``results.canonical``), with the
benchmark of the first of our runs given, which names its tasks; it keeps no episode lengths,
which no comparison reads. Its maximum rewards become the benchmark's extra LeRobot's
``avg_max_reward`` summarises, where the benchmark has one, so each run's own numbers (``Run.metrics``)
show theirs beside ours.

A group's row is matched to each run's axis by the axis's field, never its label: a label is
only what the row is shown as, and may repeat or read like another kind of row (``task``).

The overall and group rows compare the tasks every run has results for: where the runs' tasks
differ (another ``--vla-tasks``, a lerobot-eval run over fewer tasks), an SR over two tasks beside
one over one task would compare different things, so those rows are each run's mean over the
shared tasks (canonical's formulas), and ``Comparison.note`` says which tasks they leave out; the
task rows show every task. Runs that share no task are refused.

The paired difference is the regression gate's own (``gate``: the seed as the unit, per-seed
differences on the seeds every compared task has in both runs, and the interval of the method
the gate would choose for those tasks and seeds), asked of every row's tasks, so a comparison
and a gate never disagree about the same two runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from pytest_vlaeval.benchmark.model import MAX_EPISODES, Axis, Extra, Selection, load_benchmark
from pytest_vlaeval.choices import SMOOTH_SEEDS
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.fixed import paired_interval
from pytest_vlaeval.gate.methods import method_for
from pytest_vlaeval.gate.stats import group_sr, paired_seed_sums, task_outcomes
from pytest_vlaeval.lerobot.eval_info import EvalInfoLocation, eval_info_location, max_reward_extra, read_eval_info
from pytest_vlaeval.report.axes import benchmark_metrics, group_rates, summary_axes
from pytest_vlaeval.results.canonical import group_interval
from pytest_vlaeval.results.canonical import summary as canonical_summary
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.made_with import baseline_made_with, compare_note, made_with
from pytest_vlaeval.results.readback import convert, read_json
from pytest_vlaeval.results.record import FAILURE, SUCCESS, EpisodeRecord, timestamp
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.schema import Canonical, RunSummary, TaskResult

PROTOCOL = ("benchmark", "benchmark_version", "selected_split", "start_seed", "n_episodes_per_task")
"""What runs must share to be compared: the same episodes of the same benchmark."""


OVERALL = "overall"
"""The row of the whole selection (the selected split's SR)."""
GROUP = "group"
"""A row of one group along an axis."""
TASK = "task"
"""A row of one task."""
RowKind = Literal["overall", "group", "task"]

LEROBOT_EVAL = "lerobot-eval"
"""The policy a lerobot-eval run is shown with (its file does not name the checkpoint)."""


class ComparisonError(ValueError):
    """The runs cannot be compared (not runs, or different benchmarks or protocols); one line."""


@dataclass(frozen=True)
class Estimate:
    sr: float
    interval: tuple[float, float]


@dataclass(frozen=True)
class PairedDifference:
    """This run's SR minus the first run's, on the seeds every compared task has in both."""

    difference: float
    interval: tuple[float, float]
    """95 %, by ``method``."""
    seeds: int
    method: str


@dataclass(frozen=True)
class Row:
    kind: RowKind
    """``OVERALL`` (the whole selection), ``GROUP`` or ``TASK``."""
    axis: str
    """What the row is shown as: ``overall``, the group's axis label, or ``task``."""
    name: str
    estimates: tuple[Estimate | None, ...]
    """Per run, in the order given; None where the run has no result for the row."""
    differences: tuple[PairedDifference | None, ...]
    """Per run after the first; None where no seed is paired."""
    field: str | None = None
    """A group's axis field: what the row is matched to each run's axis by."""


@dataclass(frozen=True)
class Run:
    label: str
    path: Path
    policy: str
    metrics: tuple[tuple[str, str], ...] = ()
    """The benchmark's own numbers of the run (``pc_success``, ``avg_max_reward``...), as text."""


@dataclass(frozen=True)
class Comparison:
    benchmark: str
    split: str
    runs: tuple[Run, ...]
    rows: tuple[Row, ...]
    interval_method: str
    note: str | None = None
    """One line when the overall and group rows leave out tasks some run lacks; None when every run has the same tasks."""
    made_with: str | None = None
    """One line when the runs were made on stacks that differ in what their floats depend on (their
    seeds then pair in distribution only), or one records none (lerobot-eval's): ``results.made_with``."""

    def row(self, kind: RowKind, name: str, field: str | None = None) -> Row:
        """The row of the whole selection, of a task, or of a group along the axis ``field``."""
        return next(r for r in self.rows if (r.kind, r.name, r.field) == (kind, name, field))

    @property
    def curves(self) -> tuple[Row, ...]:
        """The rows drawn across the runs: the split and every group."""
        return tuple(r for r in self.rows if r.kind != TASK)


def load_run(path: Path) -> tuple[RunSummary, list[TaskResult]]:
    """A run directory's canonical files, their types checked (``results.readback``): a run may
    come from elsewhere. ``ComparisonError`` in one line naming the file otherwise."""
    run_dir = RunDir(path)
    if not run_dir.summary.exists():
        raise ComparisonError(f"{path}: not a run directory (no {run_dir.summary.name})")
    try:
        summary = read_json(run_dir.summary, RunSummary, "summary")
        for axis in summary_axes(summary):
            where = f"{run_dir.summary} ({axis.label} groups)"
            convert(summary.get(axis.summary, {}), dict[str, float], where)
            convert(summary.get(axis.intervals, {}), dict[str, tuple[float, float]], where)
        metrics = {key: summary.get(key) for key in summary.get("benchmark_metrics", [])}
        convert(metrics, dict[str, float | None], f"{run_dir.summary} (benchmark_metrics)")
        per_task = [read_json(run_dir.task(env_id), TaskResult, f"results of {env_id}") for env_id in summary["tasks"]]
    except SpecError as exc:
        raise ComparisonError(str(exc)) from None
    _check_consistent(run_dir, summary, per_task)
    return summary, per_task


def _check_consistent(run_dir: RunDir, summary: RunSummary, per_task: list[TaskResult]) -> None:
    """What the types cannot say: that a run's files agree with one another, as the files this
    package writes always do. A received run's may not (a one-value interval, seeds and successes
    of different lengths, a group without its interval, a task file of another env); the rows are
    built on what is checked here, so each is refused in one line naming the file and field."""

    def refuse(path: Path, problem: str) -> NoReturn:
        raise ComparisonError(f"{path}: {problem}; not a run as this package writes it")

    def rates(path: Path, field: str, values: Iterable[float | None]) -> None:
        """A success rate, or an interval's bounds, lies in [0, 1]."""
        wrong = next((v for v in values if v is not None and not 0 <= v <= 1), None)
        if wrong is not None:
            refuse(path, f"{field} holds {wrong!r}, outside [0, 1] where a success rate lies")

    tasks, axes = summary["tasks"], summary_axes(summary)
    if len(set(tasks)) < len(tasks):
        refuse(run_dir.summary, "tasks names a task twice")
    if tasks and (summary["sr_split"] is None or summary["sr_split_ci95"] is None):
        refuse(run_dir.summary, f"sr_split or sr_split_ci95 is null, yet {len(tasks)} tasks have results")
    if summary["sr_split_ci95"] is not None and len(summary["sr_split_ci95"]) != 2:
        refuse(run_dir.summary, f"sr_split_ci95 holds {len(summary['sr_split_ci95'])} values, not an interval's 2")
    if "sr_split_ci95" not in summary["ci95_methods"]:
        refuse(run_dir.summary, "ci95_methods has no sr_split_ci95")
    rates(run_dir.summary, "sr_split", [summary["sr_split"]])
    rates(run_dir.summary, "sr_split_ci95", summary["sr_split_ci95"] or [])
    for axis in axes:
        intervals = summary.get(axis.intervals, {})
        for group, sr in summary.get(axis.summary, {}).items():
            if group not in intervals:
                refuse(run_dir.summary, f"{axis.intervals} has no interval for the {axis.label} group {group!r}")
            rates(run_dir.summary, f"{axis.summary}[{group!r}]", [sr])
            rates(run_dir.summary, f"{axis.intervals}[{group!r}]", intervals[group])
    for env_id, result in zip(tasks, per_task, strict=True):
        path = run_dir.task(env_id)
        if result["env_id"] != env_id:
            refuse(path, f"env_id is {result['env_id']!r}, not the {env_id!r} its name says")
        if len(result["sr_ci95"]) != 2:
            refuse(path, f"sr_ci95 holds {len(result['sr_ci95'])} values, not an interval's 2")
        rates(path, "sr", [result["sr"]])
        rates(path, "sr_ci95", result["sr_ci95"])
        if len(result["episode_seeds"]) != len(result["successes"]):
            refuse(
                path,
                f"episode_seeds holds {len(result['episode_seeds'])} seeds but successes "
                f"{len(result['successes'])} outcomes",
            )
        for axis in axes:
            group = result.get(axis.field)
            if not isinstance(group, str):
                refuse(path, f"{axis.field} (the task's {axis.label} group) is missing or not text")
            if group not in summary.get(axis.summary, {}):
                refuse(run_dir.summary, f"{axis.summary} has no SR for {group!r}, the {axis.label} group of {env_id}")


def load_lerobot_run(location: EvalInfoLocation, reference: Path, split: str) -> Canonical:
    """A lerobot-eval run's canonical view, its tasks named by the benchmark ``reference`` (a run
    of ours) was made with, shown as that run's ``split``."""
    try:
        benchmark = load_benchmark(RunDir(reference).spec)
        tasks = read_eval_info(location, benchmark, "vlaeval compare")
    except SpecError as exc:
        raise ComparisonError(str(exc)) from None
    seeds = sorted({seed for task in tasks for seed in task.seeds})
    if not seeds:
        raise ComparisonError(f"{location.given}: {location.file} holds no episode")
    if (seeds[-1] - seeds[0] + 1) * len(tasks) > MAX_EPISODES:  # the selection spans every seed between
        raise ComparisonError(
            f"{location.given}: its seeds run from {seeds[0]} to {seeds[-1]}, more episodes than a run may hold"
        )
    latest = LatestRecords(RunDir(location.file.parent))
    extra = max_reward_extra(benchmark)
    for task in tasks:
        episodes = zip(task.seeds, task.successes, task.sum_rewards, task.max_rewards, strict=True)
        for seed, success, sum_reward, max_reward in episodes:
            latest.add(_record(task.env_id, seed, success, sum_reward, _extras(extra, max_reward)))
    order = {task.env_id: i for i, task in enumerate(benchmark.tasks)}
    selected = sorted((benchmark.task(task.env_id) for task in tasks), key=lambda task: order[task.env_id])
    selection = Selection(benchmark, split, tuple(selected), seeds[0], seeds[-1] - seeds[0] + 1)
    return canonical_summary(selection, latest, interrupted=False)


def _extras(extra: Extra | None, max_reward: float | None) -> dict[str, float] | None:
    """A lerobot-eval episode's maximum reward as the benchmark's extra LeRobot summarises it by."""
    return {extra.field: max_reward} if extra is not None and max_reward is not None else None


def _record(env_id: str, seed: int, success: bool, sum_reward: float, extras: dict[str, float] | None) -> EpisodeRecord:
    """A lerobot-eval episode as a record: its outcome, return and maximum reward (its length is
    not in the file)."""
    return EpisodeRecord(
        task=env_id,
        seed=seed,
        outcome=SUCCESS if success else FAILURE,
        success=success,
        episode_return=sum_reward,
        length=0,
        message="",
        wall_time=0.0,
        worker=LEROBOT_EVAL,
        time=timestamp(),
        model={"name": LEROBOT_EVAL},
        extras=extras,
    )


def compare(runs: Sequence[str | Path]) -> Comparison:
    """Compare run directories (e.g. one per checkpoint), in the order given, with the first; a
    lerobot-eval output directory among them is read with the benchmark of the first of ours."""
    if not runs:
        raise ComparisonError("compare needs at least one run directory")
    paths = [Path(r) for r in runs]
    lerobot = {path: location for path in paths if (location := eval_info_location(path)) is not None}
    ours = [path for path in paths if path not in lerobot]
    if lerobot and not ours:
        raise ComparisonError(
            "lerobot-eval's eval_info.json does not say which benchmark it ran: compare it beside one of our runs"
        )
    by_path = {path: load_run(path) for path in ours}
    split = by_path[ours[0]][0]["selected_split"]
    loaded = [by_path[p] if p in by_path else load_lerobot_run(lerobot[p], ours[0], split) for p in paths]
    first = loaded[0][0]
    for path, (summary, _) in zip(paths[1:], loaded[1:], strict=True):
        differs = [k for k in PROTOCOL if summary[k] != first[k]]  # type: ignore[literal-required]
        if differs:
            what = ", ".join(f"{k} {summary[k]!r} vs {first[k]!r}" for k in differs)  # type: ignore[literal-required]
            raise ComparisonError(
                f"refusing to compare {path} with {paths[0]}: different benchmark or protocol ({what})"
            )
        if summary_axes(summary) != summary_axes(first):
            raise ComparisonError(f"refusing to compare {path} with {paths[0]}: their summaries group by other axes")
    labels = [p.name for p in paths]
    if len(set(labels)) < len(labels):
        labels = [str(p) for p in paths]
    try:
        stacks = [made_with(p) if p in by_path else baseline_made_with(p) for p in paths]
    except SpecError as exc:
        raise ComparisonError(str(exc)) from None
    tasks = dict.fromkeys(r["env_id"] for _, per_task in loaded for r in per_task)
    shared = set.intersection(*({r["env_id"] for r in per_task} for _, per_task in loaded))
    if not shared:
        raise ComparisonError(
            f"refusing to compare {', '.join(map(str, paths))}: no task has results in every one of them"
        )
    rows = [_row(OVERALL, None, first["selected_split"], loaded, lambda r: True, shared)]
    for axis in summary_axes(first):
        names = dict.fromkeys(name for summary, _ in loaded for name, _, _ in group_rates(axis, summary))
        in_group = {name: lambda r, f=axis.field, n=name: r[f] == n for name in names}  # type: ignore[literal-required]
        rows += [
            _row(GROUP, axis, name, loaded, in_group[name], shared)
            for name in names
            if any(in_group[name](r) and r["env_id"] in shared for _, per_task in loaded for r in per_task)
        ]
    rows += [_row(TASK, None, env_id, loaded, lambda r, e=env_id: r["env_id"] == e, set(tasks)) for env_id in tasks]
    return Comparison(
        benchmark=first["benchmark"],
        split=first["selected_split"],
        runs=tuple(
            Run(label, path, str(summary["model"].get("name", "?")), tuple(benchmark_metrics(summary)))
            for label, path, (summary, _) in zip(labels, paths, loaded, strict=True)
        ),
        rows=tuple(rows),
        interval_method=first["ci95_methods"]["sr_split_ci95"],
        note=_left_out_note([t for t in tasks if t not in shared], len(tasks), len(paths)),
        made_with=compare_note(labels, stacks),
    )


SHOWN_TASKS = 4
"""The most left-out tasks the note names one by one."""


def _left_out_note(left_out: list[str], tasks: int, runs: int) -> str | None:
    """The line saying which tasks the overall and group rows leave out, when they leave out any."""
    if not left_out:
        return None
    more = len(left_out) - SHOWN_TASKS
    named = ", ".join(left_out[:SHOWN_TASKS]) + (f" and {more} more" if more > 0 else "")
    return (
        f"The overall and group rows are over the tasks all {runs} runs have results for "
        f"({tasks - len(left_out)} of {tasks}): they leave out {named}, shown in the task rows."
    )


def _row(
    kind: RowKind,
    axis: Axis | None,
    name: str,
    loaded: list[tuple[RunSummary, list[TaskResult]]],
    member: Callable[[TaskResult], bool],
    compared: set[str],
) -> Row:
    """The row of the tasks ``member`` picks (a group's along ``axis``) among the ``compared``
    ones: each run's SR, and each later run's paired difference."""
    picked = [[r for r in per_task if member(r)] for _, per_task in loaded]
    shown = [[r for r in tasks if r["env_id"] in compared] for tasks in picked]
    estimates = tuple(
        _estimate(kind, axis, name, summary, tasks, among)
        for (summary, _), tasks, among in zip(loaded, picked, shown, strict=True)
    )
    differences = tuple(_paired(among, shown[0]) for among in shown[1:])
    label = axis.label if axis is not None else kind
    return Row(kind, label, name, estimates, differences, axis.field if axis is not None else None)


def _estimate(
    kind: RowKind, axis: Axis | None, name: str, summary: RunSummary, tasks: list[TaskResult], shown: list[TaskResult]
) -> Estimate | None:
    """A row's SR and interval over ``shown``, of the run's ``tasks`` in the row: as the run's
    summary states them where they are the same tasks (one owner: ``canonical``), else by
    canonical's formulas over ``shown``."""
    if not shown:
        return None
    if kind == TASK:
        (task,) = shown
        return Estimate(task["sr"], (task["sr_ci95"][0], task["sr_ci95"][1]))
    if len(shown) < len(tasks):
        low, high = group_interval(shown)
        return Estimate(group_sr(r["sr"] for r in shown), (low, high))
    if axis is None:
        sr, bounds = summary["sr_split"], summary["sr_split_ci95"]
    else:
        sr, bounds = next((s, b) for n, s, b in group_rates(axis, summary) if n == name)  # every run has its axes
    assert sr is not None and bounds is not None
    return Estimate(sr, (bounds[0], bounds[1]))


def _paired(tasks: list[TaskResult], first: list[TaskResult]) -> PairedDifference | None:
    """This run minus the first on the row's tasks, paired by seed."""
    current = {r["env_id"]: task_outcomes(r) for r in tasks}
    reference = {r["env_id"]: task_outcomes(r) for r in first}
    compared = [t for t in reference if t in current and current[t] and reference[t]]
    sums = paired_seed_sums({t: current[t] for t in compared}, {t: reference[t] for t in compared})
    if not sums:
        return None
    differences = [k / len(compared) for k in sums.values()]
    # An interval to read, not a PASS: no broken-seed guard (that bounds per-seed SRs or drops, one side).
    srs = [sum(reference[t].values()) / len(reference[t]) for t in compared]
    method = method_for(srs, len(differences), assume=SMOOTH_SEEDS)
    return PairedDifference(
        sum(differences) / len(differences), paired_interval(differences, method, 0.05), len(differences), method.name
    )
