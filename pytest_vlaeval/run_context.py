"""What a session was asked to do, decided once by ``configure`` and read by every plugin it registers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_vlaeval.gate.settings import GateSettings
from pytest_vlaeval.results.rundir import RunDir, shard_label

if TYPE_CHECKING:
    from pytest_vlaeval.policy.loading import PolicySpec
    from pytest_vlaeval.spec import Selection


@dataclass(frozen=True)
class RunContext:
    selection: Selection
    policy: PolicySpec
    """What the run evaluates (for ``--vla-serve``, the served policy): its ``identity`` names the run."""
    render: str
    run_dir: Path
    retries: int = 0
    shard: tuple[int, int] | None = None
    merged_later: bool = False
    """The shard is one task of a scheduler's array (``--vla-shard=auto``): the array's shards share
    the run directory, each writes only its episode log, and the merge writes the run's files."""
    episode_list: tuple[tuple[str, int], ...] | None = None
    """``--vla-episode-list``: the only episodes of the universe this run's sessions may run
    (``vlaeval slurm --complete`` freezes what is missing into one, for its array to share)."""
    rerun: str | None = None
    gate: GateSettings = field(default_factory=GateSettings)
    """The gate's settings (no baseline and no min SR: no gate)."""
    timeout: float | None = None
    video: str = "none"
    lockstep: int = 1
    """``--vla-lockstep``: episodes of a task run together, one batched policy call per step."""
    reference_order: bool = False
    """``--vla-reference-order``: each task's seeds in order in one env, reset as the reference runner does."""
    episodes: frozenset[tuple[str, int]] = frozenset()
    """The episodes this session runs (the universe, a shard, or what a rerun selects)."""
    subset_note: str | None = None

    @property
    def policy_spec(self) -> str:
        """The run's policy as its reports and fingerprint name it."""
        return self.policy.identity

    @property
    def dir(self) -> RunDir:
        return RunDir(self.run_dir)

    @property
    def store_label(self) -> str:
        return shard_label(*self.shard) if self.shard else ""


WORKER_PLAN = "vla_plan"
"""``workerinput`` key: the episode ids the controller chose, so all workers collect the same."""
