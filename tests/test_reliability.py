"""What careless or hostile use must not break: reruns of served runs, refused and concurrent
sessions, bad options and results locations, damaged stores, hanging or dying policies."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_one_line_usage_error, episode_records, read_json, run_dir

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]


def usage_error(result: pytest.RunResult) -> str:
    (line,) = [line for line in result.errlines if line.startswith("ERROR:")]
    return line


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


ONCE_BROKEN = """
from pathlib import Path

import numpy as np

class OnceBroken:
    chunk_size = 1
    def reset(self, episode):
        pass
    def act(self, obs):
        if not Path("broke-once").exists():
            Path("broke-once").touch()
            raise RuntimeError("a passing fault")
        return np.full(7, 0.65)
"""


def test_a_served_run_can_be_rerun_and_completed_with_the_printed_command(fake: pytest.Pytester) -> None:
    fake.makepyfile(served=ONCE_BROKEN)
    served = [*SHORT, "--vla-serve=served:OnceBroken"]
    first = fake.runpytest_subprocess(*served)
    assert first.ret == pytest.ExitCode.TESTS_FAILED, first.stdout.str()
    (command,) = [line.split("complete it with: ", 1)[1] for line in first.outlines if "complete it with: " in line]
    rerun = fake.runpytest_subprocess(*served, "--vla-rerun=failures")
    assert rerun.ret == pytest.ExitCode.TESTS_FAILED, rerun.stdout.str()
    rerun.stdout.fnmatch_lines(["*--vla-rerun=failures: 2 of 6 episodes selected*"])
    completed = fake.runpytest_subprocess(*shlex.split(command)[1:])
    assert completed.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), completed.stderr.str()
    summary = read_json(run_dir(fake) / "summary.json")
    assert (summary["n_missing"], summary["n_errors"], summary["n_completed"]) == (0, 0, 6)
    assert "127.0.0.1" not in (run_dir(fake) / "policy.json").read_text()


CONFIGURED = """
import os
import numpy as np

class Configured:
    chunk_size = 1
    config = {"weights": os.environ.get("WEIGHTS")}
    def reset(self, episode):
        self.seed = episode.seed
    def act(self, obs):
        if str(self.seed) == os.environ.get("FAIL_SEED"):
            raise RuntimeError("fails this seed")
        return np.zeros(7)
"""


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


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--vla-timeout=-5", "--vla-timeout must be in (0, inf), got -5"),
        ("--vla-timeout=0", "--vla-timeout must be in (0, inf), got 0"),
        ("--vla-timeout=nan", "--vla-timeout must be in (0, inf), got nan"),
        ("--vla-timeout=inf", "--vla-timeout must be in (0, inf), got inf"),
        ("--vla-retries=-1", "--vla-retries must be in [0, inf), got -1"),
        ("--vla-max-drop=1.5", "--vla-max-drop must be in [0, 1], got 1.5"),
        ("--vla-gate-alpha=1", "--vla-gate-alpha must be in (0, 1), got 1"),
        ("--vla-gate-alpha=0", "--vla-gate-alpha must be in (0, 1), got 0"),
        ("--episodes=0", "--episodes must be at least 1, got 0"),
        ("--vla-start-seed=-1", "--vla-start-seed must be in [0, inf), got -1"),
        ("--vla-shard=3/2", "--vla-shard '3/2': expected I/N with 1 <= I <= N"),
    ],
)
def test_numeric_options_out_of_range_stop_in_one_line_before_anything_runs(
    fake: pytest.Pytester, option: str, expected: str
) -> None:
    result = fake.runpytest(*SHORT, option)
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists()


def test_a_policy_attribute_typo_stops_before_any_worker_starts(fake: pytest.Pytester) -> None:
    fake.makepyfile(policies=CONFIGURED)
    result = fake.runpytest(*SHORT, "--policy=policies:Configurd", "-n", "2")
    assert_one_line_usage_error(result, "module 'policies' (")
    assert "defines no 'Configurd'" in usage_error(result)
    assert not (fake.path / "results").exists()


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
    assert f"remove it with: sed -i '2d' '{log}'" in usage_error(result)
    subprocess.run(["sed", "-i", "2d", str(log)], check=True)
    repaired = fake.runpytest(*args, "--vla-resume")
    repaired.stdout.fnmatch_lines(["*1 of 3 episodes selected*"])
    assert read_json(run_dir(fake) / "summary.json")["n_missing"] == 0


def test_complex_actions_are_a_policy_error_naming_the_dtype(fake: pytest.Pytester) -> None:
    fake.makepyfile(
        policies="import numpy as np\nclass Complex:\n    chunk_size = 1\n    def reset(self, e):\n        pass\n    def act(self, o):\n        return np.full(7, 0.5 + 1j)\n"
    )
    fake.runpytest(*SHORT, "--policy=policies:Complex", "--vla-tasks=Alpha-v0", "--episodes=1")
    (record,) = episode_records(run_dir(fake)).values()
    assert (record["outcome"], record["error_kind"]) == ("error", "policy")
    assert "dtype complex128; expected real numbers" in record["message"]


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


HANGS = """
import signal
import time
import numpy as np

def never_returns():
    time.sleep(3600)

class Swallows:
    chunk_size = 1
    def reset(self, episode):
        pass
    def act(self, obs):
        try:
            time.sleep(3)
        except BaseException:
            pass  # swallows the timeout and goes on as if nothing happened
        return np.zeros(7)

class Deaf(Swallows):
    def act(self, obs):
        # Like native code: no Python signal handler runs until it returns.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        return np.zeros(7)
"""


@pytest.mark.parametrize(
    ("policy", "workers"), [("never_returns", []), ("never_returns", ["-n", "2"]), ("Swallows", [])]
)
def test_hangs_in_a_policy_end_as_timeout_errors(fake: pytest.Pytester, policy: str, workers: list[str]) -> None:
    fake.makepyfile(hangs=HANGS)
    result = fake.runpytest_subprocess(
        *SHORT,
        f"--policy=hangs:{policy}",
        "--vla-tasks=Alpha-v0",
        "--episodes=2",
        "--vla-timeout=1",
        *workers,
        timeout=90,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    records = episode_records(run_dir(fake))
    assert len(records) == 2 and {r["outcome"] for r in records.values()} == {"error"}
    assert all("--vla-timeout" in r["message"] and r["error_kind"] == "timeout" for r in records.values()), records


def test_a_serial_run_says_when_the_timeout_cannot_interrupt(fake: pytest.Pytester) -> None:
    fake.makepyfile(hangs=HANGS)
    result = fake.runpytest_subprocess(
        *SHORT, "--policy=hangs:Deaf", "--vla-tasks=Alpha-v0", "--episodes=1", "--vla-timeout=1", timeout=90
    )
    result.stderr.fnmatch_lines(["*Alpha-v0 seed 100 is stuck past 2s where --vla-timeout cannot interrupt it*"])
    (record,) = episode_records(run_dir(fake)).values()
    assert record["error_kind"] == "timeout"


DYING = """
import os
import numpy as np

class DiesOnSecondEpisode:
    chunk_size = 1
    def reset(self, episode):
        if episode.seed == 101:
            os._exit(3)
    def act(self, obs):
        return np.zeros(7)
"""


def test_a_dead_policy_server_is_announced_once_and_fails_the_rest_fast(fake: pytest.Pytester) -> None:
    fake.makepyfile(dying=DYING)
    result = fake.runpytest_subprocess(*SHORT, "--vla-serve=dying:DiesOnSecondEpisode", timeout=120)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    announced = [line for line in result.outlines if "the policy server (process" in line]
    assert len(announced) == 1 and "exited with status 3 during the session" in announced[0], result.outlines
    records = episode_records(run_dir(fake))
    assert [records[("Alpha-v0", 100)]["outcome"], records[("Alpha-v0", 101)]["outcome"]] == ["failure", "error"]
    rest = [records[key] for key in records if key[1] == 102 or key[0] == "Beta-v0"]
    assert len(rest) == 4 and all("is no longer running" in r["message"] for r in rest), rest


@pytest.mark.mikasa
def test_a_served_run_of_real_episodes_under_a_timeout_can_be_run_again(tmp_path: Path) -> None:
    """Real MIKASA episodes through ``--vla-serve`` with the per-episode deadline armed: a second
    session on a fresh port joins the same run, and the deadline does not touch episodes within it."""
    args = [
        sys.executable, "-m", "pytest", "--benchmark=short", "--vla-tasks=RememberColor3-VLA-v0", "--episodes=1",
        "--vla-serve=random", "--vla-timeout=300", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
    ]  # fmt: skip
    for attempt in (1, 2):
        proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert proc.returncode in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), proc.stdout + proc.stderr
        (directory,) = (tmp_path / "results").iterdir()
        records = episode_records(directory)
        assert {r["attempt"] for r in records.values()} == {attempt}
        assert {r["outcome"] for r in records.values()} <= {"success", "failure"}, records
    assert read_json(directory / "summary.json")["n_completed"] == 1
    assert "ws://" not in (directory / "policy.json").read_text()
