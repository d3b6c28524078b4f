"""A run directory is untrusted input: someone sends one, a crash or a full disk tears one, a
second session starts on it at the same time. Whatever it holds, a session, ``vlaeval merge`` and
``vlaeval compare`` answer in one line naming the file, before any episode where it can be known
then; two sessions never both claim one run."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_one_line_usage_error, run_dir

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import STALE_TEMPORARY_S, RunStore

SHORT = ["--benchmark=fake.yaml:short", "--episodes=2", "-p", "no:cacheprovider"]


def vlaeval(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def assert_one_line(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, output
    assert "Traceback" not in output and expected in output, output
    assert len([line for line in output.splitlines() if line.startswith("vlaeval ")]) == 1, output


def damage(run: Path, name: str) -> None:
    """Each way a received or torn run can hold something else than this package wrote."""
    summary = run / "summary.json"
    data = json.loads(summary.read_text())
    task = run / f"{data['tasks'][0]}.json"
    if name == "garbage summary":
        summary.write_text("<html>not json")
    elif name == "empty summary":
        summary.write_text("")
    elif name == "summary a list":
        summary.write_text("[]")
    elif name == "missing key":
        del data["sr_split"]
        summary.write_text(json.dumps(data))
    elif name == "NaN":
        task.write_text(re.sub(r'"sr": [0-9.]+', '"sr": NaN', task.read_text()))
    elif name == "missing task file":
        task.unlink()
    elif name == "a task outside the run":
        data["tasks"][0] = "../../../etc/passwd"
        summary.write_text(json.dumps(data))
    elif name == "a group SR as text":
        data["sr_per_memory_type"] = {"Object": "high"}
        summary.write_text(json.dumps(data))
    elif name == "a directory for the summary":
        summary.unlink()
        summary.mkdir()
    elif name == "a string for successes":
        task.write_text(json.dumps({**json.loads(task.read_text()), "successes": "yes"}))
    else:
        raise AssertionError(name)


DAMAGES = [
    "garbage summary",
    "empty summary",
    "summary a list",
    "missing key",
    "NaN",
    "missing task file",
    "a task outside the run",
    "a group SR as text",
    "a directory for the summary",
    "a string for successes",
]


@pytest.fixture
def two_runs(fake: pytest.Pytester) -> list[Path]:
    runs = []
    for policy in ("random", "zero"):
        fake.runpytest(*SHORT, f"--policy={policy}")
        runs.append(next(p for p in (fake.path / "results").iterdir() if policy in p.name))
    return runs


@pytest.mark.parametrize("name", DAMAGES)
def test_compare_refuses_a_damaged_run_in_one_line(two_runs: list[Path], tmp_path: Path, name: str) -> None:
    damage(two_runs[1], name)
    assert_one_line(vlaeval("compare", *map(str, two_runs), "--out", str(tmp_path), cwd=tmp_path), "vlaeval compare: ")


def test_compare_into_a_folder_it_cannot_write_is_one_line(two_runs: list[Path], tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    proc = vlaeval("compare", *map(str, two_runs), "--out", str(blocked), cwd=tmp_path)
    assert_one_line(proc, f"writing {blocked}/compare.md")


@pytest.mark.parametrize("what", ["fingerprint", "policy"])
def test_merge_refuses_a_garbage_fingerprint_or_policy_in_one_line(fake: pytest.Pytester, what: str) -> None:
    fake.runpytest(*SHORT, "--vla-shard=1/2", "--vla-results=one")
    fake.runpytest(*SHORT, "--vla-shard=2/2", "--vla-results=two")
    shards = [next((fake.path / root).iterdir()) for root in ("one", "two")]
    (shards[1] / f"{what}.json").write_text('{"benchmark": ')
    proc = vlaeval("merge", *map(str, shards), "--out", str(fake.path / "merged"), cwd=fake.path)
    assert_one_line(proc, f"{what}.json is not the run's {what} as this package writes it")


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        ("garbage fingerprint", "fingerprint.json is not the run's fingerprint as this package writes it"),
        ("empty policy", "policy.json is not the run's policy as this package writes it"),
        ("a directory among the logs", "episodes/x.jsonl is among the run's episode logs but cannot be read"),
        ("a dangling link among the logs", "episodes/y.jsonl is among the run's episode logs but cannot be read"),
        ("a directory for the lock", ".lock is a directory, and the run writes its .lock there"),
        ("a directory for the report", "report.html is a directory, and the run writes its report.html there"),
        ("a directory for the chart", "summary.png is a directory, and the run writes its summary.png there"),
        ("a record with success 'no'", "line 1 is not an episode record (ValidationError: Expected `bool | null`"),
    ],
)
def test_a_session_on_a_damaged_run_stops_in_one_line(fake: pytest.Pytester, what: str, expected: str) -> None:
    fake.runpytest(*SHORT)
    run = run_dir(fake)
    if what == "garbage fingerprint":
        (run / "fingerprint.json").write_text("garbage")
    elif what == "empty policy":
        (run / "policy.json").write_text("")
    elif what == "a directory among the logs":
        (run / "episodes" / "x.jsonl").mkdir()
    elif what == "a dangling link among the logs":
        (run / "episodes" / "y.jsonl").symlink_to(run / "nowhere")
    elif what.startswith("a directory for the"):
        name = {"lock": ".lock", "report": "report.html", "chart": "summary.png"}[what.rsplit(" ", 1)[1]]
        if (run / name).exists():
            (run / name).unlink()
        (run / name).mkdir()
    else:
        (log,) = (run / "episodes").iterdir()
        first, *rest = log.read_text().splitlines()
        record = json.loads(first)
        log.write_text("\n".join([json.dumps({**record, "success": "no"}), *rest]) + "\n")
    before = sorted((run / "episodes").iterdir())
    result = fake.runpytest(*SHORT)
    assert_one_line_usage_error(result, expected)
    assert sorted((run / "episodes").iterdir()) == before, "no episode ran"


def test_a_crafted_record_is_type_checked_on_read(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.episodes.mkdir()
    record = {
        "task": "A-v0", "seed": 1, "outcome": "failure", "success": True, "episode_return": 0.0, "length": 3,
        "message": "m", "wall_time": 1.0, "worker": "gw0", "time": "t",
    }  # fmt: skip
    (run.episodes / "a.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(SpecError, match="outcome 'failure' with success True"):
        LatestRecords.read(run)


def test_stale_temporaries_are_removed_at_the_next_session(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT)
    run = run_dir(fake)
    stale, fresh = run / ".summary.json.killed.tmp", run / ".report.html.live.tmp"
    stale.write_text("{")
    fresh.write_text("<")
    old = time.time() - STALE_TEMPORARY_S - 60
    os.utime(stale, (old, old))
    fake.runpytest(*SHORT, "--vla-resume")
    assert not stale.exists() and fresh.exists(), "a live writer's temporary file is left alone"


def _claim(run: str, fingerprint: dict[str, Any], start: Any, results: Any) -> None:
    start.wait()
    try:
        RunStore(Path(run)).claim(fingerprint)
        results.put(fingerprint["policy"])
    except SpecError:
        results.put(None)


@pytest.mark.parametrize("attempt", range(3))
def test_of_sessions_claiming_one_run_at_once_only_one_kind_is_accepted(tmp_path: Path, attempt: int) -> None:
    """30 processes, half with one fingerprint and half with another, claim one run directory at
    the same instant: those accepted all hold the fingerprint that is on disk, whole."""
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(30), context.Queue()
    run = tmp_path / "run"
    processes = [
        context.Process(target=_claim, args=(str(run), {"policy": f"p{i % 2}", "pad": "x" * 4096}, start, results))
        for i in range(30)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    accepted = {results.get(timeout=10) for _ in processes} - {None}
    on_disk = json.loads((run / "fingerprint.json").read_text())["policy"]
    assert accepted == {on_disk}
    assert not list(run.glob(".*.tmp"))
    shutil.rmtree(run)


def test_a_merge_made_while_a_session_writes_is_brought_up_to_date(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first merge copies a log its session is still appending to; a second merge extends that
    copy. A copy that is not the start of its log names the file to remove. Ctrl-C is one line."""
    from pytest_vlaeval.cli import main

    fake.runpytest(*SHORT)
    run = run_dir(fake)
    (log,) = (run / "episodes").iterdir()
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:2]))  # the session has written two of its records so far
    merged = fake.path / "merged"
    assert main(["merge", str(run), "--out", str(merged)]) == 0
    log.write_text("".join(lines))  # ... and then the rest
    assert main(["merge", str(run), "--out", str(merged)]) == 0
    assert (merged / "episodes" / log.name).read_text() == "".join(lines)
    assert json.loads((merged / "summary.json").read_text())["n_completed"] == 4

    (merged / "episodes" / log.name).write_text("something else\n")
    proc = vlaeval("merge", str(run), "--out", str(merged), cwd=fake.path)
    assert_one_line(proc, f"is not a copy of {log} (nor the start of one): remove {merged / 'episodes' / log.name}")

    monkeypatch.setattr(shutil, "copyfile", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(["merge", str(run), "--out", str(fake.path / "third")]) == 130


def test_a_received_runs_linked_log_is_refused_never_copied(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """A run directory from elsewhere may hold a link where an episode log belongs: the merge
    refuses it, and copies and reads nothing through it."""
    from pytest_vlaeval.cli import main as vlaeval

    fake.runpytest("--benchmark=fake.yaml:short", "-p", "no:cacheprovider")
    (run,) = (fake.path / "results").iterdir()
    precious = fake.path / "precious.txt"
    precious.write_text("mine")
    (run / "episodes" / "stolen.jsonl").symlink_to(precious)
    out = fake.path / "merged"
    assert vlaeval(["merge", str(run), "--out", str(out)]) == 2
    assert "stolen.jsonl is a symbolic link, not an episode log" in capsys.readouterr().out
    assert not (out / "episodes" / "stolen.jsonl").exists() and precious.read_text() == "mine"
