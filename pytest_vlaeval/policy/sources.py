"""What a local ``--policy`` is: a ``PolicySource``, and the table of prefixes that name the sources
other than the built-ins and ``module:attr``.

Nothing generic asks which kind of source it holds: the session checks it against its benchmark,
and where it names an interpreter of its own, either runs the workers there beside it (a benchmark
whose stack that interpreter ``holds_stacks``) or starts a server for it there (with its
``server_args``); whoever runs it builds it through its ``factory``. A source written ``PREFIX...`` is parsed by the function the
composition root (or a plugin, a conftest) registered for its prefix, so ``policy.loading`` knows
no such source by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pytest_vlaeval.benchmark.model import Benchmark
    from pytest_vlaeval.policy.contract import Policy

BENCHMARK_ENV_OPTION = "--env-type"
"""``vlaeval serve``'s option for the env type the benchmark is known by to a served source (a
source that adapts to the benchmark passes it in its ``server_args``)."""


class PolicySource(Protocol):
    """A policy this package builds itself (in this interpreter, or a server's of its own)."""

    @property
    def text(self) -> str:
        """The spec as given (as ``vlaeval serve --policy`` takes it back)."""

    @property
    def identity(self) -> str:
        """What the run's fingerprint and name record."""

    @property
    def option(self) -> str:
        """The option it was given with, for the messages about it."""

    @property
    def interpreter(self) -> str | None:
        """None: it runs in pytest's own interpreter; else the name of the interpreter of its own it
        runs in (``vlaeval install NAME``), where the session serves it from."""

    @property
    def server_args(self) -> tuple[str, ...]:
        """What ``vlaeval serve --policy TEXT`` needs besides the text to build it again."""

    @property
    def holds_stacks(self) -> tuple[str, ...]:
        """The benchmark stacks (``Benchmark.stack``) its interpreter of its own holds too: on such a
        benchmark the workers can run in that interpreter and build it beside the env, each its own
        copy, with no server; empty: none (or no interpreter of its own)."""

    def check(self, benchmark: Benchmark) -> None:
        """``SpecError`` in one line when it cannot run on ``benchmark``, before any episode."""

    def factory(self, action_dim: int, benchmark: str) -> Callable[[], Policy]:
        """The zero-argument builder of one policy instance for actions of ``action_dim`` on the
        benchmark named ``benchmark``; ``SpecError`` when what it names cannot be found. What it
        needs is imported here, not when the source is parsed."""


@dataclass(frozen=True)
class Given:
    """How a policy's text was given: with which option, and what a source may read of the benchmark
    it plays: the session's benchmark file, or in ``vlaeval serve`` the env type the session passed
    in the source's ``server_args`` (``BENCHMARK_ENV_OPTION``)."""

    option: str = "--policy"
    benchmark: Benchmark | None = None
    env_type: str | None = None


SourceParser = Callable[[str, Given], PolicySource]
"""Parses a text that starts with its prefix (the prefix included); ``SpecError`` in one line."""

_BY_PREFIX: dict[str, SourceParser] = {}


def register_policy_source(prefix: str, parse: SourceParser) -> None:
    """Policies written ``PREFIX...`` are ``parse``'s from now on in this process (a later
    registration of the prefix replaces it). The prefix ends with ``:``."""
    if not prefix.endswith(":") or len(prefix) < 2:
        raise ValueError(f"a policy source's prefix is a name and ':', got {prefix!r}")
    _BY_PREFIX[prefix] = parse


def source_parser(text: str) -> SourceParser | None:
    """The parser registered for the prefix ``text`` starts with, if any."""
    return next((parse for prefix, parse in _BY_PREFIX.items() if text.startswith(prefix)), None)


def source_prefixes() -> tuple[str, ...]:
    """The prefixes registered, for a command's help."""
    return tuple(_BY_PREFIX)
