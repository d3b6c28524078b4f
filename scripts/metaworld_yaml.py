"""Regenerate benchmarks/metaworld.yaml: Meta-World's 50 v3 tasks as LeRobot evaluates them.

Usage: python scripts/metaworld_yaml.py > benchmarks/metaworld.yaml

The task descriptions and difficulty groups are LeRobot's (``src/lerobot/envs/metaworld_config.json``
at huggingface/lerobot 7427f31, ``TASK_DESCRIPTIONS`` and ``DIFFICULTY_TO_TASKS``), kept here as data:
metaworld itself has neither. The tasks come in the order LeRobot runs MT50 as
``--env.task=easy,medium,hard,very_hard``: group by group, each in its listed order.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

MAX_STEPS = 500
"""Every sawyer env's ``max_path_length``: LeRobot's rollout runs ``_max_episode_steps = 500``
(its config's ``episode_length: 400`` is never passed on)."""

DIFFICULTY_TO_TASKS = {
    "easy": [
        "button-press-v3",
        "button-press-topdown-v3",
        "button-press-topdown-wall-v3",
        "button-press-wall-v3",
        "coffee-button-v3",
        "dial-turn-v3",
        "door-close-v3",
        "door-lock-v3",
        "door-open-v3",
        "door-unlock-v3",
        "drawer-close-v3",
        "drawer-open-v3",
        "faucet-close-v3",
        "faucet-open-v3",
        "handle-press-v3",
        "handle-press-side-v3",
        "handle-pull-v3",
        "handle-pull-side-v3",
        "lever-pull-v3",
        "plate-slide-v3",
        "plate-slide-back-v3",
        "plate-slide-back-side-v3",
        "plate-slide-side-v3",
        "reach-v3",
        "reach-wall-v3",
        "window-close-v3",
        "window-open-v3",
        "peg-unplug-side-v3",
    ],
    "medium": [
        "basketball-v3",
        "bin-picking-v3",
        "box-close-v3",
        "coffee-pull-v3",
        "coffee-push-v3",
        "hammer-v3",
        "peg-insert-side-v3",
        "push-wall-v3",
        "soccer-v3",
        "sweep-v3",
        "sweep-into-v3",
    ],
    "hard": ["assembly-v3", "hand-insert-v3", "pick-out-of-hole-v3", "pick-place-v3", "push-v3", "push-back-v3"],
    "very_hard": ["shelf-place-v3", "disassemble-v3", "stick-pull-v3", "stick-push-v3", "pick-place-wall-v3"],
}
"""LeRobot's groups: 28, 11, 6 and 5 tasks."""

TASK_DESCRIPTIONS = {
    "assembly-v3": "Pick up a nut and place it onto a peg",
    "basketball-v3": "Dunk the basketball into the basket",
    "bin-picking-v3": "Grasp the puck from one bin and place it into another bin",
    "box-close-v3": "Grasp the cover and close the box with it",
    "button-press-topdown-v3": "Press a button from the top",
    "button-press-topdown-wall-v3": "Bypass a wall and press a button from the top",
    "button-press-v3": "Press a button",
    "button-press-wall-v3": "Bypass a wall and press a button",
    "coffee-button-v3": "Push a button on the coffee machine",
    "coffee-pull-v3": "Pull a mug from a coffee machine",
    "coffee-push-v3": "Push a mug under a coffee machine",
    "dial-turn-v3": "Rotate a dial 180 degrees",
    "disassemble-v3": "Pick a nut out of a peg",
    "door-close-v3": "Close a door with a revolving joint",
    "door-lock-v3": "Lock the door by rotating the lock clockwise",
    "door-open-v3": "Open a door with a revolving joint",
    "door-unlock-v3": "Unlock the door by rotating the lock counter-clockwise",
    "hand-insert-v3": "Insert the gripper into a hole",
    "drawer-close-v3": "Push and close a drawer",
    "drawer-open-v3": "Open a drawer",
    "faucet-open-v3": "Rotate the faucet counter-clockwise",
    "faucet-close-v3": "Rotate the faucet clockwise",
    "hammer-v3": "Hammer a screw on the wall",
    "handle-press-side-v3": "Press a handle down sideways",
    "handle-press-v3": "Press a handle down",
    "handle-pull-side-v3": "Pull a handle up sideways",
    "handle-pull-v3": "Pull a handle up",
    "lever-pull-v3": "Pull a lever down 90 degrees",
    "peg-insert-side-v3": "Insert a peg sideways",
    "pick-place-wall-v3": "Pick a puck, bypass a wall and place the puck",
    "pick-out-of-hole-v3": "Pick up a puck from a hole",
    "reach-v3": "Reach a goal position",
    "push-back-v3": "Push the puck to a goal",
    "push-v3": "Push the puck to a goal",
    "pick-place-v3": "Pick and place a puck to a goal",
    "plate-slide-v3": "Slide a plate into a cabinet",
    "plate-slide-side-v3": "Slide a plate into a cabinet sideways",
    "plate-slide-back-v3": "Get a plate from the cabinet",
    "plate-slide-back-side-v3": "Get a plate from the cabinet sideways",
    "peg-unplug-side-v3": "Unplug a peg sideways",
    "soccer-v3": "Kick a soccer into the goal",
    "stick-push-v3": "Grasp a stick and push a box using the stick",
    "stick-pull-v3": "Grasp a stick and pull a box with the stick",
    "push-wall-v3": "Bypass a wall and push a puck to a goal",
    "reach-wall-v3": "Bypass a wall and reach a goal",
    "shelf-place-v3": "Pick and place a puck onto a shelf",
    "sweep-into-v3": "Sweep a puck into a hole",
    "sweep-v3": "Sweep a puck off the table",
    "window-open-v3": "Push and open a window",
    "window-close-v3": "Push and close a window",
}
"""The instruction LeRobot's rollout gives the policy (``observation["task"]``)."""

HEADER = """\
# Meta-World MT50 (metaworld 3.0.0, the 50 v3 tasks) as LeRobot evaluates it (lerobot-eval
# --env.type=metaworld, huggingface/lerobot 7427f31), in its own interpreter (gymnasium >= 1.1,
# numpy 2; MuJoCo 3.8.1 as LeRobot's lock pins it: MuJoCo versions change trajectories).
# Generated by scripts/metaworld_yaml.py; edit the script, not this file.
#
# Each task's env: MT1(task, seed=42), the task class with the corner2 camera moved to
# camera_position, set_task(train_tasks[0]), one reset, then object and goal positions drawn at
# every reset from the env's RNG, which env.seed(1000 + i) sets for episode i (every task restarts
# at 1000). The policy sees the 480x480 corner2 image flipped on both axes (pixels), the hand
# position and gripper opening (agent_pos) and LeRobot's task description; it returns 4 floats in
# [-1, 1]. 500 steps (the env's limit); success is info["success"] at any step, which ends the
# episode. LeRobot's docs recommend 10 episodes a task (500 for MT50). Its overall pc_success pools
# the episodes (easy weighs 28/50), not the mean of the four group rates.
"""


def benchmark_data() -> dict[str, Any]:
    """The benchmark file's content, in the order it is written."""
    tasks = [
        {
            "env_id": name,
            "split": "mt50",
            "difficulty": difficulty,
            "max_steps": MAX_STEPS,
            "instruction": TASK_DESCRIPTIONS[name],
        }
        for difficulty, names in DIFFICULTY_TO_TASKS.items()
        for name in names
    ]
    if sorted(t["env_id"] for t in tasks) != sorted(TASK_DESCRIPTIONS):
        raise SystemExit("the difficulty groups and the task descriptions name different tasks")
    return {
        "name": "metaworld",
        "title": "Meta-World",
        "version": "metaworld==3.0.0",
        "benchmark_commit": None,
        "env": {
            "factory": "pytest_vlaeval.envs.metaworld:make_env",
            "preflight": "pytest_vlaeval.envs.metaworld",
            "obs_type": "pixels_agent_pos",
            "camera_name": "corner2",
            "camera_position": [0.75, 0.075, 0.7],
            "image_size": 480,
            "mt1_seed": 42,
            "action_dim": 4,
            "policy_obs_keys": ["pixels", "agent_pos"],
            "filterwarnings": [
                "ignore:The pynvml package is deprecated:FutureWarning",
                "ignore:.*to get variables from other wrappers is deprecated:UserWarning",
            ],
        },
        # In an interpreter of its own: gymnasium >= 1.1 and numpy 2 clash with the other stacks'.
        "install": {
            "python": ["3.10", "3.13"],
            "steps": [
                {
                    "why": "Meta-World 3.0.0 as LeRobot's lock resolves it (mujoco 3.8.1: MuJoCo versions change "
                    "trajectories), gymnasium 1.3.0 and numpy 2.2, with packaging, which it imports undeclared",
                    "requirements": [
                        "metaworld==3.0.0",
                        "mujoco==3.8.1",
                        "gymnasium==1.3.0",
                        "numpy>=2.2,<2.3",
                        "packaging",
                    ],
                },
            ],
            "imports": ["metaworld", "mujoco", "gymnasium"],
            "system_packages": ["libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libosmesa6"],
            "own_interpreter": True,
            "record": ["metaworld", "mujoco", "gymnasium", "numpy"],
        },
        # LeRobot's eval_info.json: pc_success (success pooled over episodes, in percent) and
        # avg_max_reward (the mean over episodes of each episode's maximum step reward).
        "pooled_success_key": "pc_success",
        # A paper's "average" (SmolVLA's table: the mean of Easy/Medium/Hard/Very Hard), labelled apart.
        "mean_of_groups": "difficulty",
        "episode_extras": [{"field": "max_reward", "reduce": "mean", "summary": "avg_max_reward"}],
        # LeRobot's env (lerobot-eval --env.type=metaworld), whose processors a lerobot:PATH policy
        # uses, and the names it reads the observations by (its features_map: the one image is
        # observation.image); its eval_info.json names a task by its difficulty group and its index
        # there (--env.task=easy,medium,...), or, run alone, by its name (--env.task=push-v3 or
        # metaworld-push-v3).
        "lerobot": {
            "env_type": "metaworld",
            "features": {"pixels": "observation.image", "agent_pos": "observation.state"},
            "task_group": "difficulty",
            "single_task_prefixes": ["", "metaworld-"],
        },
        "protocol": {"start_seed": 1000, "episodes": 10},
        "axes": [
            {"field": "split", "label": "split"},
            {"field": "difficulty", "label": "difficulty", "summary": "sr_per_difficulty"},
        ],
        "tasks": tasks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    sys.stdout.write(HEADER + yaml.safe_dump(benchmark_data(), sort_keys=False, width=120))


if __name__ == "__main__":
    main()
