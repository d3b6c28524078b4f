"""A run directory and every file name in it: the one place that knows the layout.

::

    <run>/fingerprint.json      what must match for sessions to share the run (``store``)
    <run>/policy.json           the policy's own description, claimed by the first episode
    <run>/benchmark.yaml        the benchmark file the run was made with, byte for byte
    <run>/episodes/*.jsonl      the durable log, one file per session (``store``)
    <run>/.session*.lock        held by the session running the run, or a shard of it (``store``)
    <run>/<ENV_ID>.json         per-task canonical results (``canonical``)
    <run>/summary.json          the run's canonical summary
    <run>/eval_info.json        the same episodes as LeRobot's lerobot-eval writes them (``eval_info``)
    <run>/summary.png           its chart (``chart``)
    <run>/report.md             the markdown report (also the GitHub step summary)
    <run>/report.html           the self-contained HTML report (``report``)
    <run>/server.log            the ``--vla-serve`` policy server's log
    <run>/videos/<ENV_ID>/<seed>.webm
    <run>/array/                a job array's submissions, scripts and its scheduler's output (``arrays``)

A received run is untrusted, and a symbolic link in it could carry a write anywhere: no folder
between the run directory and a file this package writes may be a link (``RunDir.confined``),
whole files are renamed over their path (a link there is replaced, not followed), and files
appended to are opened without following one (``open_appending``). The run directory itself is
what the user named, so it may be a link.
"""

from __future__ import annotations

import errno
import os
import re
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, TypeVar

from pytest_vlaeval.benchmark.file import ENV_ID, PATTERNS
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.printable import UNSAFE

T = TypeVar("T")
_SHARD_LABEL = re.compile(r"-shard(\d+)of(\d+)\.jsonl$")
SUBMISSIONS = "submissions.json"
NAME_MAX = 255
"""Bytes a name in a folder may take (Linux's and macOS's file systems): a run directory's name is
one. Nothing is named after the run beside it, and its own files are names of their own inside
it, so the whole of it is the run's."""


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fingerprint = path / "fingerprint.json"
        self.policy = path / "policy.json"
        self.spec = path / "benchmark.yaml"
        self.episodes = path / "episodes"
        self.lock = path / ".lock"
        self.summary = path / "summary.json"
        self.eval_info = path / "eval_info.json"
        self.chart = path / "summary.png"
        self.report = path / "report.md"
        self.report_html = path / "report.html"
        self.server_log = path / "server.log"
        self.videos = path / "videos"

    @property
    def files(self) -> tuple[Path, ...]:
        """The run's files of fixed names (each a plain file, when there)."""
        return (
            self.fingerprint, self.policy, self.spec, self.lock, self.summary,
            self.eval_info, self.chart, self.report, self.report_html, self.server_log,
        )  # fmt: skip

    def task(self, env_id: str) -> Path:
        """A task's canonical file; an env id is a benchmark file's value or a received run's, so one
        that would lead out of the run directory is refused (``SpecError``)."""
        return self.path / f"{checked_env_id(env_id)}.json"

    def occupancy(self, label: str = "") -> Path:
        """Locked by the session that runs the run (the shard ``label``, if given) while it runs."""
        return self.path / (f".session-{label}.lock" if label else ".session.lock")

    def video(self, env_id: str, seed: int) -> Path:
        return video_file(self.videos, env_id, seed)

    @property
    def array(self) -> Path:
        """A job array's folder: its submissions (``submissions.json``), scripts and its scheduler's
        output; ``slurm/`` in a run submitted before the folder was named for every scheduler."""
        first = self.path / "slurm"
        if (first / SUBMISSIONS).exists() and not (self.path / "array" / SUBMISSIONS).exists():
            return first
        return self.path / "array"

    @property
    def submissions(self) -> Path:
        """What was submitted of the run as arrays, and how to submit more (``arrays/submission.py``)."""
        return self.array / SUBMISSIONS

    def confined(self, path: Path) -> Path:
        """``path``, a file of this run, once no folder between the run directory and it is a symbolic
        link (``ResultsUnwritable`` naming the link otherwise): a received run's link would lead the
        write, or the read, out of the run."""
        return confined(self.path, path)

    def open_appending(self, path: Path, mode: str = "a") -> IO[Any]:
        """``path``, a file of this run, opened to append (created when missing), never through a link."""
        return open_appending(self.confined(path), mode)

    def logs(self) -> list[Path]:
        return sorted(self.episodes.glob("*.jsonl"))

    def new_log(self, label: str = "") -> Path:
        """This session's log: start time, host and process, then the label (a shard's)."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        name = "-".join(filter(None, (stamp, socket.gethostname(), str(os.getpid()), label)))
        return self.episodes / f"{name}.jsonl"


def video_file(videos: Path, env_id: str, seed: int) -> Path:
    """An episode's video under a run's ``videos`` folder (confined to the run that holds it)."""
    return confined(videos.parent, videos / checked_env_id(env_id) / f"{int(seed)}.webm")


def confined(root: Path, path: Path) -> Path:
    """``path`` (below ``root``) once no folder between ``root`` and it is a symbolic link."""
    folder = root
    for part in path.relative_to(root).parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise ResultsUnwritable(linked(folder))
    return path


def open_appending(path: Path, mode: str = "a") -> IO[Any]:
    """``path`` opened to append (``mode`` ``"a"``, ``"ab"``, or ``"a+b"`` to read it too), created when
    missing; a symbolic link there is refused (``ResultsUnwritable``), never followed to the file it names."""
    flags = (os.O_RDWR if "+" in mode else os.O_WRONLY) | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ResultsUnwritable(linked(path)) from None
            raise
    return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")


def linked(path: Path) -> str:
    """Why a run's file is not written through ``path``, a symbolic link."""
    return (
        f"{path} is a symbolic link, and a run's files are never read or written through one "
        "(it could lead out of the run): remove it"
    )


def checked_run_name(name: str) -> str:
    """``name`` (``--vla-run-name``) when it names one folder that a terminal shows as written: no
    path, no character a terminal acts on (the name is on the session's last line), at most
    ``NAME_MAX`` bytes; ``SpecError`` in one line for anything else."""
    if name in (".", "..") or "/" in name or os.sep in name:
        raise SpecError(f"--vla-run-name {name!r}: expected a directory name, not a path")
    unsafe = UNSAFE.search(name)
    if unsafe:
        raise SpecError(
            f"--vla-run-name {name!r} holds {unsafe.group()!r}, which a terminal acts on instead of showing: "
            "name the run with printable characters"
        )
    size = len(name.encode("utf-8"))
    if size > NAME_MAX:
        raise SpecError(
            f"--vla-run-name {name[:40]!r}... is {size} bytes long, and a directory's name takes at most {NAME_MAX}: "
            "choose a shorter one"
        )
    return name


def checked_env_id(env_id: str) -> str:
    """``env_id`` when it names a path inside a run directory (``benchmark_file.ENV_ID``: namespaced ids
    such as ``ALE/Pong-v5`` make a subfolder); ``SpecError`` in one line for anything else."""
    if not isinstance(env_id, str) or not re.fullmatch(ENV_ID, env_id):
        raise SpecError(f"env id {env_id!r} is not one a run may hold ({PATTERNS[ENV_ID]})")
    return env_id


def shard_label(index: int, count: int) -> str:
    """The label a shard's session puts on its log."""
    return f"shard{index}of{count}"


def shard_of(log: Path) -> tuple[int, int] | None:
    """``(index, count)`` of the shard that wrote ``log``, None for an unsharded session's log."""
    match = _SHARD_LABEL.search(log.name)
    return (int(match.group(1)), int(match.group(2))) if match else None


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an ``OSError`` while writing ``path`` into ``ResultsUnwritable``, one line naming the
    file (and, for a full disk, the file system it is on)."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ResultsUnwritable(f"no space left on {_mount_point(path)} writing {path}") from None
        raise ResultsUnwritable(f"{(exc.strerror or str(exc)).lower()} writing {path}") from None


def _mount_point(path: Path) -> Path:
    resolved = path.resolve()
    return next((p for p in (resolved, *resolved.parents) if os.path.ismount(p)), Path("/"))


def attempt_write(path: Path, write: Callable[[], T], unwritten: list[str], *, ours: bool = True) -> T | None:
    """``write()``'s result, or None and a line in ``unwritten`` when the disk refused it: for
    outputs that only read the canonical files (chart, report). A torn file of the run is
    removed: an old or half-written one would contradict this run."""
    try:
        with writing(path):
            return write()
    except ResultsUnwritable as exc:
        unwritten.append(str(exc))
        if ours and not path.is_dir():
            path.unlink(missing_ok=True)
        return None
