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
off); ``RUN_DIR/slurm/`` keeps the scripts as submitted, the job ids and Slurm's output.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_vlaeval.arrays import Submission, complete, locate_run, submission_key
from pytest_vlaeval.choices import add_gate_options, gate_options
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.printable import command_line, terminal_lines, terminal_safe
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import write_text_atomic

SBATCH_OPTIONS = ("partition", "account", "qos", "time", "constraint", "gres", "gpus-per-task", "cpus-per-task", "mem")
"""sbatch options passed through to the array (the merge job takes the first four and the constraint)."""
MERGE_OPTIONS = ("partition", "account", "qos", "time", "constraint")
WORKER_OPTIONS = ("-n", "--numprocesses", "--vla-placement", "--tx", "-d", "--dist")
"""Options of pytest's that place workers: given, the array task keeps them; else it sets its own."""
RERUN_OPTIONS = ("--vla-rerun", "--vla-resume")


def array_script(submission: Submission, run_dir: Path, name: str, count: int, extra: list[str]) -> str:
    """The sbatch script of an array of ``count`` shards."""
    completing = bool(extra)  # an episode list: what is missing or errored, which only 'incomplete' runs
    args = [arg for arg in submission.pytest_args if not (completing and arg.split("=")[0] in RERUN_OPTIONS)]
    placed = any(arg.split("=")[0] in WORKER_OPTIONS for arg in args)
    rerun = [] if any(arg.split("=")[0] in RERUN_OPTIONS for arg in args) else ["--vla-rerun=incomplete"]
    gpus = "gres" in submission.scheduler_options or "gpus-per-task" in submission.scheduler_options
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=vlaeval-{run_dir.name}",
        f"#SBATCH --array=0-{count - 1}",
        f"#SBATCH --output={slurm_pattern(RunDir(run_dir).slurm / 'logs')}/{name}_%A_%a.out",
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
                f"#SBATCH --output={slurm_pattern(RunDir(run_dir).slurm / 'logs')}/{name}_%j.out",
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
    """Slurm as an ``arrays.ArrayScheduler``: an array job of shards and a merge job after it."""

    def submit(
        self, submission: Submission, run_dir: Path, episodes: list[tuple[str, int]] | None, dry_run: bool
    ) -> list[str]:
        """Write the array and merge scripts for the whole run (``episodes`` None) or for exactly
        ``episodes``, and submit them unless ``dry_run``; the lines to print."""
        slurm = RunDir(run_dir).slurm
        number = len(submission.jobs) + 1
        kind = "array" if episodes is None else "complete"
        name = f"{kind}-{number}"
        extra: list[str] = []
        count = submission.shards
        if episodes is not None:
            listed = slurm / f"{name}.episodes.json"
            extra = [f"--vla-episode-list={listed}"]
            count = min(count, len(episodes))
        array, merge = (
            array_script(submission, run_dir, name, count, extra),
            merge_script(submission, run_dir, f"merge-{number}"),
        )
        if dry_run:
            return [f"# {slurm / f'{name}.sbatch'}", array, f"# {slurm / f'merge-{number}.sbatch'}", merge]
        run = RunDir(run_dir)
        run.confined(slurm / "logs" / "-").parent.mkdir(parents=True, exist_ok=True)
        if episodes is not None:
            write_text_atomic(run.confined(listed), json.dumps([list(key) for key in episodes]) + "\n")
        write_text_atomic(run.confined(slurm / f"{name}.sbatch"), array)
        write_text_atomic(run.confined(slurm / f"merge-{number}.sbatch"), merge)
        array_job = sbatch(slurm / f"{name}.sbatch")
        try:
            merge_job = sbatch(slurm / f"merge-{number}.sbatch", f"--dependency=afterany:{array_job}")
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
            f"scripts, job ids and Slurm's output: {slurm}",
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
    parser.add_argument("--shards", type=int, default=1, help="array tasks: shards of the run [1]")
    for option in SBATCH_OPTIONS:
        parser.add_argument(f"--{option}", metavar="VALUE", help=f"sbatch --{option} for the array tasks")
    gate = parser.add_argument_group("the merge's gate (vlaeval merge's options: it judges the whole run)")
    add_gate_options(gate.add_argument, defaults=False)
    parser.add_argument("--complete", type=Path, metavar="RUN_DIR", help="submit what a run still misses, then merge")
    parser.add_argument("--dry-run", action="store_true", help="print the scripts instead of submitting them")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the pytest arguments of the run")


def run(args: argparse.Namespace) -> int:
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    try:
        if args.complete is not None:
            if pytest_args:
                raise SpecError(
                    "--complete RUN_DIR submits with the run's own arguments (RUN_DIR/slurm/submissions.json)"
                )
            lines = complete(args.complete.resolve(), args.dry_run, Slurm())
        else:
            lines = _first(args, pytest_args)
    except (SpecError, ResultsUnwritable) as exc:
        print(terminal_safe(f"vlaeval slurm: {exc}"))
        return 2
    print(terminal_lines("\n".join(lines)))
    return 0


def _first(args: argparse.Namespace, pytest_args: list[str]) -> list[str]:
    if not pytest_args:
        raise SpecError("give the run's pytest arguments after --, e.g. -- --benchmark=mikasa:short --policy=random")
    if args.shards < 1:
        raise SpecError(f"--shards must be at least 1, got {args.shards}")
    refused = [arg for arg in pytest_args if arg.split("=")[0] in ("--vla-shard", "--vla-sequential", "--vla-baseline")]
    if refused:
        raise SpecError(
            f"{refused[0]}: the array shards the run itself, and the sequential gate needs one session "
            "(give a baseline to vlaeval slurm --baseline: the merge judges the whole run)"
        )
    sbatch_options = {
        o: getattr(args, o.replace("-", "_")) for o in SBATCH_OPTIONS if getattr(args, o.replace("-", "_"))
    }
    if any(re.search(r"\s", value) for value in sbatch_options.values()):
        raise SpecError("an sbatch option's value has a space, which an #SBATCH line cannot hold")
    names = [name for name in gate_options() if name != "baseline"]  # handed to the merge as given
    given = {name: getattr(args, name.replace("-", "_")) for name in names}
    if not args.baseline and any(value is not None for value in given.values()):
        raise SpecError(f"--{'/--'.join(names)} set the merge's gate against --baseline DIR: give the baseline")
    merge_args = [] if not args.baseline else [f"--baseline={Path(args.baseline).resolve()}"]
    merge_args += [f"--{name}={value}" for name, value in given.items() if value is not None]
    run_dir = locate_run(pytest_args, Path.cwd(), args.shards).resolve()
    if re.search(r"[\s\\]", str(run_dir)):  # Slurm drops a file name pattern's backslashes, and expands nothing
        raise SpecError(
            f"{run_dir}: Slurm's #SBATCH --output cannot name a path with a space or a backslash; "
            "choose --vla-results or --vla-run-name"
        )
    submission = Submission(
        pytest_args, args.shards, sbatch_options, merge_args, sys.executable, str(Path.cwd()), str(run_dir)
    )
    kept = RunDir(run_dir).slurm_submissions
    if args.dry_run:
        return Slurm().submit(submission, run_dir, None, dry_run=True)
    jobs = Submission.read(kept).jobs if kept.exists() else []  # a later submission of the run: counted on
    Slurm().refuse_while_queued(jobs)
    sealed = replace(submission, seal=submission.seal_with(submission_key(create=True)), jobs=jobs)
    return Slurm().submit(sealed, run_dir, None, dry_run=False)
