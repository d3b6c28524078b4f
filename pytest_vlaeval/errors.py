"""Exception types. Each one maps to one outcome, so the mapping lives in the type, not in strings.

- ``SpecError``: the user's command line or benchmark file is wrong; the session does not start.
- ``EpisodeError`` and subclasses: the harness could not evaluate an episode (policy fault,
  simulator fault, missing asset, dead server). Reported as a pytest *error*, never a failure.
- ``EpisodeFailed``: the episode ran to its end and the success latch never fired.
"""

from __future__ import annotations


class SpecError(Exception):
    """Bad benchmark name, task, split or benchmark file."""


class EpisodeError(Exception):
    """An episode could not be evaluated; its message is one line."""

    kind = "error"


class PolicyError(EpisodeError):
    """The policy raised, or returned something that is not a valid action chunk."""

    kind = "policy"


class EnvError(EpisodeError):
    """The simulator could not be built, reset or stepped."""

    kind = "env"


class ServerError(EpisodeError):
    """A policy server could not be reached, timed out, refused a request or broke protocol."""

    kind = "server"


class AssetMissing(EnvError):
    """A data file the task needs is not installed."""

    kind = "asset"


class EpisodeTimeout(EnvError):
    """The episode ran past ``--vla-timeout``; the env it was using is not trusted again."""

    kind = "timeout"


class EpisodeFailed(AssertionError):
    """The success latch never fired."""
