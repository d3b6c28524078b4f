"""A worker's share of the cores for torch, where the actions stay those of torch's default count.

Beside the env under ``-n N``, a worker's forward passes would run on torch's default thread count
(one per core), the count ``lerobot-eval`` runs with: a few kernels round differently on another
count (the spatial softmax's 1x1 convolution of a Diffusion checkpoint, a few of an ACT checkpoint's
ResNet convolutions: up to 1e-6 on one thread), so the count is part of what an episode's actions
are. N workers, each with a thread per core, then take turns on the cores. Instead, each worker finds
at its first forward pass which modules round differently on its share of the cores: that pass runs
on the default count, as always, with every leaf module's inputs and outputs recorded; each leaf is
recomputed on the share, and those whose output differs are pinned to the default count. The same
pass then runs again from the same generator state on the share, with those pinned; only if every
leaf's output and the action equal the default's bit for bit does the worker keep the share (else
the default count, as before). A kernel picks its order of summation by shapes and the thread count,
not by values: one pass with equal outputs throughout is the same arithmetic from then on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("pytest_vlaeval.lerobot")


@dataclass(frozen=True)
class ThreadPlan:
    """The worker's torch thread count, and the modules (by name) that run on the default count."""

    share: int
    default: int
    pinned: tuple[str, ...]

    def pin(self, policy: Any) -> None:
        """Hooks on ``policy``'s pinned modules: the default count inside them, the share after."""
        torch = _torch()
        for name in self.pinned:
            module = policy.get_submodule(name)
            module.register_forward_pre_hook(lambda *_: torch.set_num_threads(self.default))
            module.register_forward_hook(lambda *_: torch.set_num_threads(self.share))


def worker_share() -> int | None:
    """The threads torch may take in an xdist worker on the CPU, where fewer than its default count;
    None where the default is already the worker's (serial, a server) or the user set the count."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1 or "OMP_NUM_THREADS" in os.environ:
        return None
    share = max(1, len(os.sched_getaffinity(0)) // workers)
    return share if share < _torch().get_num_threads() else None


def first_pass(policy: Any, fresh: Any, observation: Any, share: int) -> tuple[Any, ThreadPlan | None]:
    """``policy.select_action(observation)`` on the default count, and the plan that computes it
    alike on ``share`` threads (None where none does: the default count stays). ``fresh`` is a copy
    of ``policy`` in the state ``policy`` is in (its episode's start). Torch's generators are left
    where the call leaves them; with a plan, torch runs on ``share`` threads from here on."""
    torch = _torch()
    default = torch.get_num_threads()
    generator = torch.get_rng_state()
    with _recorded(policy) as calls:
        action = policy.select_action(observation)
    if not calls:  # no module ran: nothing shows what a share would compute
        return action, None
    pinned = {name for name, module, args, kwargs, output in calls if _differs(module, args, kwargs, output, share)}
    plan = ThreadPlan(share, default, tuple(sorted(pinned)))
    plan.pin(fresh)
    torch.set_num_threads(share)
    try:
        with torch.random.fork_rng(), _recorded(fresh) as again:
            torch.set_rng_state(generator)
            repeated = fresh.select_action(observation)
    finally:
        torch.set_num_threads(default)
    outputs, outputs_again = [call[-1] for call in calls], [call[-1] for call in again]
    if not _equal([action, *outputs], [repeated, *outputs_again]):
        log.info("a forward pass on %d threads differs from the one on %d: torch keeps %d", share, default, default)
        return action, None
    torch.set_num_threads(share)
    log.info("torch on %d of %d threads; on %d: %s", share, default, default, ", ".join(plan.pinned) or "none")
    return action, plan


def _differs(module: Any, args: tuple, kwargs: dict, output: Any, share: int) -> bool:
    """Whether the leaf computes another output from the same inputs on ``share`` threads."""
    torch = _torch()
    default = torch.get_num_threads()
    torch.set_num_threads(share)
    try:
        return not _equal(module(*args, **kwargs), output)
    finally:
        torch.set_num_threads(default)


@contextmanager
def _recorded(policy: Any) -> Iterator[list[tuple[str, Any, tuple, dict, Any]]]:
    """The leaf modules' calls inside: (name, module, args, kwargs, output), each value cloned."""
    calls: list[tuple[str, Any, tuple, dict, Any]] = []
    leaves = [(name, module) for name, module in policy.named_modules() if not any(True for _ in module.children())]

    def recorder(name: str) -> Callable[..., None]:
        def record(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
            calls.append((name, module, _cloned(args), _cloned(kwargs), _cloned(output)))

        return record

    handles = [module.register_forward_hook(recorder(name), with_kwargs=True) for name, module in leaves]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _cloned(value: Any) -> Any:
    """``value`` with every tensor in it copied (a later in-place op must not change what was recorded)."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_cloned(item) for item in value)
    if isinstance(value, dict):
        return {key: _cloned(item) for key, item in value.items()}
    return value


def _equal(first: Any, second: Any) -> bool:
    """Bit for bit: tensors equal in dtype, shape and every value, containers item by item."""
    torch = _torch()
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (
            isinstance(first, torch.Tensor)
            and isinstance(second, torch.Tensor)
            and first.dtype == second.dtype
            and torch.equal(first, second)
        )
    if isinstance(first, (tuple, list)):
        return (
            type(first) is type(second)
            and len(first) == len(second)
            and all(_equal(a, b) for a, b in zip(first, second, strict=True))
        )
    if isinstance(first, dict):
        return (
            isinstance(second, dict)
            and first.keys() == second.keys()
            and all(_equal(first[k], second[k]) for k in first)
        )
    return first == second


def _torch() -> Any:
    import torch

    return torch
