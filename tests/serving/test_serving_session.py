"""Remote policies in real pytest sessions: the fake benchmark through a policy server, a served run
rerun and completed with the printed command, a policy server that dies mid-session, and real MIKASA
episodes through ``--vla-serve`` (with two xdist workers, and run again under a timeout)."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_one_line_usage_error, episode_records, lone_runner, read_json, run_dir, together

from pytest_vlaeval.benchmark.model import resolve_benchmark, select

pytestmark = pytest.mark.minutes(1.5)

SERVED = '''
import os
import signal
import sys

import numpy as np

from pytest_vlaeval.policy.contract import episode_rng


class Noisy:
    """The same actions in-process (reset/act) and served in batches (act_batch)."""

    chunk_size = 2

    def reset(self, episode):
        self.rng = episode_rng(episode)

    def act(self, obs):
        return self.rng.uniform(0, 0.7, (2, 7))

    def act_batch(self, episodes, observations):
        return [e.rng.uniform(0, 0.7, (2, 7)) for e in episodes]


class Broken(Noisy):
    def act_batch(self, episodes, observations):
        raise ValueError("broken weights")


class Unconvertible:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("weights on a device that is gone")


class BadForBetaBesideAlpha(Noisy):
    """An unusable output for Beta's row whenever it shares a batch with Alpha's, usable chunks otherwise."""

    def act_batch(self, episodes, observations):
        mixed = len({e.info.task for e in episodes}) > 1
        return [
            Unconvertible() if mixed and e.info.task == "Beta-v0" else e.rng.uniform(0, 0.7, (2, 7)) for e in episodes
        ]


class FreezesOnBeta(Noisy):
    """Stops its own server process (SIGSTOP) when Beta's first request reaches it."""

    def act_batch(self, episodes, observations):
        if any(e.info.task == "Beta-v0" for e in episodes):
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().act_batch(episodes, observations)


class Light(Noisy):
    def act(self, obs):
        loaded = {"websockets", "msgpack"} & set(sys.modules)
        assert not loaded, loaded
        return super().act(obs)
'''

FAKE = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "-rA"]
SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]


def comparable(directory: Path) -> dict[tuple[str, int], tuple]:
    return {key: (r["outcome"], r["episode_return"], r["length"]) for key, r in episode_records(directory).items()}


def only_run_dir(root: Path) -> Path:
    (directory,) = [p for p in root.iterdir() if p.is_dir()]
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_served_results_equal_in_process_results_under_xdist(fake: pytest.Pytester) -> None:
    fake.makepyfile(served=SERVED)
    in_process = fake.runpytest_subprocess(*FAKE, "--policy=served:Noisy", "--vla-results=in_process")
    served = fake.runpytest_subprocess(*FAKE, "--vla-serve=served:Noisy", "-n", "2", "--vla-results=served")
    assert in_process.ret in (0, 1) and served.ret == in_process.ret, served.stdout.str()
    local, remote = only_run_dir(fake.path / "in_process"), only_run_dir(fake.path / "served")
    assert remote.name == local.name, "the run is named after the served policy, not the server's address"
    records = episode_records(remote)
    assert len(records) == 6 and {r["worker"] for r in records.values()} == {"gw0", "gw1"}
    assert comparable(remote) == comparable(local)
    assert {r["outcome"] for r in records.values()} == {"success", "failure"}, "a meaningful comparison"
    log = (remote / "server.log").read_text()
    requests = sum((r["length"] + 1) // 2 for r in records.values())  # chunk size 2
    assert "batched (act_batch)" in log and f"stopped after {requests} requests" in log
    port = int(log.split("listening on ws://127.0.0.1:")[1].split()[0])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the session stopped its server


def test_a_policy_fault_on_the_server_is_an_episode_error(fake: pytest.Pytester) -> None:
    fake.makepyfile(served=SERVED)
    result = fake.runpytest_subprocess(*FAKE, "--vla-serve=served:Broken", "--episodes=1")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*ERROR fake-short::Alpha-v0::100 - served policy.act_batch raised*"])
    for record in episode_records(only_run_dir(fake.path / "results")).values():
        assert record["message"] == "served policy.act_batch raised ValueError: broken weights"
        assert record["error_kind"] == "policy" and "ValueError: broken weights" in record["detail"]


def test_a_bad_row_under_vla_serve_fails_only_its_own_episodes_as_policy_errors(fake: pytest.Pytester) -> None:
    fake.makepyfile(served=SERVED)
    result = fake.runpytest_subprocess(*FAKE, "--vla-serve=served:BadForBetaBesideAlpha", "-n", "2", "--episodes=8")
    records = episode_records(only_run_dir(fake.path / "results"))
    alpha = [r for (task, _), r in records.items() if task == "Alpha-v0"]
    beta_errors = [r for (task, _), r in records.items() if task == "Beta-v0" and r["outcome"] == "error"]
    assert len(records) == 16 and {r["worker"] for r in records.values()} == {"gw0", "gw1"}, result.stdout.str()
    assert beta_errors, "no batch held both tasks' rows: nothing was tested"
    assert all(r["error_kind"] == "policy" and "device that is gone" in r["message"] for r in beta_errors)
    assert [r["message"] for r in alpha if r["outcome"] == "error"] == [], "Alpha's valid rows were answered"
    assert "batch of" not in (only_run_dir(fake.path / "results") / "server.log").read_text()


def test_a_stopped_server_is_said_once_and_its_episodes_fail_at_once_without_tracebacks(
    fake: pytest.Pytester,
) -> None:
    fake.makepyfile(served=SERVED)
    result = fake.runpytest_subprocess(*FAKE, "--vla-serve=served:FreezesOnBeta", "--episodes=2")
    output = result.stdout.str() + result.stderr.str()
    records = episode_records(only_run_dir(fake.path / "results"))
    assert [records[("Alpha-v0", seed)]["outcome"] != "error" for seed in (100, 101)] == [True, True]
    for seed in (100, 101):
        beta = records[("Beta-v0", seed)]
        assert beta["error_kind"] == "server" and "is stopped (SIGSTOP or a debugger)" in beta["message"], beta
    assert output.count("stopped answering (its process is stopped: SIGSTOP or a debugger)") == 1, output
    assert "keepalive" not in output and "Traceback" not in output, output


def test_an_unreachable_server_makes_every_episode_an_error(fake: pytest.Pytester) -> None:
    url = f"ws://127.0.0.1:{free_port()}"
    result = fake.runpytest(*FAKE, f"--policy={url}?connect_timeout=0.2", "--episodes=1")
    result.assert_outcomes(errors=2)
    records = episode_records(only_run_dir(fake.path / "results"))
    assert {r["error_kind"] for r in records.values()} == {"server"}
    assert all(f"cannot reach the policy server at {url}" in r["message"] for r in records.values())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--policy=wss://host:1"],
            "--policy 'wss://host:1': expected ws://HOST:PORT, openpi://HOST:PORT[?chunk_size=K] or vla-eval://HOST:PORT",
        ),
        (["--vla-serve=random", "--policy=zero"], "--vla-serve serves the policy it names; it does not combine"),
        (["--vla-serve=no_such_module:make"], "module 'no_such_module' is not importable"),
        (
            ["--policy=ws://127.0.0.1:1?connect_timeout=nan"],
            "option connect_timeout must be a positive number up to 86400, got 'nan'",
        ),
    ],
)
def test_bad_serving_options_are_one_clear_line(fake: pytest.Pytester, args: list[str], expected: str) -> None:
    result = fake.runpytest("--benchmark=fake.yaml", *args)
    assert_one_line_usage_error(result, expected)


def test_the_plugin_does_not_load_serving_code_unless_asked(fake: pytest.Pytester) -> None:
    fake.makepyfile(served=SERVED)
    result = fake.runpytest_subprocess(*FAKE, "--policy=served:Light", "--episodes=1")
    assert result.parseoutcomes().get("errors", 0) == 0, result.stdout.str()
    fake.makepyfile(
        test_user="""
        import sys

        def test_nothing_of_serving_is_imported():
            assert not {"websockets", "msgpack", "pytest_vlaeval.serving"} & set(sys.modules)
        """
    )
    fake.runpytest_subprocess("-p", "no:cacheprovider", "test_user.py").assert_outcomes(passed=1)


@pytest.mark.long
@pytest.mark.mikasa
def test_mikasa_episodes_through_vla_serve_equal_in_process_episodes(tmp_path: Path) -> None:
    """Two xdist workers share one server; each episode's actions come from its own seeded RNG."""
    task, seeds = "RememberColor3-VLA-v0", (4242424242, 4242424243)
    args = ["--benchmark=short", f"--vla-tasks={task}", "--episodes=2", "-p", "no:cacheprovider", "-rA"]
    benchmark, _ = resolve_benchmark("mikasa:short")

    def in_process() -> list:
        runner = lone_runner(select(benchmark, "short", env_ids=[task], episodes=2), "random")
        try:
            return [runner.run(benchmark.task(task), seed, index) for index, seed in enumerate(seeds)]
        finally:
            runner.close()

    records, proc = together(  # the same episodes in this process while the served session runs
        in_process,
        lambda: subprocess.run(
            [sys.executable, "-m", "pytest", *args, "--vla-serve=random", "-n", "2", "--rootdir", str(tmp_path)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        ),
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    run_dir = only_run_dir(tmp_path / "results")
    served = {key: (r["success"], r["episode_return"], r["length"]) for key, r in episode_records(run_dir).items()}
    assert {r["worker"] for r in episode_records(run_dir).values()} <= {"gw0", "gw1"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["n_completed"] == 2 and summary["n_errors"] == 0
    assert served == {r.key: (r.success, r.episode_return, r.length) for r in records}
    steps = sum(r.length for r in records)  # chunk size 1: one request per step
    assert f"stopped after {steps} requests" in (run_dir / "server.log").read_text()


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


@pytest.mark.long
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


@pytest.mark.parametrize("scheme, protocol", [("ws", "vlaeval"), ("openpi", "openpi"), ("vla-eval", "vla-eval")])
def test_a_run_continues_on_its_server_restarted_on_another_port_under_its_identity(
    fake: pytest.Pytester, scheme: str, protocol: str
) -> None:
    """``?identity=NAME`` says what a server serves: a run begun on one server goes on when it comes
    back on another port, over every protocol (no record names the address)."""
    from pytest_vlaeval.serving import ServerProcess

    urls = []
    for session in (["-k", "Alpha"], ["--vla-resume"]):  # the second runs what the first left out
        server = ServerProcess("random", fake.path / f"server-{len(urls)}.log", ["--protocol", protocol])
        server.start()
        try:
            urls.append(server.url.replace("ws://", f"{scheme}://", 1))
            result = fake.runpytest_subprocess(
                *FAKE, f"--policy={urls[-1]}?identity=mine", "--episodes=2", "--vla-run-name=kept", *session
            )
        finally:
            server.stop()
        assert result.ret in (0, 1), result.stdout.str() + result.stderr.str()
        outcomes = result.parseoutcomes()
        assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2 and "errors" not in outcomes, outcomes
    assert urls[0] != urls[1]
    records = episode_records(run_dir(fake))
    assert sorted(task for task, _ in records) == ["Alpha-v0", "Alpha-v0", "Beta-v0", "Beta-v0"]
    assert not any(url.split("//")[1] in json.dumps(record) for record in records.values() for url in urls)
