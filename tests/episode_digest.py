"""What the parity tests compare: a digest of everything a policy saw and did in an episode, made
the same way by a reference loop and by a policy inside a real session.

``DigestingPolicy`` is the base of the reference modules' deterministic policies: with
``$VLAEVAL_DIGEST_DIR`` set, each episode's digest is written to ``<task>-<seed>.json`` there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

DIGEST_DIR = "VLAEVAL_DIGEST_DIR"


class EpisodeDigest:
    """A running SHA-256 over each view (the instruction, then each policy key's dtype, shape and
    bytes) and each action (as float32), with the outcome; the first image and the instruction are
    also kept apart, so a mismatch says where it starts."""

    def __init__(self, keys: tuple[str, ...], image_key: str) -> None:
        self.keys, self.image_key = keys, image_key
        self.sha = hashlib.sha256()
        self.steps = 0
        self.first_image: str | None = None
        self.instruction: str | None = None
        self.success = False
        self.episode_return: float | None = None
        self.length: int | None = None

    def observe(self, view: dict[str, Any]) -> None:
        self.instruction = str(view.get("instruction", ""))
        self.sha.update(self.instruction.encode())
        for key in self.keys:
            value = np.ascontiguousarray(view[key])
            self.sha.update(f"{key}:{value.dtype}:{value.shape}".encode())
            self.sha.update(value.tobytes())
        if self.first_image is None:
            self.first_image = hashlib.sha256(np.ascontiguousarray(view[self.image_key]).tobytes()).hexdigest()

    def act(self, action: np.ndarray) -> None:
        self.sha.update(np.asarray(action, np.float32).tobytes())
        self.steps += 1

    def outcome(self, success: bool, episode_return: float, length: int) -> None:
        self.success, self.episode_return, self.length = bool(success), float(episode_return), int(length)

    def result(self) -> dict[str, Any]:
        return {
            "digest": self.sha.hexdigest(),
            "first_image": self.first_image,
            "instruction": self.instruction,
            "steps": self.steps,
            "success": self.success,
            "episode_return": self.episode_return,
            "length": self.length,
        }


class DigestingPolicy:
    """A deterministic ``--policy`` whose every view and action goes into its episode's digest;
    a subclass says its keys and image (``KEYS``, ``IMAGE``) and how it acts (``decide``)."""

    chunk_size = 1
    KEYS: tuple[str, ...] = ()
    IMAGE = ""

    def reset(self, episode: Any) -> None:
        self.episode = episode
        self.digest = EpisodeDigest(self.KEYS, self.IMAGE)
        self.t = 0

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        self.digest.observe(obs)
        action = self.decide(obs)
        self.digest.act(action)
        self.t += 1
        return action

    def decide(self, obs: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def end_episode(self, result: Any) -> None:
        self.digest.outcome(result.success, result.episode_return, result.length)
        folder = os.environ.get(DIGEST_DIR)
        if folder:
            path = os.path.join(folder, f"{self.episode.task}-{self.episode.seed}.json")
            with open(path, "w", encoding="utf-8") as stream:
                json.dump(self.digest.result(), stream)


def read_digests(folder: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The digests a session's policy wrote to ``folder``, by (task, seed)."""
    found = {}
    for path in folder.glob("*.json"):
        task, _, seed = path.stem.rpartition("-")
        found[(task, int(seed))] = json.loads(path.read_text())
    return found
