"""The batched policy contract, and the engine that calls any policy one batch of episodes at a time.

Shared by the policy server (its batches gather requests from many workers) and a worker's
lockstep group of episodes (``episodes.lockstep``). Both call the engine from one thread, so policy
code need not be thread-safe.

A policy that offers ``act_batch(episodes, observations)`` is one instance called once per batch,
returning one chunk per episode (an array (B, K, D), or a sequence of B chunks); each row's
``BatchEpisode`` carries its own ``state`` dict and ``rng``, so nothing an episode does can reach
another episode of the same batch. Optional hooks: ``open_episode(episode)`` and
``close_episode(episode)``. A policy without ``act_batch`` keeps its memory on itself, so it gets
one instance per open episode (made by its factory, reset at open, reused after close) and is
called once per row: concurrent episodes can never share its state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_vlaeval.errors import EpisodeError, EpisodeTimeout, PolicyError
from pytest_vlaeval.policy.contract import (
    EpisodeInfo,
    Policy,
    as_action_chunk,
    checked_policy,
    describe_policy,
    episode_rng,
    to_numpy,
)
from pytest_vlaeval.policy.loading import build_policy

if TYPE_CHECKING:
    from pytest_vlaeval.policy.loading import PolicySpec

log = logging.getLogger("pytest_vlaeval.serving")


@dataclass(eq=False)
class BatchEpisode:
    """One open episode, as a batched policy sees it in ``act_batch`` and its hooks."""

    id: str
    info: EpisodeInfo
    state: dict[str, Any] = field(default_factory=dict)
    step: int = -1
    """Simulator step of the latest observation (-1 before the first)."""

    @cached_property
    def rng(self) -> np.random.Generator:
        """The episode's RNG, depending on its task and seed alone (``episode_rng``); made at first
        use, as most policies draw none and an openpi request is an episode of its own."""
        return episode_rng(self.info)


Outcome = np.ndarray | EpisodeError
"""A validated (k, D) float32 chunk, or the error that replaces it for that episode (the policy's,
or a policy server's for a client policy)."""


class PolicyEngine:
    """Any policy, called a batch of episodes at a time; a failure stays on the rows it concerns."""

    def __init__(self, spec: PolicySpec, action_dim: int, factory: Callable[[], Any] | None = None) -> None:
        self.spec = spec
        self.action_dim = action_dim
        self.factory = factory
        self.policy = self._build()
        self.batched = callable(getattr(self.policy, "act_batch", None))
        self.chunk_size: int = self.policy.chunk_size
        self.model = describe_policy(self.policy, spec.text)
        self._idle: list[Policy] = [] if self.batched else [self.policy]
        self._instances: dict[str, Policy] = {}

    def open(self, episode: BatchEpisode) -> None:
        """Reset the episode's state; raises ``PolicyError`` when the policy fails to."""
        if self.batched:
            _call(getattr(self.policy, "open_episode", None), "open_episode", episode)
            return
        instance = self._idle.pop() if self._idle else self._build()
        self._instances[episode.id] = instance
        _call(instance.reset, "reset", episode.info)

    def act(self, episodes: Sequence[BatchEpisode], observations: Sequence[dict[str, Any]]) -> list[Outcome]:
        """One chunk or error per episode; a policy exception fails only the rows it was called for."""
        if not self.batched:
            return [
                self._outcome(self._instances[e.id].act, "act", o) for e, o in zip(episodes, observations, strict=True)
            ]
        try:
            output = _call(self.policy.act_batch, "act_batch", list(episodes), list(observations))
            rows = self._rows(output, len(episodes))
        except EpisodeTimeout:
            raise
        except EpisodeError as exc:
            return [exc] * len(episodes)
        return [self._outcome(lambda row: row, "act_batch", row) for row in rows]

    def end(self, episode: BatchEpisode, result: Any) -> None:
        """Tell a per-episode instance its episode's result (``end_episode``, optional): a client of a
        policy server passes it on. Raises ``PolicyError`` when the hook fails."""
        instance = self._instances.get(episode.id)
        if instance is not None:
            _call(getattr(instance, "end_episode", None), "end_episode", result)

    def close(self, episode: BatchEpisode) -> None:
        """Free the episode's state; a failing hook is logged, the state is dropped all the same."""
        episode.state.clear()
        if self.batched:
            try:
                _call(getattr(self.policy, "close_episode", None), "close_episode", episode)
            except PolicyError as exc:
                log.warning("episode %s: %s", episode.id, exc)
            return
        instance = self._instances.pop(episode.id, None)
        if instance is not None:
            self._idle.append(instance)

    def _build(self) -> Policy:
        if self.factory is None:
            return build_policy(self.spec, self.action_dim)
        return checked_policy(_call(self.factory, "factory"), self.spec.text)

    def _outcome(self, fn: Any, name: str, arg: Any) -> Outcome:
        """One row's chunk or error: whatever its output does while being checked stays on its own row."""
        try:
            output = _call(fn, name, arg)
            return as_action_chunk(output, self.action_dim, self.chunk_size)
        except EpisodeTimeout:
            raise  # the episode's deadline: not this row's outcome
        except EpisodeError as exc:
            return exc
        except Exception as exc:
            error = PolicyError(f"policy.{name} returned {type(output).__name__} that cannot be used: {exc}")
            error.__cause__ = exc
            return error

    @staticmethod
    def _rows(output: Any, count: int) -> Sequence[Any]:
        try:
            output = to_numpy(output)
        except Exception as exc:
            raise PolicyError(f"act_batch returned {type(output).__name__} that cannot be used: {exc}") from exc
        try:
            rows = len(output)
        except TypeError:
            rows = None
        if rows != count:
            raise PolicyError(
                f"act_batch returned {type(output).__name__} with {rows} rows for a batch of {count} episodes; "
                f"expected one chunk per episode, e.g. an array ({count}, K, D)"
            )
        return output


def _call(fn: Any, name: str, *args: Any) -> Any:
    """Call a policy method; any exception becomes ``PolicyError`` naming it (the cause kept), except
    an episode error raised through it (the episode's deadline, a policy server's fault)."""
    if fn is None:
        return None
    try:
        return fn(*args)
    except EpisodeError:
        raise
    except Exception as exc:
        raise PolicyError(f"policy.{name} raised {type(exc).__name__}: {exc}") from exc
