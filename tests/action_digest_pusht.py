"""Push-T whose every record carries a digest of the actions its env was given (the extra
``actions_sha256``): what a policy did, step by step, read from the records alone, wherever the
policy ran (beside the env, or on a server). A copy of the benchmark file names it as its
``env.factory``; it is importable from the workers of any interpreter through ``PYTHONPATH``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from pytest_vlaeval.benchmark.model import Benchmark, Task
from pytest_vlaeval.envs.adapter import ExtraValue
from pytest_vlaeval.envs.pusht import PushTEnv
from pytest_vlaeval.envs.pusht import make_env as make_pusht

FACTORY = "action_digest_pusht:make_env"


class ActionDigestPushT(PushTEnv):
    def reset(self, *, seed: int, options: dict[str, Any]) -> Any:
        self.actions = hashlib.sha256()
        return super().reset(seed=seed, options=options)

    def step(self, action: np.ndarray) -> Any:
        self.actions.update(np.asarray(action, dtype=np.float32).tobytes())
        return super().step(action)

    def episode_extras(self) -> Mapping[str, ExtraValue]:
        return {**super().episode_extras(), "actions_sha256": self.actions.hexdigest()}


def make_env(task: Task, benchmark: Benchmark, render_request: str) -> ActionDigestPushT:
    built = make_pusht(task, benchmark, render_request)
    return ActionDigestPushT(built.env, built.instruction)
