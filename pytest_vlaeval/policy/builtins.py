"""The built-in policies, named on the command line: ``--policy random`` and ``--policy zero``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_vlaeval.policy.contract import EpisodeInfo, Policy, episode_rng


class RandomPolicy:
    """Uniform actions in [-1, 1], reproducible per (task, seed) whatever ran before."""

    chunk_size = 1

    def __init__(self, action_dim: int = 7) -> None:
        self.action_dim = action_dim
        self.config = {"action_dim": action_dim, "distribution": "uniform[-1,1]"}
        self._rng = np.random.default_rng(0)

    def reset(self, episode: EpisodeInfo) -> None:
        self._rng = episode_rng(episode)

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return self._rng.uniform(-1.0, 1.0, size=(self.chunk_size, self.action_dim)).astype(np.float32)


class ZeroPolicy:
    """All-zero actions: the arm holds still. A floor for any task's success rate."""

    chunk_size = 1

    def __init__(self, action_dim: int = 7) -> None:
        self.action_dim = action_dim
        self.config = {"action_dim": action_dim}

    def reset(self, episode: EpisodeInfo) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return np.zeros((1, self.action_dim), dtype=np.float32)


BUILTIN_POLICIES: dict[str, Callable[[int], Policy]] = {"random": RandomPolicy, "zero": ZeroPolicy}
