"""A run's submissions as job arrays, whatever the scheduler: what a submission records, how it is
sealed and checked before ``--complete`` runs what it records, and the command that completes the
run (the merge names it). Light: ``vlaeval merge`` reads it."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_vlaeval import strict_json
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.printable import command_line
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import write_text_atomic

SEALED = ("pytest_args", "shards", "scheduler_options", "merge_args", "workdir", "run_dir")
"""What a submission's seal covers: everything ``--complete`` runs or writes to (its interpreter is replaced)."""
FIRST_SCHEDULER = "slurm"
"""The scheduler of a record written before records named theirs: Slurm, the only one then."""
SCHEDULER_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")


@dataclass(frozen=True)
class Submission:
    """What a run's submissions file keeps (``RUN_DIR/array/submissions.json``): how to submit more of
    this run, and what was."""

    scheduler: str
    """The ``vlaeval`` subcommand it was submitted with (``slurm``), which completes it; unsealed, as
    it runs nothing."""
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
    """Each submission's kind, its array's and its merge's job ids (digits) and its shards."""

    @classmethod
    def read(cls, path: Path) -> Submission:
        """The file as written here, checked field by field (a run directory may come from elsewhere)."""
        try:
            data = strict_json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SpecError(f"{path}: cannot read it ({exc})") from None
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
            raise SpecError(f"{path}: not a job array's submission record (expected {', '.join(kinds)})")
        sealing = {k: data.get(k, "") for k in ("run_dir", "seal")}  # a run submitted before sealing lacks them
        if not all(isinstance(v, str) for v in sealing.values()):
            raise SpecError(f"{path}: not a job array's submission record (run_dir and seal are strings)")
        scheduler = data.get("scheduler", FIRST_SCHEDULER)
        if not isinstance(scheduler, str) or not SCHEDULER_NAME.fullmatch(scheduler):
            raise SpecError(f"{path}: its scheduler is not the name of a vlaeval command")
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
            raise SpecError(f"{path}: its jobs are not a list of job ids")
        return cls(scheduler, **{k: data[k] for k in kinds}, **sealing, jobs=jobs)

    def write(self, run: RunDir) -> None:
        """Into the run's array folder, renamed over: a received run's link there is never followed."""
        write_text_atomic(run.confined(run.submissions), json.dumps(asdict(self), indent=2) + "\n")

    def seal_with(self, key: bytes) -> str:
        sealed = json.dumps([getattr(self, name) for name in SEALED], sort_keys=True)
        return hmac.new(key, sealed.encode(), hashlib.sha256).hexdigest()


def submission_key(create: bool, scheduler: str) -> bytes:
    """This account's secret, which seals what it submits as arrays: ``--complete`` then runs only a
    command this account submitted for that very run directory, however the directory was edited,
    copied or received. It is made on the first submission, readable by its owner alone; an account
    that submitted before it was named for every scheduler keeps its ``slurm.key``, which sealed its runs."""
    folder = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "pytest-vlaeval"
    path = folder / "arrays.key"
    if not path.exists() and (folder / "slurm.key").exists():
        path = folder / "slurm.key"
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
        raise SpecError(f"{path} is missing: no run was submitted with vlaeval {scheduler} from this account") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot make or read the key that seals submissions ({exc.strerror or exc})") from None
    if status.st_uid != os.getuid() or status.st_mode & 0o077 or len(key) < 32:
        raise SpecError(f"{path}: the key that seals submissions must be yours, readable by you alone (chmod 600)")
    return key


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
            f"submit the run anew with vlaeval {recorded.scheduler} (each task runs only what its shard still misses)"
        )
    if Path(recorded.run_dir) != run_dir:
        raise SpecError(f"{kept} records the run at {recorded.run_dir}, not here: complete it where it was submitted")
    expected = recorded.seal_with(submission_key(create=False, scheduler=recorded.scheduler))
    if not hmac.compare_digest(recorded.seal.encode(), expected.encode()):  # bytes: a received seal may be any text
        raise SpecError(
            f"{kept} is not as this account submitted it (edited, or submitted by someone else): "
            "--complete runs the command it records, so it refuses it"
        )


def completing_command(run_dir: Path) -> str | None:
    """The command that completes a run submitted as an array (``vlaeval slurm --complete RUN_DIR``),
    None for a run that was not, or whose record does not read: the merge's advice."""
    kept = RunDir(run_dir).submissions
    if not kept.exists():
        return None
    try:
        scheduler = Submission.read(kept).scheduler
    except SpecError:
        return None
    return command_line(["vlaeval", scheduler, "--complete", str(run_dir)])
