"""The policy interface, how a ``--policy`` spec becomes a policy, and the built-in policies.

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

``--policy`` takes ``module:attr`` (a class or a zero-argument factory), a built-in name, or a
policy server's address (``ws://HOST:PORT``, ``openpi://HOST:PORT``, ``vla-eval://HOST:PORT``;
see ``serving/``).
"""

from __future__ import annotations

import importlib
import zlib
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pytest_vlaeval.errors import EpisodeError, PolicyError, SpecError


@dataclass(frozen=True)
class EpisodeInfo:
    task: str
    seed: int
    instruction: str
    episode_index: int
    max_steps: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Policy(Protocol):
    chunk_size: int

    def reset(self, episode: EpisodeInfo) -> None: ...

    def act(self, obs: dict[str, Any]) -> Any: ...


class RandomPolicy:
    """Uniform actions in [-1, 1], reproducible per (task, seed) whatever ran before."""

    chunk_size = 1

    def __init__(self, action_dim: int = 7) -> None:
        self.action_dim = action_dim
        self.config = {"action_dim": action_dim, "distribution": "uniform[-1,1]"}
        self._rng = np.random.default_rng(0)

    def reset(self, episode: EpisodeInfo) -> None:
        self._rng = np.random.default_rng([episode.seed, zlib.crc32(episode.task.encode())])

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return self._rng.uniform(-1.0, 1.0, size=(self.chunk_size, self.action_dim)).astype(np.float32)


class ZeroPolicy:
    """All-zero actions: the arm holds still. A floor for any task's success rate."""

    chunk_size = 1

    def __init__(self, action_dim: int = 7) -> None:
        self.action_dim = action_dim
        self.config = {"action_dim": action_dim}

    def reset(self, episode: EpisodeInfo) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return np.zeros((1, self.action_dim), dtype=np.float32)


BUILTIN_POLICIES = {"random": RandomPolicy, "zero": ZeroPolicy}


def resolve_policy_factory(spec: str) -> Any:
    """Find the class or factory a ``--policy`` spec names (imports the user's module)."""
    if spec in BUILTIN_POLICIES:
        return BUILTIN_POLICIES[spec]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SpecError(f"--policy {spec!r}: expected module:attr or one of {', '.join(BUILTIN_POLICIES)}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"--policy {spec!r}: cannot import {module_name!r}: {exc}") from None
    try:
        factory = getattr(module, attr)
    except AttributeError:
        raise SpecError(f"--policy {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(factory):
        raise SpecError(f"--policy {spec!r}: {attr!r} is not a class or factory")
    return factory


def build_policy(spec: str, action_dim: int, benchmark: str = "") -> Policy:
    """Instantiate the policy a spec names and check it honours the interface."""
    if "://" in spec:  # a policy server: ws://, openpi:// or vla-eval://HOST:PORT
        from pytest_vlaeval.serving.client import connect_policy

        return connect_policy(spec, action_dim, benchmark)
    try:
        factory = resolve_policy_factory(spec)
    except SpecError as exc:  # in a worker, a policy that cannot be found fails its episodes
        raise PolicyError(str(exc)) from None
    try:
        policy = factory(action_dim) if spec in BUILTIN_POLICIES else factory()
    except EpisodeError:
        raise  # the episode's deadline (or a server fault) interrupted it: not the factory's own fault
    except Exception as exc:
        raise PolicyError(f"policy factory {spec!r} raised {type(exc).__name__}: {exc}") from exc
    return checked_policy(policy, spec)


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
    if hasattr(output, "detach"):  # torch.Tensor, without importing torch
        output = output.detach().cpu().numpy()
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
