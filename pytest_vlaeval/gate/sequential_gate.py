"""The sequential gate (``--vla-sequential``): evaluate seeds in blocks, look after each complete
block, and stop the session as soon as no episode can change the verdict: it is settled, or the
gate has taken its last look.

Seeds are the unit (``stats``): block b holds seeds ``start + b*B ... start + (b+1)*B - 1`` of
every task, and every task's block b is handed out before any task's block b+1 (collection
order serially; the affinity scheduler under xdist), so a look sees complete per-seed means.
At each look the bounds of the method the rule picked (the group-sequential t test where that is
safe, else the betting confidence sequence) are taken on the per-seed drops against the baseline,
the method chosen at session start on the baseline's outcomes, ``sequential.drop_method`` (or, with
``--vla-min-sr``, on the per-seed means, the method chosen again at every look on the task SRs
observed so far, since a min SR says nothing of them):
FAIL or PASS as soon as they exclude the other side of the threshold, UNDECIDED when the budget
runs out first (``--episodes``, or the last seed the baseline pairs, if that comes sooner). As in the fixed comparison, a seed where some task
has no completed episode (an error) leaves the look, so every per-seed value averages the same
tasks. Episodes the gate did not need are not errors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_vlaeval.gate.baseline import Baseline
from pytest_vlaeval.gate.methods import MIN_SEEDS, OBSERVED, Method, method_for, pass_rests_on
from pytest_vlaeval.gate.plan import Design, Profile, baseline_profile, min_sr_profile, run, start_lines
from pytest_vlaeval.gate.settings import GateSettings
from pytest_vlaeval.gate.stats import Outcomes, group_sr, paired_seed_sums, success_rate
from pytest_vlaeval.gate.verdict import PASS, UNDECIDED, VERDICT_PREFIX, drop_verdict, min_sr_verdict

if TYPE_CHECKING:
    from pytest_vlaeval.benchmark.model import Selection

CHANCE_PATHS = 200
"""Resampled paths behind a look's chance of deciding by the budget."""


def _method(baseline: Baseline | None, reference_srs: list[float], seeds: int, max_drop: float, assume: str) -> Method:
    """Against a baseline, the rule for drops on its outcomes; with a min SR, the plan's method
    (each look chooses again on the task SRs observed so far)."""
    if baseline:
        return baseline.method(seeds, max_drop, assume)
    return method_for(reference_srs, seeds, assume=assume)


@dataclass
class Look:
    block: int
    seeds: int
    estimate: float
    interval: tuple[float, float]
    verdict: str
    method: Method
    """How this look's bounds were taken."""
    missing: tuple[str, ...] = ()
    """Compared tasks with no completed episode up to this look: no seed pairs while any is."""
    chance: float | None = None
    """Undecided with budget left and at least ``MIN_SEEDS`` seeds: how likely a verdict is by the
    budget, from the seeds so far."""


@dataclass
class SequentialGate:
    """Counts what is pending per block, takes the looks, and says when to stop (a ``protocol.Gate``)."""

    settings: GateSettings
    start_seed: int
    seeds: int
    """The gate's budget: the seeds per task it can look at (``--episodes``, or fewer where the
    baseline has no seed to pair beyond)."""
    episodes: int
    """The session's seeds per task (``--episodes``)."""
    method: Method
    """The method chosen at session start (in min-SR mode, the plan's: each look chooses again)."""
    reference_srs: list[float]
    """The baseline's task SRs, or the min SR for every task: what the method was chosen on."""
    task_ids: tuple[str, ...]
    """The selected tasks: in min-SR mode every one of them is in the mean, none drops out."""
    baseline: Baseline | None = None
    pending: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    looks: list[Look] = field(default_factory=list)

    @classmethod
    def create(cls, settings: GateSettings, selection: Selection, baseline: Baseline | None) -> SequentialGate:
        """The gate for this selection; the method is chosen here, before any episode runs."""
        seeds = selection.episodes
        if settings.min_sr is None:
            assert baseline is not None
            reference_srs = baseline.srs()
            seeds = baseline.paired_seeds(selection.seeds)[-1] - selection.start_seed + 1
        else:
            reference_srs = [settings.min_sr] * len(selection.tasks)
        task_ids = tuple(task.env_id for task in selection.tasks)
        method = _method(baseline, reference_srs, seeds, settings.max_drop, settings.assume)
        return cls(
            settings,
            selection.start_seed,
            seeds,
            selection.episodes,
            method,
            reference_srs,
            task_ids,
            baseline,
        )

    @property
    def max_drop(self) -> float:
        return self.settings.max_drop

    @property
    def last_block(self) -> int:
        return self.settings.block_of(self.seeds - 1)

    @property
    def tasks(self) -> int:
        return len(self.reference_srs)

    def design(self, seeds: int) -> Design:
        """This gate at a budget of ``seeds``, for the plan."""
        return self._design(_method(self.baseline, self.reference_srs, seeds, self.max_drop, self.settings.assume))

    def _design(self, method: Method) -> Design:
        """This gate's looks with ``method``, as the simulation runs them."""
        settings = self.settings
        return Design(method, settings.alpha, settings.block, settings.threshold, settings.min_sr is not None)

    def profile(self) -> Profile:
        """What the plan simulates: the baseline's SRs and seed correlation, or with a min SR the
        pessimistic profile for it."""
        return baseline_profile(self.baseline) if self.baseline else min_sr_profile(self.tasks)

    @property
    def short_baseline(self) -> str:
        """Why the gate's budget is below the session's ('' when it is not)."""
        if self.seeds >= self.episodes:
            return ""
        return f"the baseline pairs none of this run's seeds after the first {self.seeds} of {self.episodes}"

    def start_lines(self) -> list[str]:
        """What to say before any episode runs: when PASS and FAIL are possible, and the chances."""
        lines = start_lines(self._design(self.method), self.profile(), self.seeds)
        if self.short_baseline:
            stops = (
                ", and the session stops there" if self.last_block < self.settings.block_of(self.episodes - 1) else ""
            )
            lines.append(
                f"{VERDICT_PREFIX}: {self.short_baseline}: the gate judges those{stops} "
                f"(a baseline run with --episodes={self.episodes} lets it use them all)"
            )
        return lines

    @property
    def planned_looks(self) -> int:
        """Looks the budget allows (every block's end)."""
        return self.last_block + 1

    def block_of_seed(self, seed: int) -> int:
        return self.settings.block_of(seed - self.start_seed)

    def schedule(self, seed: int) -> None:
        self.pending[self.block_of_seed(seed)] += 1

    def settle(self, seed: int, outcomes: Callable[[], Mapping[str, Outcomes]]) -> tuple[list[str], str | None]:
        """An episode of this session settled: the lines of the looks it completed that left the
        verdict open with looks to come (with their chance of deciding), and the reason to stop
        the session when no episode can change the verdict and episodes are still to run."""
        looked = len(self.looks)
        stop = self._look_when_due(seed, outcomes)
        lines = [self.look_line(look) for look in self.looks[looked:] if self.open_with_budget(look)]
        return lines, self._stop_reason() if stop else None

    def _look_when_due(self, seed: int, outcomes: Callable[[], Mapping[str, Outcomes]]) -> bool:
        """Take every look now due, on the run's completed episodes (``outcomes``: task -> seed ->
        success, asked for only when a look is due). True when the verdict is settled, or the
        gate's budget spent, with the session's blocks still to run. A settled verdict is final:
        later episodes (in flight when it was reached) add no look."""
        self.pending[self.block_of_seed(seed)] -= 1
        if self.done:
            return False
        while self._next_block() <= self.last_block and not any(self.pending[b] for b in range(self._next_block() + 1)):
            look = self._look(self._next_block(), outcomes())
            self.looks.append(look)
            if self.done:
                return any(pending > 0 for block, pending in self.pending.items() if block > look.block)
        return False

    def _stop_reason(self) -> str:
        """Why the session stops early, as pytest is told."""
        if self.outcome == UNDECIDED:
            return f"{UNDECIDED}: {self.short_baseline}"
        return f"{self.outcome}: the sequential gate's verdict is settled"

    def seed_blocks(self) -> SequentialGate:
        """The gate itself: the scheduler hands out its blocks in order, and asks it whether it is ``done``."""
        return self

    @property
    def done(self) -> bool:
        """The verdict is settled, or the gate has taken its last look: no episode adds to it."""
        return self.outcome != UNDECIDED or (bool(self.looks) and self.looks[-1].block == self.last_block)

    def _next_block(self) -> int:
        return self.looks[-1].block + 1 if self.looks else 0

    def _look(self, block: int, outcomes: Mapping[str, Outcomes]) -> Look:
        end = self.start_seed + (block + 1) * self.settings.block
        current = {task: {s: y for s, y in seeds.items() if s < end} for task, seeds in outcomes.items()}
        if self.settings.min_sr is None:
            assert self.baseline is not None
            compared = self.baseline.outcomes
            missing = tuple(t for t in compared if not current.get(t))
            sums = paired_seed_sums(
                {t: current.get(t, {}) for t in compared},
                {t: {s: y for s, y in o.items() if s < end} for t, o in compared.items()},
            )
            if not sums:
                return Look(block, 0, 0.0, (-1.0, 1.0), UNDECIDED, self.method, missing)
            drops = [-k / len(compared) for k in sums.values()]
            lower, upper = self._bounds(drops, self.method, (-1.0, 1.0))
            verdict = str(drop_verdict(lower, upper, self.max_drop))
            chance = self._chance(drops, self.method) if verdict == UNDECIDED else None
            return Look(
                block, len(sums), 0.0 + float(np.mean(drops)), (lower, upper), verdict, self.method, chance=chance
            )
        missing = tuple(t for t in self.task_ids if not current.get(t))
        seeds = [] if missing else sorted(set.intersection(*(set(current[t]) for t in self.task_ids)))
        if not seeds:
            return Look(block, 0, 0.0, (0.0, 1.0), UNDECIDED, self.method, missing)
        observed = [success_rate(sum(current[t].values()), len(current[t])) for t in self.task_ids]
        method = method_for(observed, self.seeds, OBSERVED, self.settings.assume)
        means = [group_sr(current[t][s] for t in self.task_ids) for s in seeds]
        lower, upper = self._bounds(means, method, (0.0, 1.0))
        verdict = str(min_sr_verdict(lower, upper, self.settings.min_sr))
        chance = self._chance(means, method) if verdict == UNDECIDED else None
        return Look(block, len(seeds), float(np.mean(means)), (lower, upper), verdict, method, chance=chance)

    def _bounds(self, values: list[float], method: Method, value_range: tuple[float, float]) -> tuple[float, float]:
        lower, upper = method.bounds(np.asarray(values), self.settings.alpha, self.planned_looks, value_range)
        return float(lower[-1]), float(upper[-1])

    def _chance(self, values: list[float], method: Method) -> float | None:
        """How likely a verdict is by the budget, judged from the seeds so far: the rest of the
        budget drawn from them with replacement, ``CHANCE_PATHS`` times, and the gate's own looks
        taken on each path. A guide for the CI user, not a guarantee: it takes what the first
        seeds showed for what the rest will show."""
        rest = self.seeds - len(values)
        if rest <= 0 or len(values) < MIN_SEEDS:
            return None
        rng = np.random.default_rng(len(values))
        so_far = np.asarray(values, dtype=float)
        paths = np.concatenate([np.tile(so_far, (CHANCE_PATHS, 1)), rng.choice(so_far, (CHANCE_PATHS, rest))], axis=1)
        verdicts, _ = run(paths, self._design(method))
        return float(np.mean(verdicts != UNDECIDED))

    def open_with_budget(self, look: Look) -> bool:
        """The look left the verdict open with looks still to come."""
        return look.verdict == UNDECIDED and look.block < self.last_block

    def look_line(self, look: Look) -> str:
        """A look that left the verdict open with looks to come: where it stands, and its chance
        of a verdict by the budget (from ``MIN_SEEDS`` seeds on: fewer say too little)."""
        low, high = look.interval
        what = "drop" if self.settings.min_sr is None else "split SR"
        if look.missing:
            chance = f"no completed episode of {', '.join(look.missing)} yet, so no seed pairs"
        elif look.chance is None:
            chance = f"too few seeds yet to judge how likely a verdict is by {self.seeds}"
        else:
            chance = f"about {look.chance:.0%} likely to decide by {self.seeds} seeds, judged from the seeds so far"
        return (
            f"{VERDICT_PREFIX} look {look.block + 1} at {look.seeds} seeds: {what} {look.estimate:+.3f} "
            f"[{low:+.3f}, {high:+.3f}], undecided; {chance}"
        )

    # -- the verdict -------------------------------------------------------------------------

    @property
    def outcome(self) -> str:
        return self.looks[-1].verdict if self.looks else UNDECIDED

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    def judge(
        self, per_task: Sequence[Mapping[str, Any]], unreported: int = 0, resume_command: str | None = None
    ) -> SequentialResult:
        """The verdict as the session ends, from the looks taken (not ``per_task``); after an early
        stop (``resume_command`` completes the run), the ``unreported`` episodes were saved."""
        return SequentialResult(self, unreported if resume_command is not None else None, resume_command)


@dataclass(frozen=True)
class SequentialResult:
    """The sequential gate's verdict as the session ends, and whether it stopped the session."""

    gate: SequentialGate
    saved: int | None = None
    """Episodes the session scheduled and never ran because no episode could change the verdict (None: no early stop)."""
    resume_command: str | None = None
    """The command that completes the canonical run after an early stop."""
    made_with_note: str | None = None
    """What the baseline was made with, where another stack than this run's (``Verdict.made_with``)."""

    @property
    def stopped(self) -> bool:
        return self.saved is not None

    @property
    def outcome(self) -> str:
        return self.gate.outcome

    @property
    def passed(self) -> bool:
        return self.gate.passed

    @property
    def _method(self) -> str:
        gate = self.gate
        method = gate.looks[-1].method if gate.looks else gate.method
        return f"sequential {method.name}, seeds as the unit ({method.reason})"

    def verdict(self) -> str:
        gate = self.gate
        alpha = gate.settings.alpha
        made_with = f"; {self.made_with_note}" if self.made_with_note else ""
        if not gate.looks:
            return (
                f"{VERDICT_PREFIX}: {UNDECIDED}: no block completed; method: {self._method}, alpha {alpha:g}{made_with}"
            )
        look = gate.looks[-1]
        low, high = look.interval
        label = f"{1 - alpha:.0%} {look.method.interval}"
        if gate.settings.min_sr is None:
            what = (
                f"split SR drop {look.estimate:+.3f} [{label} {low:+.3f}, {high:+.3f}] vs max drop {gate.max_drop:.3f}"
            )
        else:
            what = f"split SR {look.estimate:.3f} [{label} {low:.3f}, {high:.3f}] vs min SR {gate.settings.min_sr:.3f}"
        stop = f", stopped early ({self.saved} episodes saved)" if self.stopped else ""
        if gate.short_baseline:
            stop += f"; {gate.short_baseline}"
        if look.missing:
            stop += f"; no completed episode of {', '.join(look.missing)}, so no seed pairs"
        not_compared = (
            f"; not compared: {gate.baseline.not_compared}" if gate.baseline and gate.baseline.not_compared else ""
        )
        rests_on = ""
        if look.verdict == PASS:
            settings = gate.settings
            rests_on = f"; {pass_rests_on(look.method, alpha, settings.threshold, settings.min_sr is not None)}"
        return (
            f"{VERDICT_PREFIX}: {look.verdict}: {what} after {len(gate.looks)} looks ({look.seeds} seeds){stop}"
            f"{not_compared}; method: {self._method}, alpha {alpha:g}{rests_on}{made_with}"
        )

    def made_with(self, note: str) -> SequentialResult:
        return replace(self, made_with_note=note)

    def as_dict(self) -> dict[str, Any]:
        """The gate's fields in ``summary.json``."""
        gate = self.gate
        look = gate.looks[-1] if gate.looks else None
        return {
            "method": self._method,
            "verdict": self.outcome,
            "verdict_line": self.verdict(),
            "baseline": str(gate.baseline.directory) if gate.baseline else None,
            "max_drop": gate.max_drop if gate.settings.min_sr is None else None,
            "min_sr": gate.settings.min_sr,
            "alpha": gate.settings.alpha,
            "block_seeds": gate.settings.block,
            "looks": len(gate.looks),
            "seeds_looked_at": look.seeds if look else 0,
            "estimate": look.estimate if look else None,
            "bounds": list(look.interval) if look else None,
            "stopped_early": self.stopped,
            "episodes_saved": self.saved or 0,
            "complete_with": self.resume_command if self.stopped else None,
            "made_with": self.made_with_note,
        }
