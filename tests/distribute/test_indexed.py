"""``--vla-shard=auto``: the shard from a scheduler's environment, or one line before any episode."""

from __future__ import annotations

import json

import pytest
from helpers import assert_one_line_usage_error, episode_records, read_json

from pytest_vlaeval.distribute.indexed import shard_from_environment
from pytest_vlaeval.errors import SpecError

SLURM = {"SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_COUNT": "4"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"VLAEVAL_SHARD": "2/5", "SLURM_ARRAY_TASK_ID": "0", **SLURM}, "1/4"),  # sbatch exports a stray pair
        ({"VLAEVAL_SHARD": "2/5"}, "2/5"),
        ({"SLURM_ARRAY_TASK_ID": "0", **SLURM}, "1/4"),
        ({"SLURM_ARRAY_TASK_ID": "3", **SLURM}, "4/4"),
        (  # any first index, any step: --array=5-13:4 is 5, 9, 13
            {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_MAX": "13"}
            | {"SLURM_ARRAY_TASK_STEP": "4", "SLURM_ARRAY_TASK_COUNT": "3"},
            "2/3",
        ),
        ({"JOB_COMPLETION_INDEX": "0", "VLAEVAL_SHARD_COUNT": "3"}, "1/3"),
        ({"JOB_COMPLETION_INDEX": "2", "VLAEVAL_SHARD_COUNT": "3"}, "3/3"),
    ],
)
def test_the_shard_comes_from_the_scheduler(environ: dict[str, str], expected: str) -> None:
    assert shard_from_environment(environ) == expected


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "found no shard index: set VLAEVAL_SHARD=I/N"),
        ({"SLURM_ARRAY_TASK_ID": "", **SLURM}, "SLURM_ARRAY_TASK_ID is missing or empty"),
        ({"SLURM_ARRAY_TASK_ID": "x", **SLURM}, "SLURM_ARRAY_TASK_ID='x' is not a non-negative integer"),
        ({"SLURM_ARRAY_TASK_ID": "\u00b2", **SLURM}, "is not a non-negative integer"),
        ({"SLURM_ARRAY_TASK_ID": "7", **SLURM}, "SLURM_ARRAY_TASK_ID=7 is not one of 0..3 in steps of 1"),
        ({"SLURM_ARRAY_TASK_ID": "0", **SLURM, "SLURM_ARRAY_TASK_COUNT": "9" * 5000}, "of at most 18 digits"),
        ({"SLURM_ARRAY_TASK_ID": "1"}, "SLURM_ARRAY_TASK_MIN is missing or empty"),
        (  # --array=1,4,9: no range, no shard order
            {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "9"}
            | {"SLURM_ARRAY_TASK_COUNT": "3"},
            "are not the range 1-9:1",
        ),
        ({"JOB_COMPLETION_INDEX": "0"}, "set VLAEVAL_SHARD_COUNT to the Indexed Job's completions"),
        ({"JOB_COMPLETION_INDEX": "3", "VLAEVAL_SHARD_COUNT": "3"}, "JOB_COMPLETION_INDEX=3 is not in 0..2"),
    ],
)
def test_missing_or_inconsistent_variables_are_one_line(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(SpecError, match=r"^--vla-shard=auto: ") as caught:
        shard_from_environment(environ)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--vla-live=off"]


def test_an_array_task_runs_its_shard_and_writes_only_its_log(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"SLURM_ARRAY_TASK_ID": "1", **SLURM}.items():
        monkeypatch.setenv(name, value)
    result = fake.runpytest_subprocess(*SHORT, "--vla-shard=auto")
    assert "shard 2/4: 1 of 6 episodes" in result.stdout.str()
    (run,) = (fake.path / "results").iterdir()
    (log,) = (run / "episodes").iterdir()
    assert log.name.endswith("-shard2of4.jsonl") and len(episode_records(run)) == 1
    assert not (run / "summary.json").exists() and not list(run.glob("*-v0.json")), "the merge writes them"
    assert f"the run's files are written by: vlaeval merge {run}" in result.stdout.str()


def test_shard_counts_beyond_the_episodes_give_empty_shards_at_no_cost(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    billion = {"SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "999999999", "SLURM_ARRAY_TASK_COUNT": "1000000000"}
    for name, value in {"SLURM_ARRAY_TASK_ID": "999999999", **billion}.items():
        monkeypatch.setenv(name, value)
    last = fake.runpytest(*SHORT, "--vla-shard=auto")
    assert "shard 1000000000/1000000000: 0 of 6 episodes" in last.stdout.str(), last.outlines[-20:]
    (run,) = (fake.path / "results").iterdir()
    assert last.ret == pytest.ExitCode.NO_TESTS_COLLECTED and not episode_records(run)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    monkeypatch.setenv("VLAEVAL_SHARD", "1/999999999999")
    first = fake.runpytest(*SHORT, "--vla-shard=auto")
    assert "shard 1/999999999999: 1 of 6 episodes" in first.stdout.str()
    assert first.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    assert len(episode_records(run)) == 1


def test_an_array_task_with_a_broken_environment_stops_before_any_episode(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"SLURM_ARRAY_TASK_ID": "", **SLURM}.items():
        monkeypatch.setenv(name, value)
    assert_one_line_usage_error(
        fake.runpytest(*SHORT, "--vla-shard=auto"), "--vla-shard=auto: SLURM_ARRAY_TASK_ID is missing or empty"
    )
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    assert_one_line_usage_error(
        fake.runpytest(*SHORT, "--vla-shard=auto", "--vla-baseline=base"), "give the baseline to the merge"
    )
    assert not (fake.path / "results").exists()


def test_an_episode_list_runs_exactly_its_episodes_and_a_shard_splits_it(fake: pytest.Pytester) -> None:
    listed = [["Beta-v0", 102], ["Alpha-v0", 100], ["Beta-v0", 100]]
    fake.makefile(".json", only=json.dumps(listed))
    fake.runpytest(*SHORT, "--vla-episode-list=only.json", "--vla-shard=1/2")
    fake.runpytest(*SHORT, "--vla-episode-list=only.json", "--vla-shard=2/2")
    (run,) = (fake.path / "results").iterdir()
    records = episode_records(run)
    assert sorted(records) == sorted(tuple(pair) for pair in listed), "each listed episode once, nothing else"
    assert len(list((run / "episodes").iterdir())) == 2
    summary = read_json(run / "summary.json")
    assert (summary["n_completed"], summary["n_missing"]) == (3, 3)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("[[", "cannot read it as JSON"),
        ('{"Alpha-v0": 0}', "expected a JSON list of [task, seed] pairs"),
        ('[["Alpha-v0", "0"]]', "expected a JSON list of [task, seed] pairs"),
        ('[["Alpha-v0", 99]]', "['Alpha-v0', 99] is not an episode of this selection"),
        ('[["../../etc", 0]]', "is not an episode of this selection"),
    ],
)
def test_a_bad_episode_list_is_one_line(fake: pytest.Pytester, content: str, expected: str) -> None:
    fake.makefile(".json", only=content)
    assert_one_line_usage_error(fake.runpytest(*SHORT, "--vla-episode-list=only.json"), expected)
    assert not (fake.path / "results").exists()


def test_an_episode_list_that_is_a_device_is_one_line(fake: pytest.Pytester) -> None:
    assert_one_line_usage_error(
        fake.runpytest(*SHORT, "--vla-episode-list=/dev/zero"), "--vla-episode-list /dev/zero: not a regular file"
    )
