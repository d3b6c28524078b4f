"""The run's episodes as LeRobot's ``eval_info.json``, beside the canonical files, so LeRobot's
tooling (and what reads its files) reads our runs.

The keys, their order and their meanings are lerobot-eval's (0.6.1, ``eval_policy_all``):
``per_task`` (a task's ``task_group`` and ``task_id``, as the benchmark file names it:
``spec.EvalInfoNames``; ``metrics``: per-episode ``sum_rewards``, ``max_rewards``, ``successes``
in seed order, and the paths of the episodes' videos), ``per_group`` and ``overall`` (the means
pooled over their episodes; ``pc_success`` in percent). LeRobot has no interval in this file, so
neither has ours. Where ours must differ, it says so rather than guess:

- each task entry adds ``vlaeval`` (``gate.eval_info.OURS``): the benchmark, the env id and the
  episodes' seeds, which lerobot-eval does not keep and its readers never look for;
- an episode's maximum reward is the benchmark's episode extra summarised as ``avg_max_reward``
  (Push-T's and Meta-World's ``max_reward``); a benchmark without one writes null;
- only completed episodes are listed (an error is not an episode that ran), and a mean over none
  is null where LeRobot writes NaN, which is not JSON;
- ``eval_s`` is the episodes' own time summed (workers run them side by side).

It is written from the same latest records as ``summary.json``, each time that is (a rerun, a
resumed or merged run rewrites both), so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vlaeval.finite import finite_mean
from pytest_vlaeval.gate.eval_info import OURS
from pytest_vlaeval.results.record import EpisodeRecord
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import write_json_atomic
from pytest_vlaeval.spec import Extra, Selection

MAX_REWARD_SUMMARY = "avg_max_reward"
"""LeRobot's key for the mean of the episodes' maximum rewards; the benchmark's extra summarised
under it is LeRobot's per-episode ``max_reward``."""


def eval_info(selection: Selection, latest: Mapping[tuple[str, int], EpisodeRecord]) -> dict[str, Any]:
    """LeRobot's ``eval_info.json`` of the run's completed episodes."""
    benchmark = selection.benchmark
    extra = next((e for e in benchmark.reporting.extras if e.summary == MAX_REWARD_SUMMARY), None)
    per_task: list[dict[str, Any]] = []
    groups: dict[str, list[EpisodeRecord]] = {}
    for task in selection.tasks:
        done = [r for seed in selection.seeds if (r := latest.get((task.env_id, seed))) is not None and r.completed]
        if not done:
            continue
        group, task_id = benchmark.eval_info.names[task.env_id]
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


def write_eval_info(run_dir: RunDir, payload: dict[str, Any]) -> None:
    """``eval_info.json``, whole or not at all."""
    write_json_atomic(run_dir.eval_info, payload)


def _means(records: list[EpisodeRecord], extra: Extra | None) -> dict[str, Any]:
    """LeRobot's group and overall numbers, pooled over ``records``; null over none."""
    maxima = [m for r in records if (m := _max_reward(r, extra)) is not None]
    return {
        "avg_sum_reward": finite_mean([_sum_reward(r) for r in records]) if records else None,
        "avg_max_reward": finite_mean(maxima) if maxima else None,
        # LeRobot's float: the mean of the successes, times 100 (3 of 10: 30.000000000000004)
        "pc_success": sum(bool(r.success) for r in records) / len(records) * 100 if records else None,
        "n_episodes": len(records),
    }


def _sum_reward(record: EpisodeRecord) -> float:
    """The episode's return: LeRobot's sum of its step rewards (a completed episode has one)."""
    return float(record.episode_return or 0.0)


def _max_reward(record: EpisodeRecord, extra: Extra | None) -> float | None:
    value = (record.extras or {}).get(extra.field) if extra else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _videos(records: list[EpisodeRecord]) -> list[str]:
    return [r.video for r in records if r.video]
