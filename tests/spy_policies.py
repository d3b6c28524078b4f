"""Policies for the tests that run in-process (importable as ``spy_policies:NAME``)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np


class Slow:
    """Zero actions, 0.15 s each: episodes long enough to cancel or kill a session midway."""

    chunk_size = 1

    def reset(self, episode) -> None:
        pass

    def act(self, obs):
        import time

        time.sleep(0.15)
        return np.zeros(7)


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


class EpisodeMemory:
    """Chunks of two whose values depend on everything its own episode showed it, so any state
    shared between episodes, or any observation lost or altered on the wire, changes them."""

    chunk_size = 2

    def reset(self, episode) -> None:
        self.total = (episode.seed % 97) / 100
        self.calls = 0

    def act(self, obs: dict) -> np.ndarray:
        rgb = np.asarray(obs["rgb"], dtype=np.float64)
        self.total += rgb.mean() / 255 + rgb[..., 3:].std() / 100 + np.asarray(obs["proprio"]).mean() / 10
        self.total += len(obs["instruction"]) / 100
        self.calls += 1
        chunk = np.tile(np.linspace(-0.3, 0.3, 7), (2, 1))
        chunk[:, 0] = 0.45 + self.total % 0.5  # above or below the fake env's seed-dependent bar
        chunk[1, 1] = self.calls / 10
        return chunk.astype(np.float32)


class Bf16Random:
    """The built-in random policy's actions as a bfloat16 tensor, as most VLA checkpoints return."""

    def __init__(self) -> None:
        from pytest_vlaeval.policy import RandomPolicy

        self.policy = RandomPolicy()
        self.chunk_size = self.policy.chunk_size

    def reset(self, episode) -> None:
        self.policy.reset(episode)

    def act(self, obs: dict):
        import torch

        return torch.as_tensor(self.policy.act(obs)).to(torch.bfloat16)


class BatchedMemory(EpisodeMemory):
    """``EpisodeMemory`` with ``act_batch`` too: a batch's rows keep their memory in their episode's
    ``state``, and every ``act_batch`` call's batch size is remembered."""

    batch_sizes: ClassVar[list[int]] = []

    def open_episode(self, episode) -> None:
        memory = EpisodeMemory()
        memory.reset(episode.info)
        episode.state["memory"] = memory

    def act_batch(self, episodes, observations) -> np.ndarray:
        BatchedMemory.batch_sizes.append(len(episodes))
        return np.stack([e.state["memory"].act(obs) for e, obs in zip(episodes, observations, strict=True)])


class FailsOnSeed101(EpisodeMemory):
    """``EpisodeMemory``, except that it raises on the first action of seed 101's episodes."""

    def reset(self, episode) -> None:
        super().reset(episode)
        self.seed = episode.seed

    def act(self, obs: dict) -> np.ndarray:
        if self.seed == 101:
            raise RuntimeError("seed 101 broke")
        return super().act(obs)


class ThreadsSeen(EpisodeMemory):
    """``EpisodeMemory`` whose config says what thread pools its process gave it."""

    def __init__(self) -> None:
        import os

        import torch

        self.config = {"omp": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads()}
