"""Worker side: one policy and at most one live env per process, turning an episode into a record.

The env is kept while consecutive episodes belong to the same task (a build costs seconds, a
reset a fraction of one) and closed before the next task's env is built, so a worker's memory
does not grow with the number of tasks.

Under ``--vla-lockstep=K`` the env is a block of K rows (``episodes.lockstep``) and the policy an
engine called once per step for all of them (``policy.batched``): the first episode of a block to
run runs the whole block, and its block-mates take their records from here.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_vlaeval.envs import assets
from pytest_vlaeval.envs.adapter import EnvAdapter, EnvFactory, checked_adapter
from pytest_vlaeval.episodes.deadline import deadline
from pytest_vlaeval.episodes.lockstep import RowEnvs, SeparateEnvs, run_block
from pytest_vlaeval.episodes.loop import EpisodeResult, run_episode
from pytest_vlaeval.episodes.video import EpisodeVideo
from pytest_vlaeval.errors import AssetMissing, EnvCloseWarning, EnvError, EpisodeError, EpisodeTimeout, PolicyError
from pytest_vlaeval.importing import load_reference, split_reference
from pytest_vlaeval.policy.batched import PolicyEngine
from pytest_vlaeval.policy.contract import Policy, describe_policy
from pytest_vlaeval.policy.loading import build_policy
from pytest_vlaeval.results.record import FAILURE, SUCCESS, EpisodeRecord, error_record, outcome_message, timestamp
from pytest_vlaeval.results.rundir import video_file
from pytest_vlaeval.spec import Benchmark, Selection, Task

if TYPE_CHECKING:
    from pytest_vlaeval.policy.loading import PolicySpec


class EpisodeRunner:
    def __init__(
        self,
        selection: Selection,
        policy: PolicySpec,
        render_request: str,
        timeout: float | None = None,
        video: tuple[str, Path] = ("none", Path("videos")),
        lockstep: int = 1,
        reference_order: bool = False,
    ) -> None:
        self.selection = selection
        self.policy_spec = policy
        """The policy this process builds, or the server it connects to (``--vla-serve``'s own on workers)."""
        self.render_request = render_request
        self.timeout = timeout
        self.video_mode, self.video_dir = video
        self.lockstep = lockstep
        """Episodes run together in one block (1: each alone, ``run_episode``)."""
        self.reference_order = reference_order
        """``--vla-reference-order``: a task's episodes run in order in one env built for them, reset
        with the benchmark's ``reference_reset_options``; an episode out of that order is an error."""
        self._next_index: int | None = None
        """Under the reference order: the episode index the kept env runs next."""
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.env_builds = 0
        self._policy: Policy | None = None
        self._policy_error: PolicyError | None = None
        self._env: EnvAdapter | RowEnvs | None = None
        self._env_task: str | None = None
        self._env_error: EnvError | None = None
        self._engine: PolicyEngine | None = None
        self._engine_error: EpisodeError | None = None
        self._block_records: dict[tuple[str, int], EpisodeRecord] = {}
        """Records of episodes a block-mate ran, until their own item asks."""

    def record(self, task: Task, seed: int, block: Sequence[tuple[int, int]]) -> EpisodeRecord:
        """The episode's record: run now with its block ``(seed, index)`` (itself alone without
        lockstep), or run earlier by a block-mate."""
        kept = self._block_records.pop((task.env_id, seed), None)
        if kept is not None:
            return kept
        if self.lockstep == 1:
            ((_, index),) = block
            return self.run(task, seed, index)
        records = self.run_block(task, block)
        for record in records:
            self._block_records[record.key] = record
        return self._block_records.pop((task.env_id, seed))

    def run(self, task: Task, seed: int, episode_index: int) -> EpisodeRecord:
        """Run one episode (in a block of one under lockstep); every harness-side problem becomes an
        error record, never a failure."""
        if self.lockstep > 1:
            return self.run_block(task, [(seed, episode_index)])[0]
        started = time.perf_counter()
        fields: dict[str, Any] = {}
        try:
            # Under xdist a stuck worker can be replaced, so the watchdog may end the process.
            with deadline(self.timeout, f"{task.env_id} seed {seed}", hard=self.worker != "main"):
                policy = self.policy()  # built under the limit too: a factory may hang
                fields.update(chunk_size=policy.chunk_size, model=describe_policy(policy, self.policy_spec.text))
                builds = self.env_builds
                env = self.env_for(task, episode_index)
                fields["env_built"] = self.env_builds > builds
                video = EpisodeVideo(env) if self.video_mode != "none" else None
                try:
                    result = run_episode(
                        env,
                        policy,
                        task=task.env_id,
                        seed=seed,
                        episode_index=episode_index,
                        action_dim=self.selection.benchmark.env.action_dim,
                        policy_obs_keys=self.selection.benchmark.env.policy_obs_keys,
                        reset_options=self._reset_options(),
                        on_frame=video.capture if video else None,
                    )
                except EpisodeError as exc:
                    if isinstance(exc, EnvError):
                        self.close_env()  # a simulator that failed mid-episode is not trusted again
                    fields["video"] = self._keep_video(video, task, seed, success=False)
                    raise
                fields["video"] = self._keep_video(video, task, seed, success=result.success)
        except EpisodeError as exc:
            return error_record(
                task.env_id,
                seed,
                exc,
                worker=self.worker,
                wall_time=_since(started),
                render_backend=self._render_backend(),
                **fields,
            )
        return _completed(
            task.env_id,
            seed,
            result,
            wall_time=_since(started),
            worker=self.worker,
            render_backend=self._render_backend(),
            **fields,
        )

    def run_block(self, task: Task, block: Sequence[tuple[int, int]]) -> list[EpisodeRecord]:
        """Run a block of the task's episodes in lockstep, one record per ``(seed, index)``, in order.
        Its limit is ``--vla-timeout`` times the block's size (rows may be stepped one by one)."""
        started = time.perf_counter()
        seeds = [seed for seed, _ in block]
        fields: dict[str, Any] = {"lockstep": len(block)}
        limit = self.timeout * len(block) if self.timeout else None
        running = False
        try:
            with deadline(limit, f"{task.env_id} seeds {seeds}", hard=self.worker != "main"):
                engine = self.engine()
                fields.update(chunk_size=engine.chunk_size, model=engine.model)
                builds = self.env_builds
                rows = self.env_for(task)
                fields["env_built"] = self.env_builds > builds
                benchmark = self.selection.benchmark
                running = True
                outcomes = run_block(
                    rows,
                    engine,
                    task=task.env_id,
                    seeds=seeds,
                    indices=[index for _, index in block],
                    policy_obs_keys=benchmark.env.policy_obs_keys,
                    reset_options=benchmark.env.reset_options,
                )
        except EpisodeError as exc:
            outcomes = [exc] * len(block)
        if running and any(isinstance(o, EnvError) for o in outcomes):
            self.close_env()  # a simulator that failed mid-block is not trusted again (a failed build is remembered)
        common = dict(worker=self.worker, wall_time=_since(started), render_backend=self._render_backend(), **fields)
        return [
            error_record(task.env_id, seed, outcome, **common)
            if isinstance(outcome, EpisodeError)
            else _completed(task.env_id, seed, outcome, **common)
            for seed, outcome in zip(seeds, outcomes, strict=True)
        ]

    def engine(self) -> PolicyEngine:
        """The policy as a lockstep block calls it: one batched instance, or one instance per row."""
        if self._engine_error is not None:
            raise self._engine_error
        if self._engine is None:
            benchmark = self.selection.benchmark
            try:
                self._engine = PolicyEngine(
                    self.policy_spec,
                    benchmark.env.action_dim,
                    lambda: build_policy(self.policy_spec, benchmark.env.action_dim, benchmark.name),
                )
            except PolicyError as exc:
                self._engine_error = exc
                raise
        return self._engine

    def policy(self) -> Policy:
        if self._policy_error is not None:
            raise self._policy_error
        if self._policy is None:
            try:
                benchmark = self.selection.benchmark
                self._policy = build_policy(self.policy_spec, benchmark.env.action_dim, benchmark.name)
            except PolicyError as exc:
                self._policy_error = exc
                raise
        return self._policy

    def _reset_options(self) -> dict[str, Any]:
        env = self.selection.benchmark.env
        return env.reference_reset_options if self.reference_order else env.reset_options

    def env_for(self, task: Task, episode_index: int | None = None) -> EnvAdapter | RowEnvs:
        """The task's env: kept from the worker's last episode when it is the same task, else built.
        Under the reference order, a task's first episode gets a new env, and each later one the env
        that just ran the one before it (``EnvError`` otherwise: a crashed worker broke the sequence)."""
        if self.reference_order and episode_index is not None:
            if episode_index == 0:
                self.close_env()
            elif self._env_task != task.env_id or self._next_index != episode_index:
                raise EnvError(
                    f"--vla-reference-order: episode {episode_index} of {task.env_id} must follow episode "
                    f"{episode_index - 1} in the same env, which this worker does not hold (a crashed worker?): "
                    f"run the whole task again"
                )
            self._next_index = episode_index + 1
        if self._env_task == task.env_id:
            if self._env_error is not None:
                raise self._env_error
            return self._env
        self.close_env()
        try:
            self._check_assets(task)
            env = self._build(task)
        except EpisodeTimeout:
            raise  # not remembered: the next episode of this task tries to build again
        except EnvError as exc:
            self._env_task, self._env_error = task.env_id, exc
            raise
        self._env_task, self._env = task.env_id, env
        self.env_builds += 1
        return env

    def _build(self, task: Task) -> EnvAdapter | RowEnvs:
        """The task's env, or under lockstep its block of rows: one simulator of ``num_envs=K`` where
        the benchmark offers one on this render backend, else K of its envs."""
        factory, benchmark = self._factory(), self.selection.benchmark
        if self.lockstep == 1:
            return checked_adapter(factory(task, benchmark, self.render_request), benchmark.env.factory)
        if vectorized(benchmark, self.render_request):
            return factory(task, benchmark, self.render_request, num_envs=self.lockstep)  # type: ignore[call-arg]
        envs: list[EnvAdapter] = []
        try:
            for _ in range(self.lockstep):
                envs.append(checked_adapter(factory(task, benchmark, self.render_request), benchmark.env.factory))
        except BaseException:
            for env in envs:
                env.close()
            raise
        return SeparateEnvs(envs)

    def close_env(self) -> None:
        """Close the env kept; one that raises on close is reported against its own task, as a
        warning: the episodes it ran are over, and the next one (maybe another task's) is not its."""
        env, task = self._env, self._env_task
        self._env, self._env_task, self._env_error = None, None, None
        if env is None:
            return
        try:
            env.close()
        except Exception as exc:
            warnings.warn(
                EnvCloseWarning(f"closing the env of {task} raised {type(exc).__name__}: {exc}"), stacklevel=2
            )

    def _keep_video(self, video: EpisodeVideo | None, task: Task, seed: int, *, success: bool) -> str | None:
        """Write the episode's video when the mode asks for it (``failed``: anything but success)."""
        if video is None or (self.video_mode == "failed" and success):
            return None
        path = video.write(video_file(self.video_dir, task.env_id, seed))
        return str(path) if path else None

    def _check_assets(self, task: Task) -> None:
        for name in task.assets:
            reason = assets.problem(name, self.selection.benchmark.assets[name])
            if reason:
                raise AssetMissing(f"{task.env_id} cannot run: {reason}")

    def _factory(self) -> EnvFactory:
        module_name, attr = split_reference(self.selection.benchmark.env.factory) or ("", "")
        return load_reference(module_name, attr)

    def _render_backend(self) -> str | None:
        return self._env.render_backend if self._env is not None else None


def vectorized(benchmark: Benchmark, render_request: str) -> bool:
    """Whether a lockstep block is one simulator of ``num_envs=K`` (the benchmark's
    ``vector_backends``) rather than K separate envs, for this render request."""
    if not benchmark.env.vector_backends:
        return False
    from pytest_vlaeval.envs.render import resolve_backend

    return resolve_backend(render_request) in benchmark.env.vector_backends


def _completed(task: str, seed: int, result: EpisodeResult, **fields: Any) -> EpisodeRecord:
    return EpisodeRecord(
        task=task,
        seed=seed,
        outcome=SUCCESS if result.success else FAILURE,
        success=result.success,
        episode_return=result.episode_return,
        length=result.length,
        message=outcome_message(result.success, result.length, result.episode_return),
        time=timestamp(),
        instruction=result.instruction,
        extras=result.extras,
        **fields,
    )


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 3)
