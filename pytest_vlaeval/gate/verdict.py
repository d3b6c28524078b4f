"""A gate's verdicts and exit status, shared by the fixed and the sequential gate and their reports."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

EXIT_GATE_FAILED = 6
"""Exit status of a session whose success rate regressed past the gate (pytest uses 0-5)."""

PASS, FAIL, UNDECIDED = "PASS", "FAIL", "UNDECIDED"
"""A gate's verdicts; UNDECIDED when the budget ran out first, or could never have decided."""

VERDICT_PREFIX = "vlaeval gate"
"""Every gate's verdict line starts ``vlaeval gate: PASS|FAIL|UNDECIDED: ``, for CI logs to grep."""


class Verdict(Protocol):
    """A gate's verdict as the session ends (the fixed gate's ``GateResult``, the sequential
    gate's ``SequentialResult``): what the reports, ``summary.json`` and the exit status read."""

    @property
    def outcome(self) -> str: ...

    @property
    def passed(self) -> bool: ...

    def verdict(self) -> str: ...

    def as_dict(self) -> dict[str, Any]: ...

    def made_with(self, note: str) -> Verdict:
        """This verdict, its line ending with ``note``: what the baseline was made with where it
        is another stack than this run's, or unknown (``results.made_with.gate_note``). A paired
        test assumes a seed replays an episode; on another stack it pairs only in distribution."""
        ...


def drop_verdict(lower: np.ndarray | float, upper: np.ndarray | float, max_drop: float) -> np.ndarray:
    """FAIL once the drop is surely above ``max_drop``, PASS once surely at or below it."""
    return np.where(np.asarray(lower) > max_drop, FAIL, np.where(np.asarray(upper) <= max_drop, PASS, UNDECIDED))


def min_sr_verdict(lower: np.ndarray | float, upper: np.ndarray | float, min_sr: float) -> np.ndarray:
    """PASS once the SR is surely at or above ``min_sr``, FAIL once surely below it."""
    return np.where(np.asarray(lower) >= min_sr, PASS, np.where(np.asarray(upper) < min_sr, FAIL, UNDECIDED))
