"""The canonical output's records, shared by the producer (``canonical``) and every reader
(gate, merge, reports, chart, progress, ``evaluate``'s ``Summary``).

The field names are the benchmark reference runner's; the fields under "additions" are ours.
A baseline written by the reference runner has the reference fields only, hence ``total=False``
on what a reader of a baseline may miss.

A benchmark's axes (``spec.Axis``) add keys of their own: each task's group under the axis's
field (MIKASA: ``memory_type``), and the group SRs and intervals under the axis's summary key
(``sr_per_memory_type``, ``sr_per_memory_type_ci95``); ``RunSummary.axes`` lists them for readers.
The split's are typed here, as every benchmark has one. So does its reporting (``spec.Reporting``):
env options copied into each task's file (MIKASA's ``control_mode``, ``obs_mode``,
``wrapper_chain``), its episode extras summarised per task and per run (LIBERO's
``replayed_resets``, Push-T's ``avg_max_reward``) and its pooled success key (``pc_success``).
"""

from __future__ import annotations

from typing import Any, TypedDict


class TaskError(TypedDict):
    seed: int
    message: str


class EpisodeRef(TypedDict):
    task: str
    seed: int


class ErroredEpisode(EpisodeRef):
    message: str


class ReferenceTaskResult(TypedDict):
    """``<ENV_ID>.json`` as the benchmark's reference runner writes it."""

    env_id: str
    split: str
    start_seed: int
    n_episodes: int
    successes: list[bool]
    returns: list[float]
    sr: float
    mean_return: float
    benchmark_commit: str | None
    action_chunk_size: int | None
    model: dict[str, Any]
    episode_lengths: list[int]
    episode_seeds: list[int]


class TaskResult(ReferenceTaskResult):
    """``<ENV_ID>.json`` as we write it: the reference fields, then our additions."""

    sr_ci95: list[float]
    n_expected: int
    n_errors: int
    errors: list[TaskError]
    complete: bool
    render_backend: str | None


class AxisEntry(TypedDict):
    """One axis in ``summary.json``: the task field, its label, and the summary keys of its group
    SRs and their intervals."""

    field: str
    label: str
    summary: str
    intervals: str


class GridSummary(TypedDict):
    """``summary.json``'s ``grid``: two axes as a table of SRs, and the benchmark's total over it."""

    rows: str
    columns: str
    cells: dict[str, dict[str, float | None]]
    total: float | None
    total_ci95: list[float] | None
    total_definition: str
    missing_cells: list[str]
    """``row/column`` of each cell without results (not run here, or not runnable)."""
    complete: bool
    unavailable_splits: dict[str, str]
    """The benchmark's splits this install cannot run, with why (LIBERO-PRO's environment perturbation)."""


class PairedGroup(TypedDict):
    """A group's tasks against their controls, on the seeds each task and its control completed."""

    n_tasks: int
    sr: float
    control_sr: float
    difference: float
    """The mean over the group's tasks of (task SR - its control's SR)."""
    difference_ci95: list[float]


class ControlArm(TypedDict):
    """``summary.json``'s ``control_arm``: the benchmark's control tasks (its ``controls``), which are
    in no other SR, and every group's paired difference against them."""

    field: str
    group: str
    pair_by: str
    tasks: list[str]
    sr: float
    sr_ci95: list[float]
    paired: dict[str, dict[str, PairedGroup]]
    """axis field -> group -> the group against its tasks' controls."""
    method: str


class _SummaryGate(TypedDict, total=False):
    gate: dict[str, Any]
    """The gate's verdict and evidence, once a gate has judged the run."""
    grid: GridSummary
    """For a benchmark that declares a grid (LIBERO-PRO)."""
    control_arm: ControlArm
    """For a run that holds a benchmark's control tasks (LIBERO-Plus with ``--vla-control-arm``)."""
    interval_clusters: str
    """The axis whose groups are the independent units of the group intervals, where they are not the seeds."""


class RunSummary(_SummaryGate):
    """``summary.json``: the reference runner's split summary, then our additions."""

    split: str
    sr_split: float | None
    tasks: list[str]
    per_task_sr: dict[str, float]
    per_task_mean_return: dict[str, float]
    benchmark: str
    benchmark_version: str
    benchmark_commit: str | None
    selected_split: str
    sr_split_ci95: list[float] | None
    sr_per_split: dict[str, float]
    sr_per_split_ci95: dict[str, list[float]]
    axes: list[AxisEntry]
    per_task_sr_ci95: dict[str, list[float]]
    ci95_methods: dict[str, str]
    start_seed: int
    n_episodes_per_task: int
    canonical_protocol: bool
    action_chunk_size: int | None
    model: dict[str, Any]
    render_backend: str | None
    sr_pooled: float | None
    """Successes over completed episodes, pooled over tasks (LeRobot's overall rate; not ``sr_split``)."""
    sr_pooled_ci95: list[float] | None
    benchmark_metrics: list[str]
    """The benchmark's own summary keys (``pc_success``, ``avg_max_reward``), for readers."""
    privileged_info_to_policy: bool
    n_tasks_expected: int
    tasks_without_results: list[str]
    n_expected: int
    n_completed: int
    n_errors: int
    n_missing: int
    errored_episodes: list[ErroredEpisode]
    rerolled_failures: list[EpisodeRef]
    n_rerolled: int
    partial: bool
    interrupted: bool
    written_at: str


Canonical = tuple[RunSummary, list[TaskResult]]
"""A run's canonical output: the summary and the per-task results."""


class _FingerprintBatch(TypedDict, total=False):
    num_envs: int
    """Episodes one simulator stepped together, when more than one (``--vla-lockstep`` on a GPU)."""
    order: str
    """``reference`` under ``--vla-reference-order``."""


class Machine(TypedDict, total=False):
    """A host a run's sessions ran on, as ``results.made_with`` probes it; a key it lacks is unknown."""

    arch: str
    cpu: str
    """The CPU's model name (``/proc/cpuinfo``), or what the platform says of it elsewhere."""
    cpu_flags: list[str]
    """Its vector extensions among ``made_with.VECTOR_EXTENSIONS``: they change a simulator's floats."""
    gpus: list[str]
    """Each NVIDIA GPU model with its driver, as ``nvidia-smi`` lists them; empty: none listed."""
    system_packages: dict[str, str]
    """The installed versions of the benchmark file's ``install.system_packages`` (Mesa's drivers)."""
    workers_elsewhere: bool
    """The session's workers ran on other hosts (``--tx ssh=``): this is the controller's host only."""


class _FingerprintMadeWith(TypedDict, total=False):
    """What the numbers were made with beyond the packages, absent from runs made before it was
    recorded (``results.made_with``)."""

    assets: dict[str, str | None]
    """The selected tasks' assets: each one's pinned sha256, null where the benchmark file pins none."""
    machines: list[Machine]
    """Every host a session of the run ran on, the first session's first: not part of what must
    match (a run may be resumed elsewhere), but what its seeds pair by."""


class Fingerprint(_FingerprintBatch, _FingerprintMadeWith):
    """``fingerprint.json``: what must match for sessions to share a run (``results.store``), and
    what the run was made with."""

    benchmark: str
    benchmark_version: str
    benchmark_digest: str
    split: str
    tasks: list[str]
    start_seed: int
    episodes: int
    policy: str
    render: str
    packages: dict[str, str | None]
    package_digest: str
    """``version.package_digest`` of the controller's copy of this package (a benchmark's own
    interpreter is checked to hold the same files): which code produced the run."""
