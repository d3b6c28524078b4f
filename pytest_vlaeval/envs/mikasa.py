"""MIKASA-Robo-VLA env factory: the canonical env settings and wrapper stack, behind the
plain-Python adapter interface that ``episode.run_episode`` drives.

Imported only inside workers that run MIKASA episodes: it pulls in torch, gymnasium, SAPIEN
and ManiSkill.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pytest_vlaeval.benchmark.model import Benchmark, Task
from pytest_vlaeval.envs import render, vulkan
from pytest_vlaeval.envs.adapter import Adapter, ExtraValue, Step
from pytest_vlaeval.errors import AssetMissing, EnvError, env_call
from pytest_vlaeval.long_lived import freeze_survivors


class MikasaEnv(Adapter):
    """Adapter: numpy action in, plain Python reward/flags/success out."""

    def __init__(self, env: Any, render_backend: str) -> None:
        self.env = env
        self.render_backend = render_backend
        self.max_episode_steps = int(env.max_episode_steps)
        self.device = getattr(env.unwrapped, "device", None)

    def reset(self, *, seed: int, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: np.ndarray) -> Step:
        # ``action`` is the episode loop's fresh copy for this step, so the env may keep (and
        # zero in place on reset) the tensor that shares its memory.
        tensor = torch.as_tensor(action, dtype=torch.float32, device=self.device).reshape(1, -1)
        obs, reward, terminated, truncated, info = self.env.step(tensor)
        info = dict(info)
        info["success"] = bool(_first(info.get("success"), default=False))
        return (
            obs,
            float(_first(reward, default=0.0)),
            bool(_first(terminated, default=False)),
            bool(_first(truncated, default=False)),
            info,
        )

    def render_frame(self, obs: dict[str, Any]) -> np.ndarray:
        """The scene camera's render beside the policy's top and wrist cameras (for videos)."""
        from pytest_vlaeval.envs.frames import compose

        scene = self.env.unwrapped.render_rgb_array()[0].cpu().numpy()
        cameras = obs["rgb"][0].cpu().numpy()
        return compose(scene, cameras[..., :3], cameras[..., 3:6])

    def close(self) -> None:
        self.env.close()


class MikasaRows:
    """Up to ``num_envs`` seeds of a task in one ManiSkill GPU simulation (``num_envs=K``), as the
    rows of a lockstep group (``episodes.lockstep.RowEnvs``).

    Reset gives one seed per row, as ManiSkill seeds a vector env (``reset(seed=[...])``); a group
    shorter than K fills its unused rows with its last seed, steps them with zero actions and
    drops them, so every group runs in a simulator of the same size. Each row's observation keeps
    the lone env's leading axis of 1, so a policy sees the shapes it sees alone.
    """

    def __init__(self, env: Any, render_backend: str) -> None:
        self.env = env
        self.render_backend = render_backend
        self.num_envs = int(env.unwrapped.num_envs)
        self.max_episode_steps = int(env.max_episode_steps)
        self.device = getattr(env.unwrapped, "device", None)

    def reset(self, seeds: Sequence[int], options: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        padded = [*seeds, *[seeds[-1]] * (self.num_envs - len(seeds))]
        obs, info = env_call(self.env.reset, seed=padded, options=options)
        return [(_row_of(obs, i, self.num_envs), _row_of(info, i, self.num_envs)) for i in range(len(seeds))]

    def step(self, actions: Sequence[np.ndarray | None]) -> list[Step | None]:
        width = next(a.shape[-1] for a in actions if a is not None)
        batch = np.zeros((self.num_envs, width), dtype=np.float32)
        for i, action in enumerate(actions):
            if action is not None:
                batch[i] = action.reshape(-1)
        tensor = torch.as_tensor(batch, device=self.device)  # a fresh tensor per step, as alone
        obs, reward, terminated, truncated, info = env_call(self.env.step, tensor)
        rewards, terminations, truncations = _flat(reward), _flat(terminated), _flat(truncated)
        successes = _flat(info.get("success"))
        results: list[Step | None] = []
        for i, action in enumerate(actions):
            if action is None:
                results.append(None)
                continue
            row_info = _row_of(info, i, self.num_envs)
            row_info["success"] = bool(successes[i]) if successes.size else False
            row_obs = _row_of(obs, i, self.num_envs)
            results.append((row_obs, float(rewards[i]), bool(terminations[i]), bool(truncations[i]), row_info))
        return results

    def episode_extras(self, row: int) -> dict[str, ExtraValue]:
        return {}

    def close(self) -> None:
        self.env.close()


def _row_of(value: Any, row: int, rows: int) -> Any:
    """Row ``row`` of a batched value: tensors and arrays with a leading axis of ``rows`` keep a
    leading axis of 1 (as a lone env gives them), lists of ``rows`` give their item, mappings
    recurse, anything else is the same for every row."""
    if isinstance(value, dict):
        return {key: _row_of(item, row, rows) for key, item in value.items()}
    if (torch.is_tensor(value) or isinstance(value, np.ndarray)) and value.ndim and value.shape[0] == rows:
        return value[row : row + 1]
    if isinstance(value, (list, tuple)) and len(value) == rows and rows > 1:
        return value[row]
    return value


def _flat(value: Any) -> np.ndarray:
    """A per-row tensor or array as a flat numpy array (empty for None)."""
    if value is None:
        return np.zeros(0)
    if torch.is_tensor(value):
        value = value.detach().cpu().numpy()
    return np.asarray(value).reshape(-1)


def make_env(task: Task, benchmark: Benchmark, render_request: str, num_envs: int = 1) -> MikasaEnv | MikasaRows:
    """Build ``task``'s canonical env: ``gym.make`` with the protocol's settings, then
    ``apply_mikasa_vla_wrappers(include_overlays=False)``; with ``num_envs`` over 1, one GPU
    simulation of that many copies of the scene, as lockstep rows (``MikasaRows``)."""
    backend = render.resolve_backend(render_request)
    vulkan.set_backend_env(backend)
    if backend == "cpu":
        vulkan.apply_cpu_patches()
    import gymnasium as gym

    _never_prompt_for_downloads()
    import mikasa_robo_suite.vla.memory_envs  # noqa: F401  (registers the env ids)
    from mikasa_robo_suite.vla.utils.apply_wrappers import apply_mikasa_vla_wrappers

    _keep_imports_out_of_the_collector()
    options = benchmark.env.options
    if num_envs > 1 and backend not in benchmark.env.vector_backends:
        raise EnvError(f"num_envs={num_envs} needs ManiSkill's GPU simulation; the render backend is {backend}")
    try:
        env = gym.make(
            task.env_id,
            num_envs=num_envs,
            obs_mode=options["obs_mode"],
            control_mode=options["control_mode"],
            reward_mode=options["reward_mode"],
            render_mode=options["render_mode"],
            **vulkan.make_kwargs(backend),
        )
        env = apply_mikasa_vla_wrappers(env, include_overlays=False)
    except AssetMissing:
        raise
    except Exception as exc:
        raise EnvError(f"cannot build {task.env_id} ({backend} backend): {type(exc).__name__}: {exc}") from exc
    if int(env.max_episode_steps) != task.max_steps:
        env.close()
        raise EnvError(
            f"{task.env_id}: benchmark file says {task.max_steps} max steps, the env says {env.max_episode_steps}"
        )
    return MikasaRows(env, backend) if num_envs > 1 else MikasaEnv(env, backend)


@functools.cache
def _keep_imports_out_of_the_collector() -> None:
    """ManiSkill calls ``gc.collect()`` at every reconfigure reset, so at every episode here, and
    walking the objects torch, SAPIEN and ManiSkill create at import took about 0.2 s of each
    (some 5 % of a short episode on a CPU): once, before the first env, they leave the collector
    (``long_lived``), in the process that builds it: a worker, or a serial session's own (``evaluate()``
    runs its session in a child process). Nothing simulated changes."""
    freeze_survivors()


def _never_prompt_for_downloads() -> None:
    """ManiSkill asks on stdin before downloading a missing asset pack; a test run must not."""
    from mani_skill.utils import download_asset

    def refuse(message: str) -> bool:
        raise AssetMissing(
            f"{message.split(' Would you like')[0]} (run ManiSkill's downloader: python -m mani_skill.utils.download_asset)"
        )

    download_asset.prompt_yes_no = refuse


def _first(value: Any, *, default: Any) -> Any:
    """First element of a (1,)-shaped tensor or array, as a Python scalar."""
    if value is None:
        return default
    if torch.is_tensor(value):
        return value.reshape(-1)[0].item() if value.numel() else default
    array = np.asarray(value)
    return array.reshape(-1)[0].item() if array.size else default
