"""Seed-clustered statistics and the sequential gate: hand-computed values, and real sessions
(pytester on the fake benchmark, serially and under ``-n 2``) that stop as soon as the verdict
is settled."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_usage_error, read_json, run_dir

from pytest_vlaeval.gate.sequential import betting_bounds
from pytest_vlaeval.gate.stats import (
    mcnemar_exact,
    paired_seed_sums,
    seed_clustered_interval,
    t_quantile,
    wilson,
)
from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED, FAIL, PASS, UNDECIDED, drop_verdict, min_sr_verdict

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]
UNDECIDED_EXIT = 7
"""``--vla-undecided-exit``'s default."""


# -- the statistics, against values worked out by hand -------------------------------------------


def test_seed_clustered_interval_known_values() -> None:
    outcomes = {s: s % 2 == 0 for s in range(10)}  # 5 of 10
    assert seed_clustered_interval([outcomes]) == wilson(5, 10), "one task: its own Wilson interval"
    # Two tasks with identical outcomes: per-seed means are 0 or 1, so there are only 10
    # independent episodes, not 20 (the old task-independent interval used 20); the variance
    # comes from 10 seeds, so the quantile is t's on 9 degrees of freedom, not the normal z.
    t9 = t_quantile(0.975, 9)
    assert seed_clustered_interval([outcomes, outcomes]) == pytest.approx(wilson(5, 10, t9))
    # Opposite outcomes: every seed's mean is 1/2, variance 0: as informative as 20 episodes.
    opposite = {s: not y for s, y in outcomes.items()}
    assert seed_clustered_interval([outcomes, opposite]) == pytest.approx(wilson(10, 20, t9))
    # Unbalanced: A on seeds 1-4 (SR 1/2), B on seeds 1-2 (SR 1). Estimate 3/4; residuals
    # r_s = (Y_As - 1/2)/8 = +-1/16, sum of squares 4/256, times 4/3 = 1/48; effective episodes
    # (3/4)(1/4) * 48 = 9, kept within [4 seeds, 6 episodes] -> Wilson(4.5 of 6), t on 3 df.
    a = {1: True, 2: False, 3: True, 4: False}
    b = {1: True, 2: True}
    assert seed_clustered_interval([a, b]) == pytest.approx(wilson(4.5, 6, t_quantile(0.975, 3)))
    assert seed_clustered_interval([{1: True}, {1: False}]) == (0.0, 1.0), "one seed: no spread to go by"


def test_t_quantile_known_values() -> None:
    expected = {1: 12.7062, 2: 4.3027, 4: 2.7764, 9: 2.2622, 49: 2.0096}  # tables, 97.5%
    assert {df: round(t_quantile(0.975, df), 4) for df in expected} == expected
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9) and t_quantile(0.95, 10) == pytest.approx(
        1.8125, abs=1e-4
    )


def test_paired_seed_sums_known_values() -> None:
    current = {"A": {1: True, 2: False, 3: True}, "B": {1: False, 2: False}, "C": {1: True}}
    baseline = {"A": {1: True, 2: True, 3: True}, "B": {1: True, 2: False, 3: True}}
    # Compared tasks A and B; seed 3 has no B episode in this run, so it leaves the comparison.
    assert paired_seed_sums(current, baseline) == {1: -1, 2: -1}
    assert mcnemar_exact(10, 2) == pytest.approx(158 / 4096)


def test_betting_confidence_sequence_covers_at_every_look() -> None:
    """Time-uniform coverage: over 50 observations, the share of paths whose sequence ever
    misses the mean stays at or below alpha (plus simulation error)."""
    rng = np.random.default_rng(1)
    x = rng.binomial(1, 0.3, size=(2000, 50)) * 0.5 + rng.uniform(0, 0.5, size=(2000, 50))  # mean 0.4
    lower, upper = betting_bounds(x, 0.05)
    ever_missed = ((lower > 0.4) | (upper < 0.4)).any(axis=1).mean()
    assert ever_missed <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 2000)
    assert (upper[:, -1] - lower[:, -1]).mean() < 0.35, "it narrows as observations come"
    assert betting_bounds(np.ones(1), 0.05) == (pytest.approx([0.0]), pytest.approx([1.0])), "one seed says nothing"


def test_verdict_rules() -> None:
    assert list(drop_verdict(np.array([0.06, -0.1, -0.1]), np.array([0.5, 0.05, 0.2]), 0.05)) == [FAIL, PASS, UNDECIDED]
    assert list(min_sr_verdict(np.array([0.5, 0.1, 0.1]), np.array([0.9, 0.49, 0.6]), 0.5)) == [PASS, FAIL, UNDECIDED]


# -- sessions ------------------------------------------------------------------------------------


def _baseline(fake: pytest.Pytester, name: str, episodes: int, success: bool) -> Path:
    """A baseline directory in the reference runner's per-task schema, every episode ``success``."""
    directory = fake.path / name
    directory.mkdir()
    seeds = [100 + i for i in range(episodes)]
    for env_id in ("Alpha-v0", "Beta-v0"):
        data = {"env_id": env_id, "successes": [success] * episodes, "sr": float(success), "episode_seeds": seeds}
        (directory / f"{env_id}.json").write_text(json.dumps(data))
    return directory


def _records(directory: Path) -> list[dict]:
    lines = [
        json.loads(line) for log in (directory / "episodes").glob("*.jsonl") for line in log.read_text().splitlines()
    ]
    return sorted(lines, key=lambda r: r["time"])


def test_sequential_gate_stops_a_regressed_run_early_under_xdist_and_resumes(fake: pytest.Pytester) -> None:
    better = _baseline(fake, "better", 20, True)  # the zero policy never succeeds: a drop of 1
    args = [*SHORT, "--episodes=20", "--policy=zero", "--vla-block=2", f"--vla-baseline={better}"]
    result = fake.runpytest_subprocess(*args, "--vla-sequential", "-n", "2")
    assert result.ret == EXIT_GATE_FAILED
    result.stdout.fnmatch_lines(
        [
            "the sequential gate stopped early: * episodes not needed (not errors); complete the canonical run with: "
            "pytest * --vla-resume",
            "vlaeval gate: FAIL: split SR drop +1.000 ?95% CS +0.*, +1.000? vs max drop 0.050 after * looks (* seeds), "
            "stopped early (* episodes saved); method: sequential betting confidence sequence, seeds as the unit (2 tasks < 10), alpha 0.05",
        ]
    )
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    gate = summary["gate"]
    records = _records(directory)
    assert gate["verdict"] == FAIL and gate["stopped_early"] and gate["looks"] >= 1
    assert gate["seeds_looked_at"] == 2 * gate["looks"] < 20
    assert gate["episodes_saved"] == 40 - len(records) == summary["n_missing"] > 0
    assert summary["n_errors"] == 0 and summary["partial"] and not summary["interrupted"]
    # Block order under -n 2: each worker's episodes never go back a block, and past the
    # deciding look at most one episode per worker (the one it held to start its last) ran.
    for worker in {r["worker"] for r in records}:
        blocks = [(r["seed"] - 100) // 2 for r in records if r["worker"] == worker]
        assert blocks == sorted(blocks), (worker, blocks)
    beyond = [r for r in records if (r["seed"] - 100) // 2 >= gate["looks"]]
    assert len(beyond) <= 2, beyond
    # The summary is resumable: the command it names completes the canonical run.
    command = shlex.split(gate["complete_with"])
    assert command[0] == "pytest" and "--vla-sequential" not in command and command[-1] == "--vla-resume"
    completed = fake.runpytest_subprocess(*command[1:])
    assert completed.ret == EXIT_GATE_FAILED
    final = read_json(directory / "summary.json")
    assert final["n_completed"] == 40 and not final["partial"] and final["gate"]["paired_seeds"] == 20
    assert len(_records(directory)) == 40, "the resume ran only the episodes the gate had not needed"


def test_sequential_gate_passes_early_serially_in_block_order(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "--episodes=20", "--vla-results=base")
    (base,) = (fake.path / "base").iterdir()
    args = [*SHORT, "--episodes=20", "--vla-block=5", "--vla-sequential", f"--vla-baseline={base}"]
    listed = fake.runpytest(*args, "--vla-max-drop=0.5", "--co", "-q")
    ids = [line for line in listed.outlines if line.startswith("fake-short::")]
    expected = [
        f"fake-short::{task}::{100 + b * 5 + i}" for b in range(4) for task in ("Alpha-v0", "Beta-v0") for i in range(5)
    ]
    assert ids == expected, "every task's block b before any task's block b+1"
    result = fake.runpytest(*args, "--vla-max-drop=0.5")  # the same policy: a drop of 0
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate: PASS: split SR drop +0.000 ?95% CS *? vs max drop 0.500 after 2 looks (10 seeds), stopped early (20 episodes saved)*"
        ]
    )
    gate = read_json(run_dir(fake) / "summary.json")["gate"]
    assert gate["verdict"] == PASS and gate["episodes_saved"] == 20 and gate["bounds"][1] <= 0.5


def test_sequential_gate_undecided_has_its_own_exit_status(fake: pytest.Pytester) -> None:
    same = _baseline(fake, "same", 4, False)
    args = [*SHORT, "--episodes=4", "--policy=zero", "--vla-block=2", "--vla-sequential", f"--vla-baseline={same}"]
    result = fake.runpytest(*args)
    assert result.ret == UNDECIDED_EXIT
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate: UNDECIDED: split SR drop +0.000 ?95% CS *? vs max drop 0.050 after 2 looks (4 seeds); method: *"
        ]
    )
    assert read_json(run_dir(fake) / "summary.json")["gate"]["stopped_early"] is False
    assert fake.runpytest(*args, "--vla-undecided-exit=0").ret == pytest.ExitCode.OK


def test_min_sr_gate_stops_as_soon_as_the_split_sr_is_known_below(fake: pytest.Pytester) -> None:
    result = fake.runpytest(
        *SHORT, "--episodes=20", "--policy=zero", "--vla-block=2", "--vla-sequential", "--vla-min-sr=0.8"
    )
    assert result.ret == EXIT_GATE_FAILED
    result.stdout.fnmatch_lines(
        ["vlaeval gate: FAIL: split SR 0.000 ?95% CS 0.000, 0.*? vs min SR 0.800 after * looks*stopped early*"]
    )
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["gate"]["min_sr"] == 0.8 and summary["n_missing"] == summary["gate"]["episodes_saved"] > 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--vla-min-sr=0.5"], "--vla-min-sr is a sequential gate: add --vla-sequential"),
        (["--vla-sequential"], "--vla-sequential needs exactly one of --vla-baseline=DIR or --vla-min-sr=X"),
        (["--vla-sequential", "--vla-min-sr=1.5"], "--vla-min-sr must be a success rate in [0, 1], got 1.5"),
        (["--vla-sequential", "--vla-min-sr=0.5", "--vla-block=0"], "--vla-block must be >= 1 seed, got 0"),
        (
            ["--vla-sequential", "--vla-min-sr=0.5", "--vla-undecided-exit=300"],
            "--vla-undecided-exit must be in [0, 255], got 300",
        ),
        (["--vla-sequential", "--vla-min-sr=0.5", "-n", "2", "--dist=load"], "--vla-sequential orders seeds in blocks"),
        (["--vla-sequential", "--vla-min-sr=0.5", "--vla-shard=1/2"], "it does not combine with --vla-shard"),
        (
            ["--vla-sequential", "--vla-baseline=noseeds"],
            "noseeds/Alpha-v0.json: no episode_seeds field; the gate pairs episodes by seed",
        ),
    ],
)
def test_sequential_gate_bad_options_are_one_line_errors(fake: pytest.Pytester, args: list[str], expected: str) -> None:
    (fake.path / "noseeds").mkdir()
    (fake.path / "noseeds" / "Alpha-v0.json").write_text(
        json.dumps({"env_id": "Alpha-v0", "successes": [True], "sr": 1.0})
    )
    assert_one_line_usage_error(fake.runpytest(*SHORT, *args), expected)
