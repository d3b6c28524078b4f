"""Policies for the tests that run in-process (importable as ``spy_policies:NAME``)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np


class Spy:
    """Zero actions; remembers which observation keys and instructions it was shown."""

    chunk_size = 1
    seen_keys: ClassVar[set[tuple[str, ...]]] = set()
    instructions: ClassVar[set[str]] = set()
    calls = 0

    def reset(self, episode) -> None:
        Spy.instructions.add(episode.instruction)

    def act(self, obs: dict) -> np.ndarray:
        Spy.seen_keys.add(tuple(sorted(obs)))
        Spy.instructions.add(obs["instruction"])
        Spy.calls += 1
        return np.zeros(7, dtype=np.float32)
