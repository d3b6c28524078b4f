"""LIBERO env factory: the published harnesses' episode protocol behind the adapter interface that
``episode.run_episode`` drives (see ``mikasa.py`` for the other benchmark).

What makes LIBERO's episode k: a fresh ``OffScreenRenderEnv`` (256x256 cameras) seeded once with
``env.seed(S)``, then k+1 hard resets (each re-samples fixture positions from numpy's global
RNG, which the init state does not cover), then ``set_init_state(init_states[k])`` and 10 wait
steps of ``[0]*6 + [-1]``. The harnesses run a task's episodes in order in one env; here any
worker may run any episode in any order, so the adapter keeps the env's own RNG stream (saved
after every reset, restored before the next, so a policy or library drawing from numpy's
global RNG between resets changes nothing) and a count of resets since seeding. Episode k
replays the resets it lacks (going backwards re-seeds first); the episode's extra field
``replayed_resets`` shows what that cost. The episode's own env calls (init state, wait steps,
steps) draw from that stream too, continued from its reset, as the harnesses' draw from the global
RNG after theirs: LIBERO's draw nothing there, LIBERO-Plus's sensor noise does.

LIBERO-PRO (``benchmarks/libero-pro.yaml``) is the same env on perturbed BDDL files, built here
too; two env options say what differs: ``instruction_source`` (``INSTRUCTION_SOURCES``) and
``env_id_format`` (``DEFAULT_ENV_ID_FORMAT``).

Imported only inside workers that run LIBERO episodes (and by the preflight check).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from pytest_vlaeval.benchmark.model import Benchmark, Task
from pytest_vlaeval.envs import mujoco_gl
from pytest_vlaeval.envs.adapter import Adapter, ExtraValue
from pytest_vlaeval.errors import EnvError


def set_gl_backend(render_request: str) -> str:
    """Choose MuJoCo's GL backend (``mujoco_gl``) and LIBERO's package paths; must run before
    mujoco, robosuite or LIBERO is imported."""
    gl = mujoco_gl.set_gl_backend(render_request)
    # The package's default paths only: a user's LIBERO path config must not swap bddl files.
    os.environ.setdefault("LIBERO_CONFIG_PATH", os.path.join(os.path.dirname(__file__), "_no_libero_config"))
    return gl


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """Robosuite's (x, y, z, w) quaternion as an axis-angle vector, angle in [0, 2*pi]: the
    convention of LIBERO's own data and openpi (w clipped to [-1, 1]; zero for no rotation)."""
    quat = np.asarray(quat, dtype=np.float64)
    w = min(1.0, max(-1.0, float(quat[3])))
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return quat[:3] * 2.0 * math.acos(w) / den


def policy_obs(raw: dict[str, Any]) -> dict[str, Any]:
    """The documented observation: both 256x256 images rotated 180 degrees (upright, as every
    harness hands them on before its own preprocessing), the 8-D state (eef position,
    axis-angle, two gripper finger positions) and the raw eef quaternion (x, y, z, w)."""
    quat = np.asarray(raw["robot0_eef_quat"], dtype=np.float64)
    return {
        "agentview_image": np.ascontiguousarray(raw["agentview_image"][::-1, ::-1]),
        "wrist_image": np.ascontiguousarray(raw["robot0_eye_in_hand_image"][::-1, ::-1]),
        "state": np.concatenate(
            [np.asarray(raw["robot0_eef_pos"], np.float64), quat_to_axis_angle(quat), raw["robot0_gripper_qpos"]]
        ).astype(np.float64),
        "eef_quat": quat,
    }


@contextlib.contextmanager
def numpy_rng(state: Any) -> Iterator[list[Any]]:
    """Run with numpy's global RNG set to ``state``; yields a one-element list that holds the
    state afterwards, and gives the caller's global RNG back untouched."""
    outer = np.random.get_state()
    np.random.set_state(state)
    after = [state]
    try:
        yield after
    finally:
        after[0] = np.random.get_state()
        np.random.set_state(outer)


class LiberoEnv(Adapter):
    """Adapter: ``reset(seed=k)`` gives episode k of the task (the harnesses' episode k)."""

    def __init__(
        self,
        env: Any,
        init_states: np.ndarray,
        *,
        instruction: str,
        max_steps: int,
        env_seed: int,
        wait_steps: int,
        wait_action: list[float],
        render_backend: str,
    ) -> None:
        self.env = env
        self.init_states = init_states
        self.instruction = instruction
        self.max_episode_steps = max_steps
        self.env_seed = env_seed
        self.wait_steps = wait_steps
        self.wait_action = np.asarray(wait_action, dtype=np.float64)
        self.render_backend = render_backend
        self.resets_since_seed = 0
        self.replayed_resets = 0
        """Resets the last episode replayed to reach its RNG state (0 when episodes come in order)."""
        self.reseeded = False
        self._rng = self._seeded_rng()
        self._episode_rng = self._rng
        """The stream the episode's steps draw from: the env's, continued from its last reset. LIBERO's
        steps draw nothing; LIBERO-Plus's sensor noise draws from numpy's global RNG at every step, so
        episode 0 is the runner's only if they draw where the runner's do, after its reset."""

    def _seeded_rng(self) -> Any:
        """The global RNG state right after the harnesses' ``env.seed(S)``."""
        with numpy_rng(np.random.get_state()) as after:
            self.env.seed(self.env_seed)
        return after[0]

    def reset(self, *, seed: int, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Episode ``seed`` (= k): replay the missing resets, load init state k, run the wait steps."""
        k = int(seed)
        if not 0 <= k < len(self.init_states):
            raise EnvError(f"LIBERO has init states 0..{len(self.init_states) - 1} for this task, not {k}")
        self.reseeded = k < self.resets_since_seed
        if self.reseeded:
            self._rng, self.resets_since_seed = self._seeded_rng(), 0
        self.replayed_resets = k - self.resets_since_seed
        with numpy_rng(self._rng) as after:
            for _ in range(self.replayed_resets + 1):
                self.env.reset()
        self._rng, self.resets_since_seed = after[0], k + 1
        self._episode_rng = self._rng
        with numpy_rng(self._episode_rng) as after:
            raw = self.env.set_init_state(self.init_states[k])
            for _ in range(self.wait_steps):
                raw, _, _, _ = self.env.step(self.wait_action.copy())
        self._episode_rng = after[0]
        info = {"language_instruction": self.instruction, "replayed_resets": self.replayed_resets}
        return policy_obs(raw), info

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """``done`` (the task's goal predicates hold) is success and ends the episode."""
        with numpy_rng(self._episode_rng) as after:
            raw, reward, done, info = self.env.step(np.asarray(action, dtype=np.float64))
        self._episode_rng = after[0]
        info = dict(info)
        info["success"] = bool(done)
        return policy_obs(raw), float(reward), bool(done), False, info

    def episode_extras(self) -> dict[str, ExtraValue]:
        return {"replayed_resets": self.replayed_resets}

    def render_frame(self, obs: dict[str, Any]) -> np.ndarray:
        """The agent view beside the policy's two cameras (for videos)."""
        from pytest_vlaeval.envs.frames import compose

        return compose(obs["agentview_image"], obs["agentview_image"], obs["wrist_image"])

    def close(self) -> None:
        self.env.close()


INSTRUCTION_SOURCES = ("task", "bddl")
"""Where the policy's instruction comes from (env option ``instruction_source``, ``task`` when
absent). ``task``: the package's ``task.language``, made from the BDDL file's name, as openpi sends
for LIBERO. ``bddl``: the BDDL file's own ``(:language ...)``, i.e. ``env.language_instruction``,
as LIBERO-PRO's runner sends. LIBERO-PRO's semantic and task suites keep the original file names
while their BDDL files hold the perturbed instruction, so for them only ``bddl`` is the benchmark."""

DEFAULT_ENV_ID_FORMAT = "{name}"
"""How a benchmark file's env id names a package task (env option ``env_id_format``; ``{split}``
and ``{name}`` are replaced). LIBERO's suites have distinct task names, so the name is the id;
LIBERO-PRO's suites reuse the original names (five suites share each one), so its file writes
``{split}.{name}``."""


def suite_task(task: Task, benchmark: Benchmark) -> tuple[Any, int]:
    """(LIBERO benchmark suite object, task index) for a benchmark-file task: the task of the
    split's suite whose name, written as ``env_id_format`` says, is the task's env id."""
    from libero.libero import benchmark as libero_benchmark

    options = benchmark.env.options
    suite_name = options["suites"][task.split]
    suite = libero_benchmark.get_benchmark_dict()[suite_name]()
    id_format = str(options.get("env_id_format", DEFAULT_ENV_ID_FORMAT))
    # Plain replacement, not str.format: a benchmark file is data, never a format program.
    ids = [
        id_format.replace("{split}", task.split).replace("{name}", suite.get_task(i).name) for i in range(suite.n_tasks)
    ]
    if task.env_id not in ids:
        raise EnvError(f"{task.env_id} is not a task of {suite_name} (env ids {id_format!r})")
    return suite, ids.index(task.env_id)


def bddl_instruction(bddl_file: str) -> str:
    """The BDDL file's ``(:language ...)`` as the env reads it (lower-cased, one space between
    words): the parser ``ControlEnv`` sets ``language_instruction`` from, without building an env."""
    from libero.libero.envs.bddl_utils import get_problem_info

    return str(get_problem_info(bddl_file)["language_instruction"])


def make_env(task: Task, benchmark: Benchmark, render_request: str) -> LiberoEnv:
    """Build ``task``'s env as the harnesses do: ``OffScreenRenderEnv`` on the task's bddl file
    with 256x256 cameras, seeded once."""
    gl = set_gl_backend(render_request)
    options = benchmark.env.options
    source = options.get("instruction_source", "task")
    if source not in INSTRUCTION_SOURCES:
        raise EnvError(f"env option instruction_source is {source!r}; expected one of {', '.join(INSTRUCTION_SOURCES)}")
    try:
        from libero.libero import get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

        suite, index = suite_task(task, benchmark)
        spec = suite.get_task(index)
        bddl_file = os.path.join(get_libero_path("bddl_files"), spec.problem_folder, spec.bddl_file)
        # Checked before the env is built (seconds): a stale benchmark file fails at once.
        expected = bddl_instruction(bddl_file) if source == "bddl" else spec.language
        if task.instruction and task.instruction != expected:
            raise EnvError(f"{task.env_id}: benchmark file says {task.instruction!r}, LIBERO says {expected!r}")
        init_states = np.asarray(suite.get_task_init_states(index))
        size = int(options["camera_size"])
        env = OffScreenRenderEnv(bddl_file_name=bddl_file, camera_heights=size, camera_widths=size)
    except EnvError:
        raise
    except Exception as exc:
        raise EnvError(f"cannot build LIBERO task {task.env_id} (MUJOCO_GL={gl}): {type(exc).__name__}: {exc}") from exc
    instruction = str(env.language_instruction) if source == "bddl" else spec.language
    return LiberoEnv(
        env,
        init_states,
        instruction=instruction,
        max_steps=task.max_steps,
        env_seed=int(options["env_seed"]),
        wait_steps=int(options["wait_steps"]),
        wait_action=list(options["wait_action"]),
        render_backend=f"{gl}: {mujoco_gl.gl_renderer()}",
    )


if __name__ == "__main__":
    check = functools.partial(mujoco_gl.simulator_problem, module="libero.libero", title="LIBERO", stack="libero")
    sys.exit(mujoco_gl.preflight_main(check, sys.argv[1:]))
