"""Who broke the contract is who gets the blame: an env returning the wrong things is an ``env``
error saying what came back, a policy calling ``sys.exit`` or returning complex numbers a ``policy``
error, a missing asset an ``asset`` error; never the harness, never a failure, never a NaN in the
canonical files. Alone and in lockstep groups."""

from __future__ import annotations

import json

import pytest
from helpers import episode_records, read_json, run_dir

from pytest_vlaeval import strict_json
from pytest_vlaeval.cli import main as vlaeval

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]

BROKEN_ENVS = """
import numpy as np

from pytest_vlaeval.envs.adapter import Adapter

BEHAVIOURS = {
    "ResetNone-v0": "env.reset returned NoneType None; expected (obs, info)",
    "FourTuple-v0": "env.step returned tuple of 4 (dict, float, bool, dict); expected (obs, reward, terminated",
    "InfoNone-v0": "env.step returned info NoneType None; expected a dict with 'success'",
    "NoSuccess-v0": "expected a dict with 'success'",
    "ArraySuccess-v0": "env.step returned info['success'] as ndarray of shape (2,); expected a bool",
    "NoneReward-v0": "env.step returned reward as NoneType None; expected a number",
    "ArrayReward-v0": "env.step returned reward as ndarray of shape (3,); expected a number",
    "NanReward-v0": "env.step returned reward nan; expected a finite number",
    "NoStepLimit-v0": "env.max_episode_steps is NoneType None; expected a positive int",
}


class Broken(Adapter):
    def __init__(self, task):
        self.kind = task.env_id
        self.max_episode_steps = None if self.kind == "NoStepLimit-v0" else task.max_steps

    def reset(self, *, seed, options):
        if self.kind == "ResetNone-v0":
            return None
        return self._obs(), {"success": False}

    def step(self, action):
        obs, info, reward = self._obs(), {"success": False}, 0.0
        if self.kind == "FourTuple-v0":
            return obs, reward, False, info
        if self.kind == "InfoNone-v0":
            info = None
        elif self.kind == "NoSuccess-v0":
            info = {}
        elif self.kind == "ArraySuccess-v0":
            info = {"success": np.array([True, False])}
        elif self.kind == "NoneReward-v0":
            reward = None
        elif self.kind == "ArrayReward-v0":
            reward = np.zeros(3)
        elif self.kind == "NanReward-v0":
            reward = float("nan")
        return obs, reward, False, False, info

    def _obs(self):
        return {"rgb": np.zeros((1, 2, 2, 6), np.uint8), "proprio": np.zeros((1, 7), np.float32)}

    def close(self):
        pass


def make_env(task, benchmark, render_request):
    return Broken(task)


class Exits:
    chunk_size = 1

    def reset(self, episode):
        pass

    def act(self, obs):
        raise SystemExit(3)
"""


def broken_benchmark(fake: pytest.Pytester) -> dict[str, str]:
    fake.makepyfile(broken_envs=BROKEN_ENVS)
    namespace: dict = {}
    exec(BROKEN_ENVS, namespace)
    behaviours = namespace["BEHAVIOURS"]
    tasks = "".join(
        f"  - {{env_id: {env_id}, split: broken, max_steps: 3, memory_type: Object}}\n" for env_id in behaviours
    )
    text = (fake.path / "fake.yaml").read_text().replace("fake_env:make_env", "broken_envs:make_env")
    fake.makefile(".yaml", broken=text.split("tasks:")[0] + "tasks:\n" + tasks)
    return behaviours


@pytest.mark.parametrize("lockstep", ["1", "2"])
def test_an_env_breaking_its_contract_is_an_env_error_saying_what_came_back(
    fake: pytest.Pytester, lockstep: str
) -> None:
    behaviours = broken_benchmark(fake)
    result = fake.runpytest(
        "--benchmark=broken.yaml", "--episodes=2", "-p", "no:cacheprovider", f"--vla-lockstep={lockstep}"
    )
    assert "INTERNALERROR" not in result.stdout.str()
    records = episode_records(run_dir(fake))
    assert len(records) == 2 * len(behaviours)
    for (env_id, _), record in records.items():
        assert (record["outcome"], record["error_kind"]) == ("error", "env"), record
        assert behaviours[env_id] in record["message"] and "\n" not in record["message"], record["message"]
    for path in run_dir(fake).glob("*.json"):
        assert "NaN" not in path.read_text() and "Infinity" not in path.read_text(), path
        json.loads(path.read_text())


def test_a_policy_calling_sys_exit_is_a_policy_error(fake: pytest.Pytester) -> None:
    broken_benchmark(fake)
    fake.runpytest(
        "--benchmark=fake.yaml:short", "--episodes=1", "--policy=broken_envs:Exits", "-p", "no:cacheprovider"
    )
    records = episode_records(run_dir(fake))
    assert {(r["outcome"], r["error_kind"]) for r in records.values()} == {("error", "policy")}
    assert all("policy.act raised SystemExit: 3" in r["message"] for r in records.values())


ENDS_ITS_PROCESS = """
import os


class EndsItsProcess:
    chunk_size = 1

    def reset(self, episode):
        pass

    def act(self, obs):
        os._exit(0)
"""


def test_a_policy_ending_its_process_passes_a_serial_session_and_is_an_error_under_xdist(
    fake: pytest.Pytester,
) -> None:
    """Why a policy you do not trust runs under xdist: ``os._exit(0)`` ends a serial session's own
    process with status 0 and no summary, which CI reads as success; under ``-n 1`` it ends a
    worker, and its episode is an error."""
    fake.makepyfile(ends_its_process=ENDS_ITS_PROCESS)
    args = [*SHORT, "--vla-tasks=Alpha-v0", "--episodes=1", "--policy=ends_its_process:EndsItsProcess"]
    serial = fake.runpytest_subprocess(*args, "--vla-results=serial")
    assert serial.ret == 0 and "episodes:" not in serial.stdout.str(), serial.stdout.str()
    assert not list((fake.path / "serial").glob("*/summary.json"))
    isolated = fake.runpytest_subprocess(*args, "-n", "1", "--vla-results=isolated")
    assert isolated.ret == 1, isolated.stdout.str()
    (run,) = (fake.path / "isolated").iterdir()
    (record,) = episode_records(run).values()
    assert record["outcome"] == "error" and "crashed" in record["message"], record
    assert read_json(run / "summary.json")["n_errors"] == 1


CLOSE_RAISES = """
import fake_env


class RaisesOnClose(fake_env.FakeEnv):
    def close(self):
        raise RuntimeError("the simulator would not let go")


def make_env(task, benchmark, render_request):
    if task.env_id == "Alpha-v0":
        return RaisesOnClose(task, benchmark, render_request)
    return fake_env.make_env(task, benchmark, render_request)
"""


def test_an_env_raising_on_close_is_reported_against_its_task_and_charges_no_episode(fake: pytest.Pytester) -> None:
    """Alpha's env raises when the worker closes it to build Beta's: Beta's episodes are Beta's."""
    fake.makepyfile(close_raises=CLOSE_RAISES)
    fake.makefile(
        ".yaml", closing=(fake.path / "fake.yaml").read_text().replace("fake_env:make_env", "close_raises:make_env")
    )
    result = fake.runpytest("--benchmark=closing.yaml:short", "--episodes=2", "-p", "no:cacheprovider", "-W", "always")
    records = episode_records(run_dir(fake))
    assert {r["outcome"] for r in records.values()} <= {"success", "failure"}, records
    result.stdout.fnmatch_lines(
        ["*EnvCloseWarning: closing the env of Alpha-v0 raised RuntimeError: the simulator would not let go*"]
    )


def test_a_huge_error_message_is_one_bounded_line_and_whole_in_the_record(fake: pytest.Pytester) -> None:
    """A policy raising with 5 MB of text: a line of 500 characters per episode on the terminal, all 5 MB
    in the record's detail."""
    fake.makepyfile(
        loud="""
class Loud:
    chunk_size = 1

    def reset(self, episode):
        pass

    def act(self, obs):
        raise RuntimeError("x" * 5_000_000)
"""
    )
    result = fake.runpytest(
        "--benchmark=fake.yaml:short", "--episodes=2", "--policy=loud:Loud", "-p", "no:cacheprovider"
    )
    assert len(result.stdout.str()) < 400_000, "the terminal is not flooded"
    records = episode_records(run_dir(fake))
    assert len(records) == 4
    for record in records.values():
        assert len(record["message"]) < 600 and record["message"].endswith("more characters in the record's detail)")
        assert "x" * 5_000_000 in record["detail"]


def test_env_and_asset_errors_are_errors_not_failures(fake: pytest.Pytester) -> None:
    result = fake.runpytest("--benchmark=fake.yaml:extra", "--episodes=2", "-rA", "-vv")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [
            "ERROR fake-extra::BrokenSim-v0::100 - cannot build BrokenSim-v0: the fake simulator refuses",
            "ERROR fake-extra::NeedsWidget-v0::100 - NeedsWidget-v0 cannot run: asset 'widget' belongs in package 'fake_env_assets_not_installed', which is not installed",
        ]
    )
    records = episode_records(run_dir(fake))
    assert {r["error_kind"] for r in records.values()} == {"env", "asset"}
    assert all(r["outcome"] == "error" and r["success"] is None for r in records.values())


def test_complex_actions_are_a_policy_error_naming_the_dtype(fake: pytest.Pytester) -> None:
    fake.makepyfile(
        policies="import numpy as np\nclass Complex:\n    chunk_size = 1\n    def reset(self, e):\n        pass\n    def act(self, o):\n        return np.full(7, 0.5 + 1j)\n"
    )
    fake.runpytest(*SHORT, "--policy=policies:Complex", "--vla-tasks=Alpha-v0", "--episodes=1")
    (record,) = episode_records(run_dir(fake)).values()
    assert (record["outcome"], record["error_kind"]) == ("error", "policy")
    assert "dtype complex128; expected real numbers" in record["message"]


EXTREME_ENVS = """
import numpy as np

from pytest_vlaeval.envs.adapter import Adapter

ERRORS = {
    "Overflow-v0": "the env's rewards overflowed at step 2: their sum is beyond the float range",
    "IntReward-v0": "env.step returned reward beyond the float range",
    "HugeExtra-v0": "env.episode_extras()['bar'] is an int of about 10**400; expected a number within the float range",
    "LongExtra-v0": "env.episode_extras()['bar'] is an int of about 10**5000; expected a number within the float range",
}


class Extreme(Adapter):
    \"\"\"Each value finite and well typed, and extreme: rewards of 1e308 a step, an int reward of
    400 digits, extras of 400 and 5,000 digits; BigReturn-v0 ends with a return and a bar of 1e308.\"\"\"

    def __init__(self, task):
        self.kind = task.env_id
        self.max_episode_steps = task.max_steps
        self.t = 0

    def reset(self, *, seed, options):
        self.t = 0
        return self._obs(), {"success": False}

    def step(self, action):
        self.t += 1
        reward = {"Overflow-v0": 1e308, "IntReward-v0": 10**400, "BigReturn-v0": 1e308 if self.t == 1 else 0.0}
        return self._obs(), reward.get(self.kind, 0.0), False, False, {"success": False}

    def episode_extras(self):
        bar = {"HugeExtra-v0": 10**400, "LongExtra-v0": 7 * 10**4999, "BigReturn-v0": 1e308}
        return {"bar": bar.get(self.kind, 0.5)}

    def _obs(self):
        return {"rgb": np.zeros((1, 2, 2, 6), np.uint8), "proprio": np.zeros((1, 7), np.float32)}

    def close(self):
        pass


def make_env(task, benchmark, render_request):
    return Extreme(task)
"""


@pytest.mark.parametrize("lockstep", ["1", "2"])
def test_extreme_but_finite_env_values_are_env_errors_and_the_run_stays_readable(
    fake: pytest.Pytester, lockstep: str
) -> None:
    """Rewards that sum past the float range and extras no float holds are env errors naming what
    overflowed; the session ends with a summary, and a later session and a merge read the run (an
    ``Infinity`` in the log, or an int of 400 digits in a record, stopped both)."""
    fake.makepyfile(extreme_envs=EXTREME_ENVS)
    tasks = "".join(
        f"  - {{env_id: {env_id}, split: extreme, max_steps: 3, memory_type: Object}}\n"
        for env_id in ("Overflow-v0", "IntReward-v0", "HugeExtra-v0", "LongExtra-v0", "BigReturn-v0")
    )
    text = (fake.path / "fake.yaml").read_text().replace("fake_env:make_env", "extreme_envs:make_env")
    fake.makefile(".yaml", extreme=text.split("tasks:")[0] + "tasks:\n" + tasks)
    args = ["--benchmark=extreme.yaml", "--episodes=2", "-p", "no:cacheprovider", f"--vla-lockstep={lockstep}"]
    result = fake.runpytest(*args)
    assert "INTERNALERROR" not in result.stdout.str()
    namespace: dict = {}
    exec(EXTREME_ENVS, namespace)
    run = run_dir(fake)
    records = episode_records(run)
    assert len(records) == 10
    for (env_id, _), record in records.items():
        if env_id == "BigReturn-v0":
            assert (record["outcome"], record["episode_return"], record["extras"]) == ("failure", 1e308, {"bar": 1e308})
        else:
            assert (record["outcome"], record["error_kind"]) == ("error", "env"), record
            assert namespace["ERRORS"][env_id] in record["message"], record["message"]
    assert read_json(run / "BigReturn-v0.json")["mean_return"] == 1e308  # two returns of 1e308 sum past the range
    assert read_json(run / "summary.json")["mean_bar"] == 1e308
    for path in [*run.glob("*.json"), *run.glob("episodes/*.jsonl")]:
        for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
            strict_json.loads(line)
    again = fake.runpytest(*args, "--vla-resume")
    assert again.ret == pytest.ExitCode.NO_TESTS_COLLECTED, again.stdout.str()  # nothing left to run: it read the run
    assert vlaeval(["merge", str(run), "--out", str(fake.path / "merged")]) == 0
    assert read_json(fake.path / "merged" / "summary.json")["n_errors"] == 8
