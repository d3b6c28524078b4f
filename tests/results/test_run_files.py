"""A run's files and the advice printed about them: a comment in the benchmark file, finished
shards, a full disk, and the size of a collection."""

from __future__ import annotations

import errno
import os
import shlex
from pathlib import Path

import pytest
from helpers import TESTS, assert_one_line_usage_error, read_json, run_dir

from pytest_vlaeval.benchmark.model import MAX_EPISODES, load_benchmark, select
from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results import store

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
            f"then, where shards wrote to other run directories, merge them: vlaeval merge {run_dir(fake)} *",
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


# -- a full disk ---------------------------------------------------------------------------------
# The disk fills at each write's own seam (no root, no mount, runs on any Linux CI): a log is
# opened on /dev/full, a real device whose every write fails with ENOSPC as on a full file system;
# a whole file's atomic write raises ENOSPC. (A link to /dev/full at the path would not do: a run's
# files are never written through a link.)


def fill_disk(monkeypatch: pytest.MonkeyPatch, *full: Path) -> None:
    """Every atomic write of one of ``full`` finds the disk full."""
    write = store._write_atomic

    def no_space(path: Path, data: bytes) -> None:
        if path in full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(path, data)

    monkeypatch.setattr(store, "_write_atomic", no_space)


FULL_LOG = """
from pytest_vlaeval.results.rundir import RunDir

open_appending = RunDir.open_appending


def onto_a_full_disk(self, path, mode="a"):
    return open("/dev/full", mode) if path.parent == self.episodes else open_appending(self, path, mode)


RunDir.new_log = lambda self, label="": self.episodes / "full.jsonl"
RunDir.open_appending = onto_a_full_disk
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_full_disk_during_a_record_append_stops_in_one_line(fake: pytest.Pytester, workers: list[str]) -> None:
    args = [*SHORT, "--vla-tasks=Alpha-v0", *workers]
    conftest = fake.makeconftest(FULL_LOG)  # this session's log is written to /dev/full
    result = fake.runpytest_subprocess(*args)
    conftest.unlink()
    log = run_dir(fake) / "episodes" / "full.jsonl"
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR, result.stdout.str()
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    result.stdout.fnmatch_lines(
        [
            f"*Exit: no space left on * writing {log}; the episodes stored before it are kept: free space, "
            "then run pytest * --vla-rerun=incomplete*"
        ]
    )
    again = fake.runpytest_subprocess(*args, "--vla-rerun=incomplete")
    again.stdout.fnmatch_lines(["*--vla-rerun=incomplete: 3 of 3 episodes selected*"])
    assert read_json(run_dir(fake) / "summary.json")["n_completed"] == 3


def test_a_chart_or_report_the_disk_refuses_is_one_line_and_never_decides_the_exit(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*SHORT, "--policy=zero", "--vla-tasks=Alpha-v0"]
    fake.runpytest(*args, "--vla-results=baseline")
    (baseline,) = (fake.path / "baseline").iterdir()
    fake.runpytest(*args)
    directory = run_dir(fake)
    chart, report = directory / "summary.png", directory / "report.md"
    fill_disk(monkeypatch, chart, report)
    # 3 seeds cannot decide; the gate's own exit for that is set to 0, so any other status is the disk's
    gated = [f"--vla-baseline={baseline}", "--vla-undecided-exit=0"]
    result = fake.runpytest(*args, *gated, "--vla-rerun=failures")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    result.stdout.fnmatch_lines(
        [
            "*Alpha-v0 * Short * Object *",
            f"not written: no space left on * writing {chart}",
            f"not written: no space left on * writing {report}",
            "vlaeval gate: UNDECIDED*",
        ]
    )
    assert not chart.exists() and not report.exists(), "nothing torn or stale is left beside the summary"
    assert read_json(directory / "summary.json")["gate"]["verdict"] == "UNDECIDED"


def test_canonical_files_the_disk_refuses_are_one_line_and_never_a_pass(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No portable way fills the disk between a temporary file and its rename: ENOSPC is raised
    at the atomic write's seam."""
    args = [*SHORT, "--policy=zero", "--vla-tasks=Alpha-v0"]
    fake.runpytest(*args, "--vla-results=baseline")
    (baseline,) = (fake.path / "baseline").iterdir()
    fake.runpytest(*args)
    first_canonical = run_dir(fake) / "Alpha-v0.json"

    def no_space(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store, "_write_atomic", no_space)
    gated = [f"--vla-baseline={baseline}", "--vla-undecided-exit=0"]  # the gate alone would exit 0
    result = fake.runpytest(*args, *gated, "--vla-rerun=failures")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    assert "Traceback" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"not written: no space left on * writing {first_canonical}", "vlaeval gate: UNDECIDED*"]
    )


def test_a_merge_whose_chart_the_disk_refuses_says_so_and_keeps_the_merged_run(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in (1, 2):
        fake.runpytest(*SHORT, f"--vla-results=shard{index}", f"--vla-shard={index}/2")
    (first,) = (fake.path / "shard1").iterdir()
    (second,) = (fake.path / "shard2").iterdir()
    out = fake.path / "merged"
    chart = out / "summary.png"
    fill_disk(monkeypatch, chart)
    assert (
        vlaeval(["merge", str(first), str(second), "--out", str(out), "--benchmark", str(fake.path / "fake.yaml")]) == 0
    )
    assert f" writing {chart}" in capsys.readouterr().out
    assert read_json(out / "summary.json")["n_completed"] == 6 and not chart.exists()


def test_a_merge_whose_summary_the_disk_refuses_leaves_no_page_or_chart_of_a_verdict(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages and the chart read the summary: written only after it, removed when it could not
    be, so none of them shows a verdict the run's files do not hold."""
    fake.runpytest(*SHORT)
    run = run_dir(fake)
    derived = [run / name for name in ("report.md", "summary.png", "report.html")]
    assert all(path.is_file() for path in derived)
    (run / "summary.json").unlink()
    fill_disk(monkeypatch, run / "summary.json")
    capsys.readouterr()
    assert vlaeval(["merge", str(run)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("vlaeval merge: no space left on ") and out.endswith(f" writing {run / 'summary.json'}\n")
    assert [path.name for path in derived if path.exists()] == []


# -- the size of a collection ----------------------------------------------------------------------


def test_a_run_past_the_episode_bound_is_refused_saying_what_it_would_cost(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*SHORT, "--episodes=100000", "--co", "-n", "2")
    assert_one_line_usage_error(
        result,
        "--episodes=100000 over 2 tasks is 200,000 episodes, more than 100,000 per run: collecting them would "
        "take about 0.4 GB and 1 min in the controller and again in every xdist worker, before any episode runs; "
        "lower --episodes or narrow the tasks with --vla-tasks",
    )
    assert "created:" not in result.stdout.str(), "no worker started"


def test_the_episode_bound_counts_tasks_times_seeds() -> None:
    benchmark = load_benchmark(TESTS / "fake.yaml")
    assert len(select(benchmark, "short", episodes=MAX_EPISODES // 2).episode_ids) == MAX_EPISODES
    with pytest.raises(SpecError, match="is 100,002 episodes, more than 100,000 per run"):
        select(benchmark, "short", episodes=MAX_EPISODES // 2 + 1)
    assert select(benchmark, "short", env_ids=["Alpha-v0"], episodes=MAX_EPISODES).episodes == MAX_EPISODES


def test_an_episode_item_holds_only_its_seed_and_index(fake: pytest.Pytester) -> None:
    """Items are collected by every process; the task, markers and plan live on the task's node."""
    selected = fake.runpytest(*SHORT, "--episodes=2", "--co", "-q", "-m", "object")
    assert [line for line in selected.outlines if "::" in line] == [
        "fake-short::Alpha-v0::100",
        "fake-short::Alpha-v0::101",
    ]
    items, _ = fake.inline_genitems(*SHORT, "--episodes=2")
    assert all(not item.own_markers and item.get_closest_marker("short") for item in items)
    bare = Bare.from_parent(items[0].parent, name="bare")
    assert set(vars(items[0])) - set(vars(bare)) == {"seed", "index", "attempts"}


class Bare(pytest.Item):
    """An item with nothing of its own, to tell what an episode item adds."""

    def runtest(self) -> None:
        pass
