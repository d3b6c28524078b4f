"""A LeRobot checkpoint's actions, in LeRobot's interpreter: an episode's are what ``lerobot-eval
--seed=SEED --eval.n_episodes=1`` computes (seeded, then built, then rolled out), with batched
inference too when the episode is its batch's only row, and batched rows keep to their own episode
(up to the last digits the batch moves).

The random-init ACT and Diffusion checkpoints of ``lerobot_checkpoints``, on observations that
differ at every step of every episode; 21 steps: ACT predicts a chunk at steps 0 and 20, Diffusion
(its noise drawn at each chunk) at 0, 8 and 16. These need ``vlaeval install lerobot``; they fail,
never skip, without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lerobot_reference import lerobot_python, pusht_act_checkpoint, pusht_diffusion_checkpoint  # noqa: F401

pytestmark = pytest.mark.lerobot

SEEDS = (1202, 1203, 1204)
JOINS = (0, 8, 0)
"""The step of the batch at which each episode opens: the first and the third ask for every chunk
together, the second (Diffusion) at the others' second and third chunks, (ACT) alone."""

ACTIONS = """
import json, sys
from pathlib import Path
import numpy as np
import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.envs.configs import PushtEnv
from lerobot.policies.factory import make_policy
from lerobot.utils.random_utils import set_seed
from pytest_vlaeval.lerobot.policy import LeRobotBatchedPolicy, LeRobotPolicy, _env_action, _load, _policy_inputs
from pytest_vlaeval.policy.batched import BatchEpisode
from pytest_vlaeval.policy.contract import EpisodeInfo

torch.set_num_threads(1)
STEPS = 21
SEEDS, JOINS = json.loads(sys.argv[1]), json.loads(sys.argv[2])


def obs(seed, step):
    value = (seed * 7 + step * 37) % 256
    return {"pixels": np.full((96, 96, 3), value, np.uint8), "agent_pos": np.array([100.0 + step, 300.0 - seed % 50]),
            "instruction": ""}


def info(seed):
    return EpisodeInfo("PushT-v0", seed, "", 0, 300)


def lerobot_eval(path, seed):
    # lerobot-eval's eval_main: set_seed, make_policy, then the rollout's select_action calls
    loaded = _load(path, "pusht")
    set_seed(seed)
    config = PreTrainedConfig.from_pretrained(path)
    config.pretrained_path, config.device = Path(path), "cpu"
    policy = make_policy(cfg=config, env_cfg=PushtEnv(), rename_map={})
    policy.eval()
    policy.reset()
    with torch.no_grad():
        return [_env_action(loaded, policy.select_action(_policy_inputs(loaded, [obs(seed, step)])[0])).tolist()
                for step in range(STEPS)]


def one_row(path, seed):
    policy = LeRobotPolicy(path, "pusht")
    policy.reset(info(seed))
    return [policy.act(obs(seed, step)).tolist() for step in range(STEPS)]


def batched(path, seeds, joins):
    policy = LeRobotBatchedPolicy(path, "pusht")
    episodes = [BatchEpisode(f"PushT-v0:{seed}", info(seed)) for seed in seeds]
    actions = {seed: [] for seed in seeds}
    for tick in range(STEPS + max(joins)):
        rows = [i for i, join in enumerate(joins) if join <= tick < join + STEPS]
        for i in rows:
            if tick == joins[i]:
                policy.open_episode(episodes[i])
        chunks = policy.act_batch([episodes[i] for i in rows], [obs(seeds[i], tick - joins[i]) for i in rows])
        for i, chunk in zip(rows, chunks, strict=True):
            actions[seeds[i]].append(chunk.tolist())
    return actions


def processed_rows_differ(path):
    # a call's observations pass the processors stacked: each row as its own call gives it, bit for bit
    loaded = _load(path, "pusht")
    views = [obs(seed, step) for seed in SEEDS for step in range(0, STEPS, 5)]
    for view in views[::3]:  # another client's layout in the same call: float32 state, openpi's prompt beside it
        view["agent_pos"], view["prompt"] = view["agent_pos"].astype(np.float32), "push the T"
    together = _policy_inputs(loaded, views)
    alone = [_policy_inputs(loaded, [view])[0] for view in views]
    differ = sum(not torch.equal(a[key], t[key]) for a, t in zip(alone, together) for key in a if torch.is_tensor(a[key]))
    differ += sum(a.keys() != t.keys() for a, t in zip(alone, together))
    actions = torch.linspace(-3, 3, 2 * len(views)).reshape(len(views), 2)
    rows = np.concatenate([_env_action(loaded, actions[i : i + 1]) for i in range(len(views))])
    return differ + int(not np.array_equal(_env_action(loaded, actions), rows))


out = {}
for path in sys.argv[3:]:
    out[path] = {
        "processed_rows_differ": processed_rows_differ(path),
        "lerobot_eval": [lerobot_eval(path, seed) for seed in SEEDS],
        "one_row": [one_row(path, seed) for seed in SEEDS],
        "alone": [batched(path, [seed], [0])[seed] for seed in SEEDS],
        "together": list(batched(path, SEEDS, JOINS).values()),
    }
print(json.dumps(out))
"""


def test_episodes_are_lerobot_evals_one_by_one_or_batched(
    pusht_act_checkpoint: Path,  # noqa: F811
    pusht_diffusion_checkpoint: Path,  # noqa: F811
) -> None:
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    checkpoints = {"act": str(pusht_act_checkpoint), "diffusion": str(pusht_diffusion_checkpoint)}
    proc = subprocess.run(
        [str(lerobot_python()), "-c", ACTIONS, json.dumps(SEEDS), json.dumps(JOINS), *checkpoints.values()],
        env={**environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    for name, path in checkpoints.items():
        assert got[path].pop("processed_rows_differ") == 0, f"{name}: processors batched give each row its own call's"
        actions = {way: np.array(rows) for way, rows in got[path].items()}
        one_row = actions["one_row"]
        assert np.array_equal(one_row, actions["lerobot_eval"]), f"{name}: lerobot-eval's actions, bit for bit"
        assert np.array_equal(actions["alone"], one_row), f"{name}: batched, a batch of one is the same"
        together = actions["together"]
        assert np.allclose(together, one_row, rtol=0, atol=0.01), f"{name}: batched rows are their own episodes'"
        assert np.abs(one_row[0] - one_row[1]).max() > 1, f"{name}: the episodes differ: rows could not be swapped"
        assert (one_row[:, 0] != one_row[:, 20]).any(), f"{name}: a new chunk at step 20"
    diffusion = np.array(got[checkpoints["diffusion"]]["one_row"])
    assert (diffusion[:, 0] != diffusion[:, 8]).any(), "Diffusion: its noise moves on from one chunk to the next"


@pytest.mark.long
def test_the_batching_benchmark_puts_both_columns_side_by_side() -> None:
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_lerobot_batching.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke", "--policy", "diffusion"], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| diffusion |")]
    assert [row.split("|")[2].strip() for row in rows[:2]] == ["one row at a time", "batched"], proc.stdout
    assert rows[2].split("|")[2].strip() == "8", "the digits row counts the 8 episodes of the smoke block"
