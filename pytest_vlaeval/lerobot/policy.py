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
the batch-of-one ``lerobot-eval`` computes. A policy that samples (Diffusion's noise) draws from
torch generator states of its own episode, the ones ``lerobot-eval --seed=SEED --eval.n_episodes=1``
starts its episode from (``seeding``), so an episode's actions are that run's, whatever ran before.

``LeRobotBatchedPolicy`` (``lerobot:PATH:batched``, the default on a GPU) computes the chunks that
the episodes of one call ask for in one forward pass (``chunks``), each episode keeping its own
copy and generators: a row's result is its own episode's, up to the last digits a batch moves.

Torch and LeRobot are imported once, when a checkpoint is loaded (``_load``), so that the module
stays importable without them.

The checkpoint directory is someone else's: before LeRobot reads its processor files, they are
checked against LeRobot's live registry (``processor_files``; the session checked them
already, and ``vlaeval serve`` relies on this one), so every step is a registered LeRobot step and
every state file is in the directory, which LeRobot then loads from the local folder it is given,
never from the hub.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.metadata
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.lerobot.processor_files import check_processor_files
from pytest_vlaeval.lerobot.threads import ThreadPlan, Threads, first_pass, worker_share
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.printable import terminal_safe

if TYPE_CHECKING:
    from pytest_vlaeval.policy.batched import BatchEpisode

BATCHED_TYPES = ("act", "diffusion")
"""The LeRobot policy types batched inference serves (``chunks.CHUNKS``)."""

DRAW_NOTHING = ("act",)
"""Policy types whose inference draws nothing from torch's generators (ACT's VAE runs in training
only): their episodes skip replaying the build's draws."""


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
    draws: Any
    """``seeding.BuildDraws``: the generators each episode starts from; None for a policy whose
    inference draws nothing."""
    chunks: Any
    """``chunks.Chunks`` of the policy's type, or None where batched inference does not serve it."""
    inputs: _Inputs
    split_checked: set[int] = field(default_factory=set)
    """The batch sizes whose split of the processors' output was checked (``_split_batch``)."""
    threads: Threads = field(default_factory=Threads)
    """The torch threads an episode's forward passes run on (``threads``), decided at the first."""


@functools.cache
def _load(path: str, env_type: str) -> _Loaded:
    """Load the checkpoint as ``lerobot-eval --policy.path=PATH --env.type=ENV`` does."""
    with _distributions_mapped_once():  # LeRobot's imports: transformers' and diffusers' calls
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.envs.configs import EnvConfig
        from lerobot.envs.factory import make_env_pre_post_processors
        from lerobot.envs.utils import preprocess_observation
        from lerobot.policies.factory import make_policy, make_pre_post_processors
        from lerobot.processor import ProcessorStepRegistry
        from lerobot.utils.constants import ACTION

        from pytest_vlaeval.lerobot.chunks import CHUNKS
        from pytest_vlaeval.lerobot.seeding import BuildDraws

    # The factory's module imported lerobot.policies, whose policies registered their steps: the
    # registry is every step make_pre_post_processors can build.
    check_processor_files(Path(path), ProcessorStepRegistry.list())
    torch.backends.cudnn.benchmark = True  # as lerobot-eval's eval_main sets them (CUDA only)
    torch.backends.cuda.matmul.allow_tf32 = True
    env_cfg = EnvConfig.get_choice_class(env_type)()
    policy_cfg = PreTrainedConfig.from_pretrained(path)
    policy_cfg.pretrained_path = Path(path)
    policy_cfg.device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = [torch.cuda.current_device()] if policy_cfg.device == "cuda" else []
    policy, draws = BuildDraws.record(lambda: make_policy(cfg=policy_cfg, env_cfg=env_cfg, rename_map={}), cuda)
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
        draws=None if policy.config.type in DRAW_NOTHING else draws,
        chunks=CHUNKS.get(policy.config.type),
        inputs=_Inputs.of(policy.config, env_type, tuple(key for key in env_cfg.features if key != ACTION)),
    )


@contextmanager
def _distributions_mapped_once() -> Iterator[None]:
    """``importlib.metadata.packages_distributions`` computed once inside, as it was after: LeRobot's
    imports call it in transformers and again in diffusers, each mapping every installed
    distribution, about a second in LeRobot's interpreter."""
    original = importlib.metadata.packages_distributions
    importlib.metadata.packages_distributions = functools.cache(original)
    try:
        yield
    finally:
        importlib.metadata.packages_distributions = original


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
    episode = copy.deepcopy(policy, shared)
    episode.reset()
    return episode


def lerobot_policy(path: str, env_type: str, batched: bool | None = None) -> LeRobotPolicy:
    """The policy for one episode (``LeRobotPolicy``), or for batches of them
    (``LeRobotBatchedPolicy``); ``batched`` None: batched on a GPU where the type allows, one row at
    a time on the CPU, where that keeps ``lerobot-eval``'s last digits."""
    if batched is None:
        loaded = _load(path, env_type)
        batched = loaded.device.startswith("cuda") and loaded.chunks is not None
    return LeRobotBatchedPolicy(path, env_type) if batched else LeRobotPolicy(path, env_type)


class LeRobotPolicy:
    """One episode's LeRobot policy: ``act`` returns the single action ``select_action`` gives."""

    chunk_size = 1
    batched = False

    def __init__(self, path: str, env_type: str) -> None:
        loaded = _load(path, env_type)
        self._loaded = loaded
        self._policy = _episode_copy(loaded.policy)
        self._generators: Any = None
        self._at_start = False
        """No step of the episode yet: its copy is as a fresh one."""
        self._pinned: ThreadPlan | None = None
        self.name = f"lerobot:{Path(path).name}"
        self.config = {
            "type": loaded.policy.config.type,
            "path": path,
            "sha256": loaded.digest,
            "env_type": env_type,
            "device": loaded.device,
            "batched": self.batched,
        }

    def reset(self, episode: EpisodeInfo) -> None:
        self._policy.reset()
        self._generators = _generators(self._loaded, episode.seed)
        self._at_start = True

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        loaded = self._loaded
        with _inference(loaded):
            observation = _policy_inputs(loaded, [obs])[0]
            with self._generators.installed() if self._generators else nullcontext(), loaded.torch.inference_mode():
                action = self._select(observation)
            self._at_start = False
            return _env_action(loaded, action)

    def _select(self, observation: dict[str, Any]) -> Any:
        """``select_action`` on the process's torch threads: the first forward pass of the process
        decides them (``threads.first_pass``), where a worker on the CPU has fewer cores than torch's
        default count; this episode's copy gets the plan's pins before its first pass on them."""
        loaded, threads = self._loaded, self._loaded.threads
        if not threads.decided and self._at_start:
            threads.decided = True
            share = worker_share(loaded.policy.config.type) if loaded.device == "cpu" else None
            if share is not None:
                action, plan = first_pass(self._policy, lambda: _episode_copy(loaded.policy), observation, share)
                if plan is not None:
                    threads.plan = plan  # before the share: a pass between the two runs on the default count
                    loaded.torch.set_num_threads(plan.share)
                return action  # on the default count: the pins go on this copy at its next pass
        plan = threads.plan
        if plan is None:
            return self._policy.select_action(observation)
        if self._pinned is not plan:
            plan.pin(self._policy)
            self._pinned = plan
        with plan.running(observation):
            return self._policy.select_action(observation)


class LeRobotBatchedPolicy(LeRobotPolicy):
    """Episodes in batches (``act_batch``): each keeps its own copy of the policy and its own
    generators in its ``state``, and the chunks the rows of a call ask for are one forward pass."""

    batched = True

    def __init__(self, path: str, env_type: str) -> None:
        super().__init__(path, env_type)
        if self._loaded.chunks is None:
            raise PolicyError(
                f"lerobot:{path}: batched inference serves {' and '.join(BATCHED_TYPES)} checkpoints, "
                f"not {self.config['type']}; leave out ':batched'"
            )

    def open_episode(self, episode: BatchEpisode) -> None:
        episode.state["policy"] = _episode_copy(self._loaded.policy)
        episode.state["generators"] = _generators(self._loaded, episode.info.seed)

    def act_batch(self, episodes: Sequence[BatchEpisode], observations: Sequence[dict[str, Any]]) -> np.ndarray:
        loaded, chunks = self._loaded, self._loaded.chunks
        policies = [episode.state["policy"] for episode in episodes]
        with _inference(loaded):
            inputs = [
                chunks.model_input(policy, row)
                for policy, row in zip(policies, _policy_inputs(loaded, observations), strict=True)
            ]
            asking = [row for row, given in enumerate(inputs) if given is not None]
            new: list[Any] = [None] * len(episodes)
            if asking:
                stacked = {key: loaded.torch.cat([inputs[row][key] for row in asking]) for key in inputs[asking[0]]}
                with loaded.torch.inference_mode():  # as select_action runs in lerobot-eval
                    predicted = chunks.predict(
                        loaded.policy, stacked, [episodes[row].state["generators"] for row in asking]
                    )
                for index, row in enumerate(asking):
                    new[row] = predicted[index : index + 1]
            actions = [chunks.next_action(policy, chunk) for policy, chunk in zip(policies, new, strict=True)]
            return _env_action(loaded, loaded.torch.cat(actions))[:, None]


def _generators(loaded: _Loaded, seed: int) -> Any:
    """``seeding.EpisodeGenerators`` of the episode with ``seed``: where ``lerobot-eval --seed=SEED``
    starts its first episode; None for a policy that draws nothing."""
    return loaded.draws.episode(seed) if loaded.draws is not None else None


@contextmanager
def _inference(loaded: _Loaded) -> Iterator[None]:
    """What lerobot-eval runs the whole rollout under: no_grad, and autocast with use_amp (and
    ``select_action`` in inference mode, less bookkeeping a tensor than no_grad: ``act`` and
    ``act_batch`` add it there)."""
    torch = loaded.torch
    autocast = torch.autocast(device_type=loaded.device.partition(":")[0]) if loaded.amp else nullcontext()
    with torch.no_grad(), autocast:
        yield


def _policy_inputs(loaded: _Loaded, observations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The observations of a call's episodes as ``select_action`` takes each (a batch of one): the
    processors run once on them stacked, as ``lerobot-eval``'s vector env runs them, then the batch
    is split into its rows. Every step works element by element (images to [0, 1], normalisation), so
    a row is what its own call would give. Rows of another layout (a served batch's other clients:
    other keys, shapes or dtypes, which stacking would drop or convert) are stacked apart."""
    if len(observations) == 1:  # an episode alone, every step of the exact path: nothing to group
        return _split_batch(loaded, observations)
    rows: list[dict[str, Any]] = [{}] * len(observations)
    by_layout: dict[tuple[Any, ...], list[int]] = {}
    for index, obs in enumerate(observations):
        by_layout.setdefault(_layout(obs), []).append(index)
    for members in by_layout.values():
        for index, row in zip(members, _split_batch(loaded, [observations[i] for i in members]), strict=True):
            rows[index] = row
    return rows


def _layout(obs: dict[str, Any]) -> tuple[Any, ...]:
    """What observations must share to be stacked: the keys of what ``_stacked`` stacks, and each
    array's shape and dtype."""
    return tuple(
        (key, _layout(value) if isinstance(value, dict) else (np.shape(value), np.asarray(value).dtype.str))
        for key, value in sorted(_stackable(obs))
    )


def _split_batch(loaded: _Loaded, observations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Observations of one layout processed stacked and split into rows; the first stacked call of each
    size checks that the processors' output splits so (``_check_split``)."""
    batch = _processed(loaded, observations)
    rows = [_row(batch, row, len(observations)) for row in range(len(observations))]
    if len(observations) > 1 and len(observations) not in loaded.split_checked:
        _check_split(_processed(loaded, observations[:1]), rows[0])
        loaded.split_checked.add(len(observations))
    return rows


def _processed(loaded: _Loaded, observations: Sequence[dict[str, Any]]) -> Any:
    """The observations stacked and passed through the checkpoint's processors, as one batch."""
    observation = loaded.preprocess_observation(_stacked(observations))
    observation["task"] = [obs.get("instruction", "") for obs in observations]
    observation = loaded.env_preprocessor(observation)
    loaded.inputs.check(observation, observations[0])
    return loaded.preprocessor(observation)


KEYS_SHOWN = 8
"""The most of an observation's keys an error names (a client may send any number)."""

EVERY_IMAGE = ("act", "diffusion", "multi_task_dit", "vqbet")
"""Policy types whose model reads each of its image inputs; the others take the cameras given
(pi0 and SmolVLA fill the rest, GR00T stacks those there)."""


@dataclass(frozen=True)
class _Inputs:
    """What a checkpoint takes of an observation in LeRobot's keys, read once from its config, and
    the observation of LeRobot's env they come from (named when they are not there)."""

    keys: tuple[str, ...]
    images: frozenset[str]
    every_image: bool
    """Whether the model reads each image (else one of them is enough: it takes the cameras given)."""
    env_type: str
    env_observation: tuple[str, ...]

    @classmethod
    def of(cls, config: Any, env_type: str, env_observation: tuple[str, ...]) -> _Inputs:
        return cls(
            tuple(config.input_features),
            frozenset(config.image_features),
            config.type in EVERY_IMAGE,
            env_type,
            env_observation,
        )

    def check(self, observation: dict[str, Any], raw: dict[str, Any]) -> None:
        """``PolicyError`` unless ``observation``, in LeRobot's keys and before the checkpoint's own
        processors (which may pack or drop them), holds each input the checkpoint needs: an
        observation of another layout (a served client of another benchmark) would otherwise fail
        deep in the policy, on a bare key. ``raw`` is the observation as the client sent it, named
        in the error."""
        absent = [key for key in self.keys if key not in observation]
        if not self.every_image and any(key in observation for key in self.images):
            absent = [key for key in absent if key not in self.images]
        if absent:
            sent = [terminal_safe(str(key)) for key in itertools.islice(raw, KEYS_SHOWN)]
            more = ", ..." if len(raw) > KEYS_SHOWN else ""
            raise PolicyError(
                f"the observation ({', '.join(sent)}{more}) gives the checkpoint no "
                f"{', '.join(terminal_safe(key) for key in absent)}: its inputs come from LeRobot's "
                f"{self.env_type} observation ({', '.join(self.env_observation)}); serve it to episodes "
                "of the benchmark it was trained on"
            )


def _stacked(observations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One episode's observation after another along a leading batch axis; a dict of images
    (several cameras) keyed as it is. Strings are left out (the instruction, openpi's ``prompt``):
    LeRobot's env observations hold none, the task comes as ``task``, and its processing takes
    every array it is given for a tensor."""
    return {
        key: _stacked([obs[key] for obs in observations])
        if isinstance(value, dict)
        else _leading_axis([obs[key] for obs in observations])
        for key, value in _stackable(observations[0])
    }


def _leading_axis(values: Sequence[Any]) -> np.ndarray:
    """The values stacked along a new leading axis; one value is viewed so, not copied."""
    return np.asarray(values[0])[None] if len(values) == 1 else np.stack([np.asarray(value) for value in values])


def _stackable(obs: dict[str, Any]) -> list[tuple[str, Any]]:
    """The items of an observation that are stacked: all but its strings."""
    return [(key, value) for key, value in obs.items() if not isinstance(value, str)]


def _row(batch: Any, row: int, rows: int) -> Any:
    """Row ``row`` of a processed batch of ``rows``, as a batch of one: a tensor's slice, a list's
    item (the task strings), a dict's rows; anything else is the batch's own."""
    if isinstance(batch, dict):
        return {key: _row(value, row, rows) for key, value in batch.items()}
    if isinstance(batch, list) and len(batch) == rows:
        return batch[row : row + 1]
    if hasattr(batch, "shape") and batch.ndim and batch.shape[0] == rows:
        return batch[row : row + 1]
    return batch


def _check_split(alone: Any, split: Any) -> None:
    """``PolicyError`` unless the first row processed alone has the shapes that row has when split from
    a batch: ``_row`` takes a value for batch-first by its leading size, which a processor's output of
    another layout could have by chance."""
    own, taken = _shapes(alone), _shapes(split)
    if own != taken:
        key = next(key for key in sorted(own.keys() | taken.keys()) if own.get(key) != taken.get(key))
        raise PolicyError(
            f"the checkpoint's processors give {key!r} a layout that does not split by episode "
            f"({own.get(key)} for one episode, {taken.get(key)} split from a batch): batched inference "
            "cannot serve it; leave out ':batched'"
        )


def _shapes(value: Any, key: str = "") -> dict[str, Any]:
    """Each value of a processed batch by its dotted key: a tensor's shape, a list's length, else its type."""
    if isinstance(value, dict):
        return {
            name: shape for k, v in value.items() for name, shape in _shapes(v, f"{key}.{k}" if key else str(k)).items()
        }
    if isinstance(value, list):
        return {key: ("list", len(value))}
    if hasattr(value, "shape"):
        return {key: tuple(value.shape)}
    return {key: type(value).__name__}


def _env_action(loaded: _Loaded, action: Any) -> np.ndarray:
    """``select_action``'s actions (B, D) as the env takes them."""
    action = loaded.postprocessor(action)
    action = loaded.env_postprocessor({loaded.action_key: action})[loaded.action_key]
    return action.to("cpu").numpy()
