"""Lockstep groups (``--vla-lockstep``) on the fake benchmark: every episode's record is the one it
gets alone, serial or under ``-n 2``, for per-episode and batched policies; a row's failure stays on
its row; bad combinations are one line. Real MIKASA groups: ``tests/envs/test_mikasa.py``."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_usage_error, episode_records, read_json, run_dir
from spy_policies import BatchedMemory

SHORT = ["--benchmark=fake.yaml:short", "--episodes=5", "-p", "no:cacheprovider"]
SAME_ALONE = ("outcome", "success", "episode_return", "length", "message", "error_kind", "chunk_size", "model")
"""What a record says of its episode: everything but where, when and how fast it ran."""


def outcomes(fake: pytest.Pytester, root: str) -> dict:
    (directory,) = (fake.path / root).iterdir()
    return {key: tuple(r[f] for f in SAME_ALONE) for key, r in episode_records(directory).items()}


@pytest.mark.parametrize("policy", ["random", "spy_policies:EpisodeMemory"])
def test_lockstep_records_equal_lone_records_serial_and_under_xdist(fake: pytest.Pytester, policy: str) -> None:
    alone = fake.runpytest(*SHORT, f"--policy={policy}", "--vla-results=alone")
    serial = fake.runpytest(*SHORT, f"--policy={policy}", "--vla-lockstep=3", "--vla-results=serial")
    parallel = fake.runpytest_subprocess(
        *SHORT, f"--policy={policy}", "--vla-lockstep=2", "-n", "2", "--vla-results=parallel"
    )
    assert alone.parseoutcomes() == serial.parseoutcomes() == parallel.parseoutcomes()
    lone = outcomes(fake, "alone")
    assert len(lone) == 10 and {o[0] for o in lone.values()} == {"success", "failure"}
    assert outcomes(fake, "serial") == lone
    assert outcomes(fake, "parallel") == lone
    (directory,) = (fake.path / "parallel").iterdir()
    records = episode_records(directory)
    assert {r["lockstep"] for r in records.values()} == {1, 2}, "groups of 2, and each task's last seed alone"
    for task in ("Alpha-v0", "Beta-v0"):
        for first in (100, 102):
            assert records[task, first]["worker"] == records[task, first + 1]["worker"], "a group runs on one worker"


def test_one_tasks_two_groups_run_on_both_workers(fake: pytest.Pytester) -> None:
    """One task, two groups of 4 under -n 2: each worker runs one, the second did not leave with
    nothing because half the work less an env build (3 episodes) is not a whole group."""
    fake.runpytest_subprocess(
        "--benchmark=fake.yaml:long", "--episodes=8", "--vla-lockstep=4", "-n", "2", "-p", "no:cacheprovider"
    )
    records = episode_records(run_dir(fake))
    assert len(records) == 8
    workers = {seed: r["worker"] for (_, seed), r in records.items()}
    assert {workers[seed] for seed in range(100, 104)} != {workers[seed] for seed in range(104, 108)}
    assert set(workers.values()) == {"gw0", "gw1"}


def test_a_batched_policy_is_called_once_per_step_for_the_block(fake: pytest.Pytester) -> None:
    """``act_batch`` with per-row state gives the per-episode policy's records, in calls of up to K rows."""
    fake.runpytest(*SHORT, "--policy=spy_policies:EpisodeMemory", "--vla-results=alone")
    BatchedMemory.batch_sizes.clear()
    fake.runpytest(*SHORT, "--policy=spy_policies:BatchedMemory", "--vla-lockstep=3", "--vla-results=batched")
    lone = {key: value[:5] for key, value in outcomes(fake, "alone").items()}  # model and chunk size differ
    assert {key: value[:5] for key, value in outcomes(fake, "batched").items()} == lone
    sizes = BatchedMemory.batch_sizes
    assert max(sizes) == 3 and min(sizes) >= 1
    # Alpha: 6 steps (3 calls of a chunk of 2) per episode; blocks of 3 and 2 rows, rows ending early drop out.
    assert len(sizes) < sum(r[3] for r in lone.values()) / 2, "fewer calls than the lone episodes' chunks"


def test_a_failing_row_is_an_error_and_its_block_mates_run_on(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "--policy=spy_policies:EpisodeMemory", "--vla-results=alone")
    result = fake.runpytest(*SHORT, "--policy=spy_policies:FailsOnSeed101", "--vla-lockstep=3", "--vla-results=b")
    records = episode_records(next((fake.path / "b").iterdir()))
    broken = {key: r for key, r in records.items() if key[1] == 101}
    assert [r["outcome"] for r in broken.values()] == ["error", "error"]
    assert all("seed 101 broke" in r["message"] and r["error_kind"] == "policy" for r in broken.values())
    lone = outcomes(fake, "alone")
    mates = {key: value[:-1] for key, value in outcomes(fake, "b").items() if key[1] != 101}  # all but the model
    assert mates == {key: value[:-1] for key, value in lone.items() if key[1] != 101}
    assert result.parseoutcomes()["errors"] == 2


def test_a_simulator_of_num_envs_rows_is_used_and_fingerprinted(fake: pytest.Pytester) -> None:
    """A benchmark whose factory steps K scenes in one simulator on this backend (its ``vector_backends``)
    gets ``num_envs=K``; the run's fingerprint says so, so another K is another run."""
    text = (
        (fake.path / "fake.yaml").read_text().replace("  reset_options:", "  vector_backends: [cpu]\n  reset_options:")
    )
    fake.makefile(".yaml", vector=text)
    args = ["--benchmark=vector.yaml:short", "--episodes=5", "-p", "no:cacheprovider", "--vla-render=cpu"]
    fake.runpytest(*args, "--vla-results=alone")
    fake.runpytest(*args, "--vla-lockstep=2", "--vla-results=rows")
    lone = outcomes(fake, "alone")
    assert outcomes(fake, "rows") == lone
    (directory,) = (fake.path / "rows").iterdir()
    assert {r["render_backend"] for r in episode_records(directory).values()} == {"fake-vector"}
    assert read_json(directory / "fingerprint.json")["num_envs"] == 2
    assert "num_envs" not in read_json(next((fake.path / "alone").iterdir()) / "fingerprint.json")
    other = fake.runpytest(*args, "--vla-lockstep=3", "--vla-results=rows")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    assert "different fingerprint (num_envs: 2 -> 3)" in other.stderr.str()


def test_separate_envs_need_no_fingerprint_change(fake: pytest.Pytester) -> None:
    """K separate envs are K lone episodes: a lockstep session adds to a lone session's run."""
    fake.runpytest(*SHORT, "--vla-tasks=Alpha-v0")
    second = fake.runpytest(*SHORT, "--vla-tasks=Alpha-v0", "--vla-lockstep=2", "--vla-rerun=failures")
    assert second.ret in (0, 1), second.stderr.str()
    assert "num_envs" not in read_json(run_dir(fake) / "fingerprint.json")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--vla-lockstep=0"], "argument --vla-lockstep: must be in [1, inf), got 0"),
        (["--vla-lockstep=2", "--vla-video=all"], "--vla-video=all records lone episodes"),
        (["--vla-lockstep=2", "-n", "2", "--dist=load"], "--vla-lockstep=2 sends each group of episodes to one worker"),
    ],
)
def test_bad_lockstep_combinations_are_one_line(fake: pytest.Pytester, args: list[str], expected: str) -> None:
    result = fake.runpytest(*SHORT, *args)
    assert_one_line_usage_error(result, expected)


# -- the reference order (--vla-reference-order) ------------------------------------------------


def test_the_reference_order_keeps_each_task_on_one_worker_and_says_so(fake: pytest.Pytester) -> None:
    fake.runpytest_subprocess(*SHORT, "--vla-reference-order", "-n", "2")
    (directory,) = (fake.path / "results").iterdir()
    records = episode_records(directory)
    for task in ("Alpha-v0", "Beta-v0"):
        assert len({r["worker"] for key, r in records.items() if key[0] == task}) == 1
    assert read_json(directory / "fingerprint.json")["order"] == "reference"
    lone = fake.runpytest(*SHORT, f"--vla-results={directory.parent}")
    assert_one_line_usage_error(lone, "different fingerprint (order: 'reference' -> None)")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--vla-shard=1/2"], "--vla-shard would break that sequence"),
        (["--vla-retries=1"], "--vla-retries=1 would break that sequence"),
        (["--vla-lockstep=2"], "--vla-lockstep=2 would break that sequence"),
        (["--vla-resume"], "--vla-resume would break that sequence"),
        (["-k", "102 or 103"], "Alpha-v0 would start past episode 0 (a -k or -m selection?): select whole tasks"),
    ],
)
def test_what_would_break_the_reference_order_is_one_line(
    fake: pytest.Pytester, args: list[str], expected: str
) -> None:
    result = fake.runpytest(*SHORT, "--vla-reference-order", *args)
    assert_one_line_usage_error(result, expected)
