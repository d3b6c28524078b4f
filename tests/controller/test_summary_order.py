"""A benchmark run ends with its result: pytest's short test summary comes before the results
table and lists failed episodes (results, counted in the table) only under an explicit ``-r``,
wherever ``-r`` is given; errors stay listed, and the exit status is pytest's."""

from __future__ import annotations

import pytest
from helpers import episode_records, run_dir

RUN = ("--benchmark=fake.yaml:all", "--vla-tasks=Alpha-v0,Beta-v0,BrokenSim-v0", "--episodes=3")
"""Random actions fail some of Alpha's and Beta's episodes; BrokenSim's cannot be built (errors)."""


def failed_ids(fake: pytest.Pytester) -> list[str]:
    records = episode_records(run_dir(fake)).values()
    return [f"fake-short::{r['task']}::{r['seed']}" for r in records if r["outcome"] != "error" and not r["success"]]


def tail(result: pytest.RunResult) -> list[str]:
    """The lines from the results table's title on."""
    (title,) = [i for i, line in enumerate(result.outlines) if "= vlaeval: Fake-Bench all split" in line]
    return result.outlines[title:]


def test_the_table_and_a_pointer_to_the_failed_episodes_end_the_run(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*RUN)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    failed = failed_ids(fake)
    assert 0 < len(failed) < 6
    result.assert_outcomes(passed=6 - len(failed), failed=len(failed), errors=3)
    assert not [line for line in result.outlines if line.startswith("FAILED")], "no line per failed episode"
    summary = result.outlines.index(next(line for line in result.outlines if "short test summary info" in line))
    errors = [line for line in result.outlines if line.startswith("ERROR fake-extra::BrokenSim-v0::")]
    assert len(errors) == 3 and result.outlines[summary + 1] == errors[0], "errors stay listed"

    last = tail(result)
    assert not [line for line in last if line.startswith(("FAILED", "ERROR"))], "the table comes after the summary"
    assert last[1].lstrip().startswith("task") and last[-3].startswith("results: ")
    assert last[-2] == (
        f"{len(failed)} episodes failed (policy failures, counted above): "
        "report.html lists them, -rf lists them here, --vla-rerun=failures reruns them"
    )
    assert f"{len(failed)} failed, {6 - len(failed)} passed, 3 errors" in last[-1], "pytest's own count closes it"


@pytest.mark.parametrize(
    ("option", "listed", "errors_listed"),
    [("-rf", True, False), ("addopts -rfE", True, True), ("PYTEST_ADDOPTS -rfE", True, True), ("-rN", False, False)],
)
def test_an_explicit_r_is_followed(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, option: str, listed: bool, errors_listed: bool
) -> None:
    """``-rfE`` asks for pytest's default: only where it was given are failed episodes listed."""
    args: tuple[str, ...] = ()
    if option.startswith("addopts"):
        fake.makeini(f"[pytest]\naddopts = {option.split()[1]}\n")
    elif option.startswith("PYTEST_ADDOPTS"):
        monkeypatch.setenv("PYTEST_ADDOPTS", option.split()[1])
    else:
        args = (option,)
    result = fake.runpytest(*RUN, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    failed = failed_ids(fake)
    assert [line.split(" ")[1] for line in result.outlines if line.startswith("FAILED")] == (failed if listed else [])
    errors = [line for line in result.outlines if line.startswith("ERROR")]
    assert len(errors) == (3 if errors_listed else 0)
    last = tail(result)
    assert last[-2].startswith(f"{len(failed)} episodes failed (policy failures")
    assert ("-rf lists them here" in last[-2]) is not listed
