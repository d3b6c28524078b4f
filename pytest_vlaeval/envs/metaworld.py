"""Meta-World (metaworld 3.0.0) as LeRobot evaluates it, behind the plain-Python adapter interface.

The env is built as LeRobot's ``MetaworldEnv`` builds it (``src/lerobot/envs/metaworld.py``): no
``gym.make``; ``MT1(task, seed=42)``, the task's class with ``render_mode="rgb_array"`` and the
``corner2`` camera, ``set_task(train_tasks[0])``, that camera moved to (0.75, 0.075, 0.7), one
reset, then ``_freeze_rand_vec = False`` and ``seeded_rand_vec = True`` so that each reset draws
the object and goal positions from the env's own seeded RNG. ``reset(seed=i)`` is LeRobot's
``env.seed(i)`` then ``env.reset(seed=i)``, which replaces that RNG and rebuilds the MuJoCo state,
so episode i is the same whatever the env ran before.

The policy sees ``pixels``: the 480x480 corner2 render flipped on both axes (that camera's images
come out upside down and mirrored), uint8; ``agent_pos``: the first 4 entries of the raw state
(hand xyz, gripper opening), float64; and LeRobot's task description as the instruction. The
action is 4 floats in [-1, 1] (xyz mocap delta, gripper effort), passed as float32 as LeRobot's
rollout passes it; the env clips the xyz part itself. Success is ``info["success"]`` at any step
and ends the episode there (LeRobot's ``terminated = done or is_success``); else the episode runs
to the env's own 500-step limit.

Meta-World needs gymnasium >= 1.1 and numpy 2, so it runs in an interpreter of its own
(``install.own_interpreter`` in its file); this module imports metaworld and MuJoCo only inside the
factory and the preflight check, after MUJOCO_GL is set.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from pytest_vlaeval.benchmark.model import Benchmark, Task
from pytest_vlaeval.envs.adapter import Adapter, MaxReward, Reset, Step
from pytest_vlaeval.envs.mujoco_gl import gl_renderer, preflight_main, set_gl_backend, simulator_problem
from pytest_vlaeval.errors import EnvError

INSTALL_HINT = "run `vlaeval install metaworld` (it makes Meta-World's own interpreter)"
FLIPPED_CAMERA = "corner2"
"""The camera whose images LeRobot flips on both axes (and the only one it moves)."""


class MetaWorldEnv(MaxReward, Adapter):
    """Adapter: ``reset(seed=i)`` gives LeRobot's episode for seed i; the episode's maximum step
    reward (LeRobot's per-episode ``max_reward``, averaged into ``avg_max_reward``) is its extra."""

    def __init__(self, env: Any, *, instruction: str, max_steps: int, camera_name: str, gl: str) -> None:
        self.env = env
        self.instruction = instruction
        self.max_episode_steps = max_steps
        self.flip = camera_name == FLIPPED_CAMERA
        self.gl = gl
        self.renderer: str | None = None
        self.state: np.ndarray | None = None
        """The sawyer env's full raw observation (39 floats) after the last reset or step: never shown
        to the policy; metaworld's scripted experts act on it."""

    @property
    def render_backend(self) -> str:
        """``<MUJOCO_GL>: <GL renderer, version>``, read once the env has rendered (its context is current then)."""
        return f"{self.gl}: {self.renderer or 'not rendered yet'}"

    def observation(self, raw: np.ndarray) -> dict[str, Any]:
        """What LeRobot's ``pixels_agent_pos`` observation holds: the render (flipped for corner2) and
        the first 4 state entries."""
        self.state = raw
        image = self.env.render()
        if self.renderer is None:
            self.renderer = gl_renderer()
        if self.flip:
            image = np.flip(image, (0, 1))
        return {"pixels": image.copy(), "agent_pos": np.array(raw[:4], dtype=np.float64)}

    def reset(self, *, seed: int, options: dict[str, Any] | None = None) -> Reset:
        """Seed the env's RNG, then reset (the object and goal positions come from that RNG)."""
        self.env.seed(int(seed))
        raw, _ = self.env.reset(seed=int(seed))  # the sawyer env ignores this seed; LeRobot passes it
        self.start_episode()
        return self.observation(raw), {"language_instruction": self.instruction, "success": False}

    def step(self, action: np.ndarray) -> Step:
        """One env step; ``terminated`` on success (LeRobot's ``done or is_success``)."""
        action = np.asarray(action, dtype=np.float32).reshape(-1)
        raw, reward, done, truncated, info = self.env.step(action)
        success = bool(info.get("success", 0))
        reward = self.saw_reward(reward)
        info = {**info, "success": success, "language_instruction": self.instruction}
        return self.observation(raw), reward, bool(done) or success, bool(truncated), info

    def render_frame(self, obs: dict[str, Any]) -> np.ndarray:
        return np.asarray(obs["pixels"])

    def close(self) -> None:
        self.env.close()


def build(task_name: str, options: dict[str, Any]) -> Any:
    """The raw sawyer env for ``task_name``, set up in LeRobot's order (``MetaworldEnv._ensure_env``)."""
    import metaworld
    import mujoco

    camera = str(options["camera_name"])
    size = int(options["image_size"])
    mt1 = metaworld.MT1(task_name, seed=int(options["mt1_seed"]))
    env = mt1.train_classes[task_name](render_mode="rgb_array", camera_name=camera, width=size, height=size)
    env.set_task(mt1.train_tasks[0])
    if camera == FLIPPED_CAMERA:
        camera_id = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        env.model.cam_pos[camera_id] = np.asarray(options["camera_position"], dtype=np.float64)
    env.reset()
    env._freeze_rand_vec = False  # else every reset replays train_tasks[0]'s positions
    env.seeded_rand_vec = True  # positions from env.np_random, which env.seed(i) sets
    return env


def make_env(task: Task, benchmark: Benchmark, render_request: str) -> MetaWorldEnv:
    """Build ``task``'s env as LeRobot does, with the benchmark file's camera and step limit (at
    most the env's own 500: the env refuses a step past it)."""
    gl = set_gl_backend(render_request)
    options = benchmark.env.options
    try:
        import metaworld  # noqa: F401
    except Exception as exc:
        raise EnvError(f"Meta-World does not import ({type(exc).__name__}: {exc}): {INSTALL_HINT}") from None
    try:
        env = build(task.env_id, options)
    except Exception as exc:
        raise EnvError(
            f"cannot build Meta-World task {task.env_id} (MUJOCO_GL={gl}): {type(exc).__name__}: {exc}"
        ) from exc
    limit = int(env.max_path_length)
    if task.max_steps > limit:
        env.close()
        raise EnvError(f"{task.env_id}: the benchmark file says max_steps {task.max_steps}; the env stops at {limit}")
    return MetaWorldEnv(
        env,
        instruction=task.instruction,
        max_steps=task.max_steps,
        camera_name=str(options["camera_name"]),
        gl=gl,
    )


if __name__ == "__main__":
    check = functools.partial(simulator_problem, module="metaworld", title="Meta-World", stack="metaworld")
    sys.exit(preflight_main(check, sys.argv[1:]))
