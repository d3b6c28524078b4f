"""``--vla-lockstep=K``: a task's episodes in groups of K stepped together (``episodes.lockstep``),
the policy an engine called once per step for all of them (``policy.batched``). The first episode
of a group to run runs the whole group, and its group-mates take their records from here."""

from __future__ import annotations

import time
from typing import Any

from pytest_vlaeval.benchmark.model import Task
from pytest_vlaeval.episodes.deadline import deadline
from pytest_vlaeval.episodes.lockstep import RowEnvs, SeparateEnvs, run_group, vectorized
from pytest_vlaeval.episodes.runner import EpisodeRunner, Group, episode_record, since
from pytest_vlaeval.episodes.worker import Worker
from pytest_vlaeval.errors import EnvError, EpisodeError
from pytest_vlaeval.results.record import EpisodeRecord


class LockstepGroups(EpisodeRunner):
    def __init__(self, worker: Worker, group_size: int, timeout: float | None = None) -> None:
        super().__init__(worker, timeout)
        self.group_size = group_size
        self._ran: dict[tuple[str, int], EpisodeRecord] = {}
        """Records of episodes a group-mate ran, until their own item asks."""

    def record(self, task: Task, seed: int, group: Group) -> EpisodeRecord:
        kept = self._ran.pop((task.env_id, seed), None)
        if kept is not None:
            return kept
        for record in self.run_group(task, group):
            self._ran[record.key] = record
        return self._ran.pop((task.env_id, seed))

    def retry(self, task: Task, seed: int, index: int) -> EpisodeRecord:
        """Alone means a group of one."""
        return self.run_group(task, [(seed, index)])[0]

    def run_group(self, task: Task, group: Group) -> list[EpisodeRecord]:
        """Run a group of the task's episodes in lockstep, one record per ``(seed, index)``, in order.
        Its limit is ``--vla-timeout`` times the group's size (rows may be stepped one by one)."""
        worker, started = self.worker, time.perf_counter()
        seeds = [seed for seed, _ in group]
        fields: dict[str, Any] = {"lockstep": len(group)}
        limit = self.timeout * len(group) if self.timeout else None
        running = False
        outcomes: list[Any]
        try:
            with deadline(limit, f"{task.env_id} seeds {seeds}", hard=worker.hard_deadline):
                engine = worker.engine()
                fields.update(chunk_size=engine.chunk_size, model=engine.model)
                builds = worker.env_builds
                rows = worker.env_for(task, self._rows)
                fields["env_built"] = worker.env_builds > builds
                running = True
                outcomes = run_group(
                    rows,  # type: ignore[arg-type]
                    engine,
                    task=task.env_id,
                    seeds=seeds,
                    indices=[index for _, index in group],
                    policy_obs_keys=worker.benchmark.env.policy_obs_keys,
                    reset_options=worker.benchmark.env.reset_options,
                )
        except EpisodeError as exc:
            outcomes = [exc] * len(group)
        if running and any(isinstance(o, EnvError) for o in outcomes):
            worker.close_env()  # a simulator that failed mid-group is not trusted again (a failed build is remembered)
        common = dict(worker=worker.name, wall_time=since(started), render_backend=worker.render_backend, **fields)
        return [episode_record(task, seed, outcome, **common) for seed, outcome in zip(seeds, outcomes, strict=True)]

    def _rows(self, task: Task) -> RowEnvs:
        """The group's rows: one simulator of ``num_envs=K`` where the benchmark offers one on this
        render backend, else K of its envs."""
        worker = self.worker
        if vectorized(worker.benchmark.env, worker.render_request):
            return worker.vector_env(task, self.group_size)
        envs = []
        try:
            for _ in range(self.group_size):
                envs.append(worker.lone_env(task))
        except BaseException:
            for env in envs:
                env.close()
            raise
        return SeparateEnvs(envs)
