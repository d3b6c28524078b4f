"""Meta-World as LeRobot evaluates it, outside the plugin, and a deterministic policy that sees only
what LeRobot's policies see.

``reference_episodes`` is a rollout loop written from LeRobot's ``MetaworldEnv``
(``src/lerobot/envs/metaworld.py``) and its ``rollout``/``eval_policy``
(``src/lerobot/scripts/lerobot_eval.py``) for one env per task and a batch of one, as
``lerobot-eval --env.type=metaworld --eval.batch_size=1`` runs it:

- the env: ``MT1(task, seed=42)``, the task's class with ``render_mode="rgb_array"`` and the
  ``corner2`` camera, ``set_task(train_tasks[0])``, camera 2 moved to (0.75, 0.075, 0.7), one plain
  reset, then ``_freeze_rand_vec = False`` and ``seeded_rand_vec = True``;
- episode i: ``env.seed(seed)`` then ``env.reset(seed=seed)``, seeds 1000 + i, the task's episodes
  in order in that one env;
- each step: the policy's action as float32 into ``env.step``, ``success = bool(info["success"])``,
  ``terminated = done or success``; on ``terminated`` LeRobot's env resets itself at once (no seed),
  which the next episode's seeded reset must make irrelevant; the rollout stops at the first
  terminated step or at the step limit (the env's 500, or less for a short test);
- the observation: the render flipped on both axes (``pixels``), the first 4 raw entries
  (``agent_pos``), and the task description as the instruction;
- per episode: success if any step's ``info["success"]``, ``max_reward`` the largest step reward.

It must run in Meta-World's interpreter (``python metaworld_reference.py REQUEST.json OUT.json``).

``Probe`` is a deterministic policy (``--policy=metaworld_reference:Probe``) whose action is a
function of ``agent_pos`` and a grid of image pixels. With ``$VLAEVAL_DIGEST_DIR`` set it writes
each episode's digest (a SHA-256 over every observation it saw and every action it took, the
first image's hash and the outcome) to ``<task>-<seed>.json`` there, for bit-for-bit comparison
with the reference loop. ``expert`` actions (``reference_episodes(..., policy="expert")``) come from
metaworld's scripted policies on the full raw state, to reach successes in a few dozen steps.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, ClassVar

import numpy as np
from episode_digest import DigestingPolicy, EpisodeDigest

POLICY_KEYS = ("pixels", "agent_pos")
CAMERA = "corner2"
CAMERA_POSITION = (0.75, 0.075, 0.7)
MT1_SEED = 42


class Probe(DigestingPolicy):
    """A deterministic policy on LeRobot's Meta-World observation: each action entry a bounded
    function of the hand position, the gripper opening and the mean colour of a 5x5 grid of pixels,
    so a wrong image or state changes the trajectory from that step on. Keeps no state across steps."""

    KEYS, IMAGE = POLICY_KEYS, "pixels"
    config: ClassVar[dict[str, Any]] = {"kind": "scripted", "inputs": list(POLICY_KEYS)}

    def decide(self, obs: dict[str, Any]) -> np.ndarray:
        return probe_action(obs)


def probe_action(obs: dict[str, Any]) -> np.ndarray:
    """``Probe``'s action for one observation, float32 in [-1, 1]."""
    state = np.asarray(obs["agent_pos"], dtype=np.float64)
    pixels = np.asarray(obs["pixels"])
    colour = pixels[48::96, 48::96].astype(np.float64).mean(axis=(0, 1)) / 255.0
    return np.array(
        [
            np.sin(40.0 * state[1] + 6.0 * colour[0]),
            np.cos(40.0 * state[0] + 6.0 * colour[1]),
            np.sin(30.0 * state[2] - 6.0 * colour[2]),
            np.cos(5.0 * state[3] + 2.0 * colour.sum()),
        ],
        dtype=np.float32,
    )


def build_env(task: str) -> Any:
    """The sawyer env as LeRobot's ``MetaworldEnv._ensure_env`` builds it."""
    import metaworld

    mt1 = metaworld.MT1(task, seed=MT1_SEED)
    env = mt1.train_classes[task](render_mode="rgb_array", camera_name=CAMERA)
    env.set_task(mt1.train_tasks[0])
    env.model.cam_pos[2] = list(CAMERA_POSITION)
    env.reset()
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    return env


def lerobot_observation(env: Any, raw: np.ndarray) -> dict[str, Any]:
    """``pixels_agent_pos``: the corner2 render flipped on both axes, and the first 4 raw entries."""
    image = np.flip(env.render(), (0, 1)).copy()
    return {"pixels": image, "agent_pos": raw[:4]}


def reference_episodes(
    task: str, instruction: str, seeds: list[int], max_steps: int, policy: str = "probe"
) -> list[dict[str, Any]]:
    """One episode per seed, in order, in one env, as LeRobot's rollout runs a batch of one."""
    env = build_env(task)
    expert = None
    if policy == "expert":
        from metaworld.policies import ENV_POLICY_MAP

        expert = ENV_POLICY_MAP[task]()
    results = []
    try:
        for seed in seeds:
            env.seed(seed)
            raw, _ = env.reset(seed=seed)
            obs = lerobot_observation(env, raw)
            digest = EpisodeDigest(POLICY_KEYS, "pixels")
            rewards: list[float] = []
            success = False
            while len(rewards) < max_steps:
                view = {**obs, "instruction": instruction}
                digest.observe(view)
                if expert is not None:
                    action = np.asarray(expert.get_action(raw), dtype=np.float32)
                else:
                    action = probe_action(view)
                digest.act(action)
                raw, reward, done, truncated, info = env.step(action)
                obs = lerobot_observation(env, raw)
                rewards.append(float(reward))
                step_success = bool(info.get("success", 0))
                success = success or step_success
                if done or step_success:
                    env.reset()  # LeRobot's env resets itself on terminated, without a seed
                    break
                if truncated:
                    break
            total = 0.0
            for reward in rewards:
                total += reward
            digest.outcome(success, total, len(rewards))
            results.append({"task": task, "seed": seed, **digest.result(), "max_reward": max(rewards)})
    finally:
        env.close()
    return results


def main(argv: list[str]) -> int:
    """``REQUEST.json OUT.json``: the request holds ``tasks`` (``[name, instruction]`` pairs),
    ``seeds``, ``max_steps`` and optionally ``policy``; the output the episodes, task by task."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    with open(argv[0], encoding="utf-8") as stream:
        request = json.load(stream)
    episodes = []
    for task, instruction in request["tasks"]:
        episodes += reference_episodes(
            task, instruction, list(request["seeds"]), int(request["max_steps"]), request.get("policy", "probe")
        )
    with open(argv[1], "w", encoding="utf-8") as stream:
        json.dump(episodes, stream)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
