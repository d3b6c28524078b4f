"""Benchmark specs: what a benchmark file says, which tasks a run selects, and the seed rule.

A benchmark is a YAML file (see ``benchmarks/``). Built-in ones are addressed by name
(``mikasa``), a split by ``short``/``mikasa:short``, and a user's own file by its path.
This module imports nothing heavy: the plugin loads specs at every ``--benchmark`` start.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_vlaeval.benchmark import file as benchmark_file
from pytest_vlaeval.benchmark.install import Stack
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.finite import finite_mean

DEFAULT_BENCHMARK = "mikasa"
ALL_SPLITS = "all"
MAX_EPISODES = 100_000
"""The most episodes (tasks x seeds) one run may hold: over 15 times the built-in benchmarks'
canonical protocols (4,500 MIKASA and 6,500 LIBERO episodes), and more simulation than a run
finishes in weeks. Every process of a session collects each episode as a pytest item, so past
this a run costs gigabytes before any episode runs."""
MAX_GRID_CELLS = 10_000
"""The most cells a benchmark's grid may declare (100 x 100; LIBERO-PRO's has 20): each cell is an
entry of ``summary.json`` and of every report's table, so a few KB of group names must not make
millions of them."""
COLLECTED_BYTES_PER_EPISODE = 1800
COLLECTED_SECONDS_PER_EPISODE = 0.0002
"""What one collected episode costs each process, as measured (resident memory; time on one
core): the estimate a refused selection states."""


TASK_FIELDS = ("env_id", "split", "max_steps", "instruction", "assets")
"""The task fields every benchmark has; a benchmark's own grouping fields are declared as axes."""
SPLIT_SUMMARY = "sr_per_split"


@dataclass(frozen=True)
class Axis:
    """A way a benchmark groups its tasks: the task field holding each task's group (also its key
    in ``<ENV_ID>.json``) and the ``summary.json`` key of the group SRs (their 95% intervals under
    ``<summary>_ci95``). The split is always the first axis; a benchmark declares the others."""

    field: str
    label: str
    summary: str
    title_case: bool = False
    """Write the groups title-cased (``short`` -> ``Short``), as a reference runner does."""

    @property
    def intervals(self) -> str:
        return benchmark_file.intervals_key(self.summary)

    def written(self, group: str) -> str:
        """A group as the canonical files write it (title-cased where the axis asks)."""
        return group.title() if self.title_case else group


SPLIT_AXIS = Axis("split", "split", SPLIT_SUMMARY)


@dataclass(frozen=True)
class Task:
    env_id: str
    split: str
    max_steps: int
    instruction: str
    assets: tuple[str, ...] = ()
    groups: tuple[tuple[str, str], ...] = ()
    """``(axis field, group)`` along each of the benchmark's axes but the split."""

    def group(self, axis: Axis) -> str:
        """The task's group along ``axis``, as the canonical files write it."""
        return axis.written(self.split if axis.field == SPLIT_AXIS.field else dict(self.groups)[axis.field])

    @property
    def marker_names(self) -> tuple[str, ...]:
        """Markers for ``-m`` selection: the split and the lower-cased group along every other axis."""
        return self.split, *(value.lower() for _, value in self.groups)


@dataclass(frozen=True)
class EnvSettings:
    """How to build an env; passed verbatim to the benchmark's env factory."""

    factory: str
    action_dim: int
    policy_obs_keys: tuple[str, ...]
    preflight: str | None = None
    """A module run as ``python -m MODULE RENDER`` before a session; non-zero exit stops it."""
    reset_options: dict[str, Any] = field(default_factory=dict)
    """Passed to every ``env.reset`` (MIKASA: rebuild the scene, so no episode depends on the last)."""
    reference_reset_options: dict[str, Any] = field(default_factory=dict)
    """What the benchmark's reference runner passes to its resets (MIKASA: none, a plain reset), for
    ``--vla-reference-order``; the file's ``reset_options`` when it does not say."""
    vector_backends: tuple[str, ...] = ()
    """Render backends on which the factory, given ``num_envs=K``, returns one simulator stepping K
    episodes at once (``episodes.lockstep.RowEnvs``; MIKASA: ``gpu``). Elsewhere a lockstep group is K
    separate envs."""
    filterwarnings: tuple[str, ...] = ()
    """pytest ``filterwarnings`` lines for the simulator stack's noise on every env."""
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Extra:
    """One of the adapter's own per-episode fields (``EnvAdapter.episode_extras``), and how a task's
    JSON and ``summary.json`` summarise it under ``summary``: the ``sum`` or the ``mean`` over the
    completed episodes (the summary's mean pools every episode, as LeRobot's ``avg_max_reward``)."""

    field: str
    reduce: str
    summary: str

    def reduced(self, values: list[float]) -> float | None:
        """None without values, or for a sum beyond the float range (JSON has no infinity; every
        episode's value stays in its record)."""
        if not values:
            return None
        if self.reduce == "mean":
            return finite_mean(values)
        total = sum(values)
        return total if math.isfinite(total) else None


@dataclass(frozen=True)
class Grid:
    """Two axes as a table (LIBERO-PRO: base suite x perturbation), and the benchmark's headline
    number over its cells (``total``: what it is, in the benchmark's words). The row and column
    groups are every cell the benchmark defines, runnable here or not."""

    rows: Axis
    columns: Axis
    row_groups: tuple[str, ...]
    column_groups: tuple[str, ...]
    total: str


@dataclass(frozen=True)
class Reporting:
    """What a benchmark adds to the canonical files beyond success rates."""

    result_fields: tuple[str, ...] = ()
    """Env options written, as given, into every ``<ENV_ID>.json`` (MIKASA's ``control_mode``...)."""
    extras: tuple[Extra, ...] = ()
    pooled_success_key: str | None = None
    """``summary.json``'s key for 100 x the success rate pooled over episodes (LeRobot's ``pc_success``)."""
    grid: Grid | None = None
    mean_of_groups: Axis | None = None
    """An axis whose group SRs' unweighted mean ``summary.json`` also gives (Meta-World's difficulty:
    a paper's average of Easy/Medium/Hard/Very Hard, not LeRobot's pooled ``pc_success``)."""

    @property
    def mean_of_groups_key(self) -> str | None:
        """``summary.json``'s key for that mean, where the file asks for one."""
        return benchmark_file.mean_of_groups_key(self.mean_of_groups.field) if self.mean_of_groups else None


@dataclass(frozen=True)
class LeRobot:
    """The benchmark as LeRobot knows it (``benchmark_file.LeRobotFile``): its env type, the names its
    policies read the observations by, and its name of each task in ``eval_info.json``,
    ``(task_group, task_id)``: what our copy of that file writes, and how a lerobot-eval one is read."""

    env_type: str | None = None
    """LeRobot's ``--env.type``, whose env processors a ``lerobot:PATH`` policy's observations pass
    through as in ``lerobot-eval``; None: LeRobot has no such env here."""
    names: dict[str, tuple[str, int]] = field(default_factory=dict)
    """env id -> (task_group, task_id)."""
    single_task_prefixes: tuple[str, ...] = ()
    features: dict[str, str] = field(default_factory=dict)
    """Observation key (nested keys joined by ``.``) -> the LeRobot feature a policy reads it as."""

    def env_id(self, task_group: str, task_id: int) -> str | None:
        """The task LeRobot's ``(task_group, task_id)`` names; None when it names none of this benchmark's."""
        if (task_group, task_id) in self._by_name:
            return self._by_name[task_group, task_id]
        for prefix in self.single_task_prefixes if task_id == 0 else ():
            if task_group.startswith(prefix) and task_group[len(prefix) :] in self.names:
                return task_group[len(prefix) :]
        return None

    @functools.cached_property
    def _by_name(self) -> dict[tuple[str, int], str]:
        return {name: env_id for env_id, name in self.names.items()}


@dataclass(frozen=True)
class Controls:
    """The benchmark's unperturbed arm (``benchmark_file.ControlsFile``): the tasks whose group along
    ``axis`` is ``group``, each the control of the tasks whose group along ``pair_by`` is its env id.
    They stay out of the run's own numbers; ``summary.json``'s ``control_arm`` pairs them with the
    tasks they control."""

    axis: Axis
    group: str
    """As the axis writes it."""
    pair_by: Axis

    def is_control(self, task: Task) -> bool:
        return task.group(self.axis) == self.group

    def control_of(self, task: Task) -> str:
        """The env id of the task's control (a control's own)."""
        return dict(task.groups)[self.pair_by.field]


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    version: str
    benchmark_commit: str | None
    env: EnvSettings
    axes: tuple[Axis, ...]
    """The split's axis, then the benchmark's own; the canonical files group SRs along each."""
    start_seed: int
    episodes: int
    assets: dict[str, benchmark_file.Asset]
    """The data files its tasks need beyond the wheels, by name (``envs.assets``)."""
    tasks: tuple[Task, ...]
    source: str
    digest: str
    reporting: Reporting = Reporting()
    unavailable_splits: dict[str, str] = field(default_factory=dict)
    """Splits the benchmark defines that this install cannot run, with the reason (one line)."""
    lerobot: LeRobot = LeRobot()
    install: Stack = field(kw_only=True)
    """The simulator stack: its pins for ``vlaeval install``, the interpreter, what a run records."""
    controls: Controls | None = None
    interval_clusters: Axis | None = None
    """The axis whose groups are the independent units of the group intervals; None: the seeds."""

    @property
    def stack(self) -> str:
        """The name of the stack the benchmark runs on (and of its interpreter, if it has one)."""
        return self.install.name

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(task.split for task in self.tasks))

    def groups(self, axis: Axis) -> tuple[str, ...]:
        """The groups along ``axis``, in the order the tasks list them."""
        return tuple(dict.fromkeys(task.group(axis) for task in self.tasks))

    def selected(self, selector: str) -> tuple[Task, ...]:
        """The tasks ``selector`` names: ``all``, a split, a group along another axis
        (``spatial``) or ``field=group`` where a group name is on two axes; control tasks only
        where it names nothing else (their own group). ``SpecError`` in one line otherwise, saying
        why a split this install cannot run is unavailable."""
        tasks = self._named(selector)
        measured = tuple(t for t in tasks if self.controls is None or not self.controls.is_control(t))
        return measured or tasks

    def _named(self, selector: str) -> tuple[Task, ...]:
        wanted = selector.lower()
        if wanted == ALL_SPLITS:
            return self.tasks
        if wanted in self.splits:
            return tuple(t for t in self.tasks if t.split == wanted)
        reasons = {name.lower(): reason for name, reason in self.unavailable_splits.items()}
        if wanted in reasons:
            raise SpecError(f"split {selector!r} of {self.name!r} cannot run here: {reasons[wanted]}")
        field_name, equals, group = wanted.partition("=")
        axes = [a for a in self.axes[1:] if not equals or a.field.lower() == field_name]
        group = group if equals else wanted
        matches = {a: tasks for a in axes if (tasks := tuple(t for t in self.tasks if t.group(a).lower() == group))}
        if len(matches) == 1:
            return next(iter(matches.values()))
        if matches:
            forms = " or ".join(f"{self.name}:{a.field}={group}" for a in matches)
            raise SpecError(f"{selector!r} is a group along {len(matches)} axes of {self.name!r}; write {forms}")
        groups = [f"{a.field}={g.lower()}" for a in self.axes[1:] for g in self.groups(a)]
        raise SpecError(
            f"unknown split {selector!r} for benchmark {self.name!r}; valid: {_names([*self.splits, ALL_SPLITS])}"
            + (f", or a group: {_names(groups)}" if groups else "")
        )

    def task(self, env_id: str) -> Task:
        for task in self.tasks:
            if task.env_id == env_id:
                return task
        raise SpecError(
            f"unknown task {env_id!r} in benchmark {self.name!r}; valid: {_names(t.env_id for t in self.tasks)}"
        )


@dataclass(frozen=True)
class Selection:
    """The episode universe of a run: which tasks, which seeds."""

    benchmark: Benchmark
    split: str
    tasks: tuple[Task, ...]
    start_seed: int
    episodes: int

    @property
    def seeds(self) -> tuple[int, ...]:
        """The canonical seed rule: episode i of every task uses ``start_seed + i``."""
        return tuple(self.start_seed + i for i in range(self.episodes))

    @property
    def episode_ids(self) -> list[tuple[str, int]]:
        return [(task.env_id, seed) for task in self.tasks for seed in self.seeds]

    @property
    def is_canonical(self) -> bool:
        """True when seeds and episode count are the benchmark's own protocol."""
        return self.start_seed == self.benchmark.start_seed and self.episodes == self.benchmark.episodes


def builtin_benchmarks() -> dict[str, Path]:
    """Built-in benchmark files, by name (the file's stem)."""
    root = resources.files("pytest_vlaeval.benchmarks")
    return {Path(e.name).stem: Path(str(e)) for e in root.iterdir() if e.name.endswith(".yaml")}


def resolve_benchmark(value: str) -> tuple[Benchmark, str]:
    """Resolve ``short`` / ``mikasa:short`` / ``mikasa`` / ``path.yaml[:split]`` to (benchmark, split)."""
    if _is_path(value):
        name, split = _split_path_arg(value)
        path = Path(name)
        if not path.is_file():
            raise SpecError(f"benchmark file {name!r} not found")
        return load_benchmark(path), split or ALL_SPLITS
    builtins = builtin_benchmarks()
    name, _, split = value.partition(":")
    if name in builtins:
        return load_benchmark(builtins[name]), split or ALL_SPLITS
    default = load_benchmark(builtins[DEFAULT_BENCHMARK])
    if not split and name in (*default.splits, ALL_SPLITS):
        return default, name
    valid = [*default.splits, ALL_SPLITS, *builtins, *(f"{DEFAULT_BENCHMARK}:{s}" for s in default.splits)]
    raise SpecError(f"unknown benchmark {value!r}; valid: {_names(valid)}, or a path to a benchmark YAML file")


def load_benchmark(path: Path) -> Benchmark:
    """The benchmark a file describes, read once per process while the file is unchanged (the
    session, the run store and merge all ask for it); ``SpecError`` in one line when the file is
    not a benchmark (``benchmark_file``)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise SpecError(f"benchmark file {path}: cannot read it ({exc.strerror or exc})") from None
    return _load(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _load(path_text: str, mtime_ns: int, size: int) -> Benchmark:
    path = Path(path_text)
    data = benchmark_file.read_yaml(path)
    document, env, options, entries, assets = benchmark_file.parse(data, path)
    axes = _axes(document.axes, path)
    known = frozenset({*TASK_FIELDS, *(a.field for a in axes)})
    tasks = tuple(_task(entry, data["tasks"][i], axes, known, path) for i, entry in enumerate(entries))
    for task in tasks:
        unknown = set(task.assets) - set(assets)
        if unknown:
            raise SpecError(f"benchmark file {path}: task {task.env_id} needs undeclared assets {sorted(unknown)}")
    _check_selectors(axes, tasks, document.unavailable_splits, path)
    controls = _controls(document.controls, axes, tasks, path)
    by_field = {a.field: a for a in axes}
    stack = Stack.from_section(document.install, document.name)
    return Benchmark(
        name=document.name,
        title=document.title or document.name,
        version=document.version,
        benchmark_commit=document.benchmark_commit,
        env=EnvSettings(
            factory=env.factory,
            action_dim=env.action_dim,
            policy_obs_keys=tuple(env.policy_obs_keys),
            preflight=env.preflight,
            reset_options=dict(env.reset_options),
            reference_reset_options=dict(
                env.reset_options if env.reference_reset_options is None else env.reference_reset_options
            ),
            vector_backends=tuple(env.vector_backends),
            filterwarnings=tuple(env.filterwarnings),
            options=options,
        ),
        axes=axes,
        start_seed=document.protocol.start_seed,
        episodes=document.protocol.episodes,
        assets=assets,
        tasks=tasks,
        source=str(path),
        digest=content_digest(data),
        reporting=_reporting(document, axes, tasks, path),
        unavailable_splits=dict(document.unavailable_splits),
        lerobot=_lerobot(document.lerobot, axes, tasks, path, controls),
        install=stack,
        controls=controls,
        interval_clusters=_axis_named(by_field, document.interval_clusters, "interval_clusters", path),
    )


def _axis_named(by_field: dict[str, Axis], name: str | None, where: str, path: Path) -> Axis | None:
    if name is None:
        return None
    if name not in by_field:
        raise SpecError(f"benchmark file {path}: {where} {name!r} is not one of the axes {list(by_field)}")
    return by_field[name]


def _controls(
    declared: benchmark_file.ControlsFile | None, axes: tuple[Axis, ...], tasks: tuple[Task, ...], path: Path
) -> Controls | None:
    """The control tasks and how each task names its control, when every task names one: a control
    its own env id, any other task a control's."""
    if declared is None:
        return None
    by_field = {a.field: a for a in axes}
    axis = _axis_named(by_field, declared.field, "controls.field", path)
    pair_by = _axis_named(by_field, declared.pair_by, "controls.pair_by", path)
    assert axis is not None and pair_by is not None
    if pair_by == axes[0] or pair_by.title_case:
        raise SpecError(f"benchmark file {path}: controls.pair_by {pair_by.field!r} must name env ids as written")
    controls = Controls(axis, axis.written(declared.group), pair_by)
    ids = {t.env_id for t in tasks if controls.is_control(t)}
    if not ids:
        raise SpecError(f"benchmark file {path}: no task's {axis.field} is {declared.group!r} (controls.group)")
    for task in tasks:
        control = controls.control_of(task)
        if control not in ids or (task.env_id in ids and control != task.env_id):
            whose = "its own env id" if task.env_id in ids else "a control task's env id"
            raise SpecError(
                f"benchmark file {path}: task {task.env_id}'s {pair_by.field} {control!r} is not {whose} "
                f"(controls.pair_by)"
            )
    return controls


def _reporting(
    document: benchmark_file.BenchmarkFile, axes: tuple[Axis, ...], tasks: tuple[Task, ...], path: Path
) -> Reporting:
    by_field = {a.field: a for a in axes}
    if document.mean_of_groups and document.mean_of_groups not in by_field:
        raise SpecError(f"benchmark file {path}: mean_of_groups {document.mean_of_groups!r} is not one of the axes")
    return Reporting(
        mean_of_groups=by_field.get(document.mean_of_groups or ""),
        result_fields=tuple(document.result_fields),
        extras=tuple(Extra(e.field, e.reduce, e.summary or e.field) for e in document.episode_extras),
        pooled_success_key=document.pooled_success_key,
        grid=_grid(document.grid, by_field, tasks, path) if document.grid else None,
    )


def _lerobot(
    declared: benchmark_file.LeRobotFile,
    axes: tuple[Axis, ...],
    tasks: tuple[Task, ...],
    path: Path,
    controls: Controls | None,
) -> LeRobot:
    """The env type and features as given, and each task's ``(task_group, task_id)`` in LeRobot's
    ``eval_info.json``: its group along the declared axis, renamed where the file says, and its
    index among that group's tasks; refused in one line where a name would be ambiguous (two groups
    renamed alike, a task named like a group). Control tasks have no name there: LeRobot's suites
    of the benchmark hold only the tasks they control."""
    tasks = tuple(t for t in tasks if controls is None or not controls.is_control(t))
    if declared.task_group not in {a.field for a in axes}:
        raise SpecError(f"benchmark file {path}: lerobot.task_group {declared.task_group!r} is not one of the axes")
    raw = [t.split if declared.task_group == SPLIT_AXIS.field else dict(t.groups)[declared.task_group] for t in tasks]
    unknown = sorted(set(declared.group_names) - set(raw))
    if unknown:
        raise SpecError(
            f"benchmark file {path}: lerobot.group_names renames {unknown}, not groups along {declared.task_group!r}"
        )
    renamed = {group: declared.group_names.get(group, group) for group in dict.fromkeys(raw)}
    if len(set(renamed.values())) < len(renamed):
        raise SpecError(f"benchmark file {path}: lerobot.group_names gives two groups one name: {renamed}")
    alone = {p + t.env_id for p in declared.single_task_prefixes for t in tasks} & set(renamed.values())
    if alone:
        raise SpecError(f"benchmark file {path}: lerobot names a task like a group: {sorted(alone)}")
    counts: Counter[str] = Counter()
    names = {}
    for task, group in zip(tasks, raw, strict=True):
        names[task.env_id] = (renamed[group], counts[group])
        counts[group] += 1
    return LeRobot(declared.env_type, names, tuple(declared.single_task_prefixes), dict(declared.features))


def _grid(declared: benchmark_file.GridFile, by_field: dict[str, Axis], tasks: tuple[Task, ...], path: Path) -> Grid:
    """The grid, when its cells are every task's place: two different axes, at most
    ``MAX_GRID_CELLS`` cells, each group once, and every task's group along each axis among its
    groups (written as the axis writes them), so that no task is left out of the total."""
    for name in (declared.rows, declared.columns):
        if name not in by_field:
            raise SpecError(f"benchmark file {path}: grid axis {name!r} is not one of the axes {list(by_field)}")
    if declared.rows == declared.columns:
        raise SpecError(f"benchmark file {path}: grid rows and columns are both {declared.rows!r}; name two axes")
    cells = len(declared.row_groups) * len(declared.column_groups)
    if cells > MAX_GRID_CELLS:
        raise SpecError(
            f"benchmark file {path}: the grid declares {cells:,} cells "
            f"({len(declared.row_groups):,} x {len(declared.column_groups):,}), more than {MAX_GRID_CELLS:,}"
        )
    grid = Grid(
        rows=by_field[declared.rows],
        columns=by_field[declared.columns],
        row_groups=tuple(by_field[declared.rows].written(g) for g in declared.row_groups),
        column_groups=tuple(by_field[declared.columns].written(g) for g in declared.column_groups),
        total=declared.total,
    )
    for where, axis, groups in (
        ("row_groups", grid.rows, grid.row_groups),
        ("column_groups", grid.columns, grid.column_groups),
    ):
        counts = Counter(groups)
        repeated = sorted(g for g, count in counts.items() if count > 1)
        if repeated:
            raise SpecError(
                f"benchmark file {path}: grid.{where} lists {', '.join(map(repr, repeated))} more than once"
            )
        by_case = {g.lower(): g for g in groups}
        for task in tasks:
            group = task.group(axis)
            if group not in counts:
                near = by_case.get(group.lower())
                hint = f" (it differs by case from {near!r})" if near else ""
                raise SpecError(
                    f"benchmark file {path}: task {task.env_id}'s {axis.field} {group!r} is not in grid.{where}"
                    f"{hint}, so the grid's total would leave it out; list it there or correct the task"
                )
    return grid


def _axes(declared: list[benchmark_file.AxisFile], path: Path) -> tuple[Axis, ...]:
    """The split's axis (its label and case may be declared; its summary key is fixed), then
    the benchmark's own axes, each naming a task field and a summary key of its own."""
    split = SPLIT_AXIS
    others: list[Axis] = []
    for entry in declared:
        axis = Axis(
            field=entry.field,
            label=entry.label or entry.field,
            summary=entry.summary or (SPLIT_SUMMARY if entry.field == SPLIT_AXIS.field else ""),
            title_case=entry.title_case,
        )
        if axis.field == SPLIT_AXIS.field:
            if axis.summary != SPLIT_SUMMARY:
                raise SpecError(
                    f"benchmark file {path}: the split axis's summary key is {SPLIT_SUMMARY}, not {axis.summary!r}"
                )
            split = axis
        elif axis.field in TASK_FIELDS:
            raise SpecError(f"benchmark file {path}: axis field {axis.field!r} is a task field every benchmark has")
        elif not axis.summary:
            raise SpecError(
                f"benchmark file {path}: axis {axis.field!r} needs a summary key (e.g. sr_per_{axis.field})"
            )
        else:
            others.append(axis)
    return (split, *others)  # fields and summary keys are each used once (benchmark.file: _check_names, _check_keys)


def _task(
    entry: benchmark_file.TaskFile, raw: dict[str, Any], axes: tuple[Axis, ...], known: frozenset[str], path: Path
) -> Task:
    """A task: its own fields, and its group (a string) along each of the benchmark's other axes."""
    unknown = raw.keys() - known
    if unknown:
        raise SpecError(
            f"benchmark file {path}: task {entry.env_id} has fields {sorted(unknown)} that are neither "
            f"task fields ({', '.join(TASK_FIELDS)}) nor declared axes ({', '.join(a.field for a in axes)})"
        )
    groups = []
    for axis in axes[1:]:
        group = raw.get(axis.field)
        if not isinstance(group, str) or not group.strip():
            raise SpecError(
                f"benchmark file {path}: task {entry.env_id} needs a text {axis.field!r} (axis {axis.label!r})"
            )
        groups.append((axis.field, group))
    return Task(
        env_id=entry.env_id,
        split=entry.split.lower(),
        max_steps=entry.max_steps,
        instruction=entry.instruction,
        assets=tuple(entry.assets),
        groups=tuple(groups),
    )


def _check_selectors(axes: tuple[Axis, ...], tasks: tuple[Task, ...], unavailable: dict[str, str], path: Path) -> None:
    """A selector (``FILE:NAME``, any case) names one thing: no split is called ``all``, and no split,
    runnable or not, is named like a group along another axis, which it would hide."""
    if ALL_SPLITS in {t.split for t in tasks} | {name.lower() for name in unavailable}:
        raise SpecError(f"benchmark file {path}: a split may not be called {ALL_SPLITS!r}, the selector of every task")
    splits = {task.split: "split" for task in tasks} | {name: "unavailable split" for name in unavailable}
    for axis in axes[1:]:
        groups = {task.group(axis).lower() for task in tasks}
        for name, kind in splits.items():
            if name.lower() in groups:
                raise SpecError(
                    f"benchmark file {path}: {kind} {name!r} is named like a group along the axis "
                    f"{axis.field!r}, so {name!r} could not select that group; rename the split"
                )


def content_digest(data: Any) -> str:
    """A digest of what a benchmark file says, not of how it is written: comments, key order,
    quoting and layout leave it unchanged, so editing a comment keeps a run resumable."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def select(
    benchmark: Benchmark,
    split: str,
    *,
    env_ids: list[str] | None = None,
    start_seed: int | None = None,
    episodes: int | None = None,
    collected: bool = True,
    control_arm: bool = False,
) -> Selection:
    """Choose the run's tasks: a split (or ``all``), narrowed by explicit env ids, and with
    ``control_arm`` the controls of those (the benchmark's ``controls``), after them. A selection a
    session will collect as items is held to ``MAX_EPISODES``; one only summarised (a merge of
    the records a run's shards left) is not."""
    tasks = list(benchmark.selected(split))
    if env_ids:
        by_id = {t.env_id: t for t in tasks}
        controls = benchmark.controls
        named = {t.env_id: t for t in benchmark.tasks if controls and controls.is_control(t)} | by_id
        unknown = [e for e in env_ids if e not in named]
        if unknown:
            kind = "split" if split.lower() in benchmark.splits else "group"
            where = f"{kind} {split!r} of {benchmark.name!r}" if split != ALL_SPLITS else repr(benchmark.name)
            raise SpecError(f"unknown task {', '.join(map(repr, unknown))} in {where}; valid: {_names(by_id)}")
        tasks = [named[e] for e in dict.fromkeys(env_ids)]  # a control by its id too (a run made with them)
    if control_arm:
        if benchmark.controls is None:
            raise SpecError(f"--vla-control-arm: benchmark {benchmark.name!r} declares no control tasks (controls)")
        chosen = {t.env_id for t in tasks}
        wanted = dict.fromkeys(benchmark.controls.control_of(t) for t in tasks)
        tasks += [benchmark.task(env_id) for env_id in wanted if env_id not in chosen]
    episodes = benchmark.episodes if episodes is None else episodes
    if episodes < 1:
        raise SpecError(f"--episodes must be at least 1, got {episodes}")
    total = len(tasks) * episodes
    if collected and total > MAX_EPISODES:
        gigabytes = total * COLLECTED_BYTES_PER_EPISODE / 1e9
        minutes = total * COLLECTED_SECONDS_PER_EPISODE / 60
        raise SpecError(
            f"--episodes={episodes} over {len(tasks)} tasks is {total:,} episodes, more than {MAX_EPISODES:,} per run: "
            f"collecting them would take about {gigabytes:.1f} GB and {minutes:.0f} min in the controller and again "
            f"in every xdist worker, before any episode runs; lower --episodes or narrow the tasks with --vla-tasks"
        )
    start_seed = benchmark.start_seed if start_seed is None else start_seed  # --vla-start-seed: checked by the session
    return Selection(benchmark, split, tuple(tasks), start_seed, episodes)


NAMES_SHOWN = 30
"""The most names a refusal lists (LIBERO-Plus has 10,030 tasks)."""


def _names(names: Any) -> str:
    listed = list(names)
    shown = ", ".join(listed[:NAMES_SHOWN])
    return shown if len(listed) <= NAMES_SHOWN else f"{shown}, ... ({len(listed):,} in all)"


def _is_path(value: str) -> bool:
    return "/" in value or ".yaml" in value or ".yml" in value


def _split_path_arg(value: str) -> tuple[str, str]:
    """``dir/bench.yaml:short`` -> (``dir/bench.yaml``, ``short``)."""
    for suffix in (".yaml", ".yml"):
        head, sep, tail = value.rpartition(suffix + ":")
        if sep:
            return head + suffix, tail
    return value, ""
