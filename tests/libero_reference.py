"""The harnesses' LIBERO evaluation loops, written from the description of openpi's
``examples/libero/main.py`` and of LIBERO-PRO's runner, and a deterministic policy whose actions
follow what it sees.

Reference loop, per task: a fresh ``OffScreenRenderEnv`` (256x256 cameras), ``env.seed(S)``
once, then for episode k = 0, 1, ... in order: ``env.reset()``, ``env.set_init_state(init[k])``,
10 steps of ``[0]*6 + [-1]`` (not counted), then up to ``max_steps`` policy steps on the images
rotated 180 degrees, stopping at ``done``. openpi prompts with the package's ``task.language``,
LIBERO-PRO's runner with the BDDL file's ``env.language_instruction``. Each episode is summarised
by a digest of every observation the policy saw (the instruction with it), every action and the
outcome (return and success), so two runs agree only if they agree bit for bit.

``Deterministic`` is also a ``--policy`` for real sessions (``libero_reference:Deterministic``):
with ``$VLAEVAL_DIGEST_DIR`` set it writes each episode's digest to ``<task>-<k>.json`` there
(``episode_digest``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from episode_digest import DigestingPolicy, EpisodeDigest

WAIT_ACTION = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]
WAIT_STEPS = 10
POLICY_KEYS = ("agentview_image", "wrist_image", "state", "eef_quat")


def deterministic_action(obs: dict[str, Any], t: int) -> np.ndarray:
    """Moves that depend on the step and on every part of the observation, so any difference
    in the scene changes the trajectory."""
    image = float(np.asarray(obs["agentview_image"], np.float64).mean()) / 255
    wrist = float(np.asarray(obs["wrist_image"], np.float64).mean()) / 255
    state = np.asarray(obs["state"], np.float64)
    action = np.array(
        [
            0.6 * np.sin(0.7 * t) + image - 0.5,
            0.6 * np.cos(0.5 * t) + wrist - 0.5,
            -0.4 + 0.1 * state[2],
            0.1 * np.sin(t) + 0.01 * state[3],
            0.05 * state[4],
            0.05 * state[5],
            1.0 if (t // 4) % 2 else -1.0,
        ]
    )
    return action.astype(np.float32)


class Deterministic(DigestingPolicy):
    """``deterministic_action`` as a pytest-vlaeval policy; writes digests when asked."""

    KEYS, IMAGE = POLICY_KEYS, "agentview_image"

    def decide(self, obs: dict[str, Any]) -> np.ndarray:
        self.keys = sorted(obs)
        self.shapes = {key: (np.shape(obs[key]), str(np.asarray(obs[key]).dtype)) for key in POLICY_KEYS}
        return deterministic_action(obs, self.t)


class WrongShape(Deterministic):
    """Returns six numbers where seven are expected."""

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return super().act(obs)[:6]


def flipped(raw: dict[str, Any]) -> dict[str, Any]:
    """The observation as the harness hands it to its policy (written independently of the
    adapter: images rotated 180 degrees, state = eef pos + axis-angle + gripper qpos)."""
    quat = np.array(raw["robot0_eef_quat"], np.float64)
    quat[3] = min(1.0, max(-1.0, quat[3]))
    den = math.sqrt(1.0 - quat[3] * quat[3])
    axis_angle = np.zeros(3) if math.isclose(den, 0.0) else quat[:3] * 2.0 * math.acos(quat[3]) / den
    return {
        "agentview_image": np.ascontiguousarray(np.rot90(raw["agentview_image"], 2)),
        "wrist_image": np.ascontiguousarray(np.rot90(raw["robot0_eye_in_hand_image"], 2)),
        "state": np.concatenate([raw["robot0_eef_pos"], axis_angle, raw["robot0_gripper_qpos"]]).astype(np.float64),
        "eef_quat": np.asarray(raw["robot0_eef_quat"], np.float64),
    }


def prompted_episode(env: Any, raw: dict[str, Any], prompt: str, max_steps: int) -> dict:
    """The policy's part of a LIBERO episode after the wait steps (openpi's, LIBERO-PRO's and
    LIBERO-Plus's runners alike): up to ``max_steps`` deterministic actions prompted with ``prompt``, success as
    soon as ``done``; the digest of what the policy saw and did."""
    digest = EpisodeDigest(POLICY_KEYS, "agentview_image")
    episode_return, success = 0.0, False
    for step in range(max_steps):
        obs = {**flipped(raw), "instruction": prompt}
        digest.observe(obs)
        action = deterministic_action(obs, step)
        digest.act(action)
        raw, reward, done, _ = env.step(action.tolist())
        episode_return += float(reward)
        if done:
            success = True
            break
    digest.outcome(success, episode_return, digest.steps)
    return digest.result()


def reference_episodes(suite_name: str, task_index: int, episodes: int, max_steps: int, seed: int = 7) -> list[dict]:
    """Episodes 0..episodes-1 of one task, as the harnesses run them (fresh env, seed once, in
    order, prompted with ``task.language`` as openpi does)."""
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()[suite_name]()
    task = suite.get_task(task_index)
    init_states = suite.get_task_init_states(task_index)
    env = OffScreenRenderEnv(
        bddl_file_name=os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file),
        camera_heights=256,
        camera_widths=256,
    )
    env.seed(seed)
    results = []
    try:
        for k in range(episodes):
            env.reset()
            raw = env.set_init_state(init_states[k])
            # openpi's loop counts t over the wait steps and the policy's max_steps together: the same steps.
            for _ in range(WAIT_STEPS):
                raw, _, _, _ = env.step(WAIT_ACTION)
            results.append(prompted_episode(env, raw, task.language, max_steps))
    finally:
        env.close()
    return results


def reference_pro_episodes(
    suite_name: str, task_index: int, episodes: int, max_steps: int, seed: int = 7
) -> list[dict]:
    """Episodes 0..episodes-1 of one LIBERO-PRO task as LIBERO-PRO's own runner runs them
    (``EvaluationRunner.run`` and ``_run_episode`` in ``libero/evaluation/runner.py`` of
    Zxy-MLlab/LIBERO-PRO at 8af465d), written from that description: Python's and numpy's RNGs
    seeded once; one env per task, built as that runner builds it (horizon = max_steps + 10 + 20,
    ``ignore_done``: settings the adapter leaves at LIBERO's defaults, so parity also shows they
    change nothing here) and seeded once; init states 0, 1, ... in order, each after
    ``env.reset()``; 10 warm-up steps of float32 ``[0]*6 + [-1]``; the prompt read from
    ``env.language_instruction`` (the BDDL file's instruction, not ``task.language``); then up
    to ``max_steps`` steps, success as soon as ``done``. Left out: the runner's 50 s wall-clock
    episode timeout (it depends on the machine) and its action chunking (a policy matter)."""
    import random

    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    random.seed(seed)
    np.random.seed(seed)
    suite = benchmark.get_benchmark_dict()[suite_name]()
    task = suite.get_task(task_index)
    init_states = suite.get_task_init_states(task_index)
    env = OffScreenRenderEnv(
        bddl_file_name=os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file),
        camera_heights=256,
        camera_widths=256,
        horizon=max_steps + WAIT_STEPS + 20,
        ignore_done=True,
    )
    env.seed(seed)
    warm_up = np.array(WAIT_ACTION, np.float32)
    results = []
    try:
        for k in range(episodes):
            env.reset()
            raw = env.set_init_state(init_states[k])
            for _ in range(WAIT_STEPS):
                raw, _, _, _ = env.step(warm_up)
            results.append(prompted_episode(env, raw, str(env.language_instruction), max_steps))
    finally:
        env.close()
    return results


def reference_plus_episodes(suite_name: str, names: list[str], max_steps: int, seed: int = 7) -> dict[str, dict]:
    """Each named LIBERO-Plus variant's one trial as LIBERO's loop runs it with LIBERO-Plus's README
    change (``num_trials_per_task = 1``), written from that description (openpi's
    ``examples/libero/main.py`` and OpenVLA-OFT's LIBERO evaluation script): per task a fresh
    ``OffScreenRenderEnv`` on ``get_task_bddl_file_path`` (256x256 cameras), ``env.seed(seed)``
    once, ``env.reset()``, ``env.set_init_state(init_states[0])``, 10 steps of ``[0]*6 + [-1]``, then
    up to ``max_steps`` steps prompted with ``task.language``, success as soon as ``done``; nothing
    else draws from numpy's global RNG in between, so the sensor noise draws where the runner's do.
    The package is imported with the environment's own config (``libero_plus_setup.import_liberoplus``), which changes
    only where it reads its files from."""
    from pytest_vlaeval.envs.libero_plus import suite_index
    from pytest_vlaeval.envs.libero_plus_setup import import_liberoplus

    _, OffScreenRenderEnv = import_liberoplus()
    suite, index_by_name = suite_index(suite_name)
    results = {}
    for name in names:
        index = index_by_name[name]
        task = suite.get_task(index)
        init_states = suite.get_task_init_states(index)
        env = OffScreenRenderEnv(
            bddl_file_name=suite.get_task_bddl_file_path(index), camera_heights=256, camera_widths=256
        )
        env.seed(seed)
        try:
            env.reset()
            raw = env.set_init_state(init_states[0])
            for _ in range(WAIT_STEPS):
                raw, _, _, _ = env.step(WAIT_ACTION)
            results[name] = prompted_episode(env, raw, task.language, max_steps)
        finally:
            env.close()
    return results
