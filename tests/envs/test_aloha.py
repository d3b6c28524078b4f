"""Real ALOHA episodes (``benchmarks/aloha.yaml``; gym-aloha on dm-control and MuJoCo, EGL on Mesa's
llvmpipe where there is no GPU), in ALOHA's own interpreter.

ALOHA needs MuJoCo 3.8.1 and numpy 2, so this process never imports it: sessions start as a user
starts them, ``python -m pytest --benchmark=...`` from here, and the file's
``install: {own_interpreter: true}`` puts their workers in ALOHA's interpreter; the reference loop
and the other checks run there as subprocesses. Small on purpose (a step renders the 480x640 top
camera: 0.1 to 0.4 s on a CPU): both tasks, seeds 1000-1001, episodes capped at STEPS steps by a
copy of the benchmark file. These tests need ``vlaeval install aloha``; they fail, never skip,
without it.

``Probe`` (``--policy=test_aloha:Probe``) is a deterministic policy on what LeRobot's ALOHA
policies see: joint targets a small bounded move from the current joints, a function of them and of
a grid of the top image's pixels, so a wrong image or state changes the trajectory from that step
on. It writes each episode's digest (``episode_digest``) for bit-for-bit comparison.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import yaml
from episode_digest import DigestingPolicy
from helpers import (
    REVERSED_ORDER,
    ROOT,
    TESTS,
    assert_failures_equal_reference,
    capped_benchmark,
    ended_on_exit,
    episode_records,
    read_json,
    start_digesting_session,
)

pytestmark = pytest.mark.aloha

TASKS = ("AlohaInsertion-v0", "AlohaTransferCube-v0")
SEEDS = [1000, 1001]
STEPS = 6
HERE = Path(__file__).parent
DIGEST_KEYS = ("top", "agent_pos")


def flat_view(view: dict[str, Any]) -> dict[str, Any]:
    """The policy's view with the one camera out of its ``pixels`` dict, for the digest."""
    return {"top": view["pixels"]["top"], "agent_pos": view["agent_pos"], "instruction": view["instruction"]}


def probe_action(view: dict[str, Any]) -> np.ndarray:
    """``Probe``'s 14 joint targets for one view, float32: each joint moved by at most 0.05 from
    where it is, by an amount that depends on the joints and on the image."""
    joints = np.asarray(view["agent_pos"], dtype=np.float64)
    image = np.asarray(view["pixels"]["top"])
    colour = image[60::120, 80::160].astype(np.float64).mean(axis=(0, 1)) / 255.0
    phase = 7.0 * joints + colour[np.arange(14) % 3] * 5.0
    return (joints + 0.05 * np.sin(phase)).astype(np.float32)


class Probe(DigestingPolicy):
    """The deterministic probe policy; keeps no state across steps."""

    KEYS, IMAGE = DIGEST_KEYS, "top"
    config: ClassVar[dict[str, Any]] = {"kind": "scripted", "inputs": ["pixels", "agent_pos"]}

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        self.digest.observe(flat_view(obs))
        action = probe_action(obs)
        self.digest.act(action)
        return action


REFERENCE = """
import json, sys

import gymnasium as gym
import gym_aloha  # registers the env ids
import numpy as np
from episode_digest import EpisodeDigest
from test_aloha import DIGEST_KEYS, flat_view, probe_action

request = json.loads(sys.argv[1])
episodes = []
for task, instruction in request["tasks"]:
    # LeRobot's AlohaEnv config: gym.make with its gym_kwargs, env checker off (envs/configs.py, envs/factory.py)
    env = gym.make(
        f"gym_aloha/{task}", disable_env_checker=True, obs_type="pixels_agent_pos", render_mode="rgb_array",
        max_episode_steps=request["max_steps"],
    )
    for seed in request["seeds"]:
        obs, info = env.reset(seed=seed)
        digest = EpisodeDigest(DIGEST_KEYS, "top")
        rewards, success = [], False
        while len(rewards) < request["max_steps"]:
            view = {**obs, "instruction": instruction}  # lerobot-eval's task string: the env's `task`
            digest.observe(flat_view(view))
            action = probe_action(view)
            digest.act(action)
            obs, reward, terminated, truncated, info = env.step(action)
            rewards.append(float(reward))
            success = success or bool(info["is_success"])
            if terminated or truncated:
                break
        total = 0.0
        for reward in rewards:
            total += reward
        digest.outcome(success, total, len(rewards))
        episodes.append({"task": task, "seed": seed, **digest.result(), "max_reward": max(rewards)})
    env.close()
print(json.dumps(episodes))
"""
"""A rollout loop written from LeRobot's ``rollout`` (``scripts/lerobot_eval.py``) for one ALOHA env
and a batch of one, as ``lerobot-eval --env.type=aloha --eval.batch_size=1`` runs it: episodes in
order in one env, ``reset(seed)``, the action as float32 into ``step`` until terminated or the time
limit; success if ``is_success`` at any step, ``max_reward`` the largest step reward."""


def aloha_python() -> Path:
    """ALOHA's interpreter, where a session's workers start (``vlaeval install aloha`` makes it)."""
    from pytest_vlaeval.install.interpreters import interpreter_python

    return interpreter_python("aloha")


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of every process a test starts: this folder's and the suite's modules
    importable (before what PYTHONPATH held), one GL backend."""
    paths = os.pathsep.join(filter(None, [str(TESTS), str(HERE), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": paths, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), **extra}


def instructions() -> dict[str, str]:
    return {
        t["env_id"]: t["instruction"] for t in yaml.safe_load((ROOT / "benchmarks" / "aloha.yaml").read_text())["tasks"]
    }


def start_session(directory: Path, benchmark: Path, *args: str) -> subprocess.Popen[str]:
    """A session as a user runs it, from this environment, with ``Probe`` writing its digests."""
    return start_digesting_session(
        directory, subprocess_env(), f"--benchmark={benchmark}", "--policy=test_aloha:Probe", *args
    )


def start_in_aloha(code: str, *args: str) -> subprocess.Popen[str]:
    command = [str(aloha_python()), "-c", code, *args]
    return subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.long
@pytest.mark.parity
def test_aloha_sessions_equal_the_lerobot_loop(tmp_path: Path) -> None:
    """Both tasks x seeds 1000-1001, run in reverse order by one worker and under -n 2, are LeRobot's
    rollouts of the same seeds (computed meanwhile in ALOHA's interpreter): what the policy saw and
    did bit for bit (first image and task string included), the return, the maximum reward, the length."""
    benchmark = capped_benchmark("aloha", STEPS, tmp_path)
    serial_dir, parallel_dir = tmp_path / "serial", tmp_path / "parallel"
    serial_dir.mkdir()
    (serial_dir / "conftest.py").write_text(REVERSED_ORDER)
    serial = start_session(serial_dir, benchmark, "--episodes=2")
    parallel = start_session(parallel_dir, benchmark, "--episodes=2", "-n", "2")
    request = {"tasks": [[task, instructions()[task]] for task in TASKS], "seeds": SEEDS, "max_steps": STEPS}
    reference_proc = start_in_aloha(REFERENCE, json.dumps(request))
    expected_ids = sorted((task, seed) for task in TASKS for seed in SEEDS)
    with ended_on_exit(serial, parallel, reference_proc):
        out, err = reference_proc.communicate(timeout=600)
        assert reference_proc.returncode == 0, err[-3000:]
        reference = {(e["task"], e["seed"]): e for e in json.loads(out.strip().splitlines()[-1])}
        assert sorted(reference) == expected_ids
        assert len({e["first_image"] for e in reference.values()}) == len(reference)  # the seeds place things apart
        assert {e["instruction"] for e in reference.values()} == {"insertion", "transfer_cube"}
        for directory, proc in ((serial_dir, serial), (parallel_dir, parallel)):
            output, _ = proc.communicate(timeout=600)
            assert proc.returncode == 1, output[-3000:]  # failed episodes (6 steps solve nothing), no error
            (run_dir,) = (directory / "results").iterdir()
            records = episode_records(run_dir)
            assert sorted(records) == expected_ids
            assert_failures_equal_reference(directory, records, reference, STEPS)
            summary = read_json(run_dir / "summary.json")
            assert summary["pc_success"] == 0 and set(summary["sr_per_split"]) == {"insertion", "transfer_cube"}
            result = read_json(run_dir / "AlohaInsertion-v0.json")
            assert result["episode_seeds"] == SEEDS and result["split"] == "insertion"
    (log,) = (serial_dir / "results").glob("*/episodes/*.jsonl")
    order = [(json.loads(line)["task"], json.loads(line)["seed"]) for line in log.read_text().splitlines()]
    assert order == [(task, seed) for task in TASKS for seed in SEEDS][::-1]
    workers = {record["worker"] for record in episode_records(next((parallel_dir / "results").iterdir())).values()}
    assert workers == {"gw0", "gw1"}, "two tasks over two workers: both ran episodes"


FACTS = """
import json, sys

import gymnasium as gym
import gym_aloha

facts = {}
for task in json.loads(sys.argv[1]):
    env = gym.make(f"gym_aloha/{task}", obs_type="pixels_agent_pos", render_mode="rgb_array", disable_env_checker=True)
    space = env.observation_space
    facts[task] = {
        "task": env.unwrapped.task,
        "top": list(space["pixels"]["top"].shape),
        "agent_pos": list(space["agent_pos"].shape),
        "action": list(env.action_space.shape),
        "max_reward": env.unwrapped._env.task.max_reward,
    }
    env.close()
print(json.dumps(facts))
"""

LEROBOT_FACTS = """
import json

from lerobot.envs.configs import AlohaEnv

config = AlohaEnv()
print(json.dumps({
    "episode_length": config.episode_length,
    "obs_type": config.obs_type,
    "features": {key: list(feature.shape) for key, feature in config.features.items()},
    "features_map": config.features_map,
}))
"""


@pytest.mark.lerobot
def test_the_benchmark_file_is_lerobots_aloha_on_the_installed_gym_aloha() -> None:
    """What the file says is what the installed gym-aloha and LeRobot's ``AlohaEnv`` config say:
    the task string is the env's ``task`` attribute (lerobot-eval's fallback), 400 steps, a 480x640
    top camera and 14 joints in, 14 joint targets out, success at the reward's top stage (4)."""
    from pytest_vlaeval.install.interpreters import interpreter_python

    facts = start_in_aloha(FACTS, json.dumps(list(TASKS)))
    lerobot = subprocess.Popen(
        [str(interpreter_python("lerobot")), "-c", LEROBOT_FACTS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with ended_on_exit(facts, lerobot):
        outputs = {}
        for name, proc in (("aloha", facts), ("lerobot", lerobot)):
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            outputs[name] = json.loads(out.strip().splitlines()[-1])
    data = yaml.safe_load((ROOT / "benchmarks" / "aloha.yaml").read_text())
    config = outputs["lerobot"]
    assert data["env"]["obs_type"] == config["obs_type"] == "pixels_agent_pos"
    assert {t["max_steps"] for t in data["tasks"]} == {config["episode_length"]} == {400}
    assert config["features"] == {"action": [14], "agent_pos": [14], "pixels/top": [480, 640, 3]}
    assert data["lerobot"]["features"] == {
        key.replace("/", "."): config["features_map"][key] for key in ("pixels/top", "agent_pos")
    }
    assert sorted(t["env_id"] for t in data["tasks"]) == sorted(outputs["aloha"])
    for task in data["tasks"]:
        env = outputs["aloha"][task["env_id"]]
        assert task["instruction"] == env["task"]
        assert env["top"] == [480, 640, 3] and env["agent_pos"] == [14] and env["action"] == [data["env"]["action_dim"]]
        assert env["max_reward"] == 4


def test_the_preflight_check_passes_in_alohas_interpreter_and_names_the_install_elsewhere() -> None:
    """``python -m pytest_vlaeval.envs.aloha RENDER``: MuJoCo renders with OSMesa there; this
    environment has no gym-aloha, and the one line says how to get it."""
    check = [sys.executable, "-m", "pytest_vlaeval.envs.aloha", "cpu"]
    there = subprocess.run([str(aloha_python()), *check[1:]], capture_output=True, text=True, timeout=120)
    assert there.returncode == 0 and there.stdout.strip() == "osmesa", there.stdout + there.stderr
    here = subprocess.run(check, capture_output=True, text=True, timeout=120)
    assert here.returncode == 1 and "vlaeval install aloha" in here.stdout.strip().splitlines()[-1], here.stdout


@pytest.mark.long
@pytest.mark.lerobot
def test_a_lerobot_checkpoint_plays_aloha_from_lerobots_interpreter(tmp_path: Path) -> None:
    """A random-init ACT built for ALOHA's features (``observation.images.top``, 14 joints) runs as
    ``--policy=lerobot:DIR``: its server in LeRobot's interpreter reads the top camera out of the
    ``pixels`` dict the workers in ALOHA's interpreter send, as LeRobot's ``preprocess_observation``
    names it; a policy reading another key would end every episode in an error, not a failure."""
    from lerobot_reference import build_checkpoint, lerobot_session

    checkpoint = build_checkpoint(tmp_path / "aloha-act", "aloha", "act")
    benchmark = capped_benchmark("aloha", STEPS, tmp_path)
    session = lerobot_session(
        tmp_path / "ours", str(benchmark), checkpoint, "--episodes=2", "--vla-tasks=AlohaTransferCube-v0"
    )
    with ended_on_exit(session):
        output, _ = session.communicate(timeout=900)
    assert session.returncode == 1, output[-3000:]  # failed episodes (a random policy in 6 steps), no error
    (run_dir,) = (tmp_path / "ours" / "results").iterdir()
    records = episode_records(run_dir)
    assert sorted(records) == [("AlohaTransferCube-v0", seed) for seed in SEEDS]
    for record in records.values():
        assert record["outcome"] == "failure" and record["length"] == STEPS, record
        assert record["instruction"] == "transfer_cube"
    info = read_json(run_dir / "eval_info.json")
    assert info["overall"]["n_episodes"] == 2 and info["overall"]["pc_success"] == 0.0
