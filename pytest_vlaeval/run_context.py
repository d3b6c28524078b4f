"""What a session was asked to do, decided once by ``configure`` and read by every plugin it
registers: the benchmark's selection and the policy, then three groups, each checking its own
conflicts where it is built: which episodes (``Subset``), how they run (``Execution``), and the
gate (``GateSettings``)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.settings import GateSettings
from pytest_vlaeval.results.rundir import RunDir, shard_label

if TYPE_CHECKING:
    from pytest_vlaeval.benchmark.model import Selection
    from pytest_vlaeval.policy.loading import PolicySpec


@dataclass(frozen=True)
class Execution:
    """How each episode runs, the same in every process of the run."""

    render: str = "auto"
    retries: int = 0
    timeout: float | None = None
    video: str = "none"
    lockstep: int = 1
    """``--vla-lockstep``: episodes of a task run together, one batched policy call per step."""
    reference_order: bool = False
    """``--vla-reference-order``: each task's seeds in order in one env, reset as the reference runner does."""

    @classmethod
    def checked(
        cls,
        render: str,
        *,
        retries: int = 0,
        timeout: float | None = None,
        video: str = "none",
        lockstep: int = 1,
        reference_order: bool = False,
    ) -> Execution:
        """The execution, refused in one line where two of its options cannot go together."""
        if reference_order and (lockstep > 1 or retries):
            given = f"--vla-lockstep={lockstep}" if lockstep > 1 else f"--vla-retries={retries}"
            raise SpecError(reference_order_refusal(given))
        if video != "none" and lockstep > 1:
            raise SpecError(
                f"--vla-video={video} records lone episodes; it does not combine with --vla-lockstep={lockstep}"
            )
        if video != "none" and importlib.util.find_spec("cv2") is None:
            raise SpecError(
                f"--vla-video={video} writes videos with OpenCV, which is not installed: pip install 'pytest-vlaeval[video]'"
            )
        return cls(render, retries, timeout, video, lockstep, reference_order)


def reference_order_refusal(given: str) -> str:
    """The one line refusing what would break ``--vla-reference-order``'s sequences."""
    return (
        f"--vla-reference-order runs each task's seeds in order in one env, from its first; {given} would "
        f"break that sequence"
    )


@dataclass(frozen=True)
class Subset:
    """Which of the selection's episodes the run holds, and which this session runs."""

    shard: tuple[int, int] | None = None
    merged_later: bool = False
    """The shard is one task of a scheduler's array (``--vla-shard=auto``): the array's shards share
    the run directory, each writes only its episode log, and the merge writes the run's files."""
    episode_list: tuple[tuple[str, int], ...] | None = None
    """``--vla-episode-list``: the only episodes of the universe this run's sessions may run
    (``vlaeval slurm --complete`` freezes what is missing into one, for its array to share)."""
    rerun: str | None = None
    episodes: frozenset[tuple[str, int]] = frozenset()
    """The episodes this session runs (the universe, a shard, or what a rerun selects)."""
    note: str | None = None
    """Why the session runs less than the universe, said at its start."""

    @property
    def store_label(self) -> str:
        return shard_label(*self.shard) if self.shard else ""


@dataclass(frozen=True)
class RunContext:
    selection: Selection
    policy: PolicySpec
    """What the run evaluates (for ``--vla-serve``, the served policy): its ``identity`` names the run."""
    run_dir: Path
    execution: Execution = field(default_factory=Execution)
    subset: Subset = field(default_factory=Subset)
    gate: GateSettings = field(default_factory=GateSettings)
    """The gate's settings (no baseline and no min SR: no gate)."""

    @property
    def dir(self) -> RunDir:
        return RunDir(self.run_dir)


WORKER_PLAN = "vla_plan"
"""``workerinput`` key: the episode ids the controller chose, so all workers collect the same."""
