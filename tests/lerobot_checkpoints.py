"""Randomly initialised LeRobot checkpoints for the parity tests: no weights can be downloaded, so the
tests build their own, through LeRobot's own API, and evaluate them with both ``lerobot-eval`` and
this plugin.

Run it in LeRobot's interpreter::

    python lerobot_checkpoints.py --env pusht --policy act --out DIR

It writes what ``lerobot-eval --policy.path=DIR`` loads: the policy's ``save_pretrained`` output
(``config.json``, ``model.safetensors``) and its pre- and post-processors' own ``save_pretrained``
output (``policy_preprocessor.json``, ``policy_postprocessor.json`` and their normaliser state). The
weights come from ``torch`` seeded with ``--seed`` (0 unless told), so the same command writes the
same checkpoint. The vision backbone starts from random weights too (no ImageNet download).

The features are the ones LeRobot's env wrappers give the policy (``envs/configs.py`` and
``preprocess_observation``): Push-T a 96x96 ``observation.image`` and a 2-vector
``observation.state`` (the pusher's position in 0..512), its action a 2-vector target in the same
frame; Meta-World a 480x480 ``observation.image`` and the first 4 entries of the raw state, its
action a 4-vector in [-1, 1]; ALOHA the 480x640 top camera as ``observation.images.top`` and the 14
joint positions, its action 14 joint targets; LIBERO both 360x360 cameras as
``observation.images.image`` and ``image2`` and the 8-vector state its env processor makes (eef
position, axis-angle, gripper), its action a 7-vector in [-1, 1]. The normalisation statistics are stated below, not measured: a random
policy's outputs are near zero, so mean/std (or min/max) put its actions around the workspace's
centre, moving enough to change the reward from one episode to the next.

Both policies are small, to build in seconds and run a few episodes on a CPU in seconds:

- ``act``: ACT without its VAE at inference (deterministic), a 20-step chunk executed whole, so it
  sees the observation every 20 steps (15 times in a Push-T episode);
- ``diffusion``: a two-level U-Net (horizon 16, a multiple of ``2 ** len(down_dims)``), DDIM with 10
  denoising steps, 2 observation steps, 8 actions executed per chunk. Its sampling noise comes from
  ``torch``'s global generator, which ``lerobot-eval`` seeds before it builds the policy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors
from lerobot.utils.random_utils import set_seed

IMAGE, STATE, ACTION = "observation.image", "observation.state", "action"

# ImageNet's channel statistics, the ones LeRobot's pretrained vision policies are normalised with.
IMAGE_STATS = {
    "mean": torch.tensor([0.485, 0.456, 0.406]).reshape(3, 1, 1),
    "std": torch.tensor([0.229, 0.224, 0.225]).reshape(3, 1, 1),
    "min": torch.zeros(3, 1, 1),
    "max": torch.ones(3, 1, 1),
}


def _vector_stats(size: int, low: float, high: float) -> dict[str, torch.Tensor]:
    """A range's statistics in the four forms LeRobot's normaliser modes read: centre and half-width
    as mean and std (for MEAN_STD), the bounds as min and max (for MIN_MAX)."""
    return {
        "mean": torch.full((size,), (low + high) / 2),
        "std": torch.full((size,), (high - low) / 2),
        "min": torch.full((size,), low),
        "max": torch.full((size,), high),
    }


# benchmark -> (image features, their shape, state size, action size, the state's and action's range)
BENCHMARKS = {
    "pusht": ((IMAGE,), (3, 96, 96), 2, 2, (0.0, 512.0)),
    "metaworld": ((IMAGE,), (3, 480, 480), 4, 4, (-1.0, 1.0)),
    "aloha": (("observation.images.top",), (3, 480, 640), 14, 14, (-1.0, 1.0)),
    "libero": (("observation.images.image", "observation.images.image2"), (3, 360, 360), 8, 7, (-1.0, 1.0)),
}

# policy -> its configuration beyond the features (small and fast, and no download)
POLICIES = {
    "act": {
        "chunk_size": 20,
        "n_action_steps": 20,
        "dim_model": 64,
        "n_heads": 4,
        "dim_feedforward": 128,
        "n_encoder_layers": 2,
        "n_decoder_layers": 1,
        "n_vae_encoder_layers": 1,
        "latent_dim": 8,
        "pretrained_backbone_weights": None,
        "normalization_mapping": {
            "VISUAL": NormalizationMode.MEAN_STD,
            "STATE": NormalizationMode.MEAN_STD,
            "ACTION": NormalizationMode.MEAN_STD,
        },
    },
    "diffusion": {
        "n_obs_steps": 2,
        "horizon": 16,
        "n_action_steps": 8,
        "down_dims": (32, 64),
        "kernel_size": 3,
        "diffusion_step_embed_dim": 32,
        "spatial_softmax_num_keypoints": 16,
        "crop_shape": None,
        "noise_scheduler_type": "DDIM",
        "num_train_timesteps": 100,
        "num_inference_steps": 10,
        "pretrained_backbone_weights": None,
        "normalization_mapping": {
            "VISUAL": NormalizationMode.MEAN_STD,
            "STATE": NormalizationMode.MIN_MAX,
            "ACTION": NormalizationMode.MIN_MAX,
        },
    },
}


def build(env: str, policy: str, out: Path, seed: int = 0) -> Path:
    """Write the checkpoint of ``policy`` for ``env``'s features to ``out``; returns ``out``."""
    images, image_shape, state_size, action_size, (low, high) = BENCHMARKS[env]
    config = make_policy_config(
        policy,
        device="cpu",
        push_to_hub=False,
        input_features={
            **{image: PolicyFeature(type=FeatureType.VISUAL, shape=image_shape) for image in images},
            STATE: PolicyFeature(type=FeatureType.STATE, shape=(state_size,)),
        },
        output_features={ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(action_size,))},
        **POLICIES[policy],
    )
    stats = {
        **dict.fromkeys(images, IMAGE_STATS),
        STATE: _vector_stats(state_size, low, high),
        ACTION: _vector_stats(action_size, low, high),
    }
    set_seed(seed)
    model = get_policy_class(policy)(config)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(BENCHMARKS), required=True)
    parser.add_argument("--policy", choices=sorted(POLICIES), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(build(args.env, args.policy, args.out, args.seed))


if __name__ == "__main__":
    main()
