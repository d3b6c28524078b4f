"""K episodes of one task in lockstep (``--vla-lockstep``): one batched policy call per step for the
rows that need actions, a done mask per row.

Each row is what ``loop.run_episode`` makes of its seed alone: the same reset and reset options,
a fresh action deque per episode, one popped action per step (a fresh copy), the success latch, the
return summed over the steps taken, the same end at termination, truncation or the step limit. A
row that ends early stops counting while the others go on; whatever goes wrong on a row (its
policy output, its env) ends that row as an error and leaves the others running.

The rows live behind ``RowEnvs``: K separate envs stepped one after the other (``SeparateEnvs``,
any benchmark, and MIKASA's CPU simulation, which holds one env per scene), or one simulator that
steps K copies of a scene at once (MIKASA's ``num_envs=K`` on ManiSkill's GPU simulation).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pytest_vlaeval.benchmark.model import EnvSettings
from pytest_vlaeval.envs.adapter import EnvAdapter, ExtraValue, Step, checked_extras
from pytest_vlaeval.envs.render import resolve_backend
from pytest_vlaeval.episodes.loop import (
    EpisodeResult,
    added_reward,
    checked_reset,
    checked_step,
    instruction_text,
    policy_view,
    step_limit,
)
from pytest_vlaeval.errors import EnvError, EpisodeError, EpisodeTimeout, env_call
from pytest_vlaeval.policy.batched import BatchEpisode, PolicyEngine
from pytest_vlaeval.policy.contract import EpisodeInfo

Reset = tuple[dict[str, Any], dict[str, Any]]
"""One row's ``(obs, info)`` after reset."""


class RowEnvs(Protocol):
    """Up to ``num_envs`` episodes' simulators behind one interface; a row that fails comes back as
    its ``EpisodeError``, a fault of the whole simulator is raised."""

    num_envs: int
    max_episode_steps: int
    render_backend: str

    def reset(self, seeds: Sequence[int], options: dict[str, Any]) -> list[Reset | EpisodeError]:
        """Reset rows 0..len(seeds)-1 with their seeds (at most ``num_envs``)."""
        ...

    def step(self, actions: Sequence[np.ndarray | None]) -> list[Step | EpisodeError | None]:
        """Step every row given an action; None in, None out (a row that has ended)."""
        ...

    def episode_extras(self, row: int) -> Mapping[str, ExtraValue]:
        """The benchmark's own fields of the episode that just ended on ``row`` (``EnvAdapter``)."""
        ...

    def close(self) -> None: ...


class SeparateEnvs:
    """K lone envs of a task as one group, stepped one after the other: a benchmark's own adapter,
    unchanged, so each row is exactly the lone episode of its seed."""

    def __init__(self, envs: Sequence[EnvAdapter]) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.max_episode_steps = self.envs[0].max_episode_steps  # checked where the group runs (``step_limit``)
        self.render_backend = self.envs[0].render_backend

    def reset(self, seeds: Sequence[int], options: dict[str, Any]) -> list[Reset | EpisodeError]:
        return [
            _row(checked_reset, env.reset, seed=seed, options=dict(options))
            for env, seed in zip(self.envs, seeds, strict=False)
        ]

    def step(self, actions: Sequence[np.ndarray | None]) -> list[Step | EpisodeError | None]:
        return [
            None if action is None else _row(checked_step, env.step, action)
            for env, action in zip(self.envs, actions, strict=True)
        ]

    def episode_extras(self, row: int) -> Mapping[str, ExtraValue]:
        return self.envs[row].episode_extras()

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _row(checked: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """One row's env call, its result ``checked`` against the contract; its failure (blamed on
    the env) is that row's outcome."""
    try:
        return checked(env_call(fn, *args, **kwargs))
    except EpisodeTimeout:
        raise  # the group's deadline: every row still running ends
    except EpisodeError as exc:
        return exc


@dataclass(eq=False)
class _Row:
    slot: int
    episode: BatchEpisode
    obs: dict[str, Any]
    instruction: str
    actions: deque[np.ndarray] = field(default_factory=deque)
    success: bool = False
    episode_return: float = 0.0
    length: int = 0


Outcome = EpisodeResult | EpisodeError


def vectorized(env: EnvSettings, render_request: str) -> bool:
    """Whether a lockstep group is one simulator of ``num_envs=K`` (the benchmark's
    ``vector_backends``) rather than K separate envs, for this render request."""
    return bool(env.vector_backends) and resolve_backend(render_request) in env.vector_backends


def run_group(
    envs: RowEnvs,
    engine: PolicyEngine,
    *,
    task: str,
    seeds: Sequence[int],
    indices: Sequence[int],
    policy_obs_keys: tuple[str, ...],
    reset_options: Mapping[str, Any] | None = None,
) -> list[Outcome]:
    """Run the seeds' episodes in lockstep; one result or error per seed, in order."""
    outcomes: list[Outcome | None] = [None] * len(seeds)
    opened: list[_Row] = []
    live: list[_Row] = []
    try:
        max_steps = step_limit(envs)
        for slot, (seed, index, reset) in enumerate(
            zip(seeds, indices, envs.reset(seeds, dict(reset_options or {})), strict=True)
        ):
            if isinstance(reset, EpisodeError):
                outcomes[slot] = reset
                continue
            obs, info = reset
            instruction = instruction_text(info.get("language_instruction"))
            info_ = EpisodeInfo(task=task, seed=seed, instruction=instruction, episode_index=index, max_steps=max_steps)
            row = _Row(slot, BatchEpisode(f"{task}:{seed}", info_), obs, instruction)
            opened.append(row)
            try:
                engine.open(row.episode)
            except EpisodeError as exc:
                outcomes[slot] = exc
                continue
            live.append(row)
        while live:
            _fill_actions([row for row in live if not row.actions], engine, policy_obs_keys, outcomes)
            live = [row for row in live if outcomes[row.slot] is None]
            actions: list[np.ndarray | None] = [None] * envs.num_envs
            for row in live:
                actions[row.slot] = row.actions.popleft().copy()  # fresh: some envs zero it in place on reset
            results = envs.step(actions)
            for row in live:
                ended = _advance(row, results[row.slot], max_steps)
                if isinstance(ended, EpisodeError):
                    outcomes[row.slot] = ended
                elif ended:
                    outcomes[row.slot] = _finish(row, envs, engine)
            live = [row for row in live if outcomes[row.slot] is None]
    except EpisodeError as exc:  # the whole simulator, or the group's deadline: every row still open ends
        outcomes = [exc if outcome is None else outcome for outcome in outcomes]
    finally:
        for row in opened:
            engine.close(row.episode)
    return [outcome if outcome is not None else _missing(seed) for outcome, seed in zip(outcomes, seeds, strict=True)]


def _fill_actions(
    rows: list[_Row], engine: PolicyEngine, policy_obs_keys: tuple[str, ...], outcomes: list[Outcome | None]
) -> None:
    """One batched policy call for the rows whose action deque is empty."""
    asking, views = [], []
    for row in rows:
        try:
            views.append(policy_view(row.obs, policy_obs_keys, row.instruction))
            asking.append(row)
        except EpisodeError as exc:
            outcomes[row.slot] = exc
    if not asking:
        return
    for row, chunk in zip(asking, engine.act([row.episode for row in asking], views), strict=True):
        if isinstance(chunk, EpisodeError):
            outcomes[row.slot] = chunk
        else:
            row.actions.extend(chunk)
            row.episode.step = row.length


def _advance(row: _Row, result: Step | EpisodeError | None, max_steps: int) -> bool | EpisodeError:
    """Take one step's result into the row; True once its episode has ended."""
    if isinstance(result, EpisodeError):
        return result
    if result is None:
        return EnvError(f"the simulator returned no step for row {row.slot} of the group")
    row.obs, reward, terminated, truncated, info = result
    row.length += 1
    try:
        row.episode_return = added_reward(row.episode_return, float(reward), row.length)
    except EnvError as exc:
        return exc
    row.success = row.success or bool(info["success"])
    row.instruction = instruction_text(info.get("language_instruction"), default=row.instruction)
    return bool(terminated or truncated) or row.length >= max_steps


def _finish(row: _Row, envs: RowEnvs, engine: PolicyEngine) -> Outcome:
    try:
        extras = checked_extras(env_call(envs.episode_extras, row.slot))
    except EpisodeError as exc:
        return exc
    result = EpisodeResult(row.success, row.episode_return, row.length, extras, row.episode.info.instruction)
    try:
        engine.end(row.episode, result)
    except EpisodeError as exc:
        return exc
    return result


def _missing(seed: int) -> EpisodeError:
    return EpisodeError(f"seed {seed}: the group ended without an outcome for this row")
