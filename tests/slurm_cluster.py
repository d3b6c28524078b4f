"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd as child processes
of the test session, every file (key, socket, state, spool, logs) in a temporary directory, on
free ports, so it touches nothing of the machine's own. Needs Debian's slurm-wlm and munge
(``scripts/install_cluster_tools.sh``) and root (slurmd runs jobs as their user)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

START_S = 60
NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(root: Path, munge_socket: Path) -> str:
    host = socket.gethostname().split(".")[0]
    return f"""\
ClusterName=vlaeval-tests
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/ctld.pid
SlurmdPidFile={root}/d.pid
SlurmctldLogFile={root}/log/ctld.log
SlurmdLogFile={root}/log/d.log
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
NodeName={host} CPUs={os.cpu_count()} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@contextmanager
def one_node_cluster(root: Path) -> Iterator[dict[str, str]]:
    """Start the cluster; yields the environment its commands need (``SLURM_CONF``)."""
    missing = [name for name in NEEDED if shutil.which(name) is None]
    if missing:
        pytest.fail(f"Slurm is not installed here ({', '.join(missing)} missing): run scripts/install_cluster_tools.sh")
    if os.geteuid() != 0:
        pytest.fail("the one-node Slurm cluster runs slurmd as root: run the Slurm tests as root")
    for folder in ("state", "spool", "log", "munge"):
        (root / folder).mkdir(parents=True)
    key, munge_socket = root / "munge" / "munge.key", root / "munge" / "socket"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = root / "slurm.conf"
    conf.write_text(_config(root, munge_socket))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munge = [
        "munged",
        "--foreground",
        "--force",
        f"--key-file={key}",
        f"--socket={munge_socket}",
        f"--pid-file={root / 'munge' / 'pid'}",
        f"--log-file={root / 'log' / 'munge.log'}",
        f"--seed-file={root / 'munge' / 'seed'}",
    ]
    daemons = [subprocess.Popen(munge, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)]
    try:
        _wait(lambda: munge_socket.exists(), "munged", root)
        for daemon in ("slurmctld", "slurmd"):
            command = [daemon, "-D", "-f", str(conf)]
            daemons.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _wait(lambda: _idle(env), "slurmctld and slurmd (node idle)", root)
        yield {"SLURM_CONF": str(conf)}
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()


def _idle(env: dict[str, str]) -> bool:
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "idle"


def _wait(ready: object, what: str, root: Path) -> None:
    deadline = time.monotonic() + START_S
    while not ready():  # type: ignore[operator]
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in (root / "log").glob("*.log"))
            pytest.fail(f"{what} did not come up in {START_S} s:\n{logs}")
        time.sleep(0.2)


def wait_for_jobs(env: dict[str, str], jobs: list[str], timeout: float) -> None:
    """Until Slurm holds none of ``jobs`` (array or plain job ids)."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(["squeue", "-h", "-o", "%F %A"], env=env, capture_output=True, text=True, check=True)
        if not set(jobs) & set(done.stdout.split()):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"jobs {jobs} still in the queue after {timeout} s:\n{done.stdout}")
        time.sleep(0.5)
