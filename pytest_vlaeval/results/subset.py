"""Which episodes of the run's universe this session runs: a shard, and/or what the store says
still needs running (``--vla-rerun``, ``--vla-resume``).

Decided once, on the controller, before any worker starts, and handed to workers as a list of
episode ids, so every worker collects exactly the same items even while the store grows.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from pathlib import Path

from pytest_vlaeval import strict_json
from pytest_vlaeval.benchmark.model import Selection
from pytest_vlaeval.choices import EPISODE_LIST_MAX_MIB
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.record import ERROR, FAILURE, EpisodeRecord

EpisodeId = tuple[str, int]
RERUN_MODES = ("errors", "failures", "missing", "incomplete")
MAX_DIGITS = 18
"""Digits of a shard count: more than any run has episodes, and an int without Python's digit limit."""


def parse_shard(value: str) -> tuple[int, int]:
    """``I/N`` with 1 <= I <= N."""
    index, sep, count = value.partition("/")
    numbers = index.isdecimal() and count.isdecimal() and (index + count).isascii()
    if not sep or not numbers or max(len(index), len(count)) > MAX_DIGITS or not 1 <= int(index) <= int(count):
        raise SpecError(f"--vla-shard {value!r}: expected I/N with 1 <= I <= N, e.g. 2/4")
    return int(index), int(count)


def shard(selection: Selection, index: int, count: int, episodes: list[EpisodeId] | None = None) -> list[EpisodeId]:
    """Shard ``index`` of ``count`` of ``episodes`` (the selection's universe when None):
    deterministic, balanced by expected steps."""
    return _shards(selection, count, episodes).get(index, [])


def _shards(selection: Selection, count: int, episodes: list[EpisodeId] | None = None) -> dict[int, list[EpisodeId]]:
    """The non-empty shards of a ``count``-way split, by number, each in the universe's order. Time
    and memory grow with the episodes, never with ``count``: shards beyond the units are empty.

    Longest-processing-time first: whole tasks (so a shard builds each of its envs once) when
    there are at least as many tasks as shards, single episodes otherwise; each unit goes to the
    least loaded shard, the lowest numbered among equals.
    """
    universe = selection.episode_ids
    chosen = universe if episodes is None else episodes
    by_task: dict[str, list[EpisodeId]] = {}
    for key in chosen:
        by_task.setdefault(key[0], []).append(key)
    steps = {t.env_id: t.max_steps for t in selection.tasks}
    if len(by_task) >= count:
        units = [(keys, steps[task] * len(keys)) for task, keys in by_task.items()]
    else:
        units = [([key], steps[key[0]]) for keys in by_task.values() for key in keys]
    loads = [(0, number) for number in range(1, min(count, len(units)) + 1)]  # a heap: sorted already
    shards: dict[int, list[EpisodeId]] = {}
    for keys, weight in sorted(units, key=lambda unit: -unit[1]):  # stable: ties keep spec order
        load, number = heapq.heappop(loads)
        shards.setdefault(number, []).extend(keys)
        heapq.heappush(loads, (load + weight, number))
    order = {key: i for i, key in enumerate(universe)}
    return {number: sorted(keys, key=order.__getitem__) for number, keys in shards.items()}


def read_episode_list(path: Path, selection: Selection) -> list[EpisodeId]:
    """``--vla-episode-list``: a JSON list of ``[task, seed]`` pairs, each an episode of the
    selection (checked here: the file may come from another machine), in the selection's order."""
    where = f"--vla-episode-list {path}"
    try:
        listed = strict_json.loads(_bounded_read(path, where))
    except (OSError, ValueError) as exc:
        raise SpecError(f"{where}: cannot read it as JSON ({exc})") from None
    if not isinstance(listed, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and type(pair[1]) is int
        for pair in listed
    ):
        raise SpecError(f"{where}: expected a JSON list of [task, seed] pairs")
    universe = selection.episode_ids
    known = set(universe)
    strangers = [pair for pair in listed if tuple(pair) not in known]
    if strangers:
        raise SpecError(f"{where}: {strangers[0]} is not an episode of this selection ({len(strangers)} such)")
    wanted = {tuple(pair) for pair in listed}
    return [key for key in universe if key in wanted]


def _bounded_read(path: Path, where: str) -> bytes:
    """A regular file's bytes, refused when larger than ``EPISODE_LIST_MAX_MIB``: a device, a pipe
    or a huge file would otherwise be read whole (or forever) before anything could say so."""
    try:
        return strict_json.read_regular(path, EPISODE_LIST_MAX_MIB * 2**20)
    except strict_json.TooLarge as exc:
        raise SpecError(f"{where}: {exc}, more than any run's episodes") from None
    except strict_json.NotRegularFile as exc:
        raise SpecError(f"{where}: {exc}") from None


def still_to_run(universe: list[EpisodeId], records: Mapping[EpisodeId, EpisodeRecord], mode: str) -> list[EpisodeId]:
    """Episodes whose latest record matches ``mode`` (``missing``: no record at all)."""
    wanted = {"errors": {ERROR}, "failures": {FAILURE}, "missing": {None}, "incomplete": {ERROR, None}}[mode]
    return [key for key in universe if (records[key].outcome if key in records else None) in wanted]


def unfinished_shards(selection: Selection, count: int, completed: set[EpisodeId]) -> list[int]:
    """The shards of a ``count``-way split that hold an episode not completed yet."""
    shards = _shards(selection, count)
    return sorted(number for number, keys in shards.items() if any(key not in completed for key in keys))
