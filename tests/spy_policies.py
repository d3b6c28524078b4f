"""Policies the tests run by name (``--policy=spy_policies:NAME``): importable in the suite's
process (``pythonpath``) and, as the ``fake`` fixture copies this file, in the sessions it starts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import ClassVar

import numpy as np


class Zero:
    """Zero actions: fails every episode of the fake benchmark."""

    chunk_size = 1

    def reset(self, episode) -> None:
        pass

    def act(self, obs) -> np.ndarray:
        return np.zeros(7)


class Slow(Zero):
    """Zero actions, 0.2 s each, each marked by touching ``acting-<pid>`` in the working directory:
    episodes long enough to cancel or kill a session midway, and a worker seen inside a step."""

    def act(self, obs) -> np.ndarray:
        Path(f"acting-{os.getpid()}").touch()
        time.sleep(0.2)
        return super().act(obs)


class Stubborn(Slow):
    """``Slow`` in its first episode; in the next, its first step waits for Ctrl-C (touching
    ``waiting-for-interrupt``), swallows it (touching ``interrupt-swallowed``) and never returns: the
    interrupt lands in the step whatever the machine's load."""

    def __init__(self) -> None:
        self.episodes = 0

    def reset(self, episode) -> None:
        self.episodes += 1

    def act(self, obs) -> np.ndarray:
        if self.episodes < 2:
            return super().act(obs)
        try:
            Path("waiting-for-interrupt").touch()
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            Path("interrupt-swallowed").touch()
            while True:
                time.sleep(1)


class SlowSuccess(Zero):
    """Succeeds on every seed of the fake benchmark, 0.05 s a step: a run long enough to kill midway."""

    def act(self, obs) -> np.ndarray:
        time.sleep(0.05)
        return np.full(7, 0.99)


class StopOnGamma(Zero):
    """Ctrl-C as it is reset for a ``Gamma-v0`` episode: a session interrupted after Alpha and Beta."""

    def reset(self, episode) -> None:
        if episode.task == "Gamma-v0":
            raise KeyboardInterrupt


class CrashesOnBeta(Zero):
    """Raises as it is reset for a ``Beta-v0`` episode: an error, where Alpha's are failures."""

    def reset(self, episode) -> None:
        if episode.task == "Beta-v0":
            raise RuntimeError("the policy fell over")


class FailsFirst(Zero):
    """Raises on its first reset only: an error its worker's retry gets past."""

    def __init__(self) -> None:
        self.resets = 0

    def reset(self, episode) -> None:
        self.resets += 1
        if self.resets == 1:
            raise RuntimeError("transient")


class CachedAction:
    """The same array object every step, which the fake env zeroes in place on its next reset."""

    chunk_size = 1

    def __init__(self) -> None:
        self.action = np.full(7, 0.95, dtype=np.float32)

    def reset(self, episode) -> None:
        pass

    def act(self, obs) -> np.ndarray:
        return self.action


class ObservationLog:
    """Zero chunks of two; appends what each call was shown (observation keys, instruction, the
    episode's info) to the JSON-lines file ``$SPY_LOG``, for a test that reads it after the session."""

    chunk_size = 2

    def reset(self, episode) -> None:
        self.episode = episode.to_dict()

    def act(self, obs: dict) -> np.ndarray:
        seen = {"keys": sorted(obs), "instruction": obs["instruction"], "episode": self.episode}
        with open(os.environ["SPY_LOG"], "a") as log:
            log.write(json.dumps(seen) + "\n")
        return np.zeros((2, 7))


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
        import torch

        self.config = {"omp": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads()}


class CollectorSeen(Zero):
    """Zero actions; its first step writes ``collector-<pid>.json``: whether the collector walks it
    (``gc.get_objects``), and whether the collector is on."""

    def act(self, obs) -> np.ndarray:
        seen = Path(f"collector-{os.getpid()}.json")
        if not seen.exists():
            import gc

            walked = any(o is self for o in gc.get_objects())
            seen.write_text(json.dumps({"walked": walked, "enabled": gc.isenabled()}))
        return super().act(obs)
