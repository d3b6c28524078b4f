"""Each episode alone (the default mode): its own reset of the task's kept env, its own policy
episode, its own record; the one mode that records videos."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pytest_vlaeval.benchmark.model import Task
from pytest_vlaeval.envs.adapter import EnvAdapter
from pytest_vlaeval.episodes.deadline import deadline
from pytest_vlaeval.episodes.loop import run_episode
from pytest_vlaeval.episodes.runner import EpisodeRunner, Group, episode_record, since
from pytest_vlaeval.episodes.video import EpisodeVideo
from pytest_vlaeval.episodes.worker import Worker
from pytest_vlaeval.errors import EnvError, EpisodeError
from pytest_vlaeval.policy.contract import describe_policy
from pytest_vlaeval.results.record import EpisodeRecord
from pytest_vlaeval.results.rundir import video_file


class LoneEpisodes(EpisodeRunner):
    def __init__(
        self, worker: Worker, timeout: float | None = None, video: tuple[str, Path] = ("none", Path("videos"))
    ) -> None:
        super().__init__(worker, timeout)
        self.video_mode, self.video_dir = video

    def record(self, task: Task, seed: int, group: Group) -> EpisodeRecord:
        ((_, index),) = group
        return self.run(task, seed, index)

    def retry(self, task: Task, seed: int, index: int) -> EpisodeRecord:
        return self.run(task, seed, index)

    def run(self, task: Task, seed: int, episode_index: int) -> EpisodeRecord:
        """Run one episode under ``--vla-timeout``."""
        worker, started = self.worker, time.perf_counter()
        fields: dict[str, Any] = {}
        outcome: Any
        try:
            with deadline(self.timeout, f"{task.env_id} seed {seed}", hard=worker.hard_deadline):
                policy = worker.policy()  # built under the limit too: a factory may hang
                fields.update(chunk_size=policy.chunk_size, model=describe_policy(policy, worker.policy_spec.text))
                builds = worker.env_builds
                env = self.env_for(task, episode_index)
                fields["env_built"] = worker.env_builds > builds
                video = EpisodeVideo(env) if self.video_mode != "none" else None
                try:
                    outcome = run_episode(
                        env,
                        policy,
                        task=task.env_id,
                        seed=seed,
                        episode_index=episode_index,
                        action_dim=worker.benchmark.env.action_dim,
                        policy_obs_keys=worker.benchmark.env.policy_obs_keys,
                        reset_options=self.reset_options(),
                        on_frame=video.capture if video else None,
                    )
                except EpisodeError as exc:
                    if isinstance(exc, EnvError):
                        worker.close_env()  # a simulator that failed mid-episode is not trusted again
                    fields["video"] = self._keep_video(video, task, seed, success=False)
                    raise
                fields["video"] = self._keep_video(video, task, seed, success=outcome.success)
        except EpisodeError as exc:
            outcome = exc
        return episode_record(
            task,
            seed,
            outcome,
            worker=worker.name,
            wall_time=since(started),
            render_backend=worker.render_backend,
            **fields,
        )

    def env_for(self, task: Task, episode_index: int) -> EnvAdapter:
        """The env the episode runs in: the task's, kept or built."""
        return self.worker.env_for(task, self.worker.lone_env)  # type: ignore[return-value]

    def reset_options(self) -> dict[str, Any]:
        return self.worker.benchmark.env.reset_options

    def _keep_video(self, video: EpisodeVideo | None, task: Task, seed: int, *, success: bool) -> str | None:
        """Write the episode's video when the mode asks for it (``failed``: anything but success)."""
        if video is None or (self.video_mode == "failed" and success):
            return None
        path = video.write(video_file(self.video_dir, task.env_id, seed))
        return str(path) if path else None
