"""LeRobot's ``eval_info.json``, both ways: the format's keys, our run's episodes written as it,
and a lerobot-eval output directory (or the file itself) read back as the gate's baseline or a run
``vlaeval compare`` shows. It is LeRobot's format, so it sits in LeRobot's folder, below the gate
that reads it; what it is written from is any episode with a record's fields (``Episode``).

The keys, their order and their meanings are lerobot-eval's (0.6.1, ``eval_policy_all``):
``per_task`` (a task's ``task_group`` and ``task_id``, as the benchmark file names it:
``spec.LeRobot``; ``metrics``: per-episode ``sum_rewards``, ``max_rewards``, ``successes`` in
episode order, and the paths of the episodes' videos), ``per_group`` and ``overall`` (the means
pooled over their episodes; ``pc_success`` in percent). LeRobot has no interval in this file, so
neither has ours. Where ours must differ, it says so rather than guess:

- each task entry adds ``vlaeval`` (``OURS``): the benchmark, the env id and the episodes' seeds,
  which lerobot-eval does not keep and its readers never look for;
- an episode's maximum reward is the benchmark's episode extra summarised as ``avg_max_reward``
  (Push-T's and Meta-World's ``max_reward``); a benchmark without one writes null;
- only completed episodes are listed (an error is not an episode that ran), and a mean over none
  is null where LeRobot writes NaN, which is not JSON;
- a benchmark's control tasks (LIBERO-Plus's unperturbed LIBERO tasks) are left out: LeRobot's
  suites of that benchmark do not hold them;
- ``eval_s`` is the episodes' own time summed (workers run them side by side).

Ours is written from the same latest records as ``summary.json``, each time that is (a rerun, a
resumed or merged run rewrites both), so the two never disagree.

Read back: episode i of a lerobot-eval task ran seed S + i, S being lerobot-eval's ``--seed``
(every task restarts at S), and the file keeps no seed, nor does lerobot-eval keep its
configuration beside it. So the seeds come from the file where one of ours wrote it
(``per_task[i]["vlaeval"]["seeds"]``), and otherwise from the location: ``DIR:seed=1000``.

The file read is someone else's: it is read as ``strict_json`` reads (finite numbers, shallow
nesting), each field it gives is type-checked, the lists of a task must be of one length, every
task must be one of this benchmark's, and the file is never read through a symbolic link in the
directory. Whatever is not so is one line naming the file and the field, before any episode runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol

import msgspec

from pytest_vlaeval import strict_json
from pytest_vlaeval.benchmark.model import Benchmark, Extra, Selection
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.finite import finite_mean

FILE = "eval_info.json"
OURS = "vlaeval"
"""The key of a ``per_task`` entry under which our copy of the file keeps its seeds: LeRobot's
readers take ``task_group``, ``task_id`` and ``metrics`` of an entry by name, and never iterate it."""
SEED_SUFFIX = re.compile(r"^(?P<path>.+):seed=(?P<seed>\d{1,18})$")
"""``DIR:seed=N``: where the file was written by lerobot-eval run with ``--seed=N``."""
MAX_REWARD_SUMMARY = "avg_max_reward"
"""LeRobot's key for the mean of the episodes' maximum rewards; the benchmark's extra summarised
under it is LeRobot's per-episode ``max_reward``."""
MAX_BYTES = 64 * 2**20
"""The largest file read: lerobot-eval's for 50 tasks of 500 episodes is a few MB."""

Seed = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class _Ours(msgspec.Struct, frozen=True):
    benchmark: str
    env_id: str
    seeds: list[Seed]


class _Metrics(msgspec.Struct, frozen=True):
    """The lists read; LeRobot's others (``video_paths``) are left alone."""

    sum_rewards: list[float]
    max_rewards: list[float | None]
    """None where our run had no maximum reward for the episode (lerobot-eval writes a number)."""
    successes: list[bool]


class _Entry(msgspec.Struct, frozen=True):
    task_group: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    task_id: Annotated[int, msgspec.Meta(ge=0)]
    metrics: _Metrics
    vlaeval: _Ours | None = None


class _File(msgspec.Struct, frozen=True):
    per_task: list[_Entry]


@dataclass(frozen=True)
class EvalInfoLocation:
    """Where an ``eval_info.json`` is, and the seed of its first episode when the location names it."""

    given: str
    file: Path
    start_seed: int | None
    in_directory: bool
    """Found in the directory named (then never read through a link, which could lead out of it)."""


@dataclass(frozen=True)
class EvalInfoTask:
    """One task of the file, as this benchmark names it, its episodes in the file's order."""

    env_id: str
    seeds: tuple[int, ...]
    successes: tuple[bool, ...]
    sum_rewards: tuple[float, ...]
    max_rewards: tuple[float | None, ...]

    @property
    def outcomes(self) -> dict[int, bool]:
        """seed -> success: what the gate pairs."""
        return dict(zip(self.seeds, self.successes, strict=True))


def eval_info_location(given: Path) -> EvalInfoLocation | None:
    """``given`` as the place of an ``eval_info.json``: a file, a directory holding one but no
    ``summary.json`` (a run of ours is read from its canonical files), or either with ``:seed=N``.
    None when it is none of these (a directory of per-task results)."""
    text = str(given)
    path, start_seed = given, None
    match = SEED_SUFFIX.match(text)
    if match and not given.exists():
        path, start_seed = Path(match["path"]), int(match["seed"])
    if path.is_dir():
        if start_seed is None and ((path / "summary.json").exists() or not (path / FILE).exists()):
            return None
        return EvalInfoLocation(text, path / FILE, start_seed, in_directory=True)
    if start_seed is None and not path.is_file():
        return None
    return EvalInfoLocation(text, path, start_seed, in_directory=False)


def read_eval_info(location: EvalInfoLocation, benchmark: Benchmark, option: str) -> list[EvalInfoTask]:
    """The file's tasks, each named as this benchmark names it; ``SpecError`` in one line (starting
    ``option``) when the file is not LeRobot's ``eval_info.json``, is another benchmark's, or its
    seeds cannot be known."""
    file = location.file
    where = f"{option} {location.given}"
    if location.in_directory and file.is_symlink():
        raise SpecError(f"{where}: {file} is a symbolic link; name the file it leads to")
    try:
        data = strict_json.loads(_bounded_read(file, location.in_directory, where).decode("utf-8-sig"))
    except FileNotFoundError:
        raise SpecError(f"{where}: no {file}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where}: cannot read {file} ({exc})") from None
    except ValueError as exc:
        raise SpecError(f"{where}: {file} is not JSON ({exc})") from None
    try:
        entries = msgspec.convert(data, _File).per_task
    except msgspec.ValidationError as exc:
        raise SpecError(f"{where}: {file} is not LeRobot's eval_info.json: {exc}") from None
    names = benchmark.lerobot
    found = [(entry, names.env_id(entry.task_group, entry.task_id)) for entry in entries]
    foreign = [f"{e.task_group[:200]!r} {e.task_id}" for e, env_id in found if env_id is None]
    if foreign:
        whose = "another benchmark's" if len(foreign) == len(found) else "not all of it this benchmark's"
        raise SpecError(
            f"{where}: {file} is {whose}: its task_group/task_id {', '.join(foreign[:3])} "
            f"name no task of {benchmark.name} (whose groups are {', '.join(_groups(benchmark)[:6])})"
        )
    tasks = [_task(entry, env_id, location, benchmark, where) for entry, env_id in found if env_id is not None]
    ids = [task.env_id for task in tasks]
    twice = sorted({env_id for env_id in ids if ids.count(env_id) > 1})
    if twice:
        raise SpecError(f"{where}: {file} lists the task {twice[0]} twice")
    return tasks


def _bounded_read(file: Path, in_directory: bool, where: str) -> bytes:
    """A regular file's bytes, at most ``MAX_BYTES``: a pipe or a device named ``eval_info.json``
    would otherwise be waited on, or read, forever; inside a run directory, never through a link."""
    try:
        return strict_json.read_regular(file, MAX_BYTES, follow_links=not in_directory)
    except strict_json.NotRegularFile as exc:
        raise SpecError(f"{where}: {file} is {'a directory' if exc.directory else exc}") from None
    except strict_json.TooLarge as exc:
        raise SpecError(f"{where}: {file} is {exc}, more than an eval_info.json holds") from None


def _task(entry: _Entry, env_id: str, location: EvalInfoLocation, benchmark: Benchmark, where: str) -> EvalInfoTask:
    """One entry, its lists of one length and its seeds known."""
    metrics, ours = entry.metrics, entry.vlaeval
    name = f"{location.file} (task_group {entry.task_group!r}, task_id {entry.task_id})"
    n = len(metrics.successes)
    if len(metrics.sum_rewards) != n or len(metrics.max_rewards) != n:
        raise SpecError(
            f"{where}: {name} has {len(metrics.sum_rewards)} sum_rewards, {len(metrics.max_rewards)} max_rewards "
            f"and {n} successes; lerobot-eval writes one of each per episode"
        )
    if ours is not None:
        if ours.benchmark != benchmark.name or ours.env_id != env_id:
            raise SpecError(
                f"{where}: {name} says it is task {ours.env_id[:200]!r} of benchmark {ours.benchmark[:64]!r}, where "
                f"{benchmark.name} names it {env_id}"
            )
        if len(ours.seeds) != n or len(set(ours.seeds)) != n:
            raise SpecError(f"{where}: {name} lists {len(set(ours.seeds))} distinct seeds for {n} episodes")
        seeds = tuple(ours.seeds)
        if location.start_seed is not None and seeds != tuple(range(location.start_seed, location.start_seed + n)):
            raise SpecError(f"{where}: {name} keeps its own seeds, which :seed={location.start_seed} contradicts")
    elif location.start_seed is None:
        raise SpecError(
            f"{where}: {location.file} keeps no seeds (lerobot-eval ran episode i with its --seed + i): "
            f"name that seed, as {location.given}:seed=1000"
        )
    else:
        seeds = tuple(range(location.start_seed, location.start_seed + n))
    return EvalInfoTask(env_id, seeds, tuple(metrics.successes), tuple(metrics.sum_rewards), tuple(metrics.max_rewards))


def _groups(benchmark: Benchmark) -> list[str]:
    return list(dict.fromkeys(group for group, _ in benchmark.lerobot.names.values()))


# -- written ------------------------------------------------------------------------------


class Episode(Protocol):
    """What the file is written from of an episode (``results.record.EpisodeRecord``'s fields)."""

    @property
    def seed(self) -> int: ...
    @property
    def success(self) -> bool | None: ...
    @property
    def episode_return(self) -> float | None: ...
    @property
    def extras(self) -> Mapping[str, object] | None: ...
    @property
    def video(self) -> str | None: ...
    @property
    def wall_time(self) -> float: ...
    @property
    def completed(self) -> bool: ...


def max_reward_extra(benchmark: Benchmark) -> Extra | None:
    """The benchmark's episode extra that is LeRobot's per-episode maximum reward, if it has one."""
    return next((e for e in benchmark.reporting.extras if e.summary == MAX_REWARD_SUMMARY), None)


def eval_info(selection: Selection, latest: Mapping[tuple[str, int], Episode]) -> dict[str, Any]:
    """LeRobot's ``eval_info.json`` of the run's completed episodes."""
    benchmark = selection.benchmark
    extra = max_reward_extra(benchmark)
    per_task: list[dict[str, Any]] = []
    groups: dict[str, list[Episode]] = {}
    controls = benchmark.controls
    for task in selection.tasks:
        done = [r for seed in selection.seeds if (r := latest.get((task.env_id, seed))) is not None and r.completed]
        if not done or (controls is not None and controls.is_control(task)):
            continue  # a control task is the base benchmark's, which LeRobot's suites of this one do not hold
        group, task_id = benchmark.lerobot.names[task.env_id]
        groups.setdefault(group, []).extend(done)
        metrics = {
            "sum_rewards": [_sum_reward(r) for r in done],
            "max_rewards": [_max_reward(r, extra) for r in done],
            "successes": [bool(r.success) for r in done],
            "video_paths": _videos(done),
            "predicted_video_paths": [],
        }
        ours = {"benchmark": benchmark.name, "env_id": task.env_id, "seeds": [r.seed for r in done]}
        per_task.append({"task_group": group, "task_id": task_id, "metrics": metrics, OURS: ours})
    episodes = [r for records in groups.values() for r in records]
    eval_s = sum(r.wall_time for r in episodes)
    overall = {
        **_means(episodes, extra),
        "eval_s": eval_s,
        "eval_ep_s": eval_s / max(1, len(episodes)),
        "video_paths": _videos(episodes),
        "predicted_video_paths": [],
    }
    return {
        "per_task": per_task,
        "per_group": {
            group: {**_means(records, extra), "video_paths": _videos(records), "predicted_video_paths": []}
            for group, records in groups.items()
        },
        "overall": overall,
    }


def _means(records: list[Episode], extra: Extra | None) -> dict[str, Any]:
    """LeRobot's group and overall numbers, pooled over ``records``; null over none."""
    maxima = [m for r in records if (m := _max_reward(r, extra)) is not None]
    return {
        "avg_sum_reward": finite_mean([_sum_reward(r) for r in records]) if records else None,
        "avg_max_reward": finite_mean(maxima) if maxima else None,
        # LeRobot's float: the mean of the successes, times 100 (3 of 10: 30.000000000000004)
        "pc_success": sum(bool(r.success) for r in records) / len(records) * 100 if records else None,
        "n_episodes": len(records),
    }


def _sum_reward(record: Episode) -> float:
    """The episode's return: LeRobot's sum of its step rewards (a completed episode has one)."""
    return float(record.episode_return or 0.0)


def _max_reward(record: Episode, extra: Extra | None) -> float | None:
    value = (record.extras or {}).get(extra.field) if extra else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _videos(records: list[Episode]) -> list[str]:
    return [r.video for r in records if r.video]
