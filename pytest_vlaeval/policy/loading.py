"""A ``--policy`` spec, parsed once into a typed value, and the policy it names.

The text is parsed here and nowhere else: a built-in name, a local ``module:attr``, or a
server's address (``serving.url``, imported only then). A local policy is built here; an
address is handed to ``serving``. A server builds local policies only: it never proxies another
server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_vlaeval.errors import EpisodeError, PolicyError, SpecError
from pytest_vlaeval.importing import load_reference, split_reference
from pytest_vlaeval.policy.builtins import BUILTIN_POLICIES
from pytest_vlaeval.policy.contract import Policy, checked_policy

if TYPE_CHECKING:
    from pytest_vlaeval.serving.url import RemoteSpec


@dataclass(frozen=True)
class BuiltinPolicy:
    """One of ``BUILTIN_POLICIES``, made with the benchmark's action dimension."""

    name: str
    option: str = field(default="--policy", compare=False)
    """The option it was given with, for the messages about it."""

    @property
    def text(self) -> str:
        return self.name

    @property
    def server_args(self) -> tuple[str, ...]:
        """What ``vlaeval serve --policy TEXT`` needs besides the text to build it: nothing."""
        return ()

    @property
    def identity(self) -> str:
        return self.name


@dataclass(frozen=True)
class LocalPolicy:
    """``module:attr``: a class or zero-argument factory in an importable module."""

    module: str
    attr: str
    option: str = field(default="--policy", compare=False)
    """The option it was given with, for the messages about it."""

    @property
    def text(self) -> str:
        return f"{self.module}:{self.attr}"

    @property
    def server_args(self) -> tuple[str, ...]:
        """What ``vlaeval serve --policy TEXT`` needs besides the text to build it: nothing."""
        return ()

    @property
    def identity(self) -> str:
        return self.text


@dataclass(frozen=True)
class LeRobotCheckpoint:
    """``lerobot:PATH``: a LeRobot pretrained-model directory, served from LeRobot's interpreter
    (``policy.lerobot``) with the env processors of ``env_type`` (the benchmark's LeRobot env)."""

    path: Path
    env_type: str | None = None
    option: str = field(default="--policy", compare=False)
    """The option it was given with, for the messages about it."""

    INTERPRETER = "lerobot"
    """The interpreter of its own it runs in (``vlaeval install lerobot``)."""

    @property
    def text(self) -> str:
        return f"{LEROBOT_PREFIX}{self.path}"

    @property
    def server_args(self) -> tuple[str, ...]:
        """What ``vlaeval serve --policy TEXT`` needs besides the text to build it: the env type."""
        return (ENV_TYPE_OPTION, self.env_type) if self.env_type else ()

    @property
    def identity(self) -> str:
        return self.text


LEROBOT_PREFIX = "lerobot:"
ENV_TYPE_OPTION = "--env-type"
"""``vlaeval serve``'s option for the env type a served spec is parsed with (``parse_local_policy``)."""

LocalSpec = BuiltinPolicy | LocalPolicy | LeRobotCheckpoint
"""What a policy server can serve: a policy it builds itself."""

if TYPE_CHECKING:
    PolicySpec = LocalSpec | RemoteSpec
    """Each has ``text`` (as given) and ``identity`` (what the run's fingerprint and name record)."""


def parse_policy(text: str) -> PolicySpec:
    """The typed value of a ``--policy`` spec; ``SpecError`` saying what is wrong."""
    if "://" in text:
        from pytest_vlaeval.serving.url import parse_remote_spec

        return parse_remote_spec(text)
    return parse_local_policy(text)


def parse_local_policy(text: str, env_type: str | None = None, option: str = "--policy") -> LocalSpec:
    """A spec a server can serve, given with ``option``: a built-in, ``module:attr`` or
    ``lerobot:PATH`` (its processors those of LeRobot's env ``env_type``, the benchmark's), never
    another server's address."""
    if text in BUILTIN_POLICIES:
        return BuiltinPolicy(text, option)
    if text.startswith(LEROBOT_PREFIX):
        path = text.removeprefix(LEROBOT_PREFIX)
        if not path:
            raise SpecError(f"{option} {text!r}: expected lerobot:PATH, PATH a LeRobot pretrained-model directory")
        return LeRobotCheckpoint(Path(path).expanduser().resolve(), env_type, option)  # checkpoints/last is a link
    if "://" in text:
        raise SpecError(
            f"{option} {text!r} is a policy server's address; a server serves a local policy: "
            f"module:attr or one of {', '.join(BUILTIN_POLICIES)}"
        )
    reference = split_reference(text)
    if reference is None:
        raise SpecError(f"{option} {text!r}: expected module:attr or one of {', '.join(BUILTIN_POLICIES)}")
    return LocalPolicy(*reference, option)


def resolve_policy_factory(spec: LocalSpec) -> Any:
    """Find the class or factory a local spec names (imports the user's module, or LeRobot)."""
    if isinstance(spec, BuiltinPolicy):
        return BUILTIN_POLICIES[spec.name]
    if isinstance(spec, LeRobotCheckpoint):
        return _lerobot_factory(spec)
    try:
        factory = load_reference(spec.module, spec.attr)
    except ImportError as exc:
        raise SpecError(f"{spec.option} {spec.text!r}: cannot import {spec.module!r}: {exc}") from None
    except AttributeError:
        raise SpecError(f"{spec.option} {spec.text!r}: module {spec.module!r} has no attribute {spec.attr!r}") from None
    if not callable(factory):
        raise SpecError(f"{spec.option} {spec.text!r}: {spec.attr!r} is not a class or factory")
    return factory


def _lerobot_factory(spec: LeRobotCheckpoint) -> Any:
    if spec.env_type is None:
        raise SpecError(
            f"{spec.option} {spec.text!r}: no LeRobot env type for its observations (the benchmark file's "
            f"lerobot.env_type; vlaeval serve {ENV_TYPE_OPTION})"
        )
    try:
        from pytest_vlaeval.policy.lerobot import LeRobotPolicy
    except ImportError as exc:
        raise SpecError(f"{spec.option} {spec.text!r} runs in LeRobot's interpreter: {exc}") from None
    return lambda: LeRobotPolicy(str(spec.path), spec.env_type)


def local_policy(spec: LocalSpec, action_dim: int) -> Policy:
    """Instantiate the local policy a spec names and check it honours the contract."""
    try:
        factory = resolve_policy_factory(spec)
    except SpecError as exc:  # in a worker, a policy that cannot be found fails its episodes
        raise PolicyError(str(exc)) from None
    try:
        policy = factory(action_dim) if isinstance(spec, BuiltinPolicy) else factory()
    except EpisodeError:
        raise  # the episode's deadline (or a server fault) interrupted it: not the factory's own fault
    except Exception as exc:
        raise PolicyError(f"policy factory {spec.text!r} raised {type(exc).__name__}: {exc}") from exc
    return checked_policy(policy, spec.text)


def build_policy(spec: PolicySpec, action_dim: int, benchmark: str = "") -> Policy:
    """The policy a spec names: a local one, or a client of the server it addresses."""
    if isinstance(spec, (BuiltinPolicy, LocalPolicy, LeRobotCheckpoint)):
        return local_policy(spec, action_dim)
    from pytest_vlaeval.serving.client.connect import connect_policy

    return connect_policy(spec, action_dim, benchmark)
