"""Real signals to real sessions: termination signals act as Ctrl-C does, and Ctrl-C (in a policy or
during ``evaluate()``) lets the session store what it finished."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from helpers import episode_records, read_json, run_dir

pytestmark = pytest.mark.minutes(1.5)

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--vla-live=off", "-q"]
HANG_GUARD_S = 300
"""How long a test waits for something that must happen, before failing instead of hanging (generous:
a loaded machine starts a replacement xdist worker slowly)."""


def stored_lines(results: Path) -> int:
    return sum(len(log.read_text().splitlines()) for log in results.glob("*/episodes/*.jsonl"))


def wait_until(done: Callable[[], bool], proc: subprocess.Popen[str], failure: str) -> None:
    """Until ``done()``; fails with ``failure``, and the session's output if it ended first."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not done():
        assert proc.poll() is None, f"{failure}; the session ended: {proc.communicate()[0]}"
        assert time.monotonic() < deadline, failure
        time.sleep(0.05)


def wait_for_records(results: Path, count: int, proc: subprocess.Popen[str]) -> None:
    wait_until(lambda: stored_lines(results) >= count, proc, "no episode finished")


def as_from_a_terminal() -> None:
    """In the child: SIGHUP and SIGINT at their defaults, as a session started from a terminal has
    them, whatever this suite inherited (``nohup`` ignores SIGHUP, a background job SIGINT, and a
    session keeps an ignored signal ignored)."""
    for signum in (signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def session(fake: pytest.Pytester, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "pytest", *SHORT, "--episodes=5", *args]
    # A fresh session even when this suite runs under xdist; lines as wide as written, on the panel too.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    env["COLUMNS"] = "250"
    return subprocess.Popen(
        command,
        cwd=fake.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=as_from_a_terminal,
    )


def descendants(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    return psutil.Process(proc.pid).children(recursive=True)


@pytest.mark.parametrize(
    ("signum", "args"),
    [
        (signal.SIGTERM, ["--policy=spy_policies:Slow"]),
        (signal.SIGTERM, ["--policy=spy_policies:Slow", "-n", "2"]),
        (signal.SIGHUP, ["--vla-serve=spy_policies:Slow", "-n", "2"]),
    ],
    ids=["sigterm-serial", "sigterm-xdist", "sighup-xdist-served"],
)
def test_a_termination_signal_stops_the_session_as_ctrl_c_does(
    fake: pytest.Pytester, signum: signal.Signals, args: list[str]
) -> None:
    proc = session(fake, *args)
    wait_for_records(fake.path / "results", 2, proc)
    helpers = descendants(proc)  # xdist workers, a --vla-serve server
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    (run,) = (fake.path / "results").iterdir()
    summary = read_json(run / "summary.json")
    assert summary["interrupted"] is True and summary["partial"] is True, output
    assert summary["n_completed"] + summary["n_errors"] == stored_lines(fake.path / "results"), "finished kept"
    assert 2 <= summary["n_completed"] < 10 and summary["n_errors"] == 0, output
    assert "complete it with: pytest" in output
    _, alive = psutil.wait_procs(helpers, timeout=HANG_GUARD_S)
    assert not alive, f"left running: {alive}"


def test_a_second_termination_signal_ends_the_session_at_once(fake: pytest.Pytester) -> None:
    proc = session(fake, "--policy=spy_policies:Stubborn")
    wait_for_records(fake.path / "results", 1, proc)
    waiting, swallowed = fake.path / "waiting-for-interrupt", fake.path / "interrupt-swallowed"
    wait_until(waiting.exists, proc, "the second episode never reached its first step")
    proc.send_signal(signal.SIGTERM)
    wait_until(swallowed.exists, proc, "the first signal did not interrupt")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGTERM


CALLER = """
import json
import sys
import threading
from pathlib import Path

import psutil

import pytest_vlaeval
from spy_policies import Slow

policy = Slow() if sys.argv[1] == "object" else "spy_policies:Slow"
run = dict(benchmark="fake.yaml:short", episodes=3, results="results", run_name="run")
try:
    pytest_vlaeval.evaluate(policy, **run)
except KeyboardInterrupt:
    print("interrupted")
print("threads", sorted(t.name for t in threading.enumerate()))
print("children", psutil.Process().children(recursive=True))
stored = Path("results/run/summary.json")
summary = json.loads(stored.read_text()) if stored.exists() else {}
print("stored", summary.get("interrupted"), summary.get("partial"), summary.get("n_completed"))
if isinstance(policy, str):
    summary = pytest_vlaeval.evaluate(policy, resume=True, **run)
    print("resumed", summary.n_completed, summary.partial)
"""


@pytest.mark.parametrize("policy", ["object", "spec"])
def test_ctrl_c_during_evaluate_lets_the_session_store_its_partial_run(fake: pytest.Pytester, policy: str) -> None:
    fake.makepyfile(caller=CALLER)
    proc = subprocess.Popen(
        [sys.executable, "caller.py", policy],
        cwd=fake.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    wait_for_records(fake.path / "results", 2, proc)
    stored = stored_lines(fake.path / "results")
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=HANG_GUARD_S)
    lines = output.splitlines()
    assert proc.returncode == 0 and "interrupted" in lines, output
    assert "threads ['MainThread']" in lines and "children []" in lines, output
    (state,) = [line.split()[1:] for line in lines if line.startswith("stored ")]
    assert state[:2] == ["True", "True"] and stored <= int(state[2]) < 6, output
    if policy == "spec":  # the run is completed through the API
        assert "resumed 6 False" in lines, output


@pytest.mark.long
def test_a_frozen_worker_is_ended_by_the_controller_and_the_run_completes(fake: pytest.Pytester) -> None:
    proc = session(fake, "--policy=spy_policies:Slow", "-n", "2", "--vla-timeout=5")
    wait_for_records(fake.path / "results", 2, proc)
    frozen = psutil.Process(proc.pid).children()[0]  # an xdist worker
    mid_episode(frozen, fake.path)  # the watchdog ends a worker that stopped on an episode
    try:
        output, _ = proc.communicate(timeout=HANG_GUARD_S)
    finally:  # only a failing test leaves them running
        proc.kill()
        with contextlib.suppress(psutil.NoSuchProcess):
            frozen.kill()
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, output
    (run,) = (fake.path / "results").iterdir()
    summary = read_json(run / "summary.json")
    assert (summary["n_completed"], summary["n_errors"], summary["n_missing"]) == (9, 1, 0), output
    (errored,) = [r for r in episode_records(run).values() if r["outcome"] == "error"]
    assert errored["error_kind"] == "crash", "an infrastructure error, not a policy failure"
    assert "stopped answering" in errored["message"] and "ended by the controller" in errored["message"]
    assert f"has been on {errored['task']} seed {errored['seed']} for" in output
    assert not psutil.wait_procs([frozen], timeout=HANG_GUARD_S)[1]


def mid_episode(worker: psutil.Process, folder: Path) -> None:
    """Stop ``worker`` inside a policy step (``Slow`` marks each step with a file named by its pid):
    stopped between episodes, on a loaded machine, it would be on no episode to name."""
    mark = folder / f"acting-{worker.pid}"
    deadline = time.monotonic() + HANG_GUARD_S
    while not (mark.exists() and time.time() - mark.stat().st_mtime < 0.1):
        assert time.monotonic() < deadline, "the worker never stepped"
        time.sleep(0.01)
    worker.send_signal(signal.SIGSTOP)


@pytest.mark.long
@pytest.mark.parametrize("live", ["off", "on"])
def test_without_a_timeout_the_progress_output_names_a_frozen_worker_and_its_episode(
    fake: pytest.Pytester, live: str
) -> None:
    proc = session(fake, "--policy=spy_policies:Slow", "-n", "2", f"--vla-live={live}")
    # Read from the start: the live panel fills a pipe nobody drains, and the session would block on it.
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    wait_for_records(fake.path / "results", 2, proc)
    frozen = psutil.Process(proc.pid).children()[0]
    mid_episode(frozen, fake.path)
    deadline = time.monotonic() + HANG_GUARD_S
    try:
        while "far past the typical episode" not in (notice := lines.get(timeout=HANG_GUARD_S)):
            assert time.monotonic() < deadline, "no word of the frozen worker"
        time.sleep(2)  # a panel refresh or two, while it is still frozen
    finally:
        frozen.send_signal(signal.SIGCONT)
    proc.wait(timeout=HANG_GUARD_S)
    named = re.search(r"worker (gw\d+) has been on (\S+) seed (\d+) for (\d+)s", notice)
    assert named, notice
    worker, task, seed, seconds = named.groups()
    (run,) = (fake.path / "results").iterdir()
    record = episode_records(run)[(task, int(seed))]
    assert record["worker"] == worker and record["outcome"] != "error", "the episode it named, on that worker"
    assert int(seconds) >= 30, "far past the typical episode of about 1.5 s: the floor"
    summary = read_json(run / "summary.json")
    assert (summary["n_completed"], summary["n_errors"]) == (10, 0)
    if live == "on":  # the panel shows it too, with the time growing
        shown = "".join(lines.queue)
        rows = set(re.findall(rf"worker {worker} has been on {task} seed {seed} for (\d+)s", shown))
        assert len(rows) > 1, shown


SLOW_FINAL_WRITE = """
import time
from pathlib import Path

import pytest_vlaeval.controller.run_writer as run_writer

write_run_files = run_writer.write_run_files


def slow(*args, final, **kwargs):  # the run's files, written whole once, after the last episode
    if final:
        Path("writing").touch()
        time.sleep(3)
    return write_run_files(*args, final=final, **kwargs)


run_writer.write_run_files = slow
"""


def test_sigterm_during_the_final_write_finishes_it_then_ends_as_interrupted(fake: pytest.Pytester) -> None:
    fake.makeconftest(SLOW_FINAL_WRITE)
    proc = session(fake, "--policy=random", "--vla-live=off")
    deadline = time.monotonic() + HANG_GUARD_S
    while not (fake.path / "writing").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "Traceback" not in output and "SIGTERM received while the run's files were written: they are whole" in output
    (run,) = (fake.path / "results").iterdir()
    summary = read_json(run / "summary.json")
    assert summary["n_completed"] == 10 and summary["n_missing"] == 0
    assert (run / "report.html").is_file(), "the outputs after the canonical files were written too"


def test_interrupted_session_keeps_finished_episodes_and_marks_partial(fake: pytest.Pytester) -> None:
    result = fake.runpytest_subprocess("--benchmark=fake.yaml", "--policy=spy_policies:StopOnGamma")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["partial"] is True and summary["interrupted"] is True
    assert summary["n_completed"] == 6 and summary["tasks"] == ["Alpha-v0", "Beta-v0"]
