"""A run's files and the advice printed about them: a comment in the benchmark file, finished
shards, a full disk, and the size of a collection."""

from __future__ import annotations

import shlex

import pytest
from helpers import assert_one_line_usage_error, read_json, run_dir

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--vla-live=off"]


def advised(result: pytest.RunResult, prefix: str) -> list[str]:
    """The arguments of the pytest command printed after ``prefix``."""
    (line,) = [line for line in result.outlines if line.startswith(prefix)]
    return shlex.split(line.removeprefix(prefix))[1:]


# -- the benchmark file's digest -------------------------------------------------------------


def test_a_comment_in_the_benchmark_file_keeps_the_run_resumable(fake: pytest.Pytester) -> None:
    args = [*SHORT, "--policy=zero", "--vla-tasks=Alpha-v0"]
    assert fake.runpytest(*args).ret == pytest.ExitCode.TESTS_FAILED
    spec = fake.path / "fake.yaml"
    spec.write_text(
        "# pinned for the nightly job\n" + spec.read_text().replace("title: Fake-Bench", "title: 'Fake-Bench'  # shown")
    )
    rerun = fake.runpytest(*args, "--vla-rerun=failures")
    assert rerun.ret == pytest.ExitCode.TESTS_FAILED, rerun.stderr.str()
    rerun.stdout.fnmatch_lines(["*--vla-rerun=failures: 3 of 3 episodes selected*"])


def test_a_changed_benchmark_names_the_option_that_starts_a_new_run(fake: pytest.Pytester) -> None:
    args = [*SHORT, "--policy=zero", "--vla-tasks=Alpha-v0"]
    fake.runpytest(*args)
    spec = fake.path / "fake.yaml"
    spec.write_text(spec.read_text().replace("max_steps: 6,", "max_steps: 7,"))
    result = fake.runpytest(*args, "--vla-rerun=failures")
    assert_one_line_usage_error(result, "holds a run with a different fingerprint (benchmark_digest: ")
    (error,) = [line for line in result.errlines if line.startswith("ERROR:")]
    assert "start a new run beside it with --vla-run-name=<new name>" in error and "remove" not in error
    assert fake.runpytest(*args, "--vla-run-name=steps7").ret == pytest.ExitCode.TESTS_FAILED


# -- shards ------------------------------------------------------------------------------------


def test_a_finished_shard_names_the_shards_still_to_run_and_the_merge(fake: pytest.Pytester) -> None:
    first = fake.runpytest(*SHORT, "--vla-shard", "1/2")
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    out = first.stdout.str()
    assert "--vla-shard=1/2 --vla-rerun=incomplete" not in out and "--vla-shard 1/2" not in out
    first.stdout.fnmatch_lines(
        [
            "shard 1/2 is complete; still to run: shard 2/2",
            "run shard 2/2 with: pytest * --vla-shard=2/2*--vla-rerun=incomplete",
            f"then, where shards wrote to other run directories, merge them: vlaeval-merge {run_dir(fake)} *",
        ]
    )
    second = fake.runpytest(*advised(first, "run shard 2/2 with: "))
    assert second.ret == pytest.ExitCode.TESTS_FAILED
    summary = read_json(run_dir(fake) / "summary.json")
    assert (summary["n_completed"], summary["partial"]) == (6, False)
    assert "still to run" not in second.stdout.str() and "partial run" not in second.stdout.str()


def test_a_shard_with_episodes_of_its_own_left_is_completed_by_itself(fake: pytest.Pytester) -> None:
    args = ["--benchmark=fake.yaml:extra", "-p", "no:cacheprovider", "--vla-live=off", "--vla-shard=2/2"]
    result = fake.runpytest(*args)
    result.stdout.fnmatch_lines(["complete this shard with: pytest * --vla-shard=2/2*--vla-rerun=incomplete"])
    assert "still to run" not in result.stdout.str()
