"""Records held back while the run's recorded policy may still refuse the session (``intake``):
a refused session leaves every file of the run as it was, serially and under ``-n 2``, and the
errors of a session that never completes an episode are still stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CONFIGURED, episode_records, read_json, run_dir

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_refused_session_leaves_every_file_of_the_run_as_it_was(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    fake.makepyfile(policies=CONFIGURED)
    args = [*SHORT, "--policy=policies:Configured", "--vla-tasks=Alpha-v0,Beta-v0"]
    monkeypatch.setenv("WEIGHTS", "a")
    assert fake.runpytest_subprocess(*args).ret == pytest.ExitCode.TESTS_FAILED
    before = snapshot(run_dir(fake))
    monkeypatch.setenv("WEIGHTS", "b")
    monkeypatch.setenv("FAIL_SEED", "100")  # an error before the first completed episode shows the difference
    refused = fake.runpytest_subprocess(*args, *workers)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stdout.fnmatch_lines(["*refusing to mix episodes into this run*weights*"])
    assert snapshot(run_dir(fake)) == before


def test_errors_of_a_session_that_never_shows_its_policy_are_still_stored(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.makepyfile(policies=CONFIGURED)
    args = [*SHORT, "--policy=policies:Configured", "--vla-tasks=Alpha-v0,Beta-v0"]
    fake.runpytest_subprocess(*args)
    monkeypatch.setenv("FAIL_SEED", "100")
    result = fake.runpytest_subprocess(*args, "--vla-rerun=failures", "-k", "100")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    records = episode_records(run_dir(fake))
    assert [records[(task, 100)]["outcome"] for task in ("Alpha-v0", "Beta-v0")] == ["error", "error"]
    assert read_json(run_dir(fake) / "summary.json")["n_errors"] == 2
