"""A run as an array of shards on a batch scheduler, the scheduler-agnostic half: what a
submission records and how it is sealed, the run directory a command line names, what a run still
misses, and completing it. ``slurm.py`` is the Slurm half (its scripts, ``sbatch``, ``squeue``);
another scheduler (a Kubernetes Indexed Job, whose ``JOB_COMPLETION_INDEX`` ``--vla-shard=auto``
already reads) is one sibling file implementing ``ArrayScheduler``.

Each array task runs ``pytest ARGS --vla-shard=auto --vla-rerun=incomplete`` and writes only its own
episode log into the run directory (a shared filesystem); a merge (``vlaeval merge RUN_DIR``) writes
the run's files once the array has ended. The run directory is the record of what finished.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import secrets
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pytest_vlaeval import strict_json
from pytest_vlaeval.distribute.indexed import PAIR
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.printable import command_line
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import write_text_atomic

SEALED = ("pytest_args", "shards", "scheduler_options", "merge_args", "workdir", "run_dir")
"""What a submission's seal covers: everything ``--complete`` runs or writes to (its interpreter is replaced)."""


@dataclass(frozen=True)
class Submission:
    """What a run's submissions file keeps (``RUN_DIR/slurm/submissions.json``): how to submit more of
    this run, and what was."""

    pytest_args: list[str]
    shards: int
    scheduler_options: dict[str, str]
    """The scheduler's own options for the array (Slurm's sbatch options)."""
    merge_args: list[str]
    python: str
    workdir: str
    run_dir: str = ""
    """Where the run was submitted (empty in a record written before runs were sealed)."""
    seal: str = ""
    """An HMAC of the ``SEALED`` fields with this account's key (``submission_key``)."""
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Submission:
        """The file as written here, checked field by field (a run directory may come from elsewhere)."""
        try:
            data = strict_json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SpecError(f"{path}: cannot read it ({exc}); was the run submitted with vlaeval slurm?") from None
        if isinstance(data, dict) and "sbatch" in data and "scheduler_options" not in data:
            data["scheduler_options"] = data.pop("sbatch")  # its name before other schedulers were foreseen
        kinds = {
            "pytest_args": list,
            "shards": int,
            "scheduler_options": dict,
            "merge_args": list,
            "python": str,
            "workdir": str,
        }
        if not isinstance(data, dict) or any(not isinstance(data.get(k), t) for k, t in kinds.items()):
            raise SpecError(f"{path}: not a vlaeval slurm submission (expected {', '.join(kinds)})")
        sealing = {k: data.get(k, "") for k in ("run_dir", "seal")}  # a run submitted before sealing lacks them
        if not all(isinstance(v, str) for v in sealing.values()):
            raise SpecError(f"{path}: not a vlaeval slurm submission (run_dir and seal are strings)")
        strings = [
            *data["pytest_args"],
            *data["merge_args"],
            *data["scheduler_options"].keys(),
            *data["scheduler_options"].values(),
        ]
        if not all(isinstance(s, str) and "\n" not in s for s in strings) or data["shards"] < 1:
            raise SpecError(f"{path}: its arguments are not one-line strings, or it has no shard")
        jobs = data.get("jobs", [])
        ids = ("array_job", "merge_job")
        if not isinstance(jobs, list) or not all(
            isinstance(job, dict) and all(isinstance(job.get(k), str) and job[k].isdecimal() for k in ids)
            for job in jobs
        ):
            raise SpecError(f"{path}: its jobs are not a list of Slurm job ids")
        return cls(**{k: data[k] for k in kinds}, **sealing, jobs=jobs)

    def write(self, run: RunDir) -> None:
        """Into the run's ``slurm/`` folder, renamed over: a received run's link there is never followed."""
        write_text_atomic(run.confined(run.slurm_submissions), json.dumps(asdict(self), indent=2) + "\n")

    def seal_with(self, key: bytes) -> str:
        sealed = json.dumps([getattr(self, name) for name in SEALED], sort_keys=True)
        return hmac.new(key, sealed.encode(), hashlib.sha256).hexdigest()


def submission_key(create: bool) -> bytes:
    """This account's secret, which seals what ``vlaeval slurm`` submits: ``--complete`` then runs
    only a command this account submitted for that very run directory, however the directory was
    edited, copied or received. It is made on the first submission, readable by its owner alone."""
    path = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "pytest-vlaeval" / "slurm.key"
    try:
        if create and not path.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fresh = path.with_name(f"{path.name}.{os.getpid()}")
            with open(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
                file.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):  # a submission beside this one made it first: theirs is kept
                os.link(fresh, path)
            fresh.unlink()
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as file:
            status = os.fstat(file.fileno())
            key = file.read(256).strip()
    except FileNotFoundError:
        raise SpecError(f"{path} is missing: no run was submitted with vlaeval slurm from this account") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot make or read the key that seals submissions ({exc.strerror or exc})") from None
    if status.st_uid != os.getuid() or status.st_mode & 0o077 or len(key) < 32:
        raise SpecError(f"{path}: the key that seals submissions must be yours, readable by you alone (chmod 600)")
    return key


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


def check_identity(recorded: Submission, run_dir: Path, kept: Path) -> None:
    """Before anything a submission records runs (even the collection that names its run, which
    imports the workdir's ``conftest.py``): refuse a run directory of another user, a copy moved
    away from where its command writes, and a record this account did not seal as it is now
    (edited, or submitted by someone else)."""
    if run_dir.stat().st_uid != os.getuid():
        raise SpecError(
            f"{run_dir} belongs to another user: --complete runs the command it records; complete your own runs"
        )
    if not recorded.seal:
        raise SpecError(
            f"{kept} was written before submissions were sealed, so --complete cannot trust it: "
            "submit the run anew with vlaeval slurm (each task runs only what its shard still misses)"
        )
    if Path(recorded.run_dir) != run_dir:
        raise SpecError(f"{kept} records the run at {recorded.run_dir}, not here: complete it where it was submitted")
    expected = recorded.seal_with(submission_key(create=False))
    if not hmac.compare_digest(recorded.seal.encode(), expected.encode()):  # bytes: a received seal may be any text
        raise SpecError(
            f"{kept} is not as this account submitted it (edited, or submitted by someone else): "
            "--complete runs the command it records, so it refuses it"
        )


class ArrayScheduler(Protocol):
    """A batch scheduler's half: submitting an array and its merge, and telling whether a run's jobs
    are still queued."""

    def submit(
        self, submission: Submission, run_dir: Path, episodes: list[tuple[str, int]] | None, dry_run: bool
    ) -> list[str]:
        """Submit the array (of the whole run, or of exactly ``episodes``) and its merge; the lines to print."""
        ...

    def refuse_while_queued(self, jobs: list[dict[str, Any]]) -> None:
        """``SpecError`` while the scheduler still holds one of a run's jobs."""
        ...


def complete(run_dir: Path, dry_run: bool, scheduler: ArrayScheduler) -> list[str]:
    """Submit what the run still misses, with the run's recorded pytest arguments (complete only
    runs you submitted: they are what the jobs run) and this interpreter, not the recorded one."""
    kept = RunDir(run_dir).slurm_submissions
    recorded = Submission.read(kept)
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
