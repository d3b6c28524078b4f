"""The run's store (``store``): the run directory's name, the durable episode log and the latest
attempt read back from it, the fingerprint, files that honour the umask, and what sessions do to
one store: concurrent shards, a damaged line, a results location that cannot be written."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_one_line_usage_error, episode_records, read_json, record, run_dir, usage_error

from pytest_vlaeval.benchmark.model import resolve_benchmark, select
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.printable import command_line
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.record import MAX_LINE_BYTES
from pytest_vlaeval.results.rundir import NAME_MAX, RunDir
from pytest_vlaeval.results.store import RunStore, run_dir_name

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]


def test_run_dir_name_is_deterministic_and_separates_selections() -> None:
    benchmark, _ = resolve_benchmark("mikasa")
    full = select(benchmark, "short")
    assert run_dir_name(full, "my_pkg.policies:make_policy") == "mikasa-short-my_pkg.policies_make_policy"
    narrowed = select(benchmark, "short", env_ids=["InterceptSlow-VLA-v0"])
    assert run_dir_name(narrowed, "random") == run_dir_name(narrowed, "random") != run_dir_name(full, "random")
    assert run_dir_name(select(benchmark, "short", episodes=5), "random") != run_dir_name(full, "random")


def test_a_run_dir_name_too_long_for_a_folder_keeps_its_start_and_ends_in_a_digest_of_the_whole() -> None:
    """Module paths that differ only past the cut still name two runs."""
    full = select(resolve_benchmark("mikasa")[0], "short")
    long_module, other = ("pkg." + "m" * 300 + ending + ":make" for ending in ("a", "b"))
    name = run_dir_name(full, long_module)
    assert len(name.encode()) == NAME_MAX and re.fullmatch(r"mikasa-short-pkg\.m+-[0-9a-f]{8}", name), name
    assert run_dir_name(full, long_module) == name != run_dir_name(full, other)
    fits = "pkg." + "m" * 200 + ":make"
    assert run_dir_name(full, fits) == "mikasa-short-pkg." + "m" * 200 + "_make"


def test_store_keeps_the_latest_attempt_and_ignores_a_torn_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.append(record("A", 1, "failure", time="2026-01-01T00:00:01"))
    store.append(record("A", 2, "success", time="2026-01-01T00:00:02"))
    store.close()
    later = RunStore(tmp_path)
    later.append(dataclasses.replace(record("A", 1, "success", time="2026-01-01T00:00:03"), attempt=2))
    later.close()
    log = next((tmp_path / "episodes").glob("*.jsonl"))
    with log.open("a") as f:
        f.write('{"task": "A", "seed": 3, "outc')  # a crash mid-write
    loaded = LatestRecords.read(RunDir(tmp_path))
    assert sorted(loaded) == [("A", 1), ("A", 2)]
    assert loaded[("A", 1)].outcome == "success" and loaded[("A", 1)].attempt == 2


def test_store_refuses_a_different_fingerprint(tmp_path: Path) -> None:
    RunStore(tmp_path).claim({"policy": "random", "episodes": 50})
    RunStore(tmp_path).claim({"policy": "random", "episodes": 50})
    with pytest.raises(SpecError, match=r"different fingerprint \(episodes: 50 -> 2\)"):
        RunStore(tmp_path).claim({"policy": "random", "episodes": 2})


BARRIER = """
import os
import time
from pathlib import Path

import numpy as np

class Together:
    '''Starts acting only once both sessions have built their policy, so both read the run's
    store before either writes to it.'''

    chunk_size = 1

    def __init__(self):
        Path(f"started-{os.getpid()}").touch()
        deadline = time.monotonic() + 60
        while len(list(Path().glob("started-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)

    def reset(self, episode):
        pass

    def act(self, obs):
        return np.zeros(7)
"""


def test_concurrent_shards_into_one_run_leave_a_summary_of_everything_stored(fake: pytest.Pytester) -> None:
    fake.makepyfile(together=BARRIER)
    shards = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", *SHORT, "--policy=together:Together", f"--vla-shard={i}/2"],
            cwd=fake.path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in (1, 2)
    ]
    assert [shard.wait(120) for shard in shards] == [pytest.ExitCode.TESTS_FAILED] * 2
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    assert len(episode_records(directory)) == 6
    assert (summary["n_completed"], summary["n_missing"], summary["tasks_without_results"]) == (6, 0, [])
    assert all(read_json(directory / f"{task}.json")["complete"] for task in ("Alpha-v0", "Beta-v0"))


HELD = """
import time
from pathlib import Path

import numpy as np


class Held:
    '''Zero actions, the first only once the test lets it go: a session that still runs when the
    other one started beside it has checked the run directory.'''

    chunk_size = 1

    def reset(self, episode):
        pass

    def act(self, obs):
        deadline = time.monotonic() + 120
        while not Path("go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return np.zeros(7)
"""


def test_of_two_sessions_started_at_once_on_one_run_the_second_refuses(fake: pytest.Pytester) -> None:
    """Both ran every episode (12 records for 6 episodes). Now the session that holds the run is
    named, with what to do, and the next session after it runs as usual."""
    fake.makepyfile(held=HELD)
    command = [sys.executable, "-m", "pytest", *SHORT, "--policy=held:Held"]
    sessions = [
        subprocess.Popen(command, cwd=fake.path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while all(session.poll() is None for session in sessions) and time.monotonic() < deadline:
            time.sleep(0.05)
        (refused,) = [session for session in sessions if session.poll() is not None]
        (holder,) = [session for session in sessions if session is not refused]
        _, err = refused.communicate()
        assert refused.returncode == pytest.ExitCode.USAGE_ERROR, err
        directory = run_dir(fake)
        errors = [line for line in err.splitlines() if line.startswith("ERROR:")]
        named = re.escape(
            f"ERROR: {directory} is being run by another session, pid {holder.pid} on {socket.gethostname()}"
        )
        advice = ": wait for it to end, or start this one beside it with --vla-run-name=<new name> (or another --vla-results)"
        assert len(errors) == 1 and re.fullmatch(rf"{named} since \S+{re.escape(advice)}", errors[0]), err
    finally:
        (fake.path / "go").touch()
    assert holder.wait(120) == pytest.ExitCode.TESTS_FAILED
    assert record_lines(directory) == 6, "every episode ran once"
    assert (directory / ".session.lock").read_bytes() == b"", "an ended session names itself no more"

    again = fake.runpytest(*SHORT, "--policy=held:Held")
    assert again.ret == pytest.ExitCode.TESTS_FAILED, again.errlines
    assert record_lines(directory) == 12, "after it, a session runs every episode again"


def record_lines(directory: Path) -> int:
    return sum(len(log.read_text().splitlines()) for log in (directory / "episodes").glob("*.jsonl"))


HOLDS = """
import sys, time
from pathlib import Path
from pytest_vlaeval.results.store import RunStore
store = RunStore(Path(sys.argv[1]))
store.occupy()
print("held", flush=True)
time.sleep(600)
"""


def test_a_session_whose_process_is_gone_holds_the_run_no_more(fake: pytest.Pytester) -> None:
    """The lock is the file system's: a killed session's file still names it, and blocks nothing."""
    fake.runpytest(*SHORT, "--policy=zero")
    directory = run_dir(fake)
    holder = subprocess.Popen([sys.executable, "-c", HOLDS, str(directory)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(SpecError, match=f"is being run by another session, pid {holder.pid} on "):
            RunStore(directory).occupy()
    finally:
        holder.kill()
        holder.wait()
    assert f'"pid": {holder.pid}' in (directory / ".session.lock").read_text()
    assert fake.runpytest(*SHORT, "--policy=zero").ret == pytest.ExitCode.TESTS_FAILED
    assert record_lines(directory) == 12


def test_each_shard_of_a_run_is_held_by_its_own_session(tmp_path: Path) -> None:
    first, second = RunStore(tmp_path, "shard1of2"), RunStore(tmp_path, "shard2of2")
    first.occupy()
    second.occupy()  # the shards of an array run side by side
    with pytest.raises(SpecError, match=rf"is being run by another session \(the same shard\), pid {os.getpid()} "):
        RunStore(tmp_path, "shard1of2").occupy()
    first.vacate()
    RunStore(tmp_path, "shard1of2").occupy()


@pytest.mark.parametrize("where", ["a-regular-file", "/proc/self/results"])
def test_an_unusable_results_location_stops_in_one_line_before_any_episode(fake: pytest.Pytester, where: str) -> None:
    (fake.path / "a-regular-file").write_text("not a directory\n")
    result = fake.runpytest(*SHORT, f"--vla-results={where}")
    assert_one_line_usage_error(result, "cannot write results to ")
    assert "choose a writable --vla-results" in usage_error(result)
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_damaged_store_line_is_refused_naming_file_line_and_repair(fake: pytest.Pytester) -> None:
    args = [*SHORT, "--vla-tasks=Alpha-v0"]
    fake.runpytest(*args)
    (log,) = (run_dir(fake) / "episodes").glob("*.jsonl")
    lines = log.read_text().splitlines(keepends=True)
    torn = lines[-1][:20]  # a crash mid-write: an unterminated last line is passed over silently
    log.write_text("".join(lines) + torn)
    assert fake.runpytest(*args, "--vla-resume").ret == pytest.ExitCode.NO_TESTS_COLLECTED
    log.write_text(lines[0] + '{"task": "Alpha-v0", "se\n' + "".join(lines[2:]))
    result = fake.runpytest(*args, "--vla-resume")
    assert_one_line_usage_error(result, f"{log} line 2 is not an episode record (JSONDecodeError")
    assert f"remove it with: {command_line(['sed', '-i', '2d', str(log)])} " in usage_error(result)
    subprocess.run(["sed", "-i", "2d", str(log)], check=True)
    repaired = fake.runpytest(*args, "--vla-resume")
    repaired.stdout.fnmatch_lines(["*1 of 3 episodes selected*"])
    assert read_json(run_dir(fake) / "summary.json")["n_missing"] == 0


def test_a_session_passes_over_a_line_too_long_to_be_a_record_and_says_so(fake: pytest.Pytester) -> None:
    """A line past ``MAX_LINE_BYTES`` (sparse zero bytes) is no record any session wrote: a resumed
    session warns of it, naming file and line, and keeps the records around it."""
    args = [*SHORT, "--vla-tasks=Alpha-v0"]
    fake.runpytest(*args)
    (log,) = (run_dir(fake) / "episodes").glob("*.jsonl")
    lines = log.read_bytes().splitlines(keepends=True)
    with log.open("wb") as f:
        f.write(lines[0])
        f.seek(MAX_LINE_BYTES + 1, 1)
        f.write(b"\n" + b"".join(lines[1:]))
    result = fake.runpytest(*args, "--vla-resume")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, "every episode is still recorded"
    result.stdout.fnmatch_lines(
        [f"*PytestWarning: {log} line 2 passed over: longer than 256 MiB, so no episode record*"]
    )


def test_canonical_files_honour_the_umask(fake: pytest.Pytester) -> None:
    previous = os.umask(0o022)
    try:
        fake.runpytest(*SHORT, "--vla-tasks=Alpha-v0", "--episodes=1")
    finally:
        os.umask(previous)
    directory = run_dir(fake)
    modes = {p.name: p.stat().st_mode & 0o777 for p in directory.iterdir() if p.suffix in (".json", ".md", ".png")}
    assert set(modes) >= {"summary.json", "Alpha-v0.json", "fingerprint.json", "policy.json", "report.md"}
    assert set(modes.values()) == {0o644}, modes


# -- links in a received run: the store never writes through one --------------------------------


@pytest.mark.parametrize("link", ["episodes", "videos", "ns", ".lock", "server.log"])
def test_a_link_where_a_session_would_write_is_refused_before_any_episode(tmp_path: Path, link: str) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    (run / link).symlink_to(outside)
    refused = f"^{re.escape(str(run / link))} is a symbolic link, and a run's files"
    with pytest.raises((SpecError, ResultsUnwritable), match=refused):
        RunStore(run).check_writable(["ns/Alpha-v0"])
    assert not outside.exists()


def test_the_log_and_the_lock_are_never_opened_through_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appended files are opened without following a link: a received run's would create or grow
    the file it names."""
    store, outside = RunStore(tmp_path / "run"), tmp_path / "outside"
    monkeypatch.setattr(RunDir, "new_log", lambda self, label="": self.episodes / "mine.jsonl")
    store.dir.episodes.mkdir(parents=True)
    (store.dir.episodes / "mine.jsonl").symlink_to(outside)
    with pytest.raises(ResultsUnwritable, match=r"mine\.jsonl is a symbolic link"):
        store.append(record("A", 1, "success"))
    store.dir.lock.symlink_to(outside)
    with pytest.raises(ResultsUnwritable, match=r"\.lock is a symbolic link"), store.locked():
        pass
    assert not outside.exists()
