"""The built-in policies: ``--policy random`` reproducible per task and seed, ``--policy zero``
a policy that never succeeds."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import read_json, run_dir

from pytest_vlaeval.policy import EpisodeInfo, RandomPolicy

SHORT = ["--benchmark=fake.yaml:short"]


def test_random_policy_is_reproducible_per_task_and_seed_whatever_ran_before() -> None:
    def first_chunks(policy: RandomPolicy, task: str, seed: int) -> np.ndarray:
        policy.reset(EpisodeInfo(task=task, seed=seed, instruction="", episode_index=0, max_steps=3))
        return np.stack([policy.act({}) for _ in range(3)])

    fresh = first_chunks(RandomPolicy(), "A", 1)
    used = RandomPolicy()
    first_chunks(used, "B", 9)
    assert np.array_equal(first_chunks(used, "A", 1), fresh)
    assert not np.array_equal(first_chunks(used, "B", 1), fresh)
    assert np.abs(fresh).max() <= 1.0


def test_zero_policy_fails_every_episode(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*SHORT, "--policy=zero")
    result.assert_outcomes(failed=6)
    assert read_json(run_dir(fake) / "summary.json")["sr_split"] == 0.0
