"""A tiny, fast, deterministic stand-in for a simulator, for testing the plugin's logic.

It mimics what matters of MIKASA: dict observations with a privileged key, the instruction in
``info``, a success flag per step, a step limit, and the trap of zeroing the previous action
in place on reset. Task names choose behaviours: ``Broken*`` cannot be built, ``Crash*``
kills its worker process mid-episode, ``Flaky*`` kills it with SIGKILL once per working
directory (the first attempt of its first episode) and then behaves.
"""

from __future__ import annotations

import os
import signal

import numpy as np

from pytest_vlaeval.envs.adapter import Adapter

BUILDS: list[str] = []


class FakeEnv(Adapter):
    def __init__(self, task, benchmark, render_request):
        self.task = task
        self.reset_options = benchmark.env.reset_options
        self.max_episode_steps = task.max_steps
        self.render_backend = "none"
        self._last_action = None
        self._t = 0
        self._seed = 0

    def reset(self, *, seed, options):
        if options != self.reset_options:
            raise ValueError(f"reset options {options} are not the benchmark's {self.reset_options}")
        if self._last_action is not None:
            self._last_action[...] = 0  # the in-place zeroing trap
        self._seed = seed
        self._t = 0
        return self._obs(), {"language_instruction": self.task.instruction, "oracle_info": seed % 7, "success": False}

    def step(self, action):
        self._last_action = action
        self._t += 1
        if self.task.env_id.startswith("Crash") and self._t == 2:
            os._exit(13)
        if self.task.env_id.startswith("Flaky") and self._t == 2 and _first_time("flaky.once"):
            os.kill(os.getpid(), signal.SIGKILL)
        # Success when the first action component beats a seed-dependent bar.
        bar = 0.5 + 0.1 * (self._seed % 5)
        success = bool(action[0] > bar)
        reward = float(np.clip(action[0], 0, 1)) * 0.1
        terminated = success and self._t >= 2
        info = {"success": success, "language_instruction": self.task.instruction, "oracle_info": 1}
        return self._obs(), reward, terminated, False, info

    def render_frame(self, obs):
        return np.full((16, 16, 3), 10 * self._t % 256, dtype=np.uint8)

    def episode_extras(self):
        """The benchmark's own field of an episode (fake.yaml summarises it): the seed's bar."""
        return {"bar": round(0.5 + 0.1 * (self._seed % 5), 3)}

    def close(self):
        pass

    def _obs(self):
        return {
            "rgb": np.full((1, 4, 4, 6), self._seed % 251, dtype=np.uint8),
            "proprio": np.full((1, 7), self._t, dtype=np.float32),
            "task_cue": np.array([self._seed], dtype=np.int64),
        }


def _first_time(marker):
    """True for exactly one caller across processes sharing the working directory."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


class FakeRows:
    """One fake simulator of ``num_envs`` scenes stepped together (a benchmark's ``vector_backends``):
    K fake envs behind the lockstep rows' interface; unused rows are not stepped."""

    def __init__(self, task, benchmark, render_request, num_envs):
        self.envs = [FakeEnv(task, benchmark, render_request) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.max_episode_steps = task.max_steps
        self.render_backend = "fake-vector"

    def reset(self, seeds, options):
        return [env.reset(seed=seed, options=options) for env, seed in zip(self.envs, seeds, strict=False)]

    def step(self, actions):
        return [None if action is None else env.step(action) for env, action in zip(self.envs, actions, strict=True)]

    def episode_extras(self, row):
        return self.envs[row].episode_extras()

    def close(self):
        pass


def make_env(task, benchmark, render_request, num_envs=1):
    from pytest_vlaeval.errors import EnvError

    if task.env_id.startswith("Broken"):
        raise EnvError(f"cannot build {task.env_id}: the fake simulator refuses")
    BUILDS.append(task.env_id)
    if num_envs > 1:
        return FakeRows(task, benchmark, render_request, num_envs)
    return FakeEnv(task, benchmark, render_request)
