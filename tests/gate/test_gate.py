"""Seed-clustered statistics and the sequential gate: hand-computed values, and real sessions
(pytester on the fake benchmark, serially and under ``-n 2``) that stop as soon as the verdict
is settled."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, TESTS, assert_one_line_usage_error, read_json, run_dir

from pytest_vlaeval.gate.methods import Betting, TTest, betting_bounds, method_for
from pytest_vlaeval.gate.plan import shown_ends
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


def test_the_rule_looks_at_the_spread_of_the_reference_srs_not_their_mean() -> None:
    """Half the tasks near 0 and half near 1 average 1/2, yet their per-seed values are lumpy:
    the t test was wrongly decided 0.10 of the time there, so the rule keeps the betting sequence."""
    assert isinstance(method_for([0.05, 0.95] * 6, 50), Betting)
    assert isinstance(method_for([0.5] * 12, 50), TTest)
    assert isinstance(method_for([0.5] * 9, 50), Betting), "fewer than 10 tasks"
    assert isinstance(method_for([0.5] * 12, 9), Betting), "fewer than 10 seeds"


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


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_sequential_gate_stops_where_the_baseline_has_no_seed_left_to_pair(
    fake: pytest.Pytester, workers: list[str]
) -> None:
    """A budget beyond the baseline's seeds adds nothing to the verdict: the gate's looks, its plan
    and the session end at the last seed it can pair, and every line says why."""
    same = _baseline(fake, "same", 5, False)  # seeds 100-104; the zero policy fails them too: a drop of 0
    args = [*SHORT, "--episodes=10", "--policy=zero", "--vla-block=2", "--vla-sequential", f"--vla-baseline={same}"]
    result = fake.runpytest_subprocess(*args, *workers)
    assert result.ret == UNDECIDED_EXIT
    why = "the baseline pairs none of this run's seeds after the first 5 of 10"
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate plan: betting confidence sequence (2 tasks < 10); earliest PASS at not within this budget, "
            "earliest FAIL at not within this budget of 5",
            f"vlaeval gate: {why}: the gate judges those, and the session stops there (a baseline run with "
            "--episodes=10 lets it use them all)",
            "vlaeval gate look 1 at 2 seeds: drop +0.000 ?-1.000, +1.000?, undecided; too few seeds yet to judge how "
            "likely a verdict is by 5",
            f"vlaeval gate: UNDECIDED: split SR drop +0.000 ?95% CS *? vs max drop 0.050 after 3 looks (5 seeds), "
            f"stopped early (* episodes saved); {why}; method: *",
        ]
    )
    gate = read_json(run_dir(fake) / "summary.json")["gate"]
    ran = len(_records(run_dir(fake)))
    assert gate["stopped_early"] and gate["episodes_saved"] == 20 - ran and gate["looks"] == 3
    # The blocks holding a paired seed ran (seed 105 shares block 2 with 104), nothing after them but,
    # under xdist, at most one episode per worker in flight.
    assert 12 <= ran <= (12 if not workers else 14), ran
    assert not result.stdout.lines[-1].startswith("vlaeval gate look"), "no look line after the last look"


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


def test_min_sr_gate_never_averages_over_a_task_that_only_errors(fake: pytest.Pytester) -> None:
    """A task whose every episode errors stays in the split SR: no seed has all tasks, so the
    verdict is UNDECIDED and names the task, never a PASS on the tasks that happened to run."""
    result = fake.runpytest(
        "--benchmark=fake.yaml",
        "-p",
        "no:cacheprovider",
        "--vla-tasks=Alpha-v0,BrokenSim-v0",
        "--episodes=6",
        "--policy=zero",
        "--vla-block=2",
        "--vla-sequential",
        "--vla-min-sr=0.1",
    )
    assert result.ret == UNDECIDED_EXIT, result.stdout.str()
    result.stdout.fnmatch_lines(["vlaeval gate: UNDECIDED: *no completed episode of BrokenSim-v0, so no seed pairs*"])
    assert read_json(run_dir(fake) / "summary.json")["gate"]["seeds_looked_at"] == 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--vla-min-sr=0.5"], "--vla-min-sr is a sequential gate: add --vla-sequential"),
        (["--vla-sequential"], "--vla-sequential needs exactly one of --vla-baseline=DIR or --vla-min-sr=X"),
        (["--vla-sequential", "--vla-min-sr=1.5"], "argument --vla-min-sr: must be in [0, 1], got 1.5"),
        (["--vla-sequential", "--vla-min-sr=0.5", "--vla-block=0"], "argument --vla-block: must be in [1, inf), got 0"),
        (
            ["--vla-sequential", "--vla-min-sr=0.5", "--vla-gate-assume=hope"],
            "argument --vla-gate-assume: invalid choice",
        ),
        (
            ["--vla-sequential", "--vla-min-sr=0.5", "--vla-undecided-exit=300"],
            "argument --vla-undecided-exit: must be in [0, 255], got 300",
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


# -- baselines the gate cannot use: refused at session start, one line, exit 4 ------------------


def _write_task(directory: Path, env_id: str, data: dict | str, *, prefix: str = "") -> None:
    directory.mkdir(exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data)
    (directory / f"{env_id}.json").write_text(prefix + text, encoding="utf-8")


def _task_json(env_id: str, seeds: list[int], success: bool = True) -> dict:
    return {"env_id": env_id, "successes": [success] * len(seeds), "sr": float(success), "episode_seeds": seeds}


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (  # issue 17 item 5: a baseline sharing no seed with the run used to PASS
            lambda d: [_write_task(d, e, _task_json(e, [1100, 1101, 1102])) for e in ("Alpha-v0", "Beta-v0")],
            "no seed of this run is in the baseline for every compared task, so nothing can be paired "
            "(it has seeds 1100-1102, this run needs 100-102",
        ),
        (  # item 6: a malformed file used to give a traceback after the whole evaluation
            lambda d: _write_task(d, "Alpha-v0", {**_task_json("Alpha-v0", [100, 101, 102]), "sr": None}),
            "Alpha-v0.json: sr is null, expected a success rate in [0, 1]",
        ),
        (
            lambda d: _write_task(d, "Alpha-v0", {**_task_json("Alpha-v0", [100, 101]), "episode_seeds": ["a", 1.5]}),
            'Alpha-v0.json: episode_seeds must be a list of seeds, got ["a", 1.5]',
        ),
        (  # item 11: path problems used to be found only after the evaluation, as exit 6
            lambda d: None,
            "baseline: no such directory",
        ),
        (
            lambda d: d.write_text("{}"),
            "baseline is not LeRobot's eval_info.json: Object missing required field `per_task`",
        ),
        (lambda d: d.mkdir(), "no selected task has a completed episode there (it has no per-task <ENV_ID>.json file"),
        (
            lambda d: _write_task(d, "Other-v0", _task_json("Other-v0", [100, 101, 102])),
            "no selected task has a completed episode there (it has Other-v0; this run needs Alpha-v0, Beta-v0)",
        ),
        (lambda d: _write_task(d, "Alpha-v0", "{not json"), "Alpha-v0.json: not JSON (Expecting property name"),
        (
            lambda d: _write_task(d, "Alpha-v0", _task_json("Beta-v0", [100])),
            "Alpha-v0.json: env_id is 'Beta-v0', expected 'Alpha-v0' (its file name)",
        ),
    ],
)
@pytest.mark.parametrize("sequential", [False, True])
def test_a_baseline_the_gate_cannot_use_stops_the_session_before_any_episode(
    fake: pytest.Pytester, build, expected: str, sequential: bool
) -> None:
    build(fake.path / "baseline")
    extra = ["--vla-sequential"] if sequential else []
    result = fake.runpytest(*SHORT, f"--vla-baseline={fake.path / 'baseline'}", *extra)
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists(), "refused before any episode ran or any file was written"


def test_a_refused_baseline_leaves_the_run_s_files_agreeing(fake: pytest.Pytester) -> None:
    """Issue 17 item 6: the previous session's report said PASS while its summary had no gate."""
    fake.runpytest(*SHORT, "--episodes=20", "--vla-results=base")
    (base,) = (fake.path / "base").iterdir()
    assert fake.runpytest(*SHORT, "--episodes=20", f"--vla-baseline={base}").ret == pytest.ExitCode.OK
    broken = fake.path / "broken"
    _write_task(broken, "Alpha-v0", {**read_json(base / "Alpha-v0.json"), "sr": None})
    result = fake.runpytest(*SHORT, "--episodes=20", f"--vla-baseline={broken}")
    assert_one_line_usage_error(result, "broken/Alpha-v0.json: sr is null")
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    assert (
        summary["gate"]["verdict"] == PASS
        and f"**{summary['gate']['verdict_line']}**" in (directory / "report.md").read_text()
    )


def test_a_byte_order_mark_and_an_unrelated_broken_summary_are_harmless(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "--episodes=20", "--vla-results=base")
    (base,) = (fake.path / "base").iterdir()
    marked = fake.path / "marked"
    for env_id in ("Alpha-v0", "Beta-v0"):
        _write_task(marked, env_id, (base / f"{env_id}.json").read_text(), prefix="\ufeff")
    (marked / "summary.json").write_text("{broken")
    result = fake.runpytest(*SHORT, "--episodes=20", f"--vla-baseline={marked}")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["vlaeval gate: PASS: split SR drop +0.000 paired on 20 seeds x 2 tasks*"])


# -- the fixed gate without holes ---------------------------------------------------------------


def test_fixed_gate_that_cannot_fail_says_so_first_and_is_undecided(fake: pytest.Pytester) -> None:
    """Five paired seeds used to PASS a drop of 1 (the sign-flip p can never go below 1/16)."""
    better = _baseline(fake, "better", 5, True)
    result = fake.runpytest(*SHORT, "--episodes=5", "--policy=zero", f"--vla-baseline={better}")
    assert result.ret == UNDECIDED_EXIT
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate plan: betting confidence sequence (2 tasks < 10); earliest PASS at not within this budget, "
            "earliest FAIL at not within this budget of 5",
            "vlaeval gate plan: simulated at the baseline's 2 task SRs (mean 1.00) and seed correlation anywhere in "
            "0 to 0.95 (its 5 seeds say too little), the worse end first: true drop 0: correct 0%, budget spent "
            "1.00; true drop 0.1: correct 0%, budget spent 1.00; true drop 0.1 on whole seeds: correct 0%, budget "
            "spent 1.00",
            "vlaeval gate: this run pairs 5 seeds with the baseline: too few to show a drop above 0.05 at alpha 0.05*",
            "fake-short FFFFF",
            "vlaeval gate: UNDECIDED: split SR drop +1.000 paired on 5 seeds x 2 tasks*; 5 paired seeds cannot show "
            "a drop above max drop at this alpha*",
        ]
    )
    assert read_json(run_dir(fake) / "summary.json")["gate"]["verdict"] == UNDECIDED


def test_fixed_gate_says_when_the_baseline_pairs_fewer_seeds_than_the_run(fake: pytest.Pytester) -> None:
    short = _baseline(fake, "short", 12, False)  # seeds 100-111; the zero policy fails them too
    result = fake.runpytest(*SHORT, "--episodes=15", "--policy=zero", f"--vla-baseline={short}")
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate plan: * of 12",
            "vlaeval gate: the baseline pairs 12 of this run's 15 seeds: the gate judges those (a baseline run with "
            "--episodes=15 lets it judge them all)",
            "vlaeval gate: *: split SR drop +0.000 paired on 12 seeds x 2 tasks*",
        ]
    )


def test_fixed_gate_fails_only_a_drop_significantly_above_max_drop(fake: pytest.Pytester) -> None:
    """A point drop of 0.075 > 0.05 on 20 seeds is no evidence that the drop exceeds 0.05: PASS
    (the point-estimate gate, the old default, said FAIL)."""
    fake.runpytest(*SHORT, "--episodes=20", "--vla-results=base")
    (base,) = (fake.path / "base").iterdir()
    lifted = fake.path / "lifted"
    for env_id in ("Alpha-v0", "Beta-v0"):
        data = read_json(base / f"{env_id}.json")
        if env_id == "Alpha-v0":
            failed = [i for i, y in enumerate(data["successes"]) if not y][:3]
            assert len(failed) == 3
            for i in failed:
                data["successes"][i] = True
            data["sr"] = sum(data["successes"]) / len(data["successes"])
        _write_task(lifted, env_id, data)
    result = fake.runpytest(*SHORT, "--episodes=20", f"--vla-baseline={lifted}")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["vlaeval gate: PASS: split SR drop +0.075 paired on 20 seeds x 2 tasks*"])


# -- the variance-adaptive method, chosen by the rule, under xdist -------------------------------

WIDE_TASKS = [f"Wide{i:02d}-v0" for i in range(12)]


@pytest.fixture
def wide(fake: pytest.Pytester) -> pytest.Pytester:
    """The fake benchmark with a split of 12 tasks: enough for the group-sequential t test."""
    rows = "".join(
        f"  - {{env_id: {t}, split: wide, memory_type: Object, max_steps: 4, instruction: wide {i}}}\n"
        for i, t in enumerate(WIDE_TASKS)
    )
    fake.makefile(".yaml", wide=(TESTS / "fake.yaml").read_text().replace("name: fake", "name: wide") + rows)
    return fake


WIDE = ["--benchmark=wide.yaml:wide", "-p", "no:cacheprovider", "--episodes=30"]


def test_group_sequential_gate_passes_early_under_xdist(wide: pytest.Pytester) -> None:
    wide.runpytest(*WIDE, "--vla-results=base")
    (base,) = (wide.path / "base").iterdir()
    result = wide.runpytest_subprocess(
        *WIDE, "--vla-sequential", f"--vla-baseline={base}", "--vla-max-drop=0.2", "-n", "2"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate plan: group-sequential t test with the broken-seed guard (12 tasks, 30 seeds, variance floor at a drop of 0.2 *); earliest "
            "PASS at 10 "
            "seeds, earliest FAIL at 10 seeds of 30",
            "vlaeval gate: PASS: split SR drop +0.000 ?95% bounds -*? vs max drop 0.200 after 2 looks (10 seeds), "
            "stopped early (* episodes saved); method: sequential group-sequential t test with the broken-seed guard, seeds as the unit "
            "(12 tasks, 30 seeds, variance floor at a drop of 0.2 from the baseline's task SRs and seed correlation 0.*), "
            "alpha 0.05; a PASS assumes smooth seeds, or whole seeds broken at random (random-breaks): a policy failing "
            "every task on *% of the seeds or more (a drop above 0.2 from the baseline's 0.*) shows such a seed within * "
            "seeds with probability 97.5%, and no PASS comes sooner; assuming nothing (--vla-gate-assume=nothing), a PASS "
            "takes at least 18 seeds",
        ]
    )
    gate = read_json(run_dir(wide) / "summary.json")["gate"]
    assert gate["verdict"] == PASS and gate["stopped_early"] and gate["seeds_looked_at"] == 10


def test_group_sequential_gate_fails_early_under_xdist(wide: pytest.Pytester) -> None:
    baseline = wide.path / "half"
    for i, env_id in enumerate(WIDE_TASKS):  # every task at SR 1/2, on alternating seeds
        seeds = list(range(100, 130))
        data = {"env_id": env_id, "successes": [(s + i) % 2 == 0 for s in seeds], "sr": 0.5, "episode_seeds": seeds}
        _write_task(baseline, env_id, data)
    result = wide.runpytest_subprocess(
        *WIDE, "--policy=zero", "--vla-sequential", f"--vla-baseline={baseline}", "-n", "2"
    )
    assert result.ret == EXIT_GATE_FAILED
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate: FAIL: split SR drop +0.500 ?95% bounds +0.*? vs max drop 0.050 after 2 looks (10 seeds), "
            "stopped early (* episodes saved); method: sequential group-sequential t test*"
        ]
    )


def test_a_good_policy_against_its_own_baseline_passes_early_on_smooth_seeds(wide: pytest.Pytester) -> None:
    """SRs near 0.95, tasks correlated through the seed: the betting sequence alone could not PASS
    within 30 seeds at max drop 0.1 (it needs about 37 even when nothing moves), so the rule must
    give these SRs the t test with the floor from the baseline's own seed correlation. By default
    its broken-seed guard holds a PASS back until a tenth of the seeds failing every task would
    have shown (34 seeds at SR 0.97): the plan says so before any episode, and the verdict is
    UNDECIDED within 30; assuming smooth seeds by name, the t test alone PASSes early and says
    what it assumed."""
    wide.makepyfile(
        good="""
        import hashlib

        import numpy as np

        def uniform(*key):
            return int(hashlib.sha256(repr(key).encode()).hexdigest()[:12], 16) / 16**12

        class Good:  # fails about 1 episode in 20, more often on the seeds that are hard for every task
            chunk_size = 1
            run = "a"

            def reset(self, episode):
                hard, own = uniform(episode.seed), uniform(self.run, episode.task, episode.seed)
                self.value = 0.0 if 0.5 * hard + 0.5 * own > 0.84 else 1.0

            def act(self, obs):
                return np.full(7, self.value, np.float32)

        class Again(Good):  # the same policy, another draw of its own noise
            run = "b"
        """
    )
    first = wide.runpytest(*WIDE, "--policy=good:Good", "--vla-results=base")
    split_sr = float(re.search(r"split SR ([\d.]+)%", first.stdout.str()).group(1))
    assert 90 <= split_sr < 99, "a good policy, not a perfect one"
    (base,) = (wide.path / "base").iterdir()
    result = wide.runpytest(
        *WIDE, "--policy=good:Again", "--vla-sequential", f"--vla-baseline={base}", "--vla-max-drop=0.1"
    )
    assert result.ret == UNDECIDED_EXIT
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate plan: group-sequential t test with the broken-seed guard (12 tasks, 30 seeds, variance floor "
            "at a drop of 0.1 *); earliest PASS at not within this budget, earliest FAIL at 10 seeds of 30",
            "vlaeval gate plan: a PASS assumes smooth seeds, or whole seeds broken at random (random-breaks): a policy "
            "failing every task on 10.*% of the seeds or more * within 34 seeds *",
            "vlaeval gate look 2 at 10 seeds: drop * undecided; about 0% likely to decide by 30 seeds, judged from *",
            "vlaeval gate: UNDECIDED: split SR drop * after 6 looks (30 seeds)*",
        ]
    )
    smooth = wide.runpytest(
        *WIDE, "--policy=good:Again", "--vla-sequential", f"--vla-baseline={base}", "--vla-max-drop=0.1",
        "--vla-gate-assume=smooth-seeds", "--vla-results=smooth",
    )  # fmt: skip
    assert smooth.ret == pytest.ExitCode.OK
    smooth.stdout.fnmatch_lines(
        [
            "vlaeval gate plan: group-sequential t test (12 tasks, *); earliest PASS at 10 seeds, *",
            "vlaeval gate: PASS: split SR drop * stopped early*; method: sequential group-sequential t test, seeds as "
            "the unit (*), alpha 0.05; a PASS assumes smooth seeds (smooth-seeds): *; assuming nothing (--vla-gate-assume=nothing), "
            "a PASS takes at least 37 seeds",
        ]
    )
    # Two of those tasks: the betting sequence, which cannot PASS within 30 seeds, and each look says so.
    two = wide.runpytest(
        *WIDE, "--policy=good:Again", "--vla-tasks=Wide00-v0,Wide01-v0", "--vla-sequential", f"--vla-baseline={base}",
        "--vla-max-drop=0.1", "--vla-results=two",
    )  # fmt: skip
    assert two.ret == UNDECIDED_EXIT
    two.stdout.fnmatch_lines(["vlaeval gate look 5 at 25 seeds: drop * undecided; about 0% likely to decide by 30*"])


def test_min_sr_mode_chooses_its_method_at_each_look_on_the_observed_srs(wide: pytest.Pytester) -> None:
    # A min SR says nothing of the tasks' own SRs, so each look applies the rule to what it saw.
    wide.makepyfile(
        steady="""
        import numpy as np

        class Steady:  # succeeds on the fake env's seeds whose bar is below 0.65: SR 0.4 on every task
            chunk_size = 1

            def reset(self, episode):
                pass

            def act(self, obs):
                return np.full(7, 0.65, np.float32)
        """
    )
    args = [*WIDE, "--vla-sequential"]
    cases = {  # policy, min SR: what the plan says at start, and the verdict after the looks
        ("steady:Steady", 0.8): (
            "group-sequential t test with the broken-seed guard (12 tasks, 30 seeds, reference SRs' mean p(1-p) 0.160)",
            "FAIL: split SR 0.400 ?95% bounds *? vs min SR 0.800 after * looks*; method: sequential group-sequential "
            "t test with the broken-seed guard, seeds as the unit (12 tasks, 30 seeds, observed task SRs' mean p(1-p) "
            "0.240)",
        ),
        ("zero", 0.5): (
            "group-sequential t test with the broken-seed guard (12 tasks, 30 seeds, reference SRs' mean p(1-p) 0.250)",
            "FAIL: split SR 0.000 ?95% CS *? vs min SR 0.500 after * looks*; method: sequential betting confidence "
            "sequence, seeds as the unit (observed task SRs near 0 or 1: mean p(1-p) 0.000 < 0.128)",
        ),
    }
    for (policy, min_sr), (plan, verdict) in cases.items():
        result = wide.runpytest(*args, f"--policy={policy}", f"--vla-min-sr={min_sr}", f"--vla-run-name={min_sr}")
        assert result.ret == EXIT_GATE_FAILED
        result.stdout.fnmatch_lines([f"vlaeval gate plan: {plan}*", f"vlaeval gate: {verdict}*"])
    extreme = wide.runpytest(*args, "--policy=zero", "--vla-min-sr=0.95", "--vla-run-name=extreme")
    extreme.stdout.fnmatch_lines(
        ["vlaeval gate plan: betting confidence sequence (reference SRs near 0 or 1: mean p(1-p) 0.048 < 0.128)*"]
    )


# -- plans before spending -------------------------------------------------------------------


def test_gate_plan_prints_the_budgets_and_runs_no_episode(wide: pytest.Pytester) -> None:
    wide.runpytest(*WIDE, "--vla-results=base")
    (base,) = (wide.path / "base").iterdir()
    result = wide.runpytest(*WIDE, f"--vla-baseline={base}", "--vla-sequential", "--vla-gate-plan", "--vla-results=r")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate plan: simulated at the baseline's 12 task SRs (mean *) and seed correlation * to * (its "
            "30 seeds' middle half), the worse end first",
            "vlaeval gate plan: the baseline pairs 30 of the first 300 seeds from this run's start seed; the rows "
            "above 30 seeds assume a baseline of as many",
            "| seeds | method | true drop 0 | true drop 0.1 | true drop 0.1 on whole seeds |",
            "| 10 | group-sequential t test with the broken-seed guard | correct *",
            "| 300 | group-sequential t test with the broken-seed guard | correct *",
            "vlaeval gate plan: 12 tasks: decides correctly with probability >= 80% in both from --episodes=*, with a "
            "baseline of as many seeds (this one pairs 30: rerun it with --episodes=*); true drop 0.1 on whole seeds: *",
            "vlaeval gate plan: a PASS assumes smooth seeds, or whole seeds broken at random (random-breaks): *",
        ]
    )
    assert not (wide.path / "r").exists(), "no episode ran"
    assert_one_line_usage_error(wide.runpytest(*WIDE, "--vla-gate-plan"), "--vla-gate-plan plans a gate")
    plan = [f"--vla-baseline={base}", "--vla-sequential", "--vla-gate-plan"]
    surer = wide.runpytest(*WIDE, *plan, "--vla-gate-plan-probability=0.95")
    surer.stdout.fnmatch_lines(["vlaeval gate plan: 12 tasks: decides correctly with probability >= 95% in both*"])
    assert_one_line_usage_error(
        wide.runpytest(*WIDE, *plan, "--vla-gate-plan-probability=1"),
        "argument --vla-gate-plan-probability: must be in (0, 1)",
    )


def test_the_plan_check_puts_the_plan_beside_what_happens(tmp_path: Path) -> None:
    """``gate_simulation.py --plan-check --smoke``: one row per case with the plan's numbers and
    the simulated sessions', and a line naming the most optimistic plan."""
    out = tmp_path / "plan.json"
    script = ROOT / "scripts" / "gate_simulation.py"
    done = subprocess.run(
        [sys.executable, str(script), "--plan-check", "--smoke", "--max-drop=0.1", "--json", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert [r["case"] for r in rows] == ["true drop 0", "true drop 0.2"]
    figures = ("plan_correct", "plan_correct_other", "correct", "plan_spent", "plan_spent_other", "spent")
    assert all(0 <= r[k] <= 1 for r in rows for k in figures)
    within = sum(r["within"] for r in rows)
    assert f"{within} of 2 cells within 0.1 of the plan" in done.stdout
    for r in rows:  # within 0.1 of what the session prints: its one number, or its range
        figures_within = [
            min(ends) - 0.1 <= seen <= max(ends) + 0.1
            for ends, seen in (
                (shown_ends(r["plan_correct"], r["plan_correct_other"]), r["correct"]),
                (shown_ends(r["plan_spent"], r["plan_spent_other"]), r["spent"]),
            )
        ]
        assert r["within"] == all(figures_within), r
    assert "most optimistic worse end:" in done.stdout and "most pessimistic worse end:" in done.stdout


def test_the_simulation_runs_and_writes_every_cell(tmp_path: Path) -> None:
    """``scripts/gate_simulation.py --smoke``: the keys the docs' table is built from, and no
    method's wrong-verdict rate far above alpha even in this tiny run."""
    out = tmp_path / "cells.json"
    script = ROOT / "scripts" / "gate_simulation.py"
    done = subprocess.run(
        [sys.executable, str(script), "--smoke", "--family=both", "--json", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    cells = json.loads(out.read_text())
    keys = {
        "tasks",
        "seeds",
        "rho",
        "profile",
        "kind",
        "drop",
        "true_drop",
        "mode",
        "method",
        "wrong",
        "correct",
        "undecided",
        "spent",
        "reps",
    }
    assert cells and all(set(c) == keys for c in cells)
    assert {c["method"] for c in cells} == {"betting", "t_test", "auto", "auto_smooth", "fixed", "oracle"}
    assert {c["mode"] for c in cells} == {"drop", "min_sr"}
    assert {c["kind"] for c in cells} == {"even", "broken-all", "broken-each"}
    assert "The broken-seed family: the worst wrong verdict" in done.stdout
    assert all(c["wrong"] + c["correct"] + c["undecided"] <= 1 + 1e-9 for c in cells)
    assert "Split-SR interval coverage" in done.stdout
