"""Where ``lerobot-eval --seed=s --eval.n_episodes=1`` leaves torch's generators when its one episode
starts, as an episode's own generator states.

``lerobot-eval`` seeds torch (``set_seed(s)``: the CPU's generator and every CUDA device's), makes
the env, builds the policy, whose random initialisation draws from the CPU's generator before the
checkpoint's weights are loaded over it, and then rolls its episodes out, each ``select_action``
drawing from the same global generators. Nothing else draws from them in between (making the env
and the processors, resetting the env and the policy). So the episode with seed s starts from the
state ``torch.manual_seed(s)`` and the build's draws leave, whatever ran before it.

The policy is built once per checkpoint, its draws recorded as it is built (every operator
LeRobot's code reaches that torch tags as drawing from a generator, with the layout of the tensor it
fills); an episode replays them on a scratch tensor after seeding: torch's generators end where the
build left them, without building a model or loading weights. The replay is checked once, at load,
to land where the recorded build did; a build whose draws it cannot reproduce (one that reseeds
torch itself) is built again for every episode instead.

Imported where a checkpoint is loaded (``policy._load``), in LeRobot's interpreter.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

log = logging.getLogger("pytest_vlaeval.serving")

RECORDING_SEED = 0
"""The seed the build is recorded under (any seed: the replay is checked against it)."""

STATES_KEPT = 1024
"""Seeds whose starting states are kept (5 KiB each): a multi-task benchmark's tasks share seeds."""


@dataclass(frozen=True)
class _Layout:
    """What a draw filled: its draws depend on the tensor's shape, strides, dtype and device only."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @property
    def span(self) -> int:
        """Elements of storage the layout reaches from its first."""
        if 0 in self.size:
            return 0
        return 1 + sum((n - 1) * step for n, step in zip(self.size, self.stride, strict=True))


@dataclass(frozen=True)
class _Draw:
    """One operator call that drew from a global generator: the tensors it wrote as layouts, the
    others as copies."""

    op: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.draws: list[_Draw] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags and kwargs.get("generator") is None:
            self.draws.append(_recorded(func, args, kwargs))
        return func(*args, **kwargs)


def _recorded(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Draw:
    written = {
        argument.name
        for argument in func._schema.arguments
        if argument.alias_info is not None and argument.alias_info.is_write
    }
    names = [argument.name for argument in func._schema.arguments]

    def kept(name: str, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if name in written:
            return _Layout(tuple(value.shape), tuple(value.stride()), value.dtype, value.device)
        return value.detach().clone()

    return _Draw(
        func,
        tuple(kept(name, value) for name, value in zip(names, args, strict=False)),
        {name: kept(name, value) for name, value in kwargs.items()},
    )


class BuildDraws:
    """The draws a policy's build makes from torch's global generators, and the states they leave
    after ``torch.manual_seed(seed)``, as ``lerobot-eval --seed=seed`` reaches them."""

    def __init__(self, draws: list[_Draw], build: Callable[[], Any], devices: Sequence[int]) -> None:
        self._draws = draws
        self._build = build
        self.devices = list(devices)
        """The CUDA devices whose generators are seeded and carried (none on the CPU)."""
        self.replayed = True
        """False when the replay does not reproduce the build: each seed's states are built then."""
        self.states = functools.lru_cache(maxsize=STATES_KEPT)(self._states)

    @classmethod
    def record(cls, build: Callable[[], Any], devices: Sequence[int] = ()) -> tuple[Any, BuildDraws]:
        """``build()``'s result, and its draws, recorded and checked to replay where it left the
        generators; torch's global generators are left as they were."""
        recorder = _Recorder()
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(RECORDING_SEED)
            with recorder:
                built = build()
            left = _global_states(devices)
        draws = cls(recorder.draws, build, devices)
        if not _equal(draws._states(RECORDING_SEED), left):
            draws.replayed = False
            log.warning("the policy's build draws from torch in a way that cannot be replayed: built again per episode")
        return built, draws

    def episode(self, seed: int) -> EpisodeGenerators:
        """The generators the episode with ``seed`` starts from."""
        cpu, cuda = self.states(seed)
        return EpisodeGenerators(cpu.clone(), {device: state.clone() for device, state in cuda.items()})

    def _states(self, seed: int) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        with torch.random.fork_rng(devices=self.devices):
            torch.manual_seed(seed)  # what set_seed does to torch: the CPU's generator and every CUDA device's
            if self.replayed:
                self._replay()
            else:
                self._build()
            return _global_states(self.devices)

    def _replay(self) -> None:
        """Every recorded draw again, on a view of one scratch tensor per dtype and device."""
        spans: dict[tuple[torch.dtype, torch.device], int] = {}
        for layout in self._layouts():
            key = (layout.dtype, layout.device)
            spans[key] = max(spans.get(key, 0), layout.span)
        scratch = {key: torch.empty(span, dtype=key[0], device=key[1]) for key, span in spans.items()}

        def view(value: Any) -> Any:
            if not isinstance(value, _Layout):
                return value
            return scratch[(value.dtype, value.device)].as_strided(value.size, value.stride)

        for draw in self._draws:
            draw.op(*map(view, draw.args), **{name: view(value) for name, value in draw.kwargs.items()})

    def _layouts(self) -> Iterator[_Layout]:
        for draw in self._draws:
            for value in (*draw.args, *draw.kwargs.values()):
                if isinstance(value, _Layout):
                    yield value


@dataclass
class EpisodeGenerators:
    """One episode's torch generator states, the CPU's and its CUDA device's, carried from one call
    of the policy to the next, so its draws never depend on other episodes."""

    cpu: torch.Tensor
    cuda: dict[int, torch.Tensor]

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Torch's global generators are the episode's inside (for LeRobot's code, which draws from
        them), as they were before after; the episode keeps where its draws left them."""
        with torch.random.fork_rng(devices=list(self.cuda)):
            torch.set_rng_state(self.cpu)
            for device, state in self.cuda.items():
                torch.cuda.set_rng_state(state, device)
            yield
            self.cpu = torch.get_rng_state()
            self.cuda = {device: torch.cuda.get_rng_state(device) for device in self.cuda}

    def generator(self, device: torch.device) -> torch.Generator:
        """The episode's generator for ``device`` as a generator object of its own, for code that
        takes one; ``keep`` it after drawing."""
        generator = torch.Generator(device=device)
        generator.set_state(self._state(device))
        return generator

    def keep(self, generator: torch.Generator) -> None:
        """The episode's generator for ``generator``'s device goes on from where drawing from it left it."""
        if generator.device.type == "cuda":
            self.cuda[_index(generator.device)] = generator.get_state()
        else:
            self.cpu = generator.get_state()

    def _state(self, device: torch.device) -> torch.Tensor:
        return self.cuda[_index(device)] if device.type == "cuda" else self.cpu


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _global_states(devices: Sequence[int]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    return torch.get_rng_state(), {device: torch.cuda.get_rng_state(device) for device in devices}


def _equal(a: tuple[torch.Tensor, dict[int, torch.Tensor]], b: tuple[torch.Tensor, dict[int, torch.Tensor]]) -> bool:
    return torch.equal(a[0], b[0]) and a[1].keys() == b[1].keys() and all(torch.equal(a[1][d], b[1][d]) for d in a[1])
