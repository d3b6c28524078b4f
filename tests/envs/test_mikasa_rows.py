"""``MikasaRows``: a ManiSkill GPU simulation of K scenes as lockstep rows, driven here by a stand-in
with ManiSkill's batched shapes (the real one needs SAPIEN's PhysX GPU library; see docs/gpu.md)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from pytest_vlaeval.envs.mikasa import MikasaRows  # noqa: E402
from pytest_vlaeval.errors import EnvError  # noqa: E402

pytestmark = pytest.mark.torch


class BatchedStandIn:
    """ManiSkill's vector env as the wrappers leave it: (K, ...) tensors, per-row lists, one step for all rows."""

    def __init__(self, num_envs: int) -> None:
        self.unwrapped = SimpleNamespace(num_envs=num_envs, device=torch.device("cpu"))
        self.max_episode_steps = 5
        self.resets: list[tuple[list[int], dict]] = []
        self.actions: list[np.ndarray] = []
        self.seeds = torch.zeros(num_envs)

    def reset(self, seed, options):
        self.resets.append((list(seed), options))
        self.seeds = torch.as_tensor(seed, dtype=torch.float64)
        return self._obs(), {"language_instruction": [f"seed {s}" for s in seed], "success": torch.zeros(len(seed))}

    def step(self, action):
        if tuple(action.shape) != (len(self.seeds), 7) or action.dtype != torch.float32:
            raise ValueError(f"bad action batch {tuple(action.shape)} {action.dtype}")
        self.actions.append(action.numpy().copy())
        reward = action[:, 0].double() + self.seeds % 10
        success = action[:, 1] > 0.5
        terminated = torch.zeros(len(self.seeds), dtype=torch.bool)
        return self._obs(), reward, terminated, torch.zeros_like(terminated), {"success": success, "elapsed": 1}

    def _obs(self):
        rows = len(self.seeds)
        return {"rgb": torch.arange(rows)[:, None, None, None].expand(rows, 2, 2, 6), "proprio": self.seeds[:, None]}

    def close(self):
        pass


def test_rows_keep_a_lone_envs_shapes_and_a_short_block_is_padded() -> None:
    stand_in = BatchedStandIn(4)
    rows = MikasaRows(stand_in, "gpu")
    assert rows.num_envs == 4 and rows.max_episode_steps == 5
    resets = rows.reset([11, 12, 13], {"reconfigure": True})
    assert stand_in.resets == [([11, 12, 13, 13], {"reconfigure": True})], "the unused row repeats the last seed"
    assert len(resets) == 3
    obs, info = resets[1]
    assert tuple(obs["rgb"].shape) == (1, 2, 2, 6) and int(obs["rgb"][0, 0, 0, 0]) == 1
    assert obs["proprio"].tolist() == [[12.0]] and info["language_instruction"] == "seed 12"

    actions = [
        np.array([0.5, 1, 0, 0, 0, 0, 0], np.float32),
        None,
        np.array([0.25, 0, 0, 0, 0, 0, 0], np.float32),
        None,
    ]
    steps = rows.step(actions)
    assert steps[1] is None and steps[3] is None
    obs, reward, terminated, truncated, info = steps[0]
    assert reward == pytest.approx(1.5) and info["success"] is True and terminated is False and truncated is False
    assert steps[2][1] == pytest.approx(3.25) and steps[2][4]["success"] is False
    assert info["elapsed"] == 1, "what is the same for every row stays as it is"
    np.testing.assert_array_equal(stand_in.actions[0][1], np.zeros(7))  # a row that has ended steps with zeros


def test_a_fault_of_the_whole_simulator_is_an_env_error() -> None:
    rows = MikasaRows(BatchedStandIn(2), "gpu")
    rows.reset([1, 2], {})
    with pytest.raises(EnvError, match=r"env\.step raised ValueError"):
        rows.step([np.zeros(6, np.float32), None])
