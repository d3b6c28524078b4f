"""LIBERO as LeRobot evaluates it (``lerobot-eval --env.type=libero``, LeRobot 0.6.1), behind the
plain-Python adapter interface, in LeRobot's interpreter (``vlaeval install lerobot``).

The env is LeRobot's own ``LiberoEnv`` (``src/lerobot/envs/libero.py``) over hf-libero, built with
the arguments LeRobot's ``LiberoEnv`` config passes it (``src/lerobot/envs/configs.py``): both
cameras at 360x360, ``obs_type="pixels_agent_pos"``, relative control at 20 Hz, hard resets, the
task's init states, and the step limit of the benchmark file (LeRobot's per-suite limits). Each
reset does what LeRobot's does: ``seed(s)`` and a hard reset (which re-samples what the init state
does not cover from that seed), the init state, then 10 no-op steps.

lerobot-eval gives a task's episode ``i`` the seed ``--seed + i`` and init state ``i`` (its env
counts resets). Here the episode with seed ``s`` gets init state ``s - start_seed`` (mod the
task's 50): lerobot-eval's episode at its default ``--seed=1000`` (or any multiple of 50), whatever
ran before it in this env, in any order, on any worker. (lerobot-eval at a batch size above one
lets its vector env's autoreset pick init states by when episodes end, LeRobot issue 4152.)

What the policy sees is the env's observation as it comes: ``pixels`` {``image``: agentview,
``image2``: wrist camera}, 360x360 uint8 as rendered (upside down: LeRobot's LIBERO env processor
turns them, inside the ``lerobot:PATH`` policy, as in lerobot-eval), and ``robot_state`` (eef
position, quaternion and rotation matrix, gripper and joint positions and velocities), which the
processor makes ``observation.state``; its task string, the task's language.

Imported only where its workers run: hf-libero is imported inside the factory, after MUJOCO_GL is set.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from pytest_vlaeval.benchmark.model import Benchmark, Task
from pytest_vlaeval.envs.adapter import Reset
from pytest_vlaeval.envs.mujoco_gl import RenderedIsSuccessEnv, preflight_main, set_gl_backend, simulator_problem
from pytest_vlaeval.errors import EnvError

INSTALL_HINT = "run `vlaeval install lerobot` (LeRobot's interpreter, with its LIBERO env)"


class LeRobotLiberoEnv(RenderedIsSuccessEnv):
    """Adapter: LeRobot's ``LiberoEnv``, whose episode with seed ``s`` starts from init state
    ``s - start_seed``; the agentview image, upright, as the video frame (LeRobot's ``render``)."""

    def __init__(self, env: Any, *, instruction: str, gl: str, start_seed: int, max_episode_steps: int) -> None:
        super().__init__(env, instruction=instruction, gl=gl, max_episode_steps=max_episode_steps)
        self.start_seed = start_seed

    def reset(self, *, seed: int, options: dict[str, Any]) -> Reset:
        self.env.init_state_id = seed - self.start_seed  # the env takes it mod its init states
        return super().reset(seed=seed, options=options)

    def render_frame(self, obs: dict[str, Any]) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(obs["pixels"]["image"])[::-1, ::-1])


def make_env(task: Task, benchmark: Benchmark, render_request: str) -> LeRobotLiberoEnv:
    """Build the task's env as lerobot-eval does for one episode at a time (``--eval.batch_size=1``)."""
    gl = set_gl_backend(render_request)
    options = benchmark.env.options
    suite_name = options["suites"][task.split]
    try:
        from lerobot.envs.libero import LiberoEnv
        from libero.libero import benchmark as suites
    except Exception as exc:
        raise EnvError(f"LeRobot's LIBERO env does not import ({type(exc).__name__}: {exc}): {INSTALL_HINT}") from None
    suite = suites.get_benchmark_dict()[suite_name]()
    names = [t.name for t in suite.tasks]
    if task.env_id not in names:
        raise EnvError(f"{suite_name} has no task {task.env_id!r} in this hf-libero: {INSTALL_HINT}")
    size = int(options["observation_size"])
    try:
        env = LiberoEnv(
            task_suite=suite,
            task_id=names.index(task.env_id),
            task_suite_name=suite_name,
            episode_length=task.max_steps,
            obs_type=options["obs_type"],
            observation_height=size,
            observation_width=size,
            control_freq=int(options["control_freq"]),
            control_mode=options["control_mode"],
        )
    except Exception as exc:
        raise EnvError(
            f"cannot build {suite_name} {task.env_id} (MUJOCO_GL={gl}): {type(exc).__name__}: {exc}"
        ) from exc
    return LeRobotLiberoEnv(
        env,
        instruction=task.instruction,
        gl=gl,
        start_seed=benchmark.start_seed,
        max_episode_steps=task.max_steps,
    )


if __name__ == "__main__":
    check = functools.partial(
        simulator_problem, module="lerobot.envs.libero", title="LeRobot's LIBERO env", stack="lerobot"
    )
    sys.exit(preflight_main(check, sys.argv[1:]))
