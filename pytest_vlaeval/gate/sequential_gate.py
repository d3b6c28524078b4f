"""The sequential gate (``--vla-sequential``): evaluate seeds in blocks, look after each complete
block, and stop the session as soon as the verdict is settled.

Seeds are the unit (``stats``): block b holds seeds ``start + b*B ... start + (b+1)*B - 1`` of
every task, and every task's block b is handed out before any task's block b+1 (collection
order serially; the affinity scheduler under xdist), so a look sees complete per-seed means.
At each look the anytime-valid confidence sequence of ``sequential`` is evaluated on the
per-seed paired differences with the baseline (or, with ``--vla-min-sr``, on the per-seed
means): FAIL or PASS as soon as it excludes the other side of the threshold, UNDECIDED when
the budget (``--episodes``) runs out first. As in the fixed comparison, a seed where some task
has no completed episode (an error) leaves the look, so every per-seed value averages the same
tasks. Episodes the gate did not need are not errors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.fixed import load_baseline, outcomes_by_task
from pytest_vlaeval.gate.sequential import drop_bounds, drop_verdict, mean_bounds, min_sr_verdict
from pytest_vlaeval.gate.stats import Outcomes, group_sr, paired_seed_sums
from pytest_vlaeval.gate.verdict import PASS, UNDECIDED, VERDICT_PREFIX
from pytest_vlaeval.results.record import EpisodeRecord

if TYPE_CHECKING:
    from pytest_vlaeval.context import RunContext
    from pytest_vlaeval.distribute.scheduler import SequentialBlocks

METHOD = "anytime-valid betting confidence sequence (Waudby-Smith & Ramdas 2024), seeds as the unit"

DEFAULT_ALPHA = 0.05
DEFAULT_BLOCK = 5
DEFAULT_UNDECIDED_EXIT = 7
"""Exit status when the budget ran out before the verdict was settled (pytest uses 0-5, the gate 6)."""


@dataclass(frozen=True)
class SequentialSettings:
    alpha: float
    block: int
    """Seeds per block: a look is taken after every task has run a block."""
    undecided_exit: int
    min_sr: float | None = None
    """One-sample mode: is the split SR above this? Otherwise the drop against the baseline."""

    def block_of(self, seed_index: int) -> int:
        return seed_index // self.block


def settings(
    *,
    sequential: bool,
    baseline: str | None,
    shard: str | None,
    min_sr: float | None,
    alpha: float | None,
    block: int | None,
    undecided_exit: int | None,
) -> SequentialSettings | None:
    """The sequential gate's settings from its options, or None without ``--vla-sequential``."""
    if not sequential:
        if min_sr is not None:
            raise SpecError("--vla-min-sr is a sequential gate: add --vla-sequential")
        return None
    if shard:
        raise SpecError(
            "--vla-sequential looks at every task's seeds in one session; it does not combine with --vla-shard"
        )
    if (baseline is None) == (min_sr is None):
        raise SpecError("--vla-sequential needs exactly one of --vla-baseline=DIR or --vla-min-sr=X")
    if min_sr is not None and not 0 <= min_sr <= 1:
        raise SpecError(f"--vla-min-sr must be a success rate in [0, 1], got {min_sr}")
    block = DEFAULT_BLOCK if block is None else block
    undecided_exit = DEFAULT_UNDECIDED_EXIT if undecided_exit is None else undecided_exit
    if block < 1:
        raise SpecError(f"--vla-block must be >= 1 seed, got {block}")
    if not 0 <= undecided_exit <= 255:
        raise SpecError(f"--vla-undecided-exit must be an exit status in 0-255, got {undecided_exit}")
    return SequentialSettings(DEFAULT_ALPHA if alpha is None else alpha, block, undecided_exit, min_sr)


@dataclass
class Look:
    block: int
    seeds: int
    estimate: float
    interval: tuple[float, float]
    verdict: str


@dataclass
class SequentialGate:
    """Counts what is pending per block, takes the looks, and says when to stop."""

    settings: SequentialSettings
    start_seed: int
    last_block: int
    max_drop: float
    baseline_dir: Path | None = None
    baseline: dict[str, Outcomes] = field(default_factory=dict)
    pending: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    looks: list[Look] = field(default_factory=list)
    stopped: bool = False
    saved: int = 0
    """Episodes this session scheduled and never ran, because the verdict was settled."""
    resume_command: str | None = None
    """The command that completes the canonical run after an early stop."""

    @classmethod
    def create(cls, run: RunContext) -> SequentialGate:
        """From the run's context; a baseline that cannot pair with this run is a usage error."""
        selection = run.selection
        gate = cls(run.sequential, selection.start_seed, (selection.episodes - 1) // run.sequential.block, run.max_drop)
        if run.sequential.min_sr is None:
            try:
                found = outcomes_by_task(load_baseline(run.baseline).values())
            except (OSError, ValueError) as exc:
                raise SpecError(f"--vla-sequential: cannot read the baseline: {exc}") from None
            tasks = [t.env_id for t in selection.tasks if found.get(t.env_id)]
            if not tasks:
                raise SpecError(
                    f"--vla-sequential: the baseline {run.baseline} has no per-seed results (episode_seeds) "
                    "for any selected task"
                )
            gate.baseline_dir, gate.baseline = run.baseline, {t: found[t] for t in tasks}
        return gate

    def block_of_seed(self, seed: int) -> int:
        return self.settings.block_of(seed - self.start_seed)

    def scheduling(self) -> SequentialBlocks:
        """What the affinity scheduler needs: blocks by node id, and whether to stop sending."""
        from pytest_vlaeval.distribute.scheduler import SequentialBlocks
        from pytest_vlaeval.episodes.nodeid import parse_nodeid

        def block_of(nodeid: str) -> int:
            key = parse_nodeid(nodeid)
            return self.block_of_seed(key[1]) if key else 0

        return SequentialBlocks(block_of, lambda: self.stopped)

    def schedule(self, seed: int) -> None:
        self.pending[self.block_of_seed(seed)] += 1

    def settle(self, seed: int, latest: Mapping[tuple[str, int], EpisodeRecord]) -> bool:
        """An episode of this session is settled; take every look now due. True when the verdict
        is settled with blocks still to run (the caller stops the session and sets ``stopped``).
        A settled verdict is final: later episodes (in flight when it was reached) add no look."""
        self.pending[self.block_of_seed(seed)] -= 1
        if self.outcome != UNDECIDED:
            return False
        while self._next_block() <= self.last_block and not any(self.pending[b] for b in range(self._next_block() + 1)):
            look = self._look(self._next_block(), latest)
            self.looks.append(look)
            if look.verdict != UNDECIDED:
                return look.block < self.last_block
        return False

    def _next_block(self) -> int:
        return self.looks[-1].block + 1 if self.looks else 0

    def _look(self, block: int, latest: Mapping[tuple[str, int], EpisodeRecord]) -> Look:
        end = self.start_seed + (block + 1) * self.settings.block
        current: dict[str, dict[int, bool]] = defaultdict(dict)
        for (task, seed), record in latest.items():
            if seed < end and record.completed:
                current[task][seed] = bool(record.success)
        alpha = self.settings.alpha
        if self.settings.min_sr is None:
            sums = paired_seed_sums(
                {t: current.get(t, {}) for t in self.baseline},
                {t: {s: y for s, y in o.items() if s < end} for t, o in self.baseline.items()},
            )
            if not sums:
                return Look(block, 0, 0.0, (-1.0, 1.0), UNDECIDED)
            estimate, lower, upper = drop_bounds([k / len(self.baseline) for k in sums.values()], alpha)
            verdict = str(drop_verdict(lower[-1], upper[-1], self.max_drop))
            return Look(block, len(sums), float(estimate[-1]), (float(lower[-1]), float(upper[-1])), verdict)
        tasks = [t for t in current if current[t]]
        seeds = sorted(set.intersection(*(set(current[t]) for t in tasks))) if tasks else []
        if not seeds:
            return Look(block, 0, 0.0, (0.0, 1.0), UNDECIDED)
        means = [group_sr(current[t][s] for t in tasks) for s in seeds]
        estimate, lower, upper = mean_bounds(means, alpha)
        verdict = str(min_sr_verdict(lower[-1], upper[-1], self.settings.min_sr))
        return Look(block, len(seeds), float(estimate[-1]), (float(lower[-1]), float(upper[-1])), verdict)

    # -- the verdict -------------------------------------------------------------------------

    @property
    def outcome(self) -> str:
        return self.looks[-1].verdict if self.looks else UNDECIDED

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    def verdict(self) -> str:
        alpha = self.settings.alpha
        if not self.looks:
            return f"{VERDICT_PREFIX}: {UNDECIDED}: no block completed; method: {METHOD}, alpha {alpha:g}"
        look = self.looks[-1]
        low, high = look.interval
        if self.settings.min_sr is None:
            what = f"split SR drop {look.estimate:+.3f} [{1 - alpha:.0%} CS {low:+.3f}, {high:+.3f}] vs max drop {self.max_drop:.3f}"
        else:
            what = f"split SR {look.estimate:.3f} [{1 - alpha:.0%} CS {low:.3f}, {high:.3f}] vs min SR {self.settings.min_sr:.3f}"
        stop = f", stopped early ({self.saved} episodes saved)" if self.stopped else ""
        return (
            f"{VERDICT_PREFIX}: {look.verdict}: {what} after {len(self.looks)} looks ({look.seeds} seeds){stop}; "
            f"method: {METHOD}, alpha {alpha:g}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The gate's fields in ``summary.json``."""
        look = self.looks[-1] if self.looks else None
        return {
            "method": METHOD,
            "verdict": self.outcome,
            "verdict_line": self.verdict(),
            "baseline": str(self.baseline_dir) if self.baseline_dir else None,
            "max_drop": self.max_drop if self.settings.min_sr is None else None,
            "min_sr": self.settings.min_sr,
            "alpha": self.settings.alpha,
            "block_seeds": self.settings.block,
            "looks": len(self.looks),
            "seeds_looked_at": look.seeds if look else 0,
            "estimate": look.estimate if look else None,
            "confidence_sequence": list(look.interval) if look else None,
            "stopped_early": self.stopped,
            "episodes_saved": self.saved,
            "complete_with": self.resume_command if self.stopped else None,
        }
