"""The record path: the run's latest records kept by one object, read incrementally; the terminal
output of failed episodes; a run directory that carries its benchmark."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers import read_json, run_dir

from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.record import EpisodeRecord
from pytest_vlaeval.results.rundir import RunDir

SHORT = ["--benchmark=fake.yaml:short"]


def record(task: str, seed: int, outcome: str, time: str) -> EpisodeRecord:
    return EpisodeRecord(
        task=task, seed=seed, outcome=outcome, success=outcome == "success", episode_return=0.0, length=2,
        message="", wall_time=0.1, worker="main", time=time,
    )  # fmt: skip


def line(rec: EpisodeRecord) -> str:
    return json.dumps(rec.to_dict()) + "\n"


def test_catch_up_reads_only_what_was_appended_and_a_torn_line_whole_next_time(tmp_path: Path) -> None:
    log = tmp_path / "episodes" / "other-session.jsonl"
    log.parent.mkdir()
    first = line(record("A", 1, "failure", "2026-01-01T00:00:01"))
    second = line(record("A", 2, "success", "2026-01-01T00:00:02"))
    log.write_text(first + second[:25])  # the other session is mid-append
    latest = LatestRecords.read(RunDir(tmp_path))
    assert sorted(latest) == [("A", 1)]

    # What was read is never parsed again: damage there goes unnoticed, proof it is not re-read.
    with log.open("r+") as f:
        f.write("x" * len(first.rstrip("\n")))
        f.seek(0, 2)
        f.write(second[25:])
    latest.catch_up()
    assert sorted(latest) == [("A", 1), ("A", 2)] and latest[("A", 2)].outcome == "success"

    retry = dataclasses.replace(record("A", 1, "success", "2026-01-01T00:00:03"), attempt=2)
    with log.open("a") as f:
        f.write(line(retry) + "{not json}\n")
    with pytest.raises(SpecError, match=r"other-session.jsonl line 4 is not an episode record"):
        latest.catch_up()


def test_this_sessions_log_is_skipped_and_the_latest_attempt_wins_by_time(tmp_path: Path) -> None:
    mine = tmp_path / "episodes" / "mine.jsonl"
    theirs = tmp_path / "episodes" / "theirs.jsonl"
    mine.parent.mkdir()
    latest = LatestRecords(RunDir(tmp_path))
    fail = record("A", 1, "failure", "2026-01-01T00:00:01")
    latest.add(fail)
    mine.write_text("garbage that only this session's own log holds\n")
    theirs.write_text(line(record("A", 1, "success", "2026-01-01T00:00:02")))
    latest.catch_up(skip=mine)
    assert latest[("A", 1)].outcome == "success" and latest.failed_once(("A", 1))
    latest.add(record("A", 1, "failure", "2026-01-01T00:00:00"))  # made before the other: not the latest
    assert latest[("A", 1)].outcome == "success"


def test_the_controller_parses_each_record_once(fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records come off the reports once; rewriting the canonical files as tasks complete reads
    no log again (its cost would grow with the run)."""
    parsed = []
    from_dict = EpisodeRecord.from_dict.__func__

    def counting(cls: type[EpisodeRecord], data: dict) -> EpisodeRecord:
        parsed.append((data["task"], data["seed"]))
        return from_dict(cls, data)

    monkeypatch.setattr(EpisodeRecord, "from_dict", classmethod(counting))
    result = fake.runpytest_inprocess(*SHORT, "--episodes=2", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert read_json(run_dir(fake) / "summary.json")["n_completed"] == 4
    assert sorted(parsed) == [("Alpha-v0", 100), ("Alpha-v0", 101), ("Beta-v0", 100), ("Beta-v0", 101)]


def test_failed_episodes_are_results_and_errors_keep_their_tracebacks(fake: pytest.Pytester) -> None:
    fake.makepyfile(
        policies="""
        import numpy as np

        class Zero:
            chunk_size = 1
            def reset(self, episode):
                pass
            def act(self, obs):
                return np.zeros(7)

        class CrashesOnBeta(Zero):
            def reset(self, episode):
                if episode.task == "Beta-v0":
                    raise RuntimeError("the policy fell over")
        """
    )
    result = fake.runpytest_subprocess(*SHORT, "--episodes=1", "--policy=policies:CrashesOnBeta", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "= FAILURES =" not in out and "Alpha-v0 seed 100" not in out
    assert "= ERRORS =" in out and "episode error traceback" in out and "RuntimeError: the policy fell over" in out
    result.stdout.fnmatch_lines(["FAILED fake-short::Alpha-v0::100 - no success in *", "*1 failed, 1 error*"])

    distributed = fake.runpytest_subprocess(*SHORT, "--episodes=1", "--policy=policies:CrashesOnBeta", "-n", "2")
    assert "= FAILURES =" not in distributed.stdout.str() and "= ERRORS =" in distributed.stdout.str()
    distributed.stdout.fnmatch_lines(["*1 failed, 1 error*"])

    detailed = fake.runpytest_subprocess(
        *SHORT, "--episodes=1", "--policy=policies:CrashesOnBeta", "-p", "no:xdist", "--vla-failure-details"
    )
    detailed.stdout.fnmatch_lines(["*= ERRORS =*", "*= FAILURES =*", "*_ Alpha-v0 seed 100 _*", "no success in *"])


def test_a_run_directory_keeps_its_benchmark_and_merges_without_it(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, shard in (("a", "1/2"), ("b", "2/2")):
        fake.runpytest(*SHORT, "--vla-tasks=Alpha-v0,Beta-v0", f"--vla-results={name}", f"--vla-shard={shard}")
    (a,) = (fake.path / "a").iterdir()
    (b,) = (fake.path / "b").iterdir()
    assert (a / "benchmark.yaml").read_bytes() == (fake.path / "fake.yaml").read_bytes()
    (fake.path / "fake.yaml").unlink()  # nothing outside the run directories is needed
    out = fake.path / "merged"
    assert vlaeval(["merge", str(a), str(b), "--out", str(out)]) == 0, capsys.readouterr().out
    assert read_json(out / "summary.json")["n_completed"] == 6
    assert (out / "benchmark.yaml").read_bytes() == (a / "benchmark.yaml").read_bytes()
