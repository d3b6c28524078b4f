"""The policy contract (``policy.contract``): the action shapes accepted and copied, and one
policy error naming the problem for anything else, alone and in a session.
Every real dtype, torch's included: ``test_actions.py``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import read_json, run_dir

from pytest_vlaeval import strict_json
from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy import as_action_chunk
from pytest_vlaeval.policy.contract import describe_policy

SHORT = ["--benchmark=fake.yaml:short"]


@pytest.mark.parametrize("shape", [(7,), (1, 7), (4, 7), (1, 4, 7)])
def test_accepted_action_shapes_become_k_by_d(shape: tuple[int, ...]) -> None:
    out = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) / 100
    chunk = as_action_chunk(out, 7, chunk_size=4)
    assert chunk.dtype == np.float32 and chunk.shape == (int(np.prod(shape)) // 7, 7)
    assert not np.shares_memory(chunk, out)


@pytest.mark.torch
def test_torch_actions_are_accepted_and_copied() -> None:
    torch = pytest.importorskip("torch")

    tensor = torch.ones(2, 7)
    chunk = as_action_chunk(tensor, 7, chunk_size=2)
    tensor.zero_()
    assert chunk.sum() == 14


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (np.zeros((2, 6)), r"shape \(2, 6\)"),
        (np.zeros((2, 2, 7)), r"shape \(2, 2, 7\)"),
        (np.array([np.inf] * 7), "inf in an action chunk"),
        ("go left", r"policy returned text \(str"),
        (None, "policy returned None;"),
    ],
)
def test_invalid_actions_are_policy_errors(output: object, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        as_action_chunk(output, 7, chunk_size=2)


POLICIES = """
import numpy as np

class Base:
    chunk_size = 1
    def reset(self, episode):
        pass

class Raises(Base):
    def act(self, obs):
        raise RuntimeError("model exploded")

class WrongShape(Base):
    def act(self, obs):
        return np.zeros((3, 6), dtype=np.float32)

class Nan(Base):
    def act(self, obs):
        return np.full(7, np.nan)

class Empty(Base):
    chunk_size = 4
    def act(self, obs):
        return np.zeros((0, 7))

class Overlong(Base):
    def act(self, obs):
        return np.zeros((8, 7))

class NoAct:
    chunk_size = 1
    def reset(self, episode):
        pass
"""


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("Raises", "policy.act raised RuntimeError: model exploded"),
        ("WrongShape", "policy returned shape (3, 6); expected (7,), (K, 7) or (1, K, 7) with 1 <= K <= chunk_size=1"),
        ("Nan", "policy returned NaN in an action chunk of shape (7,); expected finite values"),
        ("Empty", "policy returned an empty chunk (0, 7)"),
        ("Overlong", "policy returned 8 actions (8, 7) but declares chunk_size=1"),
        ("NoAct", "policy 'policies:NoAct' (NoAct) lacks act"),
    ],
)
def test_bad_policy_output_is_an_error_naming_the_problem(fake: pytest.Pytester, policy: str, message: str) -> None:
    fake.makepyfile(policies=POLICIES)
    result = fake.runpytest(*SHORT, f"--policy=policies:{policy}", "--vla-tasks=Alpha-v0", "--episodes=2", "-rA", "-vv")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([f"ERROR fake-short::Alpha-v0::100 - {message}*"])
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["n_errors"] == 2 and summary["n_completed"] == 0 and summary["sr_split"] is None
    assert summary["tasks_without_results"] == ["Alpha-v0"]
    if policy == "Raises":  # the policy's own traceback is kept for the user
        result.stdout.fnmatch_lines(["*episode error traceback*", "*in act*", "*RuntimeError: model exploded*"])


def test_a_config_holding_nan_or_inf_is_described_in_json_a_run_can_hold() -> None:
    """JSON has no NaN: the run's policy.json and every record carry such a value as its text, so a
    policy's configuration never makes the run unreadable (or the record unwritable)."""

    class Configured:
        name = "configured"

        def __init__(self) -> None:
            self.config = {
                "temperature": float("nan"),
                "bounds": [np.float32("inf"), -float("inf")],
                "steps": np.int64(3),
            }

    described = describe_policy(Configured(), "configured")
    assert described["config"] == {"temperature": "nan", "bounds": ["inf", "-inf"], "steps": 3}
    assert strict_json.loads(strict_json.dumps(described)) == described
