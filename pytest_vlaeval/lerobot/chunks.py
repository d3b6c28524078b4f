"""Batched inference for LeRobot's chunking policies: ``select_action`` split where the model runs,
so that the episodes whose action queues ran dry at one call share one forward pass.

``select_action`` of ACT and Diffusion keeps an episode's queue of actions (and Diffusion its
history of ``n_obs_steps`` observations, ACT with temporal ensembling its ensembler) and predicts a
chunk when the queue is empty. Here each episode's own copy of the policy keeps that state as
``select_action`` would (``model_input`` then ``next_action``, in its order), and the chunks the
rows ask for at one call are one ``predict`` on their stacked inputs; Diffusion's noise comes from
each row's own generator. A row's actions thus depend on its own episode alone, up to what the
batch does to the floating point of the forward pass.

Imported where a checkpoint is loaded (``policy._load``), in LeRobot's interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from lerobot.policies.utils import get_device_from_parameters, get_dtype_from_parameters, populate_queues
from lerobot.utils.constants import ACTION, OBS_IMAGES, OBS_STATE

from pytest_vlaeval.lerobot.seeding import EpisodeGenerators

Batch = dict[str, Any]


class Chunks(Protocol):
    """A policy type's ``select_action``, with the chunk prediction batched across episodes."""

    def model_input(self, policy: Any, batch: Batch) -> Batch | None:
        """Take the episode's observation into its state; the model's input when it needs a new chunk."""

    def predict(self, model: Any, inputs: Batch, generators: Sequence[EpisodeGenerators]) -> torch.Tensor:
        """The chunks of the stacked ``inputs`` (B, steps, D), row i drawing from ``generators[i]``."""

    def next_action(self, policy: Any, chunk: torch.Tensor | None) -> torch.Tensor:
        """The episode's action (1, D), its new chunk (1, steps, D) taken in first if it asked."""


class ActChunks:
    """ACT (``ACTPolicy.select_action``): a chunk when the action queue is empty, or every step
    into the temporal ensembler. It draws nothing at inference."""

    def model_input(self, policy: Any, batch: Batch) -> Batch | None:
        if policy.config.temporal_ensemble_coeff is None and policy._action_queue:
            return None
        return {key: batch[key] for key in policy.config.input_features}

    def predict(self, model: Any, inputs: Batch, generators: Sequence[EpisodeGenerators]) -> torch.Tensor:
        return model.predict_action_chunk(inputs)

    def next_action(self, policy: Any, chunk: torch.Tensor | None) -> torch.Tensor:
        if policy.config.temporal_ensemble_coeff is not None:
            return policy.temporal_ensembler.update(chunk)
        if chunk is not None:
            policy._action_queue.extend(chunk[:, : policy.config.n_action_steps].transpose(0, 1))
        return policy._action_queue.popleft()


class DiffusionChunks:
    """Diffusion (``DiffusionPolicy.select_action``): the observation history filled as LeRobot
    fills it, a chunk from it when the action queue is empty, its sampling noise (the prior, and
    DDPM's noise at each denoising step) drawn from each row's own generator, as ``lerobot-eval``
    at batch size 1 draws it from torch's global one."""

    def model_input(self, policy: Any, batch: Batch) -> Batch | None:
        batch = {key: value for key, value in batch.items() if key != ACTION}  # select_action pops it
        if policy.config.image_features:
            batch[OBS_IMAGES] = torch.stack([batch[key] for key in policy.config.image_features], dim=-4)
        policy._queues = populate_queues(policy._queues, batch)
        if policy._queues[ACTION]:
            return None
        return {key: torch.stack(list(policy._queues[key]), dim=1) for key in batch if key in policy._queues}

    def predict(self, model: Any, inputs: Batch, generators: Sequence[EpisodeGenerators]) -> torch.Tensor:
        """``DiffusionModel.generate_actions`` with a generator per row (diffusers' schedulers take a
        list of them, one a row); its prior drawn as ``conditional_sample`` draws it, a row at a time."""
        diffusion, config = model.diffusion, model.config
        device, dtype = get_device_from_parameters(diffusion), get_dtype_from_parameters(diffusion)
        rows = [episode.generator(device) for episode in generators]
        prior = (1, config.horizon, config.action_feature.shape[0])
        noise = torch.cat([torch.randn(prior, dtype=dtype, device=device, generator=row) for row in rows])
        batch_size, n_obs_steps = inputs[OBS_STATE].shape[:2]
        global_cond = diffusion._prepare_global_conditioning(inputs)
        actions = diffusion.conditional_sample(batch_size, global_cond=global_cond, generator=rows, noise=noise)
        for episode, row in zip(generators, rows, strict=True):
            episode.keep(row)
        start = n_obs_steps - 1
        return actions[:, start : start + config.n_action_steps]

    def next_action(self, policy: Any, chunk: torch.Tensor | None) -> torch.Tensor:
        if chunk is not None:
            policy._queues[ACTION].extend(chunk.transpose(0, 1))
        return policy._queues[ACTION].popleft()


CHUNKS: dict[str, Chunks] = {"act": ActChunks(), "diffusion": DiffusionChunks()}
"""By LeRobot policy type: the types batched inference serves (``policy.BATCHED_TYPES``)."""
