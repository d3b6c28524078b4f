"""``lerobot-eval`` itself as the parity tests' reference: a checkpoint built by
``lerobot_checkpoints`` in LeRobot's interpreter, evaluated there by LeRobot's own command, its
``eval_info.json`` read back episode by episode.

The reference is the real command, never a loop rewritten here, run as the parity claim states it:
one env (``--eval.batch_size=1``, synchronous: with async vector envs Push-T's workers cannot find
the env), episode i on seed ``--seed`` + i, on the CPU, offline. Push-T's videos are rendered at the
observation's 96x96 instead of 384x384 (``--env.visualization_*``), which changes nothing the policy
sees and saves a third of the run's time.

lerobot-eval 0.6.1 writes per-task lists of sum rewards, max rewards and successes, in episode order,
and no lengths. Its videos hold them: each of the first 10 episodes of a task is saved with one
frame per step (the frames up to and including the step that ended it), so ``length`` is the video's
frame count, counted in LeRobot's interpreter (PyAV), and None past the tenth episode.

These need LeRobot's interpreter (``vlaeval install lerobot``); they fail, never skip, without it.
Use the fixtures by importing them into a test module (``from lerobot_reference import
pusht_act_reference``) or by naming this module in ``pytest_plugins``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import TESTS

from pytest_vlaeval.install.interpreters import interpreter_python

PUSHT_SEED = 1000
PUSHT_EPISODES = 10
EVAL_TIMEOUT_S = 1800
"""Push-T's 10 episodes take about a minute alone on two cores; far longer on a loaded machine."""

COUNT_FRAMES = """
import json, sys
import av
counts = []
for path in sys.argv[1:]:
    with av.open(path) as container:
        counts.append(sum(1 for _ in container.decode(video=0)))
print(json.dumps(counts))
"""


@dataclass(frozen=True)
class ReferenceEpisode:
    """One episode as lerobot-eval reported it."""

    seed: int
    success: bool
    sum_reward: float
    max_reward: float
    length: int | None
    """Steps, from the episode's video; None where lerobot-eval saved no video (past the tenth)."""


@dataclass(frozen=True)
class ReferenceRun:
    """A finished lerobot-eval run: its output folder, the command and each task's episodes in order."""

    output_dir: Path
    command: tuple[str, ...]
    episodes: dict[str, list[ReferenceEpisode]]
    """Task group (``pusht``, or a Meta-World task name) -> its episodes, seed order."""


def within_one_ulp(ours: float, theirs: float) -> bool:
    """Equal up to one unit in the last place: all a Push-T reward promises, as gym-pusht orders its
    shapes by memory address and lerobot-eval's own reward for a seed moves by 1 ulp with what ran
    before it in its process."""
    return abs(ours - theirs) <= math.ulp(theirs)


def lerobot_python() -> Path:
    """LeRobot's interpreter, or the test fails saying how to make it."""
    python = interpreter_python("lerobot")
    if not python.is_file():
        pytest.fail(f"LeRobot's interpreter is missing ({python}): run `vlaeval install lerobot`", pytrace=False)
    return python


def _lerobot_environ() -> dict[str, str]:
    """This process's environment for a LeRobot subprocess: offline, one GL backend, and nothing of
    this interpreter's import path."""
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return {**environ, "HF_HUB_OFFLINE": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


def _run(command: list[str], what: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        command, cwd=cwd, env=_lerobot_environ(), capture_output=True, text=True, timeout=EVAL_TIMEOUT_S
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        pytest.fail(f"{what} failed ({proc.returncode}): {' '.join(command)}\n{tail}", pytrace=False)
    return proc


def lerobot_session(directory: Path, benchmark: str, checkpoint: Path, *args: str) -> subprocess.Popen[str]:
    """``pytest --benchmark=BENCHMARK --policy=lerobot:CHECKPOINT ARGS`` started in ``directory`` as a
    user starts it, offline, its run under ``directory/results``; read its output with ``communicate``."""
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", f"--benchmark={benchmark}", f"--policy=lerobot:{checkpoint}"]
    command += ["-p", "no:cacheprovider", "--rootdir", str(directory), "--vla-results=results", *args]
    paths = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": paths}
    return subprocess.Popen(
        command, cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def beside_session(session: subprocess.Popen[str], reference: Callable[[], ReferenceRun]) -> tuple[ReferenceRun, str]:
    """``reference()`` (a lerobot-eval run) while ``session`` runs, both on the machine's cores; then
    the session's output. The session is ended if the reference fails."""
    try:
        run = reference()
        output, _ = session.communicate(timeout=EVAL_TIMEOUT_S)
    finally:
        if session.poll() is None:
            session.kill()
            session.communicate()
    return run, output


def build_checkpoint(out: Path, env: str, policy: str, seed: int = 0) -> Path:
    """``lerobot_checkpoints`` run in LeRobot's interpreter: a random-init ``policy`` for ``env``."""
    command = [str(lerobot_python()), str(TESTS / "lerobot_checkpoints.py")]
    _run([*command, "--env", env, "--policy", policy, "--out", str(out), "--seed", str(seed)], "building a checkpoint")
    return out


def run_lerobot_eval(
    checkpoint: Path, output_dir: Path, env_args: list[str], n_episodes: int, seed: int
) -> ReferenceRun:
    """``lerobot-eval`` on ``checkpoint`` with ``env_args`` (``--env.type=...`` and the env's
    options), one env, ``n_episodes`` per task from ``seed``; its episodes read back."""
    command = [
        str(lerobot_python().parent / "lerobot-eval"),
        f"--policy.path={checkpoint}",
        *env_args,
        f"--eval.n_episodes={n_episodes}",
        "--eval.batch_size=1",
        "--eval.use_async_envs=false",
        f"--seed={seed}",
        "--policy.device=cpu",
        f"--output_dir={output_dir}",
    ]
    _run(command, "lerobot-eval")
    info = json.loads((output_dir / "eval_info.json").read_text())
    return ReferenceRun(output_dir, tuple(command), read_eval_info(info, seed, _video_lengths(info)))


def _video_lengths(info: dict) -> dict[str, int]:
    """Each saved video's frame count, by its path as ``eval_info.json`` gives it."""
    paths = [path for task in info["per_task"] for path in task["metrics"].get("video_paths", [])]
    if not paths:
        return {}
    proc = _run([str(lerobot_python()), "-c", COUNT_FRAMES, *paths], "counting video frames")
    return dict(zip(paths, json.loads(proc.stdout), strict=True))


def read_eval_info(info: dict, seed: int, lengths: dict[str, int]) -> dict[str, list[ReferenceEpisode]]:
    """lerobot-eval 0.6.1's per-task lists as episodes; episode i of each task ran ``seed`` + i."""
    episodes: dict[str, list[ReferenceEpisode]] = {}
    for task in info["per_task"]:
        metrics = task["metrics"]
        videos = metrics.get("video_paths", [])
        rows = zip(metrics["successes"], metrics["sum_rewards"], metrics["max_rewards"], strict=True)
        episodes[task["task_group"]] = [
            ReferenceEpisode(
                seed=seed + i,
                success=bool(success),
                sum_reward=float(sum_reward),
                max_reward=float(max_reward),
                length=lengths.get(videos[i]) if i < len(videos) else None,
            )
            for i, (success, sum_reward, max_reward) in enumerate(rows)
        ]
    return episodes


@pytest.fixture(scope="session")
def pusht_act_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random-init ACT checkpoint for Push-T (``lerobot_checkpoints``, seed 0)."""
    return build_checkpoint(tmp_path_factory.mktemp("lerobot") / "pusht-act", "pusht", "act")


@pytest.fixture(scope="session")
def pusht_act_reference(pusht_act_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ReferenceRun:
    """lerobot-eval's 10 Push-T episodes from seed 1000 on ``pusht_act_checkpoint``."""
    env_args = ["--env.type=pusht", "--env.visualization_width=96", "--env.visualization_height=96"]
    output_dir = tmp_path_factory.mktemp("lerobot-eval") / "pusht-act"
    return run_lerobot_eval(pusht_act_checkpoint, output_dir, env_args, PUSHT_EPISODES, PUSHT_SEED)


@pytest.fixture(scope="session")
def pusht_diffusion_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random-init Diffusion checkpoint for Push-T (``lerobot_checkpoints``, seed 0): a policy
    that samples, its DDIM noise drawn at each action chunk."""
    return build_checkpoint(tmp_path_factory.mktemp("lerobot") / "pusht-diffusion", "pusht", "diffusion")
