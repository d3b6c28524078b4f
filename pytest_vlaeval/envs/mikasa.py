"""MIKASA-Robo-VLA env factory: the canonical env settings and wrapper stack, behind the
plain-Python adapter interface that ``episode.run_episode`` drives.

Imported only inside workers that run MIKASA episodes: it pulls in torch, gymnasium, SAPIEN
and ManiSkill.
"""

from __future__ import annotations

import functools
import gc
from typing import Any

import numpy as np
import torch

from pytest_vlaeval.envs import render
from pytest_vlaeval.errors import AssetMissing, EnvError
from pytest_vlaeval.spec import Benchmark, Task


class MikasaEnv:
    """Adapter: numpy action in, plain Python reward/flags/success out."""

    def __init__(self, env: Any, render_backend: str) -> None:
        self.env = env
        self.render_backend = render_backend
        self.max_episode_steps = int(env.max_episode_steps)
        self.device = getattr(env.unwrapped, "device", None)

    def reset(self, *, seed: int, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
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
        from pytest_vlaeval.episodes.video import compose

        scene = self.env.unwrapped.render_rgb_array()[0].cpu().numpy()
        cameras = obs["rgb"][0].cpu().numpy()
        return compose(scene, cameras[..., :3], cameras[..., 3:6])

    def close(self) -> None:
        self.env.close()


def make_env(task: Task, benchmark: Benchmark, render_request: str) -> MikasaEnv:
    """Build ``task``'s canonical env: ``gym.make`` with the protocol's settings, then
    ``apply_mikasa_vla_wrappers(include_overlays=False)``."""
    backend = render.resolve_backend(render_request)
    render.set_backend_env(backend)
    if backend == "cpu":
        render.apply_cpu_patches()
    import gymnasium as gym

    _never_prompt_for_downloads()
    import mikasa_robo_suite.vla.memory_envs  # noqa: F401  (registers the env ids)
    from mikasa_robo_suite.vla.utils.apply_wrappers import apply_mikasa_vla_wrappers

    _keep_imports_out_of_the_collector()
    options = benchmark.env.options
    try:
        env = gym.make(
            task.env_id,
            num_envs=1,
            obs_mode=options["obs_mode"],
            control_mode=options["control_mode"],
            reward_mode=options["reward_mode"],
            render_mode=options["render_mode"],
            **render.make_kwargs(backend),
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
    return MikasaEnv(env, backend)


@functools.cache
def _keep_imports_out_of_the_collector() -> None:
    """ManiSkill calls ``gc.collect()`` at every reconfigure reset, so at every episode here, and
    walking the objects torch, SAPIEN and ManiSkill create at import took about 0.2 s of each
    (some 5 % of a short episode on a CPU). Those objects live as long as the process: move them,
    once, to the collector's permanent generation (``gc.freeze``), after one collection so that no
    garbage is frozen with them. Nothing simulated changes."""
    gc.collect()
    gc.freeze()


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
