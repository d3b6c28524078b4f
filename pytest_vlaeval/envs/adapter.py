"""The seam every benchmark plugs into: an env adapter and the factory that builds it.

A benchmark is a YAML file naming a factory (``env.factory: module:make_env``) plus the module
that holds it. The factory gets the task, the benchmark and the ``--vla-render`` request and
returns an ``EnvAdapter``: plain-Python step results whatever the simulator speaks (torch tensors,
batched arrays, old gym 4-tuples), so the episode loop, lockstep groups and videos never see a
simulator. ``Adapter`` gives the optional parts their defaults; a benchmark's adapter subclasses
it or implements the protocol outright.

What a benchmark knows that the generic record does not (LIBERO's replayed resets, Push-T's
maximum reward) comes back from ``episode_extras`` after each episode and is stored on the record
as given; the benchmark file's ``episode_extras`` says how its canonical files summarise them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from pytest_vlaeval.errors import EnvError
from pytest_vlaeval.results.record import number_problem

if TYPE_CHECKING:
    from pytest_vlaeval.benchmark.model import Benchmark, Task

Reset = tuple[dict[str, Any], dict[str, Any]]
"""``(obs, info)``; ``info["language_instruction"]`` is the instruction the policy gets."""
Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]
"""``(obs, reward, terminated, truncated, info)``: the reward a finite float, the flags and
``info["success"]`` bools."""
ExtraValue = str | int | float | bool | None


@runtime_checkable
class EnvAdapter(Protocol):
    """One task's env as the harness drives it; ``reset(seed=i)`` gives the benchmark's episode
    for seed ``i`` whatever ran before in this env."""

    max_episode_steps: int
    """Policy steps an episode may take (the benchmark file's ``max_steps``, checked by the factory)."""
    render_backend: str
    """What renders the observations (recorded with every episode: images depend on it)."""

    def reset(self, *, seed: int, options: dict[str, Any]) -> Reset: ...

    def step(self, action: np.ndarray) -> Step: ...

    def render_frame(self, obs: dict[str, Any]) -> np.ndarray | None:
        """A video frame (H, W, 3 uint8) for this observation, or None for no video."""
        ...

    def episode_extras(self) -> Mapping[str, ExtraValue]:
        """The benchmark's own fields of the episode that just ended, stored on its record as given."""
        ...

    def close(self) -> None: ...


class EnvFactory(Protocol):
    """``env.factory`` of a benchmark file. A factory that also builds one simulator stepping
    ``num_envs`` episodes at once takes that keyword (``episodes.lockstep.RowEnvs``), for the render
    backends the file's ``vector_backends`` lists."""

    def __call__(self, task: Task, benchmark: Benchmark, render_request: str) -> EnvAdapter: ...


class Adapter:
    """Defaults for the optional parts of ``EnvAdapter``: no video frame, no extra fields."""

    max_episode_steps: int
    render_backend: str = "unknown"

    def render_frame(self, obs: dict[str, Any]) -> np.ndarray | None:
        return None

    def episode_extras(self) -> Mapping[str, ExtraValue]:
        return {}


class MaxReward:
    """The episode's largest step reward as its extra ``max_reward`` (LeRobot's per-episode
    maximum, which its ``avg_max_reward`` averages); mixed in before ``Adapter``."""

    max_reward: float | None = None

    def start_episode(self) -> None:
        self.max_reward = None

    def saw_reward(self, reward: float) -> float:
        """Take a step's reward into the maximum; returns it as a float."""
        value = float(reward)
        self.max_reward = value if self.max_reward is None else max(self.max_reward, value)
        return value

    def episode_extras(self) -> Mapping[str, ExtraValue]:
        return {"max_reward": self.max_reward}


class IsSuccessEnv(MaxReward, Adapter):
    """A gymnasium env that says success as ``info["is_success"]`` (LeRobot's ``gym_*`` packages:
    gym-pusht, gym-aloha) as LeRobot's rollout drives it: ``reset(seed=i)``, the action as float32
    into ``step``, the step limit the env's own (``gym.make``'s ``max_episode_steps``), and the
    benchmark file's instruction; its episode's maximum step reward as the extra. An env built
    without ``gym.make`` is given its step limit."""

    def __init__(self, env: Any, instruction: str, max_episode_steps: int | None = None) -> None:
        self.env = env
        self.instruction = instruction
        self.max_episode_steps = int(env.spec.max_episode_steps if max_episode_steps is None else max_episode_steps)

    def reset(self, *, seed: int, options: dict[str, Any]) -> Reset:
        obs, info = self.env.reset(seed=int(seed), options=options or None)
        self.start_episode()
        return obs, {**info, "language_instruction": self.instruction, "success": bool(info.get("is_success"))}

    def step(self, action: np.ndarray) -> Step:
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(action, dtype=np.float32).reshape(-1))
        info = {**info, "language_instruction": self.instruction, "success": bool(info["is_success"])}
        return obs, self.saw_reward(reward), bool(terminated), bool(truncated), info

    def close(self) -> None:
        self.env.close()


ADAPTER_MEMBERS = ("max_episode_steps", "render_backend", "reset", "step", "render_frame", "episode_extras", "close")


def checked_adapter(env: Any, factory: str) -> EnvAdapter:
    """What a factory built, if it has every member of ``EnvAdapter``; else ``EnvError`` naming the
    missing ones (at the build, not as an attribute error in the middle of an episode). The
    factory's env is closed first when it can be."""
    missing = [name for name in ADAPTER_MEMBERS if not hasattr(env, name)]
    if missing:
        close = getattr(env, "close", None)
        if callable(close):
            close()
        raise EnvError(
            f"{factory} returned a {type(env).__name__} without {', '.join(missing)}: an env adapter implements "
            "pytest_vlaeval.envs.adapter.EnvAdapter (subclass its Adapter for the optional parts)"
        )
    return env


EXTRA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def checked_extras(value: Any) -> dict[str, ExtraValue]:
    """What ``episode_extras`` returned, if it is a mapping of identifiers to JSON scalars (numbers
    a float can hold: finite, no int of 400 digits); else ``EnvError`` naming the offending entry.
    Records travel as JSON and summaries read their numbers as floats, so anything else would fail
    later, far from the adapter that made it (in every later session's summary and merge)."""
    if not isinstance(value, Mapping):
        raise EnvError(f"env.episode_extras() returned {type(value).__name__}; expected a dict")
    extras: dict[str, ExtraValue] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not EXTRA_NAME.fullmatch(key):
            raise EnvError(f"env.episode_extras() has the key {key!r}; keys are identifiers (letters, digits, _)")
        if isinstance(item, np.generic):
            item = item.item()
        if item is not None and not isinstance(item, (str, int, float, bool)):
            raise EnvError(f"env.episode_extras()[{key!r}] is {type(item).__name__}; expected a number, text or bool")
        if problem := number_problem(item):
            raise EnvError(f"env.episode_extras()[{key!r}] {problem}")
        extras[key] = item
    return extras
