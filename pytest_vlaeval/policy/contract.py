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

import math
import numbers
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

    Any real dtype is accepted and converted to float32, as the benchmarks' own runners do
    (``torch.as_tensor(x).to(torch.float32)``). Raises ``PolicyError`` in one line naming the
    expected and the received shape, dtype or values.
    """
    array = _real_array(output)
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
    with np.errstate(over="ignore"):
        chunk = array.astype(np.float32)  # always a copy: never alias the policy's buffer
    if not np.isfinite(chunk).all():
        largest = float(np.abs(array.astype(np.float64)).max())
        raise PolicyError(
            f"policy returned {largest:g} in an action chunk of shape {shape}, which overflows float32 "
            f"(largest {float(np.finfo(np.float32).max):g}); expected finite float32 values"
        )
    return chunk


def _real_array(output: Any) -> np.ndarray:
    """``output`` as a numpy array of real numbers (bool, int or float), else ``PolicyError``
    naming what came back: None, strings or bytes, complex numbers, ints beyond float range, or
    an object whose conversion raised."""
    what = type(output).__name__
    if output is None:
        raise PolicyError("policy returned None; expected an array of actions")
    if getattr(output, "is_complex", None) is not None and output.is_complex():  # float32 would drop it silently
        raise PolicyError(f"policy returned a {what} of dtype {output.dtype}; expected real numbers")
    try:
        array = np.asarray(to_numpy(output))
    except Exception as exc:  # the policy's object: a raising __array__, a ragged list, ...
        raise PolicyError(f"policy returned {what}, which is not an array of numbers ({_one_line(exc)})") from None
    if array.dtype.kind == "O":
        odd = next((type(v).__name__ for v in array.flat if not isinstance(v, numbers.Real)), None)
        if odd is not None:
            raise PolicyError(f"policy returned {what} holding {odd}; expected real numbers (bool, int or float)")
        try:
            array = array.astype(np.float64)
        except (OverflowError, TypeError, ValueError) as exc:
            raise PolicyError(
                f"policy returned {what} holding a number beyond float range ({_one_line(exc)})"
            ) from None
    if array.dtype.kind in "SU":
        raise PolicyError(
            f"policy returned text ({what}, dtype {array.dtype}); expected real numbers, not strings or bytes"
        )
    if array.dtype.kind not in _REAL_KINDS:
        raise PolicyError(f"policy returned {what} of dtype {array.dtype}; expected real numbers (bool, int or float)")
    return array


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_REAL_KINDS = "biuf"


def to_numpy(value: Any) -> Any:
    """A torch tensor as a numpy array (without importing torch); anything else as it is. A
    dtype numpy lacks (bfloat16, the float8s) widens to float32, which holds it exactly."""
    if not hasattr(value, "detach"):
        return value
    tensor = value.detach().cpu()
    try:
        return tensor.numpy()
    except TypeError:  # torch: "Got unsupported ScalarType BFloat16"
        return tensor.float().numpy()


def _json_safe(value: Any) -> Any:
    """``value`` as JSON a run's files hold: a number JSON has no spelling for (NaN, inf) as its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item") and getattr(value, "size", 2) == 1:
        return _json_safe(value.item())
    return str(value)
