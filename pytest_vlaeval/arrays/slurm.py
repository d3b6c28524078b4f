"""``vlaeval slurm``: a run as a Slurm job array of shards and a merge job that depends on it.

    vlaeval slurm --shards 8 --time 2:00:00 --gres gpu:1 -- --benchmark=mikasa:short --policy=pkg:make
    vlaeval slurm --complete RUN_DIR

Each array task runs ``pytest ARGS --vla-shard=auto --vla-rerun=incomplete``: its shard from
``SLURM_ARRAY_TASK_ID``, skipping what a requeued try already completed, writing only its own
episode log into the run directory (a shared filesystem). The merge job runs ``vlaeval merge
RUN_DIR`` once the array has ended (``--dependency=afterany``), however its tasks ended: the
run's files and, with ``--baseline``, the fixed gate's verdict. ``--complete`` freezes the
episodes still missing or errored into a list and sends exactly those, as a new array, then
merges again. The run directory is the record of what finished (Slurm's accounting is often
off); ``RUN_DIR/array/`` keeps the scripts as submitted, the job ids and Slurm's output. What
every scheduler shares is ``command.py``'s; this is Slurm's ``ArrayScheduler``.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from pytest_vlaeval.arrays import command
from pytest_vlaeval.arrays.submission import Submission
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.printable import command_line
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import write_text_atomic

SBATCH_OPTIONS = ("partition", "account", "qos", "time", "constraint", "gres", "gpus-per-task", "cpus-per-task", "mem")
"""sbatch options passed through to the array (the merge job takes the first four and the constraint)."""
MERGE_OPTIONS = ("partition", "account", "qos", "time", "constraint")
WORKER_OPTIONS = ("-n", "--numprocesses", "--vla-placement", "--tx", "-d", "--dist")
"""Options of pytest's that place workers: given, the array task keeps them; else it sets its own."""
RERUN_OPTIONS = ("--vla-rerun", "--vla-resume")


def array_script(submission: Submission, run_dir: Path, name: str, count: int, extra: list[str]) -> str:
    """The sbatch script of an array of ``count`` shards, its output in the run's array folder."""
    completing = bool(extra)  # an episode list: what is missing or errored, which only 'incomplete' runs
    args = [arg for arg in submission.pytest_args if not (completing and arg.split("=")[0] in RERUN_OPTIONS)]
    placed = any(arg.split("=")[0] in WORKER_OPTIONS for arg in args)
    rerun = [] if any(arg.split("=")[0] in RERUN_OPTIONS for arg in args) else ["--vla-rerun=incomplete"]
    gpus = "gres" in submission.scheduler_options or "gpus-per-task" in submission.scheduler_options
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=vlaeval-{run_dir.name}",
        f"#SBATCH --array=0-{count - 1}",
        f"#SBATCH --output={slurm_pattern(RunDir(run_dir).array / 'logs')}/{name}_%A_%a.out",
        *(f"#SBATCH --{option}={value}" for option, value in submission.scheduler_options.items()),
        f"# pytest-vlaeval: {count} shards of {run_dir}, one per array task (--vla-shard=auto reads",
        "# SLURM_ARRAY_TASK_ID); --vla-rerun=incomplete skips what a requeued try of this shard already finished.",
        "set -u",
        f"cd {shlex.quote(submission.workdir)}",
    ]
    command = [submission.python, "-m", "pytest", *args, *extra, "--vla-shard=auto", *rerun]
    if placed:
        lines.append(f"exec {shlex.join(command)}")
    elif gpus:  # every GPU Slurm gave this task, a worker each
        lines.append(f"exec {shlex.join([*command, '--vla-placement=all'])}")
    else:  # a worker per CPU Slurm gave this task, serial on one
        lines += [
            'workers=(); if [ "${SLURM_CPUS_PER_TASK:-1}" -gt 1 ]; then workers=(-n "$SLURM_CPUS_PER_TASK"); fi',
            f'exec {shlex.join(command)} ${{workers[@]+"${{workers[@]}}"}}',  # bash before 4.4 and set -u
        ]
    return "\n".join(lines) + "\n"


def slurm_pattern(path: Path) -> str:
    """``path`` in an sbatch file name pattern, where Slurm replaces ``%`` sequences (``%%`` is one ``%``)."""
    return str(path).replace("%", "%%")


def merge_script(submission: Submission, run_dir: Path, name: str) -> str:
    """The sbatch script of the merge that runs once the array has ended."""
    options = {k: v for k, v in submission.scheduler_options.items() if k in MERGE_OPTIONS}
    command = [submission.python, "-m", "pytest_vlaeval", "merge", str(run_dir), *submission.merge_args]
    return (
        "\n".join(
            [
                "#!/bin/bash",
                f"#SBATCH --job-name=vlaeval-merge-{run_dir.name}",
                f"#SBATCH --output={slurm_pattern(RunDir(run_dir).array / 'logs')}/{name}_%j.out",
                *(f"#SBATCH --{option}={value}" for option, value in options.items()),
                "# pytest-vlaeval: the run's files (and the gate's verdict) from every shard's episode log.",
                "set -u",
                f"cd {shlex.quote(submission.workdir)}",
                f"exec {shlex.join(command)}",
            ]
        )
        + "\n"
    )


def slurm_command(*command: str) -> str:
    """A Slurm command's output; ``SpecError`` with its last line when it fails or is not installed."""
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except FileNotFoundError:
        raise SpecError(
            f"{command[0]} is not on PATH: run vlaeval slurm where Slurm's commands are (a login node)"
        ) from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SpecError(f"{command_line(command[:2])} failed: {said[-1] if said else f'exit status {done.returncode}'}")
    return done.stdout


def sbatch(script: Path, *options: str) -> str:
    """Submit ``script``; its job id."""
    return slurm_command("sbatch", "--parsable", *options, str(script)).strip().split(";")[0]


class Slurm:
    """Slurm as a ``command.ArrayScheduler``: an array job of shards and a merge job after it."""

    name: ClassVar[str] = "slurm"
    options: ClassVar[dict[str, str]] = {option: f"sbatch --{option} for the array tasks" for option in SBATCH_OPTIONS}

    def check_options(self, options: dict[str, str]) -> None:
        if any(re.search(r"\s", value) for value in options.values()):
            raise SpecError("an sbatch option's value has a space, which an #SBATCH line cannot hold")

    def check_run_dir(self, run_dir: Path) -> None:
        if re.search(r"[\s\\]", str(run_dir)):  # Slurm drops a file name pattern's backslashes, and expands nothing
            raise SpecError(
                f"{run_dir}: Slurm's #SBATCH --output cannot name a path with a space or a backslash; "
                "choose --vla-results or --vla-run-name"
            )

    def submit(
        self, submission: Submission, run_dir: Path, episodes: list[tuple[str, int]] | None, dry_run: bool
    ) -> list[str]:
        """Write the array and merge scripts for the whole run (``episodes`` None) or for exactly
        ``episodes``, and submit them unless ``dry_run``; the lines to print."""
        folder = RunDir(run_dir).array
        number = len(submission.jobs) + 1
        kind = "array" if episodes is None else "complete"
        name = f"{kind}-{number}"
        extra: list[str] = []
        count = submission.shards
        if episodes is not None:
            listed = folder / f"{name}.episodes.json"
            extra = [f"--vla-episode-list={listed}"]
            count = min(count, len(episodes))
        array, merge = (
            array_script(submission, run_dir, name, count, extra),
            merge_script(submission, run_dir, f"merge-{number}"),
        )
        if dry_run:
            return [f"# {folder / f'{name}.sbatch'}", array, f"# {folder / f'merge-{number}.sbatch'}", merge]
        run = RunDir(run_dir)
        run.confined(folder / "logs" / "-").parent.mkdir(parents=True, exist_ok=True)
        if episodes is not None:
            write_text_atomic(run.confined(listed), json.dumps([list(key) for key in episodes]) + "\n")
        write_text_atomic(run.confined(folder / f"{name}.sbatch"), array)
        write_text_atomic(run.confined(folder / f"merge-{number}.sbatch"), merge)
        array_job = sbatch(folder / f"{name}.sbatch")
        try:
            merge_job = sbatch(folder / f"merge-{number}.sbatch", f"--dependency=afterany:{array_job}")
        except SpecError:  # an array nobody merges or records would run its episodes for nothing
            subprocess.run(["scancel", array_job], capture_output=True)
            raise
        jobs = [*submission.jobs, {"kind": kind, "array_job": array_job, "merge_job": merge_job, "shards": count}]
        replace(submission, jobs=jobs).write(run)
        what = (
            f"{count} shards" if episodes is None else f"{len(episodes)} missing or errored episodes in {count} shards"
        )
        return [
            f"submitted array job {array_job} ({what}) and merge job {merge_job} (after it) for {run_dir}",
            f"scripts, job ids and Slurm's output: {folder}",
            f"after the merge, if episodes are missing: {command_line(['vlaeval', 'slurm', '--complete', str(run_dir)])}",
        ]

    def refuse_while_queued(self, jobs: list[dict[str, Any]]) -> None:
        """``SpecError`` while Slurm still holds (queues or runs) one of a run's jobs: a new array beside
        them would run their episodes a second time."""
        ours = {str(job.get(key)) for job in jobs for key in ("array_job", "merge_job")}
        queued = sorted(ours & set(slurm_command("squeue", "-h", "-o", "%F %A").split())) if ours else []
        if queued:
            raise SpecError(
                f"this run's jobs {', '.join(queued)} are still queued or running: wait for them, or scancel them"
            )


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``vlaeval slurm`` arguments."""
    command.configure(parser, Slurm())


def run(args: argparse.Namespace) -> int:
    return command.run(args, Slurm())
