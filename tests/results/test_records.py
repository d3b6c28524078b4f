"""The record path: the run's latest records kept by one object, read incrementally; the terminal
output of failed episodes; a run directory that carries its benchmark."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from helpers import episode_records, peak_bytes, read_json, run_dir

from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.controller.ledger import Ledger
from pytest_vlaeval.errors import PolicyError, SpecError
from pytest_vlaeval.results.latest import READ_BYTES, LatestRecords
from pytest_vlaeval.results.record import DETAIL_LIMIT, MAX_ATTEMPT, MAX_LINE_BYTES, EpisodeRecord, error_record
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import RunStore

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
    # Once off its report, once as the controller checks that the store can keep it, once as the
    # writer checks its log line (``record_line``): never from a log.
    assert sorted(parsed) == sorted(3 * [("Alpha-v0", 100), ("Alpha-v0", 101), ("Beta-v0", 100), ("Beta-v0", 101)])


def test_a_session_started_inside_an_xdist_worker_is_its_own_controller(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite run under xdist that starts an evaluation hands it its worker's name and count in the
    environment; the evaluation's records name its own workers, and the variables are back after."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    fake.runpytest(*SHORT, "--episodes=1")
    assert {record["worker"] for record in episode_records(run_dir(fake)).values()} == {"main"}
    assert (os.environ["PYTEST_XDIST_WORKER"], os.environ["PYTEST_XDIST_WORKER_COUNT"]) == ("gw7", "8")


def test_failed_episodes_are_results_and_errors_keep_their_tracebacks(fake: pytest.Pytester) -> None:
    result = fake.runpytest_subprocess(
        *SHORT, "--episodes=1", "--policy=spy_policies:CrashesOnBeta", "-p", "no:xdist", "-rfE"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "= FAILURES =" not in out and "Alpha-v0 seed 100" not in out
    assert "= ERRORS =" in out and "episode error traceback" in out and "RuntimeError: the policy fell over" in out
    result.stdout.fnmatch_lines(["FAILED fake-short::Alpha-v0::100 - no success in *", "*1 failed, 1 error*"])

    distributed = fake.runpytest_subprocess(*SHORT, "--episodes=1", "--policy=spy_policies:CrashesOnBeta", "-n", "2")
    assert "= FAILURES =" not in distributed.stdout.str() and "= ERRORS =" in distributed.stdout.str()
    distributed.stdout.fnmatch_lines(["*1 failed, 1 error*"])

    detailed = fake.runpytest_subprocess(
        *SHORT, "--episodes=1", "--policy=spy_policies:CrashesOnBeta", "-p", "no:xdist", "--vla-failure-details"
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


EARLY = "2026-01-01T00:00:00+00:00"
FUTURE = "9999-12-31T23:59:59+00:00"


def test_a_rerun_wins_over_what_it_reran_whatever_the_clocks_say(tmp_path: Path) -> None:
    """A received record stamped in the year 9999, and a shard whose clock runs three hours fast:
    each rerun session reads the run, numbers its attempts past what it read and appends to its own
    log, and its records are the latest, though stamped earlier."""
    run = RunDir(tmp_path)
    run.episodes.mkdir()
    (run.episodes / "received.jsonl").write_text(line(record("A", 1, "error", FUTURE)))
    (run.episodes / "fast-clock.jsonl").write_text(line(record("B", 1, "error", "2026-01-01T03:00:00+00:00")))
    for session in range(2):
        ledger = Ledger(LatestRecords.read(run), retries=0)
        store = RunStore(tmp_path, label=f"rerun{session}")
        for task in ("A", "B"):
            store.append(ledger.number(record(task, 1, "failure", EARLY)))
        store.close()
    latest = LatestRecords.read(run)
    assert {key: (rec.outcome, rec.attempt) for key, rec in latest.items()} == {
        ("A", 1): ("failure", 3),
        ("B", 1): ("failure", 3),
    }


def test_attempts_of_one_number_are_ordered_by_time_and_records_without_a_number_are_first_attempts(
    tmp_path: Path,
) -> None:
    """Sessions that did not know of each other both make attempt 1: the one stamped later is the
    latest, whichever log is read first. A record without ``attempt`` is a first attempt."""
    run = RunDir(tmp_path)
    run.episodes.mkdir()
    (run.episodes / "a.jsonl").write_text(line(record("A", 1, "success", "2026-01-01T00:00:00.500000+00:00")))
    (run.episodes / "b.jsonl").write_text(line(record("A", 1, "failure", "2026-01-01T00:00:00+00:00")))
    unnumbered = record("B", 1, "failure", "2026-01-01T00:00:05+00:00").to_dict()
    del unnumbered["attempt"]
    (run.episodes / "c.jsonl").write_text(
        json.dumps(unnumbered) + "\n" + line(record("B", 1, "success", "2026-01-01T00:00:04+00:00"))
    )
    latest = LatestRecords.read(run)
    assert latest[("A", 1)].outcome == "success"
    assert latest[("B", 1)].outcome == "failure" and latest[("B", 1)].attempt == 1


@pytest.mark.parametrize(
    ("time", "why"),
    [
        ("yesterday", "Invalid isoformat string"),
        ("2026-01-01T00:00:00+02:00", "is not in UTC"),
    ],
)
def test_a_record_time_that_is_no_utc_timestamp_is_refused(tmp_path: Path, time: str, why: str) -> None:
    log = tmp_path / "episodes" / "received.jsonl"
    log.parent.mkdir()
    log.write_text(line(record("A", 1, "success", EARLY)) + line(record("A", 2, "success", time)))
    with pytest.raises(SpecError, match=rf"received.jsonl line 2 is not an episode record \(ValueError: .*{why}"):
        LatestRecords.read(RunDir(tmp_path))


@pytest.mark.parametrize("attempt", [0, MAX_ATTEMPT + 1])
def test_an_attempt_number_no_run_makes_is_refused(tmp_path: Path, attempt: int) -> None:
    log = tmp_path / "episodes" / "received.jsonl"
    log.parent.mkdir()
    log.write_text(line(dataclasses.replace(record("A", 1, "success", EARLY), attempt=attempt)))
    with pytest.raises(SpecError, match=rf"line 1 is not an episode record \(ValueError: attempt {attempt} is not"):
        LatestRecords.read(RunDir(tmp_path))


def test_a_log_whose_workers_clocks_disagree_is_read_whole(tmp_path: Path) -> None:
    """Workers stamp records with their own clocks (remote ones too), so a session's log may run back
    in time by any amount: that is not damage (the reader never refuses what a session writes), and
    the attempt number, not the clock, says which attempt is the latest."""
    log = tmp_path / "episodes" / "skewed.jsonl"
    log.parent.mkdir()
    log.write_text(
        line(record("A", 1, "error", FUTURE))  # a worker whose clock runs years ahead
        + line(dataclasses.replace(record("A", 1, "success", EARLY), attempt=2))
        + line(record("B", 1, "success", "2026-01-01T00:00:00+00:00"))
    )
    latest = LatestRecords.read(RunDir(tmp_path))
    assert {key: r.outcome for key, r in latest.items()} == {("A", 1): "success", ("B", 1): "success"}


def test_a_line_too_long_to_be_a_record_is_passed_over_unread_and_named(tmp_path: Path) -> None:
    """A line of zero bytes past ``MAX_LINE_BYTES`` between two records, then a torn tail as long
    (sparse: no disk space): both are passed over in a read's piece of memory, each named by file
    and line, and the records around them are kept (refused, the first cost 256 MiB to read)."""
    log = tmp_path / "episodes" / "huge.jsonl"
    log.parent.mkdir()
    first = line(record("A", 1, "success", EARLY)).encode()
    second = line(record("B", 1, "failure", EARLY)).encode()
    with log.open("wb") as f:
        f.write(first)
        f.seek(MAX_LINE_BYTES + READ_BYTES, 1)
        f.write(b"\n" + second)
        f.truncate(f.tell() + MAX_LINE_BYTES + READ_BYTES)
    read: list[LatestRecords] = []

    assert peak_bytes(lambda: read.append(LatestRecords.read(RunDir(tmp_path)))) < 8 * READ_BYTES
    (latest,) = read
    assert sorted(latest) == [("A", 1), ("B", 1)]
    assert latest.skipped == [
        f"{log} line {number} passed over: longer than {MAX_LINE_BYTES // 2**20} MiB, so no episode record "
        "(none is written so long); the log's other lines are read"
        for number in (2, 4)
    ]
    latest.catch_up()
    assert len(latest.skipped) == 2, "what was passed over is not read again"


def test_a_record_longer_than_a_reads_piece_is_read_whole_once_it_ends(tmp_path: Path) -> None:
    """A record of megabytes (a policy's long exception) torn mid-append is not a record yet, and
    is read whole once its writer ends it."""
    made = dataclasses.replace(record("A", 1, "failure", EARLY), detail="x" * (3 * READ_BYTES))
    text = line(made)
    log = tmp_path / "episodes" / "other-session.jsonl"
    log.parent.mkdir()
    log.write_text(text[: 2 * READ_BYTES])
    latest = LatestRecords.read(RunDir(tmp_path))
    assert len(latest) == 0 and latest.skipped == []
    with log.open("a") as f:
        f.write(text[2 * READ_BYTES :] + line(record("B", 1, "success", EARLY)))
    latest.catch_up()
    assert latest[("A", 1)] == made and sorted(latest) == [("A", 1), ("B", 1)]


def test_records_of_episodes_outside_the_run_are_counted_not_kept(tmp_path: Path) -> None:
    """A received log of 4,000 records for seeds the run does not hold (25 MB) costs no memory."""
    log = tmp_path / "episodes" / "received.jsonl"
    log.parent.mkdir()
    padded = dataclasses.replace(record("A", 0, "success", EARLY), detail="x" * 6000)
    with log.open("w") as f:
        f.write(line(record("A", 1, "failure", EARLY)))
        for seed in range(1000, 5000):
            f.write(line(dataclasses.replace(padded, seed=seed)))
    assert log.stat().st_size > 24_000_000
    kept: list[LatestRecords] = []
    assert peak_bytes(lambda: kept.append(LatestRecords.read(RunDir(tmp_path), [("A", 1), ("A", 2)]))) < 2_000_000
    (latest,) = kept
    assert dict(latest) == {("A", 1): record("A", 1, "failure", EARLY)} and latest.outside == 4_000


def test_an_error_record_keeps_the_start_and_end_of_a_huge_detail(tmp_path: Path) -> None:
    """A policy's exception may hold megabytes; its record stays a line every reader takes."""
    try:
        raise ValueError("start " + "\x00" * (DETAIL_LIMIT + 1_000_000) + " end")
    except ValueError as exc:
        cause = exc
    error = PolicyError("the policy raised " + str(cause))
    error.__cause__ = cause
    made = error_record("A", 1, error, worker="gw0")
    assert made.detail is not None and len(made.detail) < DETAIL_LIMIT + 100
    assert made.detail.startswith("the policy raised start") and made.detail.rstrip().endswith(" end")
    assert "characters left out" in made.detail
    store = RunStore(tmp_path)
    store.append(made)
    store.close()
    assert LatestRecords.read(RunDir(tmp_path))[("A", 1)] == made
