"""The per-run store: where a run lives, what identifies it, and its durable episode log.

A run directory's name is derived from benchmark, split, policy (and the selection, when it is
not the whole canonical split), so a later session with the same arguments finds it: ``--lf``
and reruns add records to the same run, and the summary always counts all of them (``latest.LatestRecords``).
Each session appends to its own JSON-lines file (flushed and fsynced per episode), so parallel
writers never interleave and a crash loses no finished episode.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import IO, Annotated, Any

import msgspec

from pytest_vlaeval.benchmark.model import Benchmark, Selection, load_benchmark
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.printable import terminal_safe
from pytest_vlaeval.results.made_with import MACHINES, asset_digests
from pytest_vlaeval.results.readback import read_json
from pytest_vlaeval.results.record import EpisodeRecord, record_line
from pytest_vlaeval.results.rundir import NAME_MAX, RunDir, linked, writing
from pytest_vlaeval.schema import Fingerprint, Machine
from pytest_vlaeval.strict_json import dumps, loads
from pytest_vlaeval.version import __version__, package_digest


def run_dir_name(selection: Selection, policy_identity: str) -> str:
    """The run directory's name when none is given: the same for the same arguments, so a later
    session finds the run. One too long for a folder (a long module path or checkpoint path) keeps
    its first ``NAME_MAX`` bytes but nine and ends in a digest of the whole: still the same for the
    same arguments, and still apart for arguments that differ past the cut."""
    benchmark = selection.benchmark
    name = "-".join(
        [
            benchmark.name,
            *(re.sub(r"[^A-Za-z0-9_.-]+", "_", part).strip("_") for part in (selection.split, policy_identity)),
        ]
    )
    narrowed = len(selection.tasks) != len(benchmark.selected(selection.split))
    if narrowed or not selection.is_canonical:
        detail = json.dumps([[t.env_id for t in selection.tasks], selection.start_seed, selection.episodes])
        name += "-" + hashlib.sha256(detail.encode()).hexdigest()[:8]
    whole = name.encode("utf-8")
    if len(whole) > NAME_MAX:
        digest = "-" + hashlib.sha256(whole).hexdigest()[:8]
        name = whole[: NAME_MAX - len(digest)].decode("utf-8", "ignore").rstrip("-_.") + digest
    return name


def fingerprint(
    selection: Selection,
    policy_identity: str,
    render: str,
    num_envs: int = 1,
    reference_order: bool = False,
    installed: Callable[[str], str | None] | None = None,
) -> dict[str, Any]:
    """What must match for two sessions' episodes to belong to one run. ``num_envs``: episodes one
    simulator steps together (MIKASA's GPU simulation under ``--vla-lockstep``), recorded when over
    1: its physics is not that of a lone env, so runs with another value are another run.
    ``installed``: the simulator packages' versions where the workers run in an interpreter of
    their own (``install.interpreters``); this interpreter's by default.
    ``reference_order`` (``--vla-reference-order``), recorded when on: its episodes depend on the
    ones before them, so they are another run than order-independent ones. ``package_digest``: which
    files of this package produced the run (the version stays one across a release's commits).
    ``assets``: the selected tasks' pinned digests (``made_with``); the hosts the run's sessions ran
    on join it apart (``RunStore.join_machines``), as they never make another run."""
    benchmark = selection.benchmark
    return (
        {
            "benchmark": benchmark.name,
            "benchmark_version": benchmark.version,
            "benchmark_digest": benchmark.digest,
            "split": selection.split,
            "tasks": [t.env_id for t in selection.tasks],
            "start_seed": selection.start_seed,
            "episodes": selection.episodes,
            "policy": policy_identity,
            "render": render,
            "packages": {"pytest-vlaeval": __version__}
            | {name: (installed or _version)(name) for name in benchmark.install.record},
            "package_digest": package_digest(),
            "assets": asset_digests(selection),
        }
        | ({"num_envs": num_envs} if num_envs > 1 else {})
        | ({"order": "reference"} if reference_order else {})
    )


class RunStore:
    def __init__(self, run_dir: Path, label: str = "") -> None:
        self.run_dir = run_dir
        self.dir = RunDir(run_dir)
        self.label = label
        self._log: IO[str] | None = None
        self.log_path: Path | None = None
        """This session's log, once it has one."""
        self._occupied: IO[bytes] | None = None

    def claim(self, expected: dict[str, Any], path: Path | None = None) -> None:
        """Record the run's fingerprint (or another identity file), or refuse to mix into a run that
        differs. Atomic: of sessions claiming one run at once, exactly one writes the file (complete,
        by a hard link from a finished temporary file) and every other compares with it."""
        path = path or self.dir.fingerprint
        if not path.exists() and _create_exclusively(path, dumps(expected, indent=2) + "\n"):
            return
        stored = read_json(path, dict[str, Any], path.stem)
        keys = (set(stored) | set(expected)) - {MACHINES}  # the hosts are recorded (``join_machines``), never refused
        differ = [k for k in sorted(keys) if stored.get(k) != expected.get(k)]
        if differ:
            diff = ", ".join(f"{k}: {stored.get(k)!r} -> {expected.get(k)!r}" for k in differ)
            raise SpecError(
                f"{self.run_dir} holds a run with a different fingerprint ({diff}); "
                f"start a new run beside it with --vla-run-name=<new name> (or another --vla-results)"
            )

    def join_machines(self, machines: Iterable[Machine]) -> list[Machine]:
        """Record ``machines`` among the hosts the run's sessions ran on (the fingerprint's
        ``machines``, each once), under the run's lock: sessions of one run may start at once.
        Returns every host the run records then. A host is no part of what makes the run: one
        moved to another machine of the same stack is resumed there, and says so (``made_with``)."""
        with self.locked():
            stored = read_json(self.dir.fingerprint, Fingerprint, "fingerprint")
            before = stored.get(MACHINES, [])
            joined = list(before)
            for machine in machines:
                if machine not in joined:
                    joined.append(machine)
            if joined != before:
                write_json_atomic(self.dir.fingerprint, {**stored, MACHINES: joined})
        return joined

    def keep_spec(self, benchmark: Benchmark) -> None:
        """Keep a copy of the benchmark file the run is made with, so the run directory describes
        itself: merge, reports and comparisons need no outside file. Byte for byte (comments too),
        checked to still say what the fingerprint's digest says."""
        if self.dir.spec.is_file():  # the claimed fingerprint's digest says it is this benchmark
            return
        source = Path(benchmark.source)
        raw = source.read_bytes()
        if load_benchmark(source).digest != benchmark.digest:
            raise SpecError(f"benchmark file {benchmark.source} changed after it was read; start the session again")
        write_text_atomic(self.dir.spec, raw.decode("utf-8"))

    def holds_policy(self) -> bool:
        """Whether an earlier session recorded the run's policy (a different one is then refused);
        ``SpecError`` when what is there is not a policy file this package wrote."""
        if not self.dir.policy.exists():
            return False
        read_json(self.dir.policy, dict[str, Any], "policy")
        return True

    def claim_policy(self, record: EpisodeRecord) -> None:
        """What only a worker learns joins the run's identity: the policy's own description (name,
        config, chunk size) and the render backend ``auto`` resolved to."""
        identity = {
            "model": record.model,
            "action_chunk_size": record.chunk_size,
            "render_backend": record.render_backend,
        }
        self.claim(identity, self.dir.policy)

    def append(self, record: EpisodeRecord) -> None:
        """Append ``record`` to this session's log, durably; ``ResultsUnwritable`` when the disk
        refuses it (a torn last line is passed over when the log is read)."""
        if self._log is None:
            self.log_path = self.dir.new_log(self.label)
        with writing(self.log_path):
            try:
                if self._log is None:
                    self._log = self.dir.open_appending(self.log_path)
                self._log.write(record_line(record))
                self._log.flush()
                os.fsync(self._log.fileno())
            except OSError:
                self._discard_log()
                raise

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise writers of the run's canonical files across processes (sessions, shards, hosts
        sharing a POSIX file system)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with self.dir.open_appending(self.dir.lock) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def occupy(self) -> None:
        """Hold the run (this shard of it, for a shard's session) until ``vacate``: a second session
        started on it at once would run every episode a second time. ``SpecError`` naming the session
        that holds it. The lock is the file system's (``flock``), so a session whose process is gone
        holds nothing, whatever its file still says; the file only names the holder for that line.
        On a file system that does not share locks between hosts, sessions on two hosts do not see
        each other's, as with ``locked``."""
        path = self.dir.occupancy(self.label)
        held = self.dir.open_appending(path, "a+b")
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(held)
            held.close()
            shard = " (the same shard)" if self.label else ""
            raise SpecError(
                f"{self.run_dir} is being run by another session{shard}, {holder}: wait for it to end, or start "
                "this one beside it with --vla-run-name=<new name> (or another --vla-results)"
            ) from None
        self._occupied = held
        holder = _Holder(os.getpid(), socket.gethostname(), datetime.now(timezone.utc).isoformat(timespec="seconds"))
        with writing(path):
            held.truncate(0)
            held.write(dumps(msgspec.structs.asdict(holder)).encode("utf-8"))
            held.flush()

    def vacate(self) -> None:
        """Let the run go (``occupy``): its file emptied first, so no later reader names this session."""
        held, self._occupied = self._occupied, None
        if held is not None:
            with suppress(OSError):
                held.truncate(0)
            fcntl.flock(held, fcntl.LOCK_UN)  # before closing: a process forked from this one shares the lock
            held.close()

    def check_writable(self, env_ids: Iterable[str] = ()) -> None:
        """Fail before any episode runs when the run directory cannot take files, or holds
        something other than a file where one of its files goes, or a symbolic link where the
        session would write through it (its log's folder, the lock, the folders of ``env_ids``'
        files and videos); remove what killed writes left."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.run_dir):
                pass
        except OSError as exc:
            raise SpecError(
                f"cannot write results to {self.run_dir}: {exc.strerror or exc}; choose a writable --vla-results"
            ) from None
        for path in self.dir.files:
            if path.is_dir():
                raise SpecError(f"{path} is a directory, and the run writes its {path.name} there: remove it")
        for path in (self.dir.lock, self.dir.server_log):  # appended to, so a link there is refused, not replaced
            if path.is_symlink():
                raise SpecError(linked(path))
        env_ids = tuple(env_ids)  # walked twice: a generator would leave the videos unchecked
        for path in (self.dir.new_log(), *(self.dir.task(env_id) for env_id in env_ids)):
            self.dir.confined(path)
        for env_id in env_ids:
            self.dir.video(env_id, 0)
        remove_stale_temporaries(self.run_dir)

    def close(self) -> None:
        if self._log is not None and self.log_path is not None:
            with writing(self.log_path):
                self._log.close()
            self._log = None

    def _discard_log(self) -> None:
        """Drop a log the disk refused; the failure that led here is the one reported."""
        if self._log is not None:
            with suppress(OSError):  # closing flushes what the disk just refused
                self._log.close()
            self._log = None


class _Holder(msgspec.Struct, frozen=True):
    """What the occupancy file says of the session that holds the run."""

    pid: int
    host: Annotated[str, msgspec.Meta(max_length=255)]
    since: Annotated[str, msgspec.Meta(max_length=64)]


def _holder(held: IO[bytes]) -> str:
    """The holding session as its file names it (text from the run directory, made printable); a
    holder that has not written it yet says so."""
    held.seek(0)
    try:
        holder = msgspec.convert(loads(held.read(4096)), _Holder)
    except (ValueError, msgspec.ValidationError):
        return "which has not named itself yet"
    return terminal_safe(f"pid {holder.pid} on {holder.host} since {holder.since}")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


STALE_TEMPORARY_S = 600.0
"""Age past which a temporary file of an atomic write is taken as left by a killed writer (a live
one renames it within milliseconds)."""


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Remove the temporary files killed atomic writes left in ``directory``; returns them."""
    now = time.time()
    removed = []
    for path in directory.glob(".*.tmp"):
        with suppress(OSError):
            if path.is_file() and now - path.stat().st_mtime > STALE_TEMPORARY_S:
                path.unlink()
                removed.append(path)
    return removed


def _create_exclusively(path: Path, text: str) -> bool:
    """Write ``path`` only if nothing is there: True when this call created it (whole), False when
    another did first. A hard link from a finished temporary file makes it appear complete."""
    with writing(path), _finished_temporary(path, text.encode("utf-8")) as tmp:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    return True


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON via a temp file and rename, so a reader or a crash never sees half a file."""
    write_text_atomic(path, dumps(payload, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename, so a reader or a crash never sees half a file."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write via a temp file beside ``path`` renamed over it: a reader or a crash never sees half a
    file, and a symbolic link at ``path`` is replaced, never followed (a received run's link could
    name any file of yours)."""
    with writing(path):
        _write_atomic(path, data)


def _write_atomic(path: Path, data: bytes) -> None:
    with _finished_temporary(path, data) as tmp:
        os.replace(tmp, path)


@contextmanager
def _finished_temporary(path: Path, data: bytes) -> Iterator[str]:
    """``data`` in a synced temporary file beside ``path``, removed on the way out unless moved."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600; results are shared like any file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        yield tmp
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
