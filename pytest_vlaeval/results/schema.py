"""The canonical output's records, shared by the producer (``canonical``) and every reader
(gate, merge, reports, chart, progress, ``evaluate``'s ``Summary``).

The field names are the benchmark reference runner's; the fields under "additions" are ours.
A baseline written by the reference runner has the reference fields only, hence ``total=False``
on what a reader of a baseline may miss.

A benchmark's axes (``spec.Axis``) add keys of their own: each task's group under the axis's
field (MIKASA: ``memory_type``), and the group SRs and intervals under the axis's summary key
(``sr_per_memory_type``, ``sr_per_memory_type_ci95``); ``Summary.axes`` lists them for readers.
The split's are typed here, as every benchmark has one.
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
    control_mode: str | None
    obs_mode: str | None
    wrapper_chain: str | None
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
    replayed_resets: int
    """Env resets replayed to bring episodes to their canonical state (LIBERO; 0 when run in order)."""


class AxisEntry(TypedDict):
    """One axis in ``summary.json``: the task field, its label, and the summary keys of its group
    SRs and their intervals."""

    field: str
    label: str
    summary: str
    intervals: str


class _SummaryGate(TypedDict, total=False):
    gate: dict[str, Any]
    """The gate's verdict and evidence, once a gate has judged the run."""


class Summary(_SummaryGate):
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
    replayed_resets: int
    """Env resets replayed to bring episodes to their canonical state (LIBERO; 0 when run in order)."""
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


Canonical = tuple[Summary, list[TaskResult]]
"""A run's canonical output: the summary and the per-task results."""


class _FingerprintBatch(TypedDict, total=False):
    num_envs: int
    """Episodes one simulator stepped together, when more than one (``--vla-lockstep`` on a GPU)."""
    order: str
    """``reference`` under ``--vla-reference-order``."""


class Fingerprint(_FingerprintBatch):
    """``fingerprint.json``: what must match for sessions to share a run (``results.store``)."""

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
