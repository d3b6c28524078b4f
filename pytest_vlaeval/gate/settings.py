"""A gate's settings as one typed value: its defaults (``choices``) and the checks
between its options written once, whichever command gates (pytest, ``vlaeval merge``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from pytest_vlaeval.choices import DEFAULT_ALPHA, DEFAULT_MAX_DROP, DEFAULT_UNDECIDED_EXIT, RANDOM_BREAKS
from pytest_vlaeval.errors import SpecError

DEFAULT_BLOCK = 5
"""Seeds per block of the sequential gate (``--vla-block``)."""


@dataclass(frozen=True)
class GateSettings:
    baseline: Path | None = None
    """``--vla-baseline``: the run the gate compares with (None: no baseline; with ``min_sr``, none is needed)."""
    max_drop: float = DEFAULT_MAX_DROP
    alpha: float = DEFAULT_ALPHA
    assume: str = RANDOM_BREAKS
    """What a PASS may assume of how seeds move the tasks (``choices.GATE_ASSUMPTIONS``)."""
    undecided_exit: int = DEFAULT_UNDECIDED_EXIT
    plan_probability: float = 0.8
    """``--vla-gate-plan``: the chance of a correct verdict its recommended budget must reach."""
    sequential: bool = False
    """``--vla-sequential``: seeds in blocks, a look after each, early stop (``sequential_gate``)."""
    min_sr: float | None = None
    """One-sample mode of the sequential gate: is the split SR above this? Otherwise the drop against the baseline."""
    block: int = DEFAULT_BLOCK
    """Seeds per block: a look is taken after every task has run a block."""

    @classmethod
    def checked(
        cls,
        *,
        baseline: str | Path | None,
        sequential: bool = False,
        min_sr: float | None = None,
        block: int | None = None,
        shard: str | None = None,
        max_drop: float = DEFAULT_MAX_DROP,
        alpha: float = DEFAULT_ALPHA,
        assume: str = RANDOM_BREAKS,
        undecided_exit: int = DEFAULT_UNDECIDED_EXIT,
        plan_probability: float = 0.8,
    ) -> GateSettings:
        """The settings, or ``SpecError`` naming the options that do not go together (their ranges
        are checked where they are parsed)."""
        if not sequential and min_sr is not None:
            raise SpecError("--vla-min-sr is a sequential gate: add --vla-sequential")
        if sequential and shard:
            raise SpecError(
                "--vla-sequential looks at every task's seeds in one session; it does not combine with --vla-shard"
            )
        if sequential and (baseline is None) == (min_sr is None):
            raise SpecError("--vla-sequential needs exactly one of --vla-baseline=DIR or --vla-min-sr=X")
        return cls(
            Path(baseline) if baseline is not None else None,
            max_drop,
            alpha,
            assume,
            undecided_exit,
            plan_probability,
            sequential,
            min_sr,
            DEFAULT_BLOCK if block is None else block,
        )

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> GateSettings | None:
        """``vlaeval merge``'s fixed gate from its arguments (``choices.add_gate_options``); None
        without ``--baseline``."""
        if args.baseline is None:
            return None
        return cls.checked(
            baseline=args.baseline,
            max_drop=args.max_drop,
            alpha=args.alpha,
            assume=args.assume,
            undecided_exit=args.undecided_exit,
        )

    @property
    def threshold(self) -> float:
        """What the gate judges against: the min SR, or max drop."""
        return self.max_drop if self.min_sr is None else self.min_sr

    def block_of(self, seed_index: int) -> int:
        return seed_index // self.block
