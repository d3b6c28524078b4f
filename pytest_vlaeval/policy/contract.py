"""The policy contract: what the harness passes a policy and what it accepts back.

A policy is any object with:

``chunk_size: int``
    How many actions one ``act`` call returns (K). 1 means one action per simulator step.
``reset(episode: EpisodeInfo) -> None``
    Called at the start of every episode, before the first ``act``. Memory policies clear their
    state here; ``episode`` carries the task, seed and instruction, nothing privileged.
``act(obs: dict) -> array``
    ``obs`` holds the benchmark's policy-visible keys (for MIKASA: ``rgb`` (1, 128, 128, 6) uint8
    and ``proprio`` (1, 7) float32, as torch tensors) and ``instruction`` (str). Return one action
    of shape (D,) or (1, D), or a chunk of shape (K, D) or (1, K, D), as numpy or torch, finite.
``end_episode(result) -> None`` (optional)
    Called after the episode's last step with its ``EpisodeResult`` (success, return, length);
    served policies pass it on to protocols with episode boundaries.

A leaf: the episode loop, the built-in policies and serving (both sides) depend on it, and it on
nothing of theirs.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pytest_vlaeval.errors import PolicyError


@dataclass(frozen=True)
class EpisodeInfo:
    task: str
    seed: int
    instruction: str
    episode_index: int
    max_steps: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def episode_rng(info: EpisodeInfo) -> np.random.Generator:
    """An RNG that depends on the episode alone (task and seed), never on what ran before it or
    shared its batches: the rule every random policy follows, local or served."""
    return np.random.default_rng([info.seed, zlib.crc32(info.task.encode())])


@runtime_checkable
class Policy(Protocol):
    chunk_size: int

    def reset(self, episode: EpisodeInfo) -> None: ...

    def act(self, obs: dict[str, Any]) -> Any: ...


def checked_policy(policy: Any, spec: str) -> Policy:
    """``policy`` if it honours the interface, else ``PolicyError`` saying what it lacks."""
    missing = [name for name in ("chunk_size", "reset", "act") if not hasattr(policy, name)]
    if missing:
        raise PolicyError(f"policy {spec!r} ({type(policy).__name__}) lacks {', '.join(missing)}")
    chunk_size = policy.chunk_size
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise PolicyError(f"policy {spec!r}: chunk_size must be a positive int, got {chunk_size!r}")
    return policy


def describe_policy(policy: Policy, spec: str) -> dict[str, Any]:
    """The ``model`` block of the canonical schema: a name and a JSON-safe config."""
    config = getattr(policy, "config", {}) or {}
    return {"name": str(getattr(policy, "name", spec)), "config": _json_safe(config)}


def as_action_chunk(output: Any, action_dim: int, chunk_size: int) -> np.ndarray:
    """Validate a policy's ``act`` output and return a fresh (K, D) float32 array.

    Raises ``PolicyError`` naming the expected and the received shape, dtype or values.
    """
    output = to_numpy(output)
    dtype = getattr(output, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind not in _REAL_KINDS:  # float32 would drop an imaginary part
        raise PolicyError(f"policy returned actions of dtype {dtype}; expected real numbers (bool, int or float)")
    try:
        array = np.array(output, dtype=np.float32)  # always a copy: never alias the policy's buffer
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"policy returned {type(output).__name__}, expected an array of actions: {exc}") from None
    shape = array.shape
    expected = (
        f"expected ({action_dim},), (K, {action_dim}) or (1, K, {action_dim}) with 1 <= K <= chunk_size={chunk_size}"
    )
    if array.ndim == 1:
        array = array[None]
    elif array.ndim == 3 and shape[0] == 1:
        array = array[0]
    if array.ndim != 2 or array.shape[1] != action_dim:
        raise PolicyError(f"policy returned shape {shape}; {expected}")
    if array.shape[0] == 0:
        raise PolicyError(f"policy returned an empty chunk {shape}; {expected}")
    if array.shape[0] > chunk_size:
        raise PolicyError(f"policy returned {array.shape[0]} actions {shape} but declares chunk_size={chunk_size}")
    if not np.isfinite(array).all():
        bad = "NaN" if np.isnan(array).any() else "inf"
        raise PolicyError(f"policy returned {bad} in an action chunk of shape {shape}; expected finite values")
    return array


_REAL_KINDS = "biuf"


def to_numpy(value: Any) -> Any:
    """A torch tensor as a numpy array (without importing torch); anything else as it is."""
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item") and getattr(value, "size", 2) == 1:
        return value.item()
    return str(value)
