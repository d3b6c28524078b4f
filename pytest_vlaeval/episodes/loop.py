"""The canonical episode loop, independent of any simulator.

The env it drives is a benchmark adapter (see ``envs/mikasa.py``) with plain-Python step results:
``reset(seed=, options=) -> (obs, info)``, ``step(action) -> (obs, reward, terminated,
truncated, info)`` with ``info["success"]`` a bool, ``max_episode_steps`` and ``close()``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from pytest_vlaeval.errors import EnvError, EpisodeError, PolicyError
from pytest_vlaeval.policy.contract import EpisodeInfo, Policy, as_action_chunk

T = TypeVar("T")


@dataclass(frozen=True)
class EpisodeResult:
    success: bool
    episode_return: float
    length: int


def run_episode(
    env: Any,
    policy: Policy,
    *,
    task: str,
    seed: int,
    episode_index: int,
    action_dim: int,
    policy_obs_keys: tuple[str, ...],
    reset_options: Mapping[str, Any] | None = None,
    on_frame: Callable[[dict[str, Any]], None] | None = None,
) -> EpisodeResult:
    """Run one seeded episode and return its success latch, return and length.

    ``reset_options`` are the benchmark's (``env.reset_options`` of its file), given to every reset.
    ``on_frame`` (for videos) sees the observation before every step and after the last one.
    """
    obs, info = env_call(env.reset, seed=seed, options=dict(reset_options or {}))
    max_steps = int(env.max_episode_steps)
    instruction = instruction_text(info.get("language_instruction"))
    episode = EpisodeInfo(
        task=task, seed=seed, instruction=instruction, episode_index=episode_index, max_steps=max_steps
    )
    _policy_call(policy.reset, episode)

    actions: deque[np.ndarray] = deque()  # fresh per episode: a truncated chunk never leaks on
    success_once = False
    total_return = 0.0
    length = 0
    while length < max_steps:
        if on_frame is not None:
            on_frame(obs)
        if not actions:
            output = _policy_call(policy.act, policy_view(obs, policy_obs_keys, instruction))
            actions.extend(as_action_chunk(output, action_dim, policy.chunk_size))
        # A fresh array per step: some envs zero the previous action in place on reset.
        obs, reward, terminated, truncated, info = env_call(env.step, actions.popleft().copy())
        length += 1
        total_return += float(reward)
        success_once = success_once or bool(info["success"])
        instruction = instruction_text(info.get("language_instruction"), default=instruction)
        if terminated or truncated:
            break
    if on_frame is not None:
        on_frame(obs)
    result = EpisodeResult(success=success_once, episode_return=total_return, length=length)
    end_episode = getattr(policy, "end_episode", None)
    if end_episode is not None:
        _policy_call(end_episode, result)
    return result


def policy_view(obs: dict[str, Any], keys: tuple[str, ...], instruction: str) -> dict[str, Any]:
    """The observation a policy may see: an allow-list, so privileged keys can never leak."""
    missing = [k for k in keys if k not in obs]
    if missing:
        raise EnvError(f"observation lacks policy keys {missing}; it has {sorted(obs)}")
    view = {key: obs[key] for key in keys}
    view["instruction"] = instruction
    return view


def instruction_text(value: Any, default: str = "") -> str:
    """MIKASA gives a str, or a one-element list for the Rotate tasks."""
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        return str(value[0]) if value else default
    return str(value)


def _policy_call(fn: Callable[..., T], *args: Any) -> T:
    return _blame(PolicyError, "policy", fn, *args)


def env_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call into the env; an unexpected exception becomes ``EnvError`` naming the call."""
    return _blame(EnvError, "env", fn, *args, **kwargs)


def _blame(error: type[EpisodeError], owner: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn``; an unexpected exception becomes ``error`` naming who raised it."""
    try:
        return fn(*args, **kwargs)
    except EpisodeError:
        raise
    except Exception as exc:
        raise error(f"{owner}.{fn.__name__} raised {type(exc).__name__}: {exc}") from exc
