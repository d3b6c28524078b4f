"""The canonical episode loop, independent of any simulator.

The env it drives is a benchmark's adapter (``envs.adapter.EnvAdapter``); what it returns is
checked against that contract here, so a broken adapter is an env error naming what came back.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from pytest_vlaeval.envs.adapter import EnvAdapter, ExtraValue, Step, checked_extras
from pytest_vlaeval.errors import EnvError, PolicyError, blame, env_call
from pytest_vlaeval.policy.contract import EpisodeInfo, Policy, as_action_chunk

T = TypeVar("T")


@dataclass(frozen=True)
class EpisodeResult:
    success: bool
    episode_return: float
    length: int
    extras: dict[str, ExtraValue]
    """The adapter's ``episode_extras()`` at the episode's end."""
    instruction: str
    """The instruction the policy got at the episode's start (LIBERO-PRO: the perturbed one)."""


def run_episode(
    env: EnvAdapter,
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
    obs, info = checked_reset(env_call(env.reset, seed=seed, options=dict(reset_options or {})))
    max_steps = step_limit(env)
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
        obs, reward, terminated, truncated, info = checked_step(env_call(env.step, actions.popleft().copy()))
        length += 1
        total_return = added_reward(total_return, reward, length)
        success_once = success_once or info["success"]
        instruction = instruction_text(info.get("language_instruction"), default=instruction)
        if terminated or truncated:
            break
    if on_frame is not None:
        on_frame(obs)
    extras = checked_extras(env_call(env.episode_extras))
    result = EpisodeResult(success_once, total_return, length, extras, episode.instruction)
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
    return blame(PolicyError, "policy", fn, *args)


def checked_reset(value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What ``env.reset`` returned, if it is ``(obs, info)`` with two dicts; else ``EnvError`` saying
    what came back (the env broke its contract: never the harness's fault, never a failure)."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise EnvError(f"env.reset returned {_described(value)}; expected (obs, info)")
    obs, info = value
    for name, part in (("obs", obs), ("info", info)):
        if not isinstance(part, Mapping):
            raise EnvError(f"env.reset returned {name} as {_described(part)}; expected a dict")
    return dict(obs), dict(info)


def checked_step(value: Any) -> Step:
    """What ``env.step`` returned, if it keeps the contract; else ``EnvError`` saying what came back."""
    if not (isinstance(value, (tuple, list)) and len(value) == 5):
        raise EnvError(f"env.step returned {_described(value)}; expected (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = value
    if not isinstance(obs, Mapping):
        raise EnvError(f"env.step returned obs as {_described(obs)}; expected a dict")
    if not isinstance(info, Mapping) or "success" not in info:
        raise EnvError(f"env.step returned info {_described(info)}; expected a dict with 'success'")
    reward_value = _scalar(reward, "reward", real=True)
    if not math.isfinite(reward_value):
        raise EnvError(f"env.step returned reward {reward_value}; expected a finite number")
    info = dict(info)
    info["success"] = _scalar(info["success"], "info['success']")
    return dict(obs), reward_value, _scalar(terminated, "terminated"), _scalar(truncated, "truncated"), info


def added_reward(episode_return: float, reward: float, step: int) -> float:
    """The return after ``step``'s reward; ``EnvError`` once it leaves the float range: every reward
    is finite, yet 1e308 a step sums to infinity, which no record holds."""
    total = episode_return + reward
    if not math.isfinite(total):
        raise EnvError(
            f"the env's rewards overflowed at step {step}: their sum is beyond the float range (this reward: {reward:g})"
        )
    return total


def step_limit(env: Any) -> int:
    """The env's ``max_episode_steps``, a positive int, else ``EnvError``."""
    limit = getattr(env, "max_episode_steps", None)
    if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1:
        raise EnvError(f"env.max_episode_steps is {_described(limit)}; expected a positive int")
    return int(limit)


def _scalar(value: Any, name: str, *, real: bool = False) -> Any:
    """A Python or numpy scalar, or a 0-d array or tensor, as a float (``real``) or a bool;
    ``EnvError`` for anything else (None, an array of several values, text)."""
    item = value.item() if getattr(value, "ndim", None) == 0 and hasattr(value, "item") else value
    if real:
        usable = isinstance(item, numbers.Real) and not isinstance(item, (bool, np.bool_))
    else:
        usable = isinstance(item, (bool, np.bool_, numbers.Integral))
    if not usable:
        raise EnvError(f"env.step returned {name} as {_described(value)}; expected {'a number' if real else 'a bool'}")
    try:
        return float(item) if real else bool(item)
    except OverflowError:  # an int of 400 digits is a number, but not a float
        raise EnvError(f"env.step returned {name} beyond the float range; expected a finite number") from None


def _described(value: Any) -> str:
    """A value as an error line names it, on one line: its type, and its shape, its items' types
    or a short repr."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {len(value)} ({', '.join(type(item).__name__ for item in value)})"
    text = " ".join(repr(value).split())
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"
