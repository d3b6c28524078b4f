"""A LeRobot checkpoint beside the env (the workers in LeRobot's interpreter, each its own copy) gives
the records the served path gives, bit for bit: the same functions in the same interpreter, the
same arithmetic (under ``-n 2`` a worker's torch runs on its share of the cores, the modules that
round differently there on the server's count: ``lerobot.threads``).

The same random-init ACT (``lerobot_checkpoints``) on the same Push-T seeds, capped at STEPS steps,
in three real sessions: served from one process (``--vla-policy-placement=served``), beside the env
serially (one worker) and beside it under ``-n 2``. The env is Push-T's adapter with a digest of
every action it was given on the record (``action_digest_pusht``), so the comparison is step by
step, not only of the outcomes. These need ``vlaeval install lerobot``; they fail, never skip,
without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from action_digest_pusht import FACTORY
from helpers import capped_benchmark, episode_records
from lerobot_reference import lerobot_session, pusht_act_checkpoint  # noqa: F401

pytestmark = pytest.mark.lerobot

SEEDS = [1000, 1001, 1002]
STEPS = 30
"""Two of ACT's 20-step chunks: two forward passes an episode, each one's actions in the digest."""


def digesting_benchmark(directory: Path) -> Path:
    """Push-T capped at STEPS, its env the action-digesting adapter."""
    path = capped_benchmark("pusht", STEPS, directory)
    data = yaml.safe_load(path.read_text())
    data["env"]["factory"] = FACTORY
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_beside_the_env_the_records_are_the_served_ones_bit_for_bit(
    tmp_path: Path,
    pusht_act_checkpoint: Path,  # noqa: F811
) -> None:
    benchmark = str(digesting_benchmark(tmp_path))
    episodes = (f"--episodes={len(SEEDS)}", f"--vla-start-seed={SEEDS[0]}")
    sessions = {
        "served": ("--vla-policy-placement=served",),
        "beside": (),
        "beside-n2": ("-n", "2"),
    }
    started = {
        name: lerobot_session(tmp_path / name, benchmark, pusht_act_checkpoint, *episodes, *args)
        for name, args in sessions.items()
    }
    said = {
        "served": "is served from one process in the lerobot interpreter (--vla-policy-placement=served)",
        "beside": "runs beside the env in the lerobot interpreter (1 worker, a copy each); "
        "--vla-policy-placement=served serves it from one process instead",
        "beside-n2": "runs beside the env in the lerobot interpreter (2 workers, a copy each)",
    }
    workers = {"served": {"main"}, "beside": {"gw0"}, "beside-n2": {"gw0", "gw1"}}
    outcomes = {}
    for name, proc in started.items():
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode in (0, 1), output[-3000:]  # 1: episodes failed (a random policy)
        assert f"vlaeval: lerobot:{pusht_act_checkpoint} {said[name]}" in output, output[-3000:]
        (run_dir,) = (tmp_path / name / "results").iterdir()
        records = episode_records(run_dir)
        assert sorted(seed for _, seed in records) == SEEDS, (name, sorted(records))
        assert {r["worker"] for r in records.values()} == workers[name]
        outcomes[name] = {
            seed: (
                r["success"],
                r["episode_return"],
                r["length"],
                r["extras"]["max_reward"],
                r["extras"]["actions_sha256"],
            )
            for (_, seed), r in records.items()
        }
    assert outcomes["beside"] == outcomes["served"]
    assert outcomes["beside-n2"] == outcomes["served"]
    assert len({outcome[-1] for outcome in outcomes["served"].values()}) == len(SEEDS), "each seed's own actions"


def test_a_checkpoint_served_over_openpi_answers_as_a_fresh_episode_over_our_protocol(
    tmp_path: Path,
    pusht_act_checkpoint: Path,  # noqa: F811
) -> None:
    """openpi's clients send the instruction as a string ``prompt`` beside the arrays, which LeRobot's
    env processing (it takes every array for a tensor) must never be given; each openpi request is an
    episode of its own, so its actions are a fresh episode's first over ``vlaeval serve``'s own protocol."""
    from pytest_vlaeval.install.interpreters import interpreter_python
    from pytest_vlaeval.policy import EpisodeInfo
    from pytest_vlaeval.serving import ServerProcess, connect_policy, parse_remote_spec

    obs = {"pixels": np.full((96, 96, 3), 128, np.uint8), "agent_pos": np.array([100.0, 200.0]), "instruction": "push"}
    actions = {}
    for protocol, scheme in (("openpi", "openpi://"), ("vlaeval", "ws://")):
        server = ServerProcess(
            f"lerobot:{pusht_act_checkpoint}",
            tmp_path / f"{protocol}.log",
            ["--protocol", protocol, "--env-type", "pusht", "--action-dim", "2"],
            {**os.environ, "HF_HUB_OFFLINE": "1"},
            python=interpreter_python("lerobot"),
        )
        server.start()
        try:
            policy = connect_policy(parse_remote_spec(server.url.replace("ws://", scheme, 1)), 2)
            policy.reset(EpisodeInfo(task="openpi", seed=0, instruction="push", episode_index=0, max_steps=1))
            actions[protocol] = [np.asarray(policy.act(obs)).tolist() for _ in range(2)]
            policy.close()
        finally:
            server.stop()
    assert actions["openpi"][0] == actions["openpi"][1], "each openpi request is a fresh episode"
    assert actions["openpi"][0] == actions["vlaeval"][0], "the first step of an episode over our own protocol"
    assert actions["vlaeval"][1] != actions["vlaeval"][0], "our own protocol's episode moves on"


def test_an_observation_of_another_benchmark_is_one_line_naming_what_the_checkpoint_takes(
    tmp_path: Path,
    pusht_act_checkpoint: Path,  # noqa: F811
) -> None:
    """A bare ``vlaeval serve`` of a Push-T checkpoint may be sent another benchmark's observations:
    the episode's error names what the checkpoint lacks and the observation it takes, not a key
    deep in the model; the server serves the next episode as ever."""
    from pytest_vlaeval.errors import PolicyError
    from pytest_vlaeval.install.interpreters import interpreter_python
    from pytest_vlaeval.policy import EpisodeInfo
    from pytest_vlaeval.serving import ServerProcess, connect_policy, parse_remote_spec

    server = ServerProcess(
        f"lerobot:{pusht_act_checkpoint}",
        tmp_path / "serve.log",
        ["--env-type", "pusht", "--action-dim", "2"],
        {**os.environ, "HF_HUB_OFFLINE": "1"},
        python=interpreter_python("lerobot"),
    )
    server.start()
    try:
        foreign = {"rgb": np.zeros((64, 64, 3), np.uint8), "joints": np.zeros(9, np.float32), "instruction": "pick"}
        pusht = {"pixels": np.full((96, 96, 3), 128, np.uint8), "agent_pos": np.array([100.0, 200.0])}
        no_state = {"pixels": pusht["pixels"], "rgb": foreign["rgb"]}
        wrong = [(foreign, "observation.image, observation.state"), (no_state, "observation.state")]
        for seed, (obs, missing) in enumerate(wrong):
            policy = connect_policy(parse_remote_spec(server.url), 2)
            policy.reset(EpisodeInfo(task="other", seed=seed, instruction="pick", episode_index=seed, max_steps=1))
            with pytest.raises(PolicyError) as raised:
                policy.act(obs)
            policy.close()
            message = str(raised.value)
            assert "\n" not in message and "KeyError" not in message, message
            assert f"gives the checkpoint no {missing}: its inputs come from LeRobot's pusht observation" in message
            assert "(agent_pos, pixels)" in message, message
        policy = connect_policy(parse_remote_spec(server.url), 2)
        policy.reset(EpisodeInfo(task="pusht", seed=9, instruction="push", episode_index=9, max_steps=1))
        assert np.asarray(policy.act(pusht)).shape[-1] == 2
        policy.close()
    finally:
        server.stop()
