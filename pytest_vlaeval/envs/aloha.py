"""ALOHA (gym-aloha 0.1.4) as LeRobot evaluates it, behind the plain-Python adapter interface.

The env is built as LeRobot's ``AlohaEnv`` config has ``gym.make`` build it
(``src/lerobot/envs/configs.py``): ``gym.make("gym_aloha/<task>", obs_type="pixels_agent_pos",
render_mode="rgb_array", max_episode_steps=400)``, gymnasium's env checker off. ``reset(seed=i)``
places the objects from ``RandomState(i)`` (gym-aloha keeps that pose in a module global that the
dm_control task reads as it resets, so one process may hold several envs as long as each reset
runs whole). What the policy sees is the env's observation as it comes: ``pixels`` a dict holding
the ``top`` camera's 480x640 uint8 image (LeRobot's ``observation.images.top``) and ``agent_pos``
the 14 joint positions, float64; its action, 14 joint targets, goes to ``step`` as float32, as
LeRobot's rollout passes it. The reward is the stage reached (0-4); ``info["is_success"]`` (stage
4) ends the episode (``terminated``), else the time limit does.

ALOHA runs on dm-control with MuJoCo 3.8.1 and numpy 2, so it has an interpreter of its own
(``install.own_interpreter`` in its file); this module imports gym-aloha and MuJoCo only inside the
factory and the preflight check, after MUJOCO_GL is set.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from pytest_vlaeval.benchmark.model import Benchmark, Task
from pytest_vlaeval.envs.mujoco_gl import RenderedIsSuccessEnv, preflight_main, set_gl_backend, simulator_problem
from pytest_vlaeval.errors import EnvError

INSTALL_HINT = "run `vlaeval install aloha` (it makes ALOHA's own interpreter)"
CAMERA = "top"


class AlohaEnv(RenderedIsSuccessEnv):
    """Adapter: gym-aloha's env as LeRobot drives it; the top camera as the video frame."""

    def render_frame(self, obs: dict[str, Any]) -> np.ndarray:
        return np.asarray(obs["pixels"][CAMERA])


def make_env(task: Task, benchmark: Benchmark, render_request: str) -> AlohaEnv:
    """Build the task's env as LeRobot does, with the benchmark file's ``obs_type`` and step limit."""
    gl = set_gl_backend(render_request)
    import gymnasium as gym

    try:
        import gym_aloha  # noqa: F401  (registers the env ids)
    except Exception as exc:
        raise EnvError(f"gym-aloha does not import ({type(exc).__name__}: {exc}): {INSTALL_HINT}") from None
    env_id = f"gym_aloha/{task.env_id}"
    try:
        env = gym.make(
            env_id,
            obs_type=benchmark.env.options["obs_type"],
            render_mode="rgb_array",
            max_episode_steps=task.max_steps,
            disable_env_checker=True,  # as LeRobot builds it (the checker changes no value, only warns)
        )
    except Exception as exc:
        raise EnvError(f"cannot build {env_id} (MUJOCO_GL={gl}): {type(exc).__name__}: {exc}") from exc
    return AlohaEnv(env, instruction=task.instruction, gl=gl)


if __name__ == "__main__":
    check = functools.partial(simulator_problem, module="gym_aloha", title="gym-aloha", stack="aloha")
    sys.exit(preflight_main(check, sys.argv[1:]))
