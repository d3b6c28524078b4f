"""A LeRobot pretrained-model directory as a policy, run the way ``lerobot-eval`` runs it.

Imported only in LeRobot's interpreter (``vlaeval install lerobot``), where the session's policy
server builds it for ``--policy=lerobot:PATH``. Each step does what ``lerobot-eval``'s rollout does
at ``--eval.batch_size=1``: LeRobot's ``preprocess_observation`` on the benchmark's observation
(images HWC uint8 to CHW float in [0, 1], ``agent_pos`` to ``observation.state``), the task string
the policy is given, the env's processors (``EnvConfig.get_env_processors``), the checkpoint's own
pre-processor (normalisation), ``select_action`` under ``torch.no_grad``, then the post-processors
back to an action.

Each episode gets its own instance: a deep copy sharing the loaded parameters and buffers, so its
action queue, observation history or temporal ensembler are its alone, and a row's forward pass is
the batch-of-one ``lerobot-eval`` computes (a batch of several moves the last digits). A policy
that samples (Diffusion's noise) draws from a torch generator state of its own episode, seeded by
the task and seed, so an episode's actions never depend on which episodes ran before it.

Torch and LeRobot are imported once, when a checkpoint is loaded (``_load``), so that the module
stays importable without them.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import zlib
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from pytest_vlaeval.policy.contract import EpisodeInfo


@dataclass(frozen=True)
class _Loaded:
    """What one checkpoint loads once per server: the policy and the four processor pipelines, and
    what each step calls of torch and LeRobot."""

    torch: Any
    preprocess_observation: Any
    """LeRobot's ``envs.utils.preprocess_observation``."""
    action_key: str
    """LeRobot's ``ACTION``: the key of the action in what the env post-processor takes and gives."""
    policy: Any
    preprocessor: Any
    postprocessor: Any
    env_preprocessor: Any
    env_postprocessor: Any
    device: str
    amp: bool
    """``use_amp``: lerobot-eval runs the policy under ``torch.autocast`` on its device."""
    digest: str


@cache
def _load(path: str, env_type: str) -> _Loaded:
    """Load the checkpoint as ``lerobot-eval --policy.path=PATH --env.type=ENV`` does."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.envs.configs import EnvConfig
    from lerobot.envs.factory import make_env_pre_post_processors
    from lerobot.envs.utils import preprocess_observation
    from lerobot.policies.factory import make_policy, make_pre_post_processors
    from lerobot.utils.constants import ACTION

    torch.backends.cudnn.benchmark = True  # as lerobot-eval's eval_main sets them (CUDA only)
    torch.backends.cuda.matmul.allow_tf32 = True
    env_cfg = EnvConfig.get_choice_class(env_type)()
    policy_cfg = PreTrainedConfig.from_pretrained(path)
    policy_cfg.pretrained_path = Path(path)
    policy_cfg.device = "cuda" if torch.cuda.is_available() else "cpu"
    policy = make_policy(cfg=policy_cfg, env_cfg=env_cfg, rename_map={})
    policy.eval()
    device = str(policy.config.device)
    preprocessor, postprocessor = make_pre_post_processors(
        policy_cfg=policy_cfg,
        pretrained_path=path,
        preprocessor_overrides={
            "device_processor": {"device": device},
            "rename_observations_processor": {"rename_map": {}},
        },
    )
    env_preprocessor, env_postprocessor = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=policy_cfg)
    amp = bool(getattr(policy_cfg, "use_amp", False))
    return _Loaded(
        torch=torch,
        preprocess_observation=preprocess_observation,
        action_key=ACTION,
        policy=policy,
        preprocessor=preprocessor,
        postprocessor=postprocessor,
        env_preprocessor=env_preprocessor,
        env_postprocessor=env_postprocessor,
        device=device,
        amp=amp,
        digest=_weights_digest(path),
    )


def _weights_digest(path: str) -> str:
    """What the checkpoint's files hold (config and weights), so a run never mixes two trainings
    saved at one path: the record's policy config carries it, and the run's policy file refuses
    episodes of another."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        with open(Path(path) / name, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def _episode_copy(policy: Any) -> Any:
    """A copy of ``policy`` whose episode state is its own and whose tensors are the original's."""
    shared = {id(t): t for t in itertools.chain(policy.parameters(), policy.buffers())}
    return copy.deepcopy(policy, shared)


class LeRobotPolicy:
    """One episode's LeRobot policy: ``act`` returns the single action ``select_action`` gives."""

    chunk_size = 1

    def __init__(self, path: str, env_type: str) -> None:
        loaded = _load(path, env_type)
        self._loaded = loaded
        self._policy = _episode_copy(loaded.policy)
        self._rng_state: Any = None
        self.name = f"lerobot:{Path(path).name}"
        self.config = {
            "type": loaded.policy.config.type,
            "path": path,
            "sha256": loaded.digest,
            "env_type": env_type,
            "device": loaded.device,
        }

    def reset(self, episode: EpisodeInfo) -> None:
        torch = self._loaded.torch
        self._policy.reset()
        with torch.random.fork_rng(devices=self._devices()):
            torch.manual_seed(_torch_seed(episode))
            self._rng_state = _rng_states(torch, self._devices())

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        loaded = self._loaded
        torch, action_key = loaded.torch, loaded.action_key
        # lerobot-eval runs the whole rollout under no_grad, and under autocast with use_amp.
        autocast = torch.autocast(device_type=loaded.device.partition(":")[0]) if loaded.amp else nullcontext()
        with torch.no_grad(), autocast:
            arrays = {key: _batched(value) for key, value in obs.items() if key != "instruction"}
            observation = loaded.preprocess_observation(arrays)
            observation["task"] = [obs.get("instruction", "")]
            observation = loaded.env_preprocessor(observation)
            observation = loaded.preprocessor(observation)
            with torch.random.fork_rng(devices=self._devices()):
                _set_rng_states(torch, self._rng_state)
                action = self._policy.select_action(observation)
                self._rng_state = _rng_states(torch, self._devices())
            action = loaded.postprocessor(action)
            action = loaded.env_postprocessor({action_key: action})[action_key]
        return action.to("cpu").numpy()

    def _devices(self) -> list[int]:
        """The CUDA device whose generator the policy draws from, if it runs on one."""
        device = self._loaded.device
        return [int(device.partition(":")[2] or 0)] if device.startswith("cuda") else []


def _rng_states(torch: Any, devices: list[int]) -> tuple[Any, dict[int, Any]]:
    """Torch's generator states now: the CPU's and each listed CUDA device's."""
    return torch.get_rng_state(), {d: torch.cuda.get_rng_state(d) for d in devices}


def _set_rng_states(torch: Any, states: tuple[Any, dict[int, Any]]) -> None:
    cpu, cuda = states
    torch.set_rng_state(cpu)
    for device, state in cuda.items():
        torch.cuda.set_rng_state(state, device)


def _batched(value: Any) -> Any:
    """An observation array with the leading batch axis of one a vector env gives; a dict of
    images (several cameras) keyed as it is."""
    if isinstance(value, dict):
        return {key: _batched(item) for key, item in value.items()}
    return np.asarray(value)[None]


def _torch_seed(episode: EpisodeInfo) -> int:
    """The episode's own torch seed: its task and seed, nothing that ran before it."""
    return (episode.seed * 0x9E3779B1 + zlib.crc32(episode.task.encode())) % 2**63
