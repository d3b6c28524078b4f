"""A batch scheduler's ``vlaeval`` subcommand, the half every scheduler shares: its arguments,
the checks of a submission (what an array cannot shard, the merge's gate, the run directory the
pytest arguments name), the seal, and ``--complete``, each through an ``ArrayScheduler``
(``slurm.py``'s ``Slurm``)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pytest_vlaeval.arrays.submission import Submission, check_identity, submission_key
from pytest_vlaeval.choices import add_gate_options, gate_options
from pytest_vlaeval.distribute.indexed import PAIR
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.printable import command_line, terminal_lines, terminal_safe
from pytest_vlaeval.results.rundir import RunDir


class ArrayScheduler(Protocol):
    """A batch scheduler's half: its options, submitting an array and its merge, and telling whether
    a run's jobs are still queued."""

    name: ClassVar[str]
    """Its ``vlaeval`` subcommand (``slurm``): what a submission records, and the command messages name."""
    options: ClassVar[dict[str, str]]
    """Its own options for the array's jobs, each with its help, handed to it as given (Slurm's sbatch options)."""

    def check_options(self, options: dict[str, str]) -> None:
        """``SpecError`` for an option's value its scripts cannot hold, before the run is looked for."""
        ...

    def check_run_dir(self, run_dir: Path) -> None:
        """``SpecError`` for a run directory its scripts cannot name."""
        ...

    def submit(
        self, submission: Submission, run_dir: Path, episodes: list[tuple[str, int]] | None, dry_run: bool
    ) -> list[str]:
        """Submit the array (of the whole run, or of exactly ``episodes``) and its merge; the lines to print."""
        ...

    def refuse_while_queued(self, jobs: list[dict[str, Any]]) -> None:
        """``SpecError`` while the scheduler still holds one of a run's jobs."""
        ...


def locate_run(pytest_args: list[str], workdir: Path, shards: int) -> Path:
    """The run directory a pytest command line names, from a collect-only session in this process
    as a shard of the array would start (``--vla-shard=auto``, from ``workdir``): the plugin's checks
    run too, so a bad command line is one line here, before anything is submitted."""
    import pytest

    from pytest_vlaeval.configure import RUN_CONTEXT

    class Probe:
        run_dir: Path | None = None

        @pytest.hookimpl(trylast=True)
        def pytest_configure(self, config: pytest.Config) -> None:
            run = config.stash.get(RUN_CONTEXT, None)
            self.run_dir = run.run_dir if run is not None else None

    probe = Probe()
    output = io.StringIO()
    here, shard = Path.cwd(), os.environ.get(PAIR)
    os.environ[PAIR] = f"1/{shards}"
    try:
        os.chdir(workdir)
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            args = [*pytest_args, "--vla-shard=auto", "--collect-only", "-q", "-p", "no:cacheprovider"]
            pytest.main(args, plugins=[probe])
    finally:
        os.chdir(here)
        if shard is None:
            os.environ.pop(PAIR)
        else:
            os.environ[PAIR] = shard
    if probe.run_dir is None:
        said = [line.removeprefix("ERROR: ") for line in output.getvalue().splitlines() if line.strip()]
        raise SpecError(f"{command_line(['pytest', *pytest_args])}: {said[-1] if said else 'names no evaluation'}")
    return probe.run_dir


def incomplete_episodes(run_dir: Path) -> list[tuple[str, int]]:
    """The run's episodes with no record or whose latest is an error, from its episode logs."""
    from pytest_vlaeval.merge import selection_of
    from pytest_vlaeval.results.latest import LatestRecords
    from pytest_vlaeval.results.subset import still_to_run

    selection = selection_of(run_dir)
    universe = selection.episode_ids
    return still_to_run(universe, LatestRecords.read(RunDir(run_dir), universe), "incomplete")


def recorded_submission(kept: Path, scheduler: ArrayScheduler) -> Submission:
    """The run's submissions file, when ``scheduler`` submitted it: another scheduler's jobs are
    neither its to ask about nor its options its to run."""
    recorded = Submission.read(kept)
    if recorded.scheduler != scheduler.name:
        raise SpecError(
            f"{kept}: the run was submitted with vlaeval {recorded.scheduler}: "
            f"submit or complete it with vlaeval {recorded.scheduler}"
        )
    return recorded


def complete(run_dir: Path, dry_run: bool, scheduler: ArrayScheduler) -> list[str]:
    """Submit what the run still misses, with the run's recorded pytest arguments (complete only
    runs you submitted: they are what the jobs run) and this interpreter, not the recorded one."""
    kept = RunDir(run_dir).submissions
    if not kept.exists():
        raise SpecError(f"{kept} is missing: was the run submitted with vlaeval {scheduler.name}?")
    recorded = recorded_submission(kept, scheduler)
    check_identity(recorded, run_dir, kept)
    submission = replace(recorded, python=sys.executable)
    named = locate_run(submission.pytest_args, Path(submission.workdir), submission.shards).resolve()
    if named != run_dir:  # the workdir's settings changed since: the jobs would write into another directory
        raise SpecError(f"the run's command now writes into {named}, not {run_dir}: submit it anew")
    scheduler.refuse_while_queued(submission.jobs)
    if not RunDir(run_dir).fingerprint.exists() and not RunDir(run_dir).logs():
        return [
            f"no shard of {run_dir} started (no fingerprint.json, no episode log): submitting the whole run",
            *scheduler.submit(submission, run_dir, None, dry_run),
        ]
    missing = incomplete_episodes(run_dir)
    if not missing:
        return [
            f"every episode of {run_dir} has a completed record: nothing to submit "
            f"({command_line(['vlaeval', 'merge', str(run_dir)])} summarises it)"
        ]
    return scheduler.submit(submission, run_dir, missing, dry_run)


def configure(parser: argparse.ArgumentParser, scheduler: ArrayScheduler) -> None:
    """The subcommand's arguments: the shards, the scheduler's own options, the merge's gate,
    ``--complete`` and the run's pytest arguments."""
    parser.add_argument("--shards", type=int, default=1, help="array tasks: shards of the run [1]")
    for option, description in scheduler.options.items():
        parser.add_argument(f"--{option}", metavar="VALUE", help=description)
    gate = parser.add_argument_group("the merge's gate (vlaeval merge's options: it judges the whole run)")
    add_gate_options(gate.add_argument, defaults=False)
    parser.add_argument("--complete", type=Path, metavar="RUN_DIR", help="submit what a run still misses, then merge")
    parser.add_argument("--dry-run", action="store_true", help="print the scripts instead of submitting them")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the pytest arguments of the run")


def run(args: argparse.Namespace, scheduler: ArrayScheduler) -> int:
    """Submit the run, or complete it; what cannot be submitted is one line and exit status 2."""
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    try:
        if args.complete is not None:
            if pytest_args:
                raise SpecError(
                    "--complete RUN_DIR submits with the run's own arguments (RUN_DIR/array/submissions.json)"
                )
            lines = complete(args.complete.resolve(), args.dry_run, scheduler)
        else:
            lines = submit_run(args, pytest_args, scheduler)
    except (SpecError, ResultsUnwritable) as exc:
        print(terminal_safe(f"vlaeval {scheduler.name}: {exc}"))
        return 2
    print(terminal_lines("\n".join(lines)))
    return 0


def submit_run(args: argparse.Namespace, pytest_args: list[str], scheduler: ArrayScheduler) -> list[str]:
    """Submit the whole run: its pytest arguments checked by a collect-only session, what an array
    cannot hold refused, the merge's gate handed on, the submission sealed with this account's key."""
    if not pytest_args:
        raise SpecError("give the run's pytest arguments after --, e.g. -- --benchmark=mikasa:short --policy=random")
    if args.shards < 1:
        raise SpecError(f"--shards must be at least 1, got {args.shards}")
    refused = [arg for arg in pytest_args if arg.split("=")[0] in ("--vla-shard", "--vla-sequential", "--vla-baseline")]
    if refused:
        raise SpecError(
            f"{refused[0]}: the array shards the run itself, and the sequential gate needs one session "
            f"(give a baseline to vlaeval {scheduler.name} --baseline: the merge judges the whole run)"
        )
    options = {option: value for option in scheduler.options if (value := getattr(args, option.replace("-", "_")))}
    scheduler.check_options(options)
    names = [name for name in gate_options() if name != "baseline"]  # handed to the merge as given
    given = {name: getattr(args, name.replace("-", "_")) for name in names}
    if not args.baseline and any(value is not None for value in given.values()):
        raise SpecError(f"--{'/--'.join(names)} set the merge's gate against --baseline DIR: give the baseline")
    merge_args = [] if not args.baseline else [f"--baseline={Path(args.baseline).resolve()}"]
    merge_args += [f"--{name}={value}" for name, value in given.items() if value is not None]
    run_dir = locate_run(pytest_args, Path.cwd(), args.shards).resolve()
    scheduler.check_run_dir(run_dir)
    submission = Submission(
        scheduler.name, pytest_args, args.shards, options, merge_args, sys.executable, str(Path.cwd()), str(run_dir)
    )
    if args.dry_run:
        return scheduler.submit(submission, run_dir, None, dry_run=True)
    kept = RunDir(run_dir).submissions
    jobs = recorded_submission(kept, scheduler).jobs if kept.exists() else []  # a later submission: counted on
    scheduler.refuse_while_queued(jobs)
    seal = submission.seal_with(submission_key(create=True, scheduler=scheduler.name))
    return scheduler.submit(replace(submission, seal=seal, jobs=jobs), run_dir, None, dry_run=False)
