"""Which episodes of the run's universe this session runs: a shard, and/or what the store says
still needs running (``--vla-rerun``, ``--vla-resume``).

Decided once, on the controller, before any worker starts, and handed to workers as a list of
episode ids, so every worker collects exactly the same items even while the store grows.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.record import ERROR, FAILURE, EpisodeRecord
from pytest_vlaeval.spec import Selection

EpisodeId = tuple[str, int]
RERUN_MODES = ("errors", "failures", "missing", "incomplete")


def parse_shard(value: str) -> tuple[int, int]:
    """``I/N`` with 1 <= I <= N."""
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 1 <= int(index) <= int(count):
        raise SpecError(f"--vla-shard {value!r}: expected I/N with 1 <= I <= N, e.g. 2/4")
    return int(index), int(count)


def shard(selection: Selection, index: int, count: int) -> list[EpisodeId]:
    """Shard ``index`` of ``count``: deterministic, balanced by expected steps.

    Longest-processing-time first: whole tasks (so a shard builds each of its envs once) when
    there are at least as many tasks as shards, single episodes otherwise.
    """
    seeds = selection.seeds
    if len(selection.tasks) >= count:
        units = [([(t.env_id, s) for s in seeds], t.max_steps * len(seeds)) for t in selection.tasks]
    else:
        units = [([(t.env_id, s)], t.max_steps) for t in selection.tasks for s in seeds]
    loads = [0] * count
    mine: list[EpisodeId] = []
    for episodes, weight in sorted(units, key=lambda unit: -unit[1]):  # stable: ties keep spec order
        target = loads.index(min(loads))
        loads[target] += weight
        if target == index - 1:
            mine.extend(episodes)
    order = {key: i for i, key in enumerate(selection.episode_ids)}
    return sorted(mine, key=order.__getitem__)


def still_to_run(universe: list[EpisodeId], records: Mapping[EpisodeId, EpisodeRecord], mode: str) -> list[EpisodeId]:
    """Episodes whose latest record matches ``mode`` (``missing``: no record at all)."""
    wanted = {"errors": {ERROR}, "failures": {FAILURE}, "missing": {None}, "incomplete": {ERROR, None}}[mode]
    return [key for key in universe if (records[key].outcome if key in records else None) in wanted]


def unfinished_shards(selection: Selection, count: int, completed: set[EpisodeId]) -> list[int]:
    """The shards of a ``count``-way split that hold an episode not completed yet."""
    return [i for i in range(1, count + 1) if any(key not in completed for key in shard(selection, i, count))]
