"""A ``--policy`` spec, parsed once into a typed value, and the policy it names.

The text is parsed here and nowhere else: a built-in name, a local ``module:attr``, a source
registered for its prefix (``policy.sources``), or a server's address (``serving.url``, imported
only then). Each is built through its own ``factory``: a local policy here, an address as a client
of its server. A server builds local policies only: it never proxies another server.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_vlaeval.errors import EpisodeError, PolicyError, SpecError
from pytest_vlaeval.importing import load_reference, split_reference
from pytest_vlaeval.policy.builtins import BUILTIN_POLICIES
from pytest_vlaeval.policy.contract import Policy, checked_policy
from pytest_vlaeval.policy.sources import Given, PolicySource, source_parser

if TYPE_CHECKING:
    from pytest_vlaeval.benchmark.model import Benchmark
    from pytest_vlaeval.serving.url import RemoteSpec


@dataclass(frozen=True)
class BuiltinPolicy:
    """One of ``BUILTIN_POLICIES``, made with the benchmark's action dimension."""

    name: str
    option: str = field(default="--policy", compare=False)
    """The option it was given with, for the messages about it."""

    interpreter = None
    server_args = ()
    holds_stacks = ()

    @property
    def text(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        return self.name

    def check(self, benchmark: Benchmark) -> None:
        """A built-in runs on any benchmark."""

    def factory(self, action_dim: int, benchmark: str) -> Callable[[], Policy]:
        make = BUILTIN_POLICIES[self.name]
        return lambda: make(action_dim)


@dataclass(frozen=True)
class LocalPolicy:
    """``module:attr``: a class or zero-argument factory in an importable module."""

    module: str
    attr: str
    option: str = field(default="--policy", compare=False)
    """The option it was given with, for the messages about it."""

    interpreter = None
    server_args = ()
    holds_stacks = ()

    @property
    def text(self) -> str:
        return f"{self.module}:{self.attr}"

    @property
    def identity(self) -> str:
        return self.text

    def check(self, benchmark: Benchmark) -> None:
        """Whether the module exists and binds the name, read without importing the user's module."""
        try:
            found = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise SpecError(
                f"{self.option} {self.text!r}: module {self.module!r} is not importable from {os.getcwd()} (is it installed or on sys.path?)"
            )
        names = _top_level_names(found.origin)
        if names is not None and self.attr not in names:
            raise SpecError(
                f"{self.option} {self.text!r}: module {self.module!r} ({found.origin}) defines no {self.attr!r}"
            )

    def factory(self, action_dim: int, benchmark: str) -> Callable[[], Policy]:
        """The class or factory it names (importing the user's module)."""
        try:
            factory = load_reference(self.module, self.attr)
        except ImportError as exc:
            raise SpecError(f"{self.option} {self.text!r}: cannot import {self.module!r}: {exc}") from None
        except AttributeError:
            raise SpecError(
                f"{self.option} {self.text!r}: module {self.module!r} has no attribute {self.attr!r}"
            ) from None
        if not callable(factory):
            raise SpecError(f"{self.option} {self.text!r}: {self.attr!r} is not a class or factory")
        return factory


def _top_level_names(origin: str | None) -> set[str] | None:
    """The names a Python source file binds at module level, read without running it; None when
    that cannot be known statically (not a source file, a star import, a module ``__getattr__``)."""
    if not origin or not origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(origin).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None  # importing it will say what is wrong, in the episode's error
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue  # their bodies bind names in their own scope
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return None
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return None if "__getattr__" in names else names


if TYPE_CHECKING:
    PolicySpec = PolicySource | RemoteSpec
    """Each has ``text`` (as given), ``identity`` (what the run's fingerprint and name record),
    ``interpreter`` and ``factory``."""


def parse_policy(text: str) -> PolicySpec:
    """The typed value of a ``--policy`` spec; ``SpecError`` saying what is wrong."""
    if "://" in text:
        from pytest_vlaeval.serving.url import parse_remote_spec

        return parse_remote_spec(text)
    return parse_local_policy(text)


def parse_local_policy(
    text: str, option: str = "--policy", benchmark: Benchmark | None = None, env_type: str | None = None
) -> PolicySource:
    """A spec a server can serve, given with ``option``: a built-in, a registered source's
    ``PREFIX...`` (which may read ``benchmark``, the session's, or ``env_type``, what ``vlaeval
    serve`` was given of it) or ``module:attr``, never another server's address."""
    if text in BUILTIN_POLICIES:
        return BuiltinPolicy(text, option)
    parse = source_parser(text)
    if parse is not None:
        return parse(text, Given(option, benchmark, env_type))
    if "://" in text:
        raise SpecError(
            f"{option} {text!r} is a policy server's address; a server serves a local policy: "
            f"module:attr or one of {', '.join(BUILTIN_POLICIES)}"
        )
    reference = split_reference(text)
    if reference is None:
        raise SpecError(f"{option} {text!r}: expected module:attr or one of {', '.join(BUILTIN_POLICIES)}")
    return LocalPolicy(*reference, option)


def build_policy(spec: PolicySpec, action_dim: int, benchmark: str = "") -> Policy:
    """The policy a spec names, checked to honour the contract: one built here, or a client of the
    server it addresses."""
    try:
        factory = spec.factory(action_dim, benchmark)
    except SpecError as exc:  # in a worker, a policy that cannot be found fails its episodes
        raise PolicyError(str(exc)) from None
    try:
        policy = factory()
    except EpisodeError:
        raise  # the episode's deadline (or a server fault) interrupted it: not the factory's own fault
    except Exception as exc:
        raise PolicyError(f"policy factory {spec.text!r} raised {type(exc).__name__}: {exc}") from exc
    return checked_policy(policy, spec.text)
