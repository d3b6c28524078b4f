"""MIKASA-Robo-VLA's own runner as the reference: ``benchmarking.run_episode`` on an env built the
way its ``make_benchmark_env`` builds one, fresh for each episode, on the CPU.

``render_backend="cpu"`` is the one addition the CPU path needs (the reference's default asks for
CUDA). The policy is anything with the reference's ``forward(obs)`` and ``chunk_size``.
"""

from __future__ import annotations

from typing import Any


def reference_episode(env_id: str, policy: Any, seed: int) -> tuple[bool, float, int]:
    """One episode of ``env_id`` on ``seed`` by the reference runner: success latch, return, steps."""
    import gymnasium as gym
    from mikasa_robo_suite.vla import benchmarking
    from mikasa_robo_suite.vla.utils.apply_wrappers import apply_mikasa_vla_wrappers

    from pytest_vlaeval.envs import vulkan

    vulkan.set_backend_env("cpu")
    vulkan.apply_cpu_patches()
    env = gym.make(
        env_id,
        num_envs=1,
        obs_mode=benchmarking.OBS_MODE,
        control_mode=benchmarking.CONTROL_MODE,
        reward_mode=benchmarking.REWARD_MODE,
        render_mode="all",
        sim_backend="cpu",
        render_backend="cpu",
    )
    env = apply_mikasa_vla_wrappers(env, include_overlays=False)
    try:
        result, _ = benchmarking.run_episode(env, policy, seed)
    finally:
        env.close()
    return result.success_once, result.episode_return, result.n_steps
