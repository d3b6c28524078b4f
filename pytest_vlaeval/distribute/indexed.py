"""``--vla-shard=auto``: this session's shard from the environment an indexed-job scheduler sets,
so one command line serves every task of a Slurm job array, a Kubernetes Indexed Job or a CI
matrix. Whatever is missing or inconsistent is one line before any episode runs.

- Slurm job arrays (looked at first: sbatch exports the submitting shell's variables, a stray
  ``VLAEVAL_SHARD`` too): ``SLURM_ARRAY_TASK_ID`` among ``SLURM_ARRAY_TASK_MIN``..``_MAX`` in steps of
  ``SLURM_ARRAY_TASK_STEP`` (any first index, any step), ``SLURM_ARRAY_TASK_COUNT`` of them; an
  array of a list of indices (``--array=1,4,9``) has no rank and is refused.
- ``VLAEVAL_SHARD=I/N``: a plain pair (a CI matrix sets it from its own index).
- Kubernetes Indexed Jobs: ``JOB_COMPLETION_INDEX`` (from 0), with ``VLAEVAL_SHARD_COUNT`` set
  to the job's ``completions`` (Kubernetes exposes no count).
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.subset import MAX_DIGITS

AUTO = "auto"
PAIR = "VLAEVAL_SHARD"
COUNT = "VLAEVAL_SHARD_COUNT"
SLURM_ID = "SLURM_ARRAY_TASK_ID"
K8S_INDEX = "JOB_COMPLETION_INDEX"


def shard_from_environment(environ: Mapping[str, str]) -> str:
    """``I/N`` for this session, from the first scheduler whose variables are set."""
    if SLURM_ID in environ:  # first: a VLAEVAL_SHARD left in the submitting shell reaches every array task
        return _slurm(environ)
    if PAIR in environ:
        return environ[PAIR].strip()
    if K8S_INDEX in environ:
        index = _integer(environ, K8S_INDEX)
        count = _integer(environ, COUNT, f"{K8S_INDEX} is set: set {COUNT} to the Indexed Job's completions")
        if not 0 <= index < count:
            raise SpecError(f"--vla-shard=auto: {K8S_INDEX}={index} is not in 0..{count - 1} ({COUNT}={count})")
        return f"{index + 1}/{count}"
    raise SpecError(
        f"--vla-shard=auto: found no shard index: set {PAIR}=I/N, or run in a Slurm job array ({SLURM_ID}) "
        f"or a Kubernetes Indexed Job ({K8S_INDEX} with {COUNT})"
    )


def _slurm(environ: Mapping[str, str]) -> str:
    task = _integer(environ, SLURM_ID)
    low, high = _integer(environ, "SLURM_ARRAY_TASK_MIN"), _integer(environ, "SLURM_ARRAY_TASK_MAX")
    step = _integer(environ, "SLURM_ARRAY_TASK_STEP") if environ.get("SLURM_ARRAY_TASK_STEP") else 1
    count = _integer(environ, "SLURM_ARRAY_TASK_COUNT")
    if step < 1 or not low <= task <= high or (task - low) % step:
        raise SpecError(
            f"--vla-shard=auto: {SLURM_ID}={task} is not one of {low}..{high} in steps of {step}: inconsistent array"
        )
    if (high - low) // step + 1 != count:
        raise SpecError(
            f"--vla-shard=auto: the array's {count} tasks are not the range {low}-{high}:{step} "
            "(an array of listed indices has no shard order): submit it as --array=FIRST-LAST[:STEP]"
        )
    return f"{(task - low) // step + 1}/{count}"


def _integer(environ: Mapping[str, str], name: str, missing: str = "") -> int:
    value = environ.get(name, "").strip()
    if not value:
        raise SpecError(f"--vla-shard=auto: {missing or f'{name} is missing or empty'}")
    if not value.isdecimal() or not value.isascii() or len(value) > MAX_DIGITS:
        raise SpecError(
            f"--vla-shard=auto: {name}={value[:40]!r} is not a non-negative integer (of at most {MAX_DIGITS} digits)"
        )
    return int(value)
