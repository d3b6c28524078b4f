"""``--vla-reference-order``: a task's episodes in order in one env built for them, reset with the
benchmark's ``reference_reset_options``, as the benchmark's reference runner does (its episodes
then depend on the ones before them). A lone-episode mode changing two seams: which env an
episode gets, and how it is reset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_vlaeval.benchmark.model import Task
from pytest_vlaeval.envs.adapter import EnvAdapter
from pytest_vlaeval.episodes.lone import LoneEpisodes
from pytest_vlaeval.errors import EnvError, SpecError


class ReferenceOrder(LoneEpisodes):
    _next_index: int | None = None
    """The episode index the kept env runs next."""

    def env_for(self, task: Task, episode_index: int) -> EnvAdapter:
        """A task's first episode gets a new env, and each later one the env that just ran the one
        before it (``EnvError`` otherwise: a crashed worker broke the sequence)."""
        if episode_index == 0:
            self.worker.close_env()
        elif self.worker.env_task != task.env_id or self._next_index != episode_index:
            raise EnvError(
                f"--vla-reference-order: episode {episode_index} of {task.env_id} must follow episode "
                f"{episode_index - 1} in the same env, which this worker does not hold (a crashed worker?): "
                f"run the whole task again"
            )
        self._next_index = episode_index + 1
        return super().env_for(task, episode_index)

    def reset_options(self) -> dict[str, Any]:
        return self.worker.benchmark.env.reference_reset_options

    def check_order(self, episodes: Sequence[tuple[str, int]]) -> None:
        """Each task's selected episodes are its first ones, all of them (``-k`` may have taken some)."""
        by_task: dict[str, set[int]] = {}
        for env_id, index in episodes:
            by_task.setdefault(env_id, set()).add(index)
        for env_id, present in by_task.items():
            first_gap = next(i for i in range(len(present) + 1) if i not in present)
            if first_gap < len(present):
                raise SpecError(
                    f"--vla-reference-order runs each task's seeds in one sequence from its first; {env_id} would "
                    f"start past episode {first_gap} (a -k or -m selection?): select whole tasks"
                )
