"""What a policy may return from ``act``: every real dtype the benchmarks' own runners accept
(``torch.as_tensor(x).to(torch.float32)``), and one policy-error line for anything else."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import episode_records, run_dir

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy import as_action_chunk

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--vla-live=off"]
VALUES = [0.5, -0.25, 1.0, 0.0, -1.0, 0.75, 0.125]  # exact in every float dtype below


class RaisingArray:
    def __array__(self, *args: object, **kwargs: object) -> np.ndarray:
        raise RuntimeError("weights not loaded")


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int64, torch.int8, torch.bool]
)
def test_every_real_torch_dtype_becomes_float32_as_the_reference_runner_does(dtype: torch.dtype) -> None:
    tensor = torch.tensor(VALUES, requires_grad=dtype.is_floating_point).to(dtype)
    chunk = as_action_chunk(tensor, 7, chunk_size=1)
    reference = torch.as_tensor(tensor.detach()).to(torch.float32).numpy()
    assert chunk.dtype == np.float32 and np.array_equal(chunk[0], reference)


@pytest.mark.parametrize(
    "output", [VALUES, tuple(VALUES), np.array(VALUES, dtype=np.float16), np.array(VALUES, dtype=object), [2**64] * 7]
)
def test_lists_and_numpy_of_any_real_dtype_are_accepted(output: object) -> None:
    chunk = as_action_chunk(output, 7, chunk_size=1)
    assert chunk.dtype == np.float32 and np.array_equal(chunk[0], np.asarray(output, dtype=np.float64))


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ([10**400] * 7, "policy returned list holding a number beyond float range (OverflowError: int too large"),
        (RaisingArray(), "policy returned RaisingArray, which is not an array of numbers (RuntimeError: weights"),
        ([[0.1] * 7, [0.2] * 6], "policy returned list, which is not an array of numbers (ValueError: "),
        (None, "policy returned None; expected an array of actions"),
        (["0.5"] * 7, "policy returned text (list, dtype <U3); expected real numbers, not strings or bytes"),
        ([b"1"] * 7, "policy returned text (list, dtype |S1); expected real numbers, not strings or bytes"),
        (np.array(["0.5"] * 7, dtype=object), "policy returned ndarray holding str; expected real numbers"),
        ({"action": VALUES}, "policy returned dict holding dict; expected real numbers"),
        (torch.ones(7, dtype=torch.complex64), "policy returned a Tensor of dtype torch.complex64; expected real"),
        (np.full(7, 1e39), "policy returned 1e+39 in an action chunk of shape (7,), which overflows float32 (largest"),
        (torch.full((7,), -1e39, dtype=torch.float64), "policy returned 1e+39 in an action chunk of shape (7,), which"),
        (np.full(7, np.inf), "policy returned inf in an action chunk of shape (7,); expected finite values"),
    ],
)
def test_what_cannot_be_actions_is_one_policy_error_line_naming_it(output: object, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        as_action_chunk(output, 7, chunk_size=1)
    assert message in str(caught.value) and "\n" not in str(caught.value)


POLICIES = """
import numpy as np
import torch

class Bf16:
    chunk_size = 2
    def reset(self, episode):
        pass
    def act(self, obs):
        return torch.full((1, 2, 7), 0.96875, dtype=torch.bfloat16)

class HugeInt:
    chunk_size = 1
    def reset(self, episode):
        pass
    def act(self, obs):
        return [10**400] * 7

class Unconvertible:
    chunk_size = 1
    def reset(self, episode):
        pass
    def act(self, obs):
        class Weights:
            def __array__(self, *args, **kwargs):
                raise RuntimeError("weights not loaded")
        return Weights()
"""


def test_a_bf16_policy_runs_its_episodes_in_a_session(fake: pytest.Pytester) -> None:
    fake.makepyfile(policies=POLICIES)
    result = fake.runpytest(*SHORT, "--policy=policies:Bf16", "--vla-tasks=Alpha-v0", "--episodes=2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    records = episode_records(run_dir(fake))
    assert [(r["outcome"], r["error_kind"]) for r in records.values()] == [("success", None)] * 2


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("HugeInt", "policy returned list holding a number beyond float range (OverflowError: "),
        ("Unconvertible", "policy returned Weights, which is not an array of numbers (RuntimeError: weights"),
    ],
)
def test_unconvertible_actions_are_a_one_line_policy_error_in_a_session(
    fake: pytest.Pytester, policy: str, message: str
) -> None:
    fake.makepyfile(policies=POLICIES)
    result = fake.runpytest(*SHORT, f"--policy=policies:{policy}", "--vla-tasks=Alpha-v0", "--episodes=1")
    (record,) = episode_records(run_dir(fake)).values()
    assert (record["outcome"], record["error_kind"]) == ("error", "policy")
    assert record["message"].startswith(message), record["message"]
    assert "contract.py" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*ERROR at setup of Alpha-v0 seed 100*", f"{message}*", "*vlaeval: Fake-Bench*"])


@pytest.mark.long
@pytest.mark.mikasa
def test_bf16_actions_drive_a_real_mikasa_episode_as_the_reference_runner_does() -> None:
    """One real episode with bf16 actions; the benchmark's own ``run_episode`` with the same
    bf16 tensors on a fresh env gives the same episode."""
    from helpers import lone_runner
    from mikasa_reference import reference_episode

    from pytest_vlaeval.benchmark.model import resolve_benchmark, select
    from pytest_vlaeval.policy import EpisodeInfo, RandomPolicy

    task, seed = "RememberColor3-VLA-v0", 4242424242
    benchmark, _ = resolve_benchmark("mikasa:short")
    selection = select(benchmark, "short", env_ids=[task], episodes=1)
    runner = lone_runner(selection, "spy_policies:Bf16Random")
    try:
        record = runner.run(benchmark.task(task), seed, 0)
    finally:
        runner.close()
    assert (record.outcome, record.error_kind) in (("success", None), ("failure", None)), record.message

    class ReferencePolicy:
        def __init__(self) -> None:
            self.policy = RandomPolicy()
            self.chunk_size = self.policy.chunk_size
            self.policy.reset(EpisodeInfo(task=task, seed=seed, instruction="", episode_index=0, max_steps=0))

        def forward(self, obs: dict) -> torch.Tensor:
            return torch.as_tensor(self.policy.act(obs)).to(torch.bfloat16)

    assert (record.success, record.episode_return, record.length) == reference_episode(task, ReferencePolicy(), seed)
