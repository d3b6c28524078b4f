"""A worker's share of the cores for torch, where the actions stay those of torch's default count.

Beside the env under ``-n N``, a worker's forward passes would run on torch's default thread count
(one per core), the count ``lerobot-eval`` runs with: a few kernels round differently on another
count (on two cores: the spatial softmax's 1x1 convolution of a Diffusion checkpoint; some of an
ACT checkpoint's ResNet convolutions, or its linear layers and attention, by the machine; up to 1e-6
on one thread), so the count is part of what an episode's actions are. N workers, each with a
thread per core, then take turns on the cores.
Instead, each worker finds at its first forward pass which modules round differently on its share
of the cores: that pass runs on the default count, as always, with every module's inputs and
outputs recorded; each leaf is recomputed on the share, and those whose output differs are pinned
to the default count. The same pass then runs again from the same generator state on the share,
with those pinned; only if every module's output and the action equal the default's bit for bit
does the worker keep the share. Where they do not, a module computes outside its children (ACT's
attention, from its own weights): the first module of that pass given the inputs it was given at
first that returns another output is pinned too, and the pass runs again, until it is equal or no
such module is found (then the default count, as before).

A kernel picks its order of summation by the shapes it is given and the thread count, not by the
values, so a pass of the same shapes is the same arithmetic as the one checked. That holds for the
types in ``FIXED_SHAPES``, whose every forward pass has its first one's shapes as long as the
observation's do; an observation of another layout (shapes, dtypes) than the first's runs on the
default count, and any other type (a prompt padded to its own length, a decoder whose length
depends on values) never takes the share.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_vlaeval.cores import torch_pool_sized_by_user, worker_count, worker_threads

log = logging.getLogger("pytest_vlaeval.lerobot")

FIXED_SHAPES = ("act", "diffusion")
"""Policy types whose forward pass has the same shapes at every step of a benchmark."""

Call = tuple[str, Any, tuple, dict, Any]
"""A module's call: its name, the module, its args and kwargs, and its output (cloned)."""


@dataclass(frozen=True)
class ThreadPlan:
    """The worker's torch thread count, the modules (by name) that run on the default count, and the
    layout of the observations it was checked on."""

    share: int
    default: int
    pinned: tuple[str, ...]
    layout: Any

    def pin(self, policy: Any) -> None:
        """Hooks on ``policy``'s pinned modules: the default count inside them, the count before
        them after (the share, or the default for an observation of another layout)."""
        torch = _torch()
        before: list[int] = []

        def enter(*_: Any) -> None:
            before.append(torch.get_num_threads())
            torch.set_num_threads(self.default)

        def leave(*_: Any) -> None:
            torch.set_num_threads(before.pop())

        for name in self.pinned:
            module = policy.get_submodule(name)
            module.register_forward_pre_hook(enter)
            module.register_forward_hook(leave)

    @contextmanager
    def running(self, observation: Any) -> Iterator[None]:
        """The share inside for an observation of the checked layout; the default count for another."""
        if observation_layout(observation) == self.layout:
            yield
            return
        torch = _torch()
        torch.set_num_threads(self.default)
        try:
            yield
        finally:
            torch.set_num_threads(self.share)


@dataclass
class Threads:
    """Whether the process's first forward pass has decided torch's thread count, and its plan."""

    decided: bool = False
    plan: ThreadPlan | None = None


def worker_share(policy_type: str) -> int | None:
    """The threads torch may take in an xdist worker, where fewer than its default count; None where
    the default is the worker's already (serial, a server), the user sized torch's pool, or the
    policy's shapes may change from one pass to the next."""
    if worker_count() <= 1 or policy_type not in FIXED_SHAPES or torch_pool_sized_by_user():
        return None
    share = worker_threads()
    return share if share < _torch().get_num_threads() else None


def first_pass(policy: Any, fresh: Callable[[], Any], observation: Any, share: int) -> tuple[Any, ThreadPlan | None]:
    """``policy.select_action(observation)`` on the default count, and the plan that computes it
    alike on ``share`` threads (None where none does). ``fresh()`` gives a copy of ``policy`` in the
    state ``policy`` is in (its episode's start). Torch's generators are left where the call leaves
    them, and torch on its default count: the caller moves it to the plan's share."""
    torch = _torch()
    generator = torch.get_rng_state()
    # What the pass is given, read before it as every later step's is: select_action may take keys
    # out of the observation (Diffusion's pops its ACTION), and the check's passes get them too.
    layout, given = observation_layout(observation), dict(observation)
    with _recorded(policy) as calls:
        action = policy.select_action(observation)
    try:
        plan = _checked_plan(calls, action, fresh, given, layout, generator, share)
    except Exception as exc:  # the probe's own failure, never the episode's: it keeps the default count
        log.info("checking a forward pass on %d threads failed (%s): torch keeps its default count", share, exc)
        plan = None
    return action, plan


def _checked_plan(
    calls: list[Call], action: Any, fresh: Callable[[], Any], observation: Any, layout: Any, generator: Any, share: int
) -> ThreadPlan | None:
    """The plan the recorded pass ``calls`` (which gave ``action`` from ``observation``, of
    ``layout``) points to, if a pass of a fresh copy with it, from the same generator state, computes
    every module's output and the action alike. The leaves that round differently on the share are
    pinned first; a module whose own arithmetic outside its children does (attention computed from
    its weights, not through a child) shows in a check pass as the first module given the same
    inputs that returns another output, and is pinned in turn, at most once each."""
    torch = _torch()
    default = torch.get_num_threads()
    if not calls:  # no module ran, or the recording failed: nothing shows what a share computes
        return None
    with torch.random.fork_rng():  # a leaf that draws must not move the episode's generator
        pinned = {
            name
            for name, module, args, kwargs, output in calls
            if _is_leaf(module) and _differs(module, args, kwargs, output, share)
        }
    while True:
        plan = ThreadPlan(share, default, tuple(sorted(pinned)), layout)
        copy = fresh()
        plan.pin(copy)
        try:
            torch.set_num_threads(share)
            with torch.random.fork_rng(), _recorded(copy) as again:
                torch.set_rng_state(generator)
                repeated = copy.select_action(observation)
        finally:
            torch.set_num_threads(default)
        if _equal([action, *(call[-1] for call in calls)], [repeated, *(call[-1] for call in again)]):
            return plan
        culprit = _first_own_difference(calls, again)
        if culprit is None or culprit in pinned:
            return None
        pinned.add(culprit)


def _first_own_difference(calls: list[Call], again: list[Call]) -> str | None:
    """The first module (in the order calls end: children before their parent) that, given the
    inputs it was given in ``calls``, returns another output in ``again``; None where the two passes
    called other modules or none such is found."""
    if [call[0] for call in calls] != [call[0] for call in again]:
        return None
    for (name, _, *given, output), (_, _, *given_again, output_again) in zip(calls, again, strict=True):
        if _equal(given, given_again) and not _equal(output, output_again):
            return name
    return None


def observation_layout(value: Any) -> Any:
    """The shapes and dtypes of a processed observation's tensors, its other values by type (an ACT
    or Diffusion pass reads no task string)."""
    if isinstance(value, dict):
        return tuple((key, observation_layout(item)) for key, item in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(observation_layout(item) for item in value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return (tuple(value.shape), str(value.dtype))
    return type(value).__name__


def _is_leaf(module: Any) -> bool:
    return next(module.children(), None) is None


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
def _recorded(policy: Any) -> Iterator[list[Call]]:
    """The modules' calls inside, in the order they end, each value cloned; the list is emptied
    where one could not be recorded. Recording never fails the call it watches."""
    calls: list[Call] = []
    failed: list[BaseException] = []
    modules = list(policy.named_modules())

    def recorder(name: str) -> Callable[..., None]:
        def record(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
            try:
                calls.append((name, module, _cloned(args), _cloned(kwargs), _cloned(output)))
            except Exception as exc:
                failed.append(exc)

        return record

    handles = [module.register_forward_hook(recorder(name), with_kwargs=True) for name, module in modules]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()
        if failed:
            calls.clear()


def _cloned(value: Any) -> Any:
    """``value`` with every tensor in it copied (a later in-place op must not change what was recorded)."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_cloned(item) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_cloned(item) for item in value)
    if isinstance(value, dict):
        return {key: _cloned(item) for key, item in value.items()}
    return value


def _equal(first: Any, second: Any) -> bool:
    """Bit for bit: tensors and arrays equal in dtype, shape and every value, containers item by item."""
    torch = _torch()
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (
            isinstance(first, torch.Tensor)
            and isinstance(second, torch.Tensor)
            and first.dtype == second.dtype
            and torch.equal(first, second)
        )
    if isinstance(first, np.ndarray) or isinstance(second, np.ndarray):
        return isinstance(first, np.ndarray) and isinstance(second, np.ndarray) and np.array_equal(first, second)
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
    return bool(first == second)


def _torch() -> Any:
    import torch

    return torch
