"""Real Meta-World episodes (``benchmarks/metaworld.yaml``; MuJoCo on EGL, Mesa's llvmpipe where there
is no GPU), in Meta-World's own interpreter.

Meta-World needs gymnasium >= 1.1 and numpy 2, so this process (the project's environment) never
imports it: sessions start as a user starts them, ``python -m pytest --benchmark=...`` from here,
and the benchmark file's ``install: {own_interpreter: true}`` puts their workers in Meta-World's interpreter;
the reference loop (``metaworld_reference``) and the other checks run there as subprocesses. Small
on purpose (a step and its 480x480 render cost about 0.08 s on a CPU): three tasks (easy, medium,
very hard), seeds 1000-1002, episodes capped at STEPS steps by a copy of the benchmark file, and
two short expert episodes that end in success. These tests need ``vlaeval install metaworld``; they
fail, never skip, without it.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import (
    REVERSED_ORDER,
    ROOT,
    TESTS,
    assert_failures_equal_reference,
    assert_generated,
    ended_on_exit,
    episode_records,
    read_json,
    start_digesting_session,
)

pytestmark = pytest.mark.metaworld

TASKS = ("reach-v3", "sweep-into-v3", "stick-push-v3")
"""One easy, one medium and one very hard task (LeRobot's groups)."""
SEEDS = [1000, 1001, 1002]
STEPS = 4
EXPERT_TASK = "stick-push-v3"
"""metaworld's scripted expert solves it in 31-34 steps on seeds 1000-1002."""


def metaworld_python() -> Path:
    """Meta-World's interpreter, where a session's workers start (``vlaeval install metaworld`` makes it)."""
    from pytest_vlaeval.install.interpreters import interpreter_python

    return interpreter_python("metaworld")


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of every process a test starts: the suite's modules importable, one GL backend."""
    return {**os.environ, "PYTHONPATH": str(TESTS), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), **extra}


def capped_copy(directory: Path, tasks: tuple[str, ...], steps: int) -> Path:
    """A copy of ``benchmarks/metaworld.yaml`` holding ``tasks`` only, each capped at ``steps``."""
    data = yaml.safe_load((ROOT / "benchmarks" / "metaworld.yaml").read_text())
    data["tasks"] = [dict(task, max_steps=steps) for task in data["tasks"] if task["env_id"] in tasks]
    path = directory / "metaworld-short.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@functools.cache
def instructions() -> dict[str, str]:
    """Each task's instruction as the shipped benchmark file gives it (read once)."""
    return {
        t["env_id"]: t["instruction"]
        for t in yaml.safe_load((ROOT / "benchmarks" / "metaworld.yaml").read_text())["tasks"]
    }


def start_reference(directory: Path, tasks: tuple[str, ...], seeds: list[int], steps: int) -> subprocess.Popen[str]:
    """LeRobot's rollouts of ``tasks`` x ``seeds`` (``metaworld_reference``) in Meta-World's
    interpreter, started (not waited for), writing ``directory/reference.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    request = {"tasks": [[task, instructions()[task]] for task in tasks], "seeds": seeds, "max_steps": steps}
    (directory / "request.json").write_text(json.dumps(request))
    command = [str(metaworld_python()), str(TESTS / "metaworld_reference.py"), "request.json", "reference.json"]
    return subprocess.Popen(
        command, cwd=directory, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def start_session(directory: Path, benchmark: Path, *args: str) -> subprocess.Popen[str]:
    """A session as a user runs it, from this environment, with the ``Probe`` policy writing its
    digests to ``digests/``."""
    policy = "--policy=metaworld_reference:Probe"
    return start_digesting_session(directory, subprocess_env(), f"--benchmark={benchmark}", policy, *args)


def finished(proc: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = proc.communicate(timeout=600)
    return proc.returncode, output


@pytest.mark.long
@pytest.mark.parity
def test_metaworld_sessions_equal_the_lerobot_loop(tmp_path: Path) -> None:
    """Three tasks x seeds 1000-1002, run in reverse order by one worker and under -n 2, are LeRobot's
    rollouts of the same seeds (``metaworld_reference``, computed meanwhile): what the policy saw and
    did bit for bit (first image included), the return, the maximum reward, the length."""
    benchmark = capped_copy(tmp_path, TASKS, STEPS)
    serial_dir, parallel_dir = tmp_path / "serial", tmp_path / "parallel"
    serial_dir.mkdir()
    (serial_dir / "conftest.py").write_text(REVERSED_ORDER)
    serial = start_session(serial_dir, benchmark, "--episodes=3")
    parallel = start_session(parallel_dir, benchmark, "--episodes=3", "-n", "2")
    reference_proc = start_reference(tmp_path / "reference", TASKS, SEEDS, STEPS)
    expected_ids = sorted((task, seed) for task in TASKS for seed in SEEDS)
    with ended_on_exit(serial, parallel, reference_proc):
        returncode, output = finished(reference_proc)
        assert returncode == 0, output[-3000:]
        reference = {
            (e["task"], e["seed"]): e for e in json.loads((tmp_path / "reference" / "reference.json").read_text())
        }
        assert sorted(reference) == expected_ids
        assert len({e["first_image"] for e in reference.values()}) == len(reference)  # the seeds place things apart
        for directory, proc in ((serial_dir, serial), (parallel_dir, parallel)):
            returncode, output = finished(proc)
            assert returncode == 1, output[-3000:]  # failed episodes (4 steps solve nothing), no error
            (run_dir,) = (directory / "results").iterdir()
            records = episode_records(run_dir)
            assert sorted(records) == expected_ids
            assert_failures_equal_reference(directory, records, reference, STEPS)
            assert all(records[key]["instruction"] == instructions()[key[0]] for key in reference)
            summary = read_json(run_dir / "summary.json")
            assert set(summary["sr_per_difficulty"]) == {"easy", "medium", "very_hard"}
            assert summary["pc_success"] == 0
            maxima = [e["max_reward"] for e in reference.values()]
            assert summary["avg_max_reward"] == pytest.approx(sum(maxima) / len(maxima))
            assert read_json(run_dir / "reach-v3.json")["difficulty"] == "easy"
    (log,) = (serial_dir / "results").glob("*/episodes/*.jsonl")
    order = [(json.loads(line)["task"], json.loads(line)["seed"]) for line in log.read_text().splitlines()]
    natural = [(task, seed) for task in TASKS for seed in SEEDS]
    assert order == natural[::-1]
    workers = {record["worker"] for record in episode_records(next((parallel_dir / "results").iterdir())).values()}
    assert workers == {"gw0", "gw1"}, "three tasks over two workers: both ran episodes"


EXPERT_CHECK = """
import json, sys
from pathlib import Path

from metaworld.policies import ENV_POLICY_MAP
from metaworld_reference import reference_episodes

from pytest_vlaeval.envs.metaworld import make_env
from pytest_vlaeval.episodes.loop import run_episode
from pytest_vlaeval.benchmark.model import load_benchmark

benchmark = load_benchmark(Path(sys.argv[1]))
(task,) = [t for t in benchmark.tasks if t.env_id == sys.argv[2]]
seeds = json.loads(sys.argv[3])
env = make_env(task, benchmark, "auto")
expert = ENV_POLICY_MAP[task.env_id]()


class Expert:
    chunk_size = 1

    def reset(self, episode):
        pass

    def act(self, view):
        return expert.get_action(env.state)


harness = {}
for seed in reversed(seeds):
    result = run_episode(
        env, Expert(), task=task.env_id, seed=seed, episode_index=0, action_dim=4, policy_obs_keys=("pixels", "agent_pos")
    )
    harness[seed] = [result.success, result.length, result.episode_return, result.extras["max_reward"]]
env.close()
reference = {
    e["seed"]: [e["success"], e["length"], e["episode_return"], e["max_reward"]]
    for e in reference_episodes(task.env_id, task.instruction, seeds, task.max_steps, policy="expert")
}
print(json.dumps({"harness": harness, "reference": reference, "max_steps": env.max_episode_steps}))
"""


@pytest.mark.long
def test_an_expert_success_ends_the_episode_as_in_lerobots_loop(tmp_path: Path) -> None:
    """metaworld's scripted expert (acting on the full state) through the adapter and the harness's
    loop, with the real file's 500-step limit: each episode ends at its first success, at LeRobot's
    step, with its return and maximum reward; the episodes run in reverse order, after a success, and
    LeRobot's loop resets its env after each success: neither changes the next episode."""
    seeds = SEEDS[:2]
    command = [str(metaworld_python()), "-c", EXPERT_CHECK, str(ROOT / "benchmarks" / "metaworld.yaml"), EXPERT_TASK]
    proc = subprocess.run(
        [*command, json.dumps(seeds)], cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["max_steps"] == 500
    assert out["harness"] == out["reference"]
    for success, length, _, _ in out["harness"].values():
        assert success and 20 < length < 60


FILE_CHECK = """
import json

from metaworld.env_dict import ALL_V3_ENVIRONMENTS

print(json.dumps({
    "package": sorted(ALL_V3_ENVIRONMENTS),
    "limits": sorted({cls.max_path_length for cls in ALL_V3_ENVIRONMENTS.values()}),
}))
"""


def test_the_benchmark_file_is_lerobots_mt50_of_the_installed_metaworld() -> None:
    """The file is what scripts/metaworld_yaml.py writes (LeRobot's groups and descriptions); its 50
    tasks are the installed metaworld's v3 envs, and its step limit is their own (500)."""
    path = assert_generated("metaworld", "metaworld_yaml.py")
    proc = subprocess.run(
        [str(metaworld_python()), "-c", FILE_CHECK], env=subprocess_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    package = json.loads(proc.stdout.strip().splitlines()[-1])
    tasks = yaml.safe_load(path.read_text())["tasks"]
    assert sorted(t["env_id"] for t in tasks) == package["package"] and len(tasks) == 50
    assert package["limits"] == [500] and {t["max_steps"] for t in tasks} == {500}
    sizes = {group: sum(t["difficulty"] == group for t in tasks) for group in ("easy", "medium", "hard", "very_hard")}
    assert sizes == {"easy": 28, "medium": 11, "hard": 6, "very_hard": 5}


def test_the_preflight_check_passes_in_metaworlds_interpreter_and_names_the_install_elsewhere() -> None:
    """``python -m pytest_vlaeval.envs.metaworld RENDER``: MuJoCo renders with OSMesa there; this
    environment has no metaworld, and the one line says how to get it."""
    check = [sys.executable, "-m", "pytest_vlaeval.envs.metaworld", "cpu"]
    there = subprocess.run([str(metaworld_python()), *check[1:]], capture_output=True, text=True, timeout=120)
    assert there.returncode == 0 and there.stdout.strip() == "osmesa", there.stdout + there.stderr
    here = subprocess.run(check, capture_output=True, text=True, timeout=120)
    assert here.returncode == 1 and "vlaeval install metaworld" in here.stdout.strip().splitlines()[-1], here.stdout
