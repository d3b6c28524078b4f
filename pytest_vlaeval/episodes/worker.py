"""What a worker process keeps between episodes, whatever the execution mode: its policy (or the
batched engine lockstep calls), and at most one live env, of one task.

The env is kept while consecutive episodes belong to the same task (a build costs seconds, a
reset a fraction of one) and closed before the next task's env is built, so a worker's memory
does not grow with the number of tasks. A policy or env that could not be built is remembered
with its error, so a task's later episodes fail at once with the same message.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Generic, TypeVar

from pytest_vlaeval.benchmark.model import Benchmark, Selection, Task
from pytest_vlaeval.envs import assets
from pytest_vlaeval.envs.adapter import EnvAdapter, EnvFactory, checked_adapter
from pytest_vlaeval.episodes.lockstep import RowEnvs
from pytest_vlaeval.errors import AssetMissing, EnvCloseWarning, EnvError, EpisodeTimeout, PolicyError
from pytest_vlaeval.importing import load_reference, split_reference
from pytest_vlaeval.long_lived import built_for_life
from pytest_vlaeval.policy.batched import PolicyEngine
from pytest_vlaeval.policy.contract import Policy
from pytest_vlaeval.policy.loading import build_policy

if TYPE_CHECKING:
    from pytest_vlaeval.policy.loading import PolicySpec

Built = TypeVar("Built")
EnvBuilder = Callable[[Task], "EnvAdapter | RowEnvs"]


class BuiltOnce(Generic[Built]):
    """A value built at first use, or the ``PolicyError`` its build raised, raised again at every
    later use (a policy that cannot be built fails each of the worker's episodes at once, alike).
    ``for_life``: the value, and what its build imported, live as long as the process
    (``long_lived``)."""

    def __init__(self, build: Callable[[], Built], *, for_life: bool) -> None:
        self._build = build
        self._for_life = for_life
        self._value: Built | None = None
        self._error: PolicyError | None = None

    def get(self) -> Built:
        if self._error is not None:
            raise self._error
        if self._value is None:
            try:
                with built_for_life() if self._for_life else nullcontext():
                    self._value = self._build()
            except PolicyError as exc:
                self._error = exc
                raise
        return self._value


class Worker:
    """The policy and env caches of one worker process (``"main"`` without xdist)."""

    def __init__(self, selection: Selection, policy: PolicySpec, render_request: str) -> None:
        self.selection = selection
        self.policy_spec = policy
        """The policy this process builds, or the server it connects to (``--vla-serve``'s own on workers)."""
        self.render_request = render_request
        self.name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.env_builds = 0
        benchmark = selection.benchmark

        def new_policy() -> Policy:
            return build_policy(policy, benchmark.env.action_dim, benchmark.name)

        self._policy = BuiltOnce(new_policy, for_life=self.own_process)
        self._engine = BuiltOnce(
            lambda: PolicyEngine(policy, benchmark.env.action_dim, new_policy), for_life=self.own_process
        )
        self._env: EnvAdapter | RowEnvs | None = None
        self._env_task: str | None = None
        self._env_error: EnvError | None = None

    @property
    def benchmark(self) -> Benchmark:
        return self.selection.benchmark

    @property
    def own_process(self) -> bool:
        """An xdist worker: a process the session starts and ends, not the caller's (a serial run, or
        ``evaluate()`` in a training loop, whose objects must stay the caller's to free)."""
        return self.name != "main"

    @property
    def hard_deadline(self) -> bool:
        """Under xdist a stuck worker can be replaced, so the watchdog may end the process."""
        return self.own_process

    def policy(self) -> Policy:
        """The policy, built under the episode's limit the first time (a factory may hang)."""
        return self._policy.get()

    def engine(self) -> PolicyEngine:
        """The policy as a lockstep group calls it: one batched instance, or one instance per row."""
        return self._engine.get()

    @property
    def env_task(self) -> str | None:
        """The task of the env kept, if any."""
        return self._env_task

    def env_for(self, task: Task, build: EnvBuilder) -> EnvAdapter | RowEnvs:
        """The task's env: kept from the worker's last episode when it is the same task, else built."""
        if self._env_task == task.env_id:
            if self._env_error is not None:
                raise self._env_error
            assert self._env is not None
            return self._env
        self.close_env()
        try:
            self._check_assets(task)
            env = build(task)
        except EpisodeTimeout:
            raise  # not remembered: the next episode of this task tries to build again
        except EnvError as exc:
            self._env_task, self._env_error = task.env_id, exc
            raise
        self._env_task, self._env = task.env_id, env
        self.env_builds += 1
        return env

    def lone_env(self, task: Task) -> EnvAdapter:
        """A new env of the task, checked against the adapter protocol."""
        return checked_adapter(self._factory()(task, self.benchmark, self.render_request), self.benchmark.env.factory)

    def vector_env(self, task: Task, num_envs: int) -> RowEnvs:
        """One simulator of ``num_envs`` copies of the task's scene (the benchmark's ``vector_backends``)."""
        return self._factory()(task, self.benchmark, self.render_request, num_envs=num_envs)  # type: ignore[call-arg,return-value]

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

    @property
    def render_backend(self) -> str | None:
        return self._env.render_backend if self._env is not None else None

    def _check_assets(self, task: Task) -> None:
        for name in task.assets:
            reason = assets.problem(name, self.benchmark.assets[name], assets.benchmark_argument(self.benchmark))
            if reason:
                raise AssetMissing(f"{task.env_id} cannot run: {reason}")

    def _factory(self) -> EnvFactory:
        module_name, attr = split_reference(self.benchmark.env.factory) or ("", "")
        return load_reference(module_name, attr)
