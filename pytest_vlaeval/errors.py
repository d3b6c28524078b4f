"""Exception types. Each one maps to one outcome, so the mapping lives in the type, not in strings.

- ``SpecError``: the user's command line or benchmark file is wrong; the session does not start.
- ``EpisodeError`` and subclasses: the harness could not evaluate an episode (policy fault,
  simulator fault, missing asset, dead server, crashed worker). Reported as a pytest *error*,
  never a failure; its ``kind`` is the record's ``error_kind``.
- ``EpisodeFailed``: the episode ran to its end and the success latch never fired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class SpecError(Exception):
    """Bad benchmark name, task, split or benchmark file."""


class ResultsUnwritable(Exception):
    """A file of the run could not be written (a full disk, a quota, a read-only mount); its
    message is one line naming the file."""


class EpisodeError(Exception):
    """An episode could not be evaluated; its message is one line."""

    kind = "error"

    def __init_subclass__(cls, kind: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = kind or cls.kind


# Raised on a worker, by the policy, the simulator or a policy server.
class PolicyError(EpisodeError, kind="policy"):
    """The policy raised, or returned something that is not a valid action chunk."""


class EnvError(EpisodeError, kind="env"):
    """The simulator could not be built, reset or stepped."""


class ServerError(EpisodeError, kind="server"):
    """A policy server could not be reached, timed out, refused a request or broke protocol."""


class AssetMissing(EnvError, kind="asset"):
    """A data file the task needs is not installed."""


class EpisodeTimeout(EnvError, kind="timeout"):
    """The episode ran past ``--vla-timeout``; the env it was using is not trusted again."""


# Recorded by the controller, for an episode whose worker could not report it.
class WorkerCrash(EpisodeError, kind="crash"):
    """The worker running the episode died (or was ended for being stuck past its deadline)."""


class HarnessFault(EpisodeError, kind="harness"):
    """The harness failed before the episode could run (a pytest error outside the episode)."""


class ResultLost(EpisodeError, kind="lost"):
    """The episode was scheduled but no worker ever reported it."""


class EpisodeFailed(AssertionError):
    """The success latch never fired."""


class EnvCloseWarning(UserWarning):
    """An env raised while being closed: its episodes are over and counted; no episode is charged."""


def env_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call into the env; an unexpected exception becomes ``EnvError`` naming the call."""
    return blame(EnvError, "env", fn, *args, **kwargs)


def blame(error: type[EpisodeError], owner: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn``; an unexpected exception becomes ``error`` naming who raised it, ``SystemExit``
    too (a policy or env calling ``sys.exit`` has failed, not ended the session)."""
    try:
        return fn(*args, **kwargs)
    except EpisodeError:
        raise
    except (Exception, SystemExit) as exc:
        raise error(f"{owner}.{fn.__name__} raised {type(exc).__name__}: {exc}") from exc
