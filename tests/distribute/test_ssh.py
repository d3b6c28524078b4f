"""Workers over ssh (``--tx ssh=``), as people with a few workstations run them: a real sshd on
loopback (Debian's openssh-server, key auth, every file in a temporary directory), each worker
started in a checkout directory of its own. The affinity scheduler, the records, the frozen-worker
watch and Ctrl-C behave as with local workers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import FREEZES, TESTS, episode_records, read_json, run_dir

pytestmark = pytest.mark.ssh

START_S = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ssh_home(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An sshd on a free loopback port that lets a fresh key in; the ``--tx`` spec of a worker in
    ``home`` (a checkout of its own, with the fake benchmark) and that home."""
    sshd = Path("/usr/sbin/sshd")
    if not sshd.exists() or os.geteuid() != 0:
        pytest.fail("the ssh tests start Debian's sshd as root: run scripts/install_cluster_tools.sh, as root")
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    (keys / "authorized_keys").write_text((keys / "user.pub").read_text())
    port = _free_port()
    config = tmp_path / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nPidFile {tmp_path / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPermitUserEnvironment no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    daemon = subprocess.Popen([str(sshd), "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True)
    home = tmp_path / "workstation"
    home.mkdir()
    for file in ("fake.yaml", "fake_env.py"):
        (home / file).write_text((TESTS / file).read_text())
    client = (
        f"-p {port} -i {keys / 'user'} -o BatchMode=yes -o StrictHostKeyChecking=no "
        f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR root@127.0.0.1"
    )
    spec = f"ssh={client}//python={sys.executable}//chdir={home}//env:PYTHONPATH={home}"
    try:
        _wait_for_login(client, daemon)
        yield spec, home
    finally:
        daemon.terminate()
        daemon.wait(10)


def _wait_for_login(client: str, daemon: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_S
    while True:
        done = subprocess.run(["ssh", *client.split(), "true"], capture_output=True, text=True)
        if done.returncode == 0:
            return
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.terminate()
            pytest.fail(
                f"sshd did not let the test key in: {done.stderr}{daemon.stderr.read() if daemon.stderr else ''}"
            )
        time.sleep(0.2)


ARGS = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--vla-live=off"]


def test_ssh_workers_run_the_affinity_scheduler_and_send_back_every_record(
    fake: pytest.Pytester, ssh_home: tuple[str, Path]
) -> None:
    spec, home = ssh_home
    result = fake.runpytest_subprocess("--tx", f"2*{spec}", *ARGS, "-v", "--episodes=4", timeout=180)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    result.stdout.fnmatch_lines(["*scheduling tests via AffinityScheduling*"])
    records = episode_records(run_dir(fake))
    assert len(records) == 8 and {r["worker"] for r in records.values()} <= {"gw0", "gw1"}
    # Affinity: a worker builds a task's env once and runs its episodes there. A worker that runs dry
    # may take the tail of the other's task (a loaded machine starts one worker late): one more build.
    places = {(task, record["worker"]) for (task, _), record in records.items()}
    builds = Counter((task, record["worker"]) for (task, _), record in records.items() if record["env_built"])
    assert builds == Counter(places), f"one env build per task and worker: {builds} for {places}"
    assert len(places) <= 3, f"at most one tail taken: {places}"
    assert read_json(run_dir(fake) / "summary.json")["n_completed"] == 8
    assert not (home / "results").exists(), "results live on the controller, not the workstation"


@pytest.mark.long
def test_a_frozen_ssh_worker_is_cut_off_not_signalled_and_the_run_finishes(
    fake: pytest.Pytester, ssh_home: tuple[str, Path]
) -> None:
    spec, home = ssh_home
    (home / "fake_env_base.py").write_text((TESTS / "fake_env.py").read_text())
    (home / "fake_env.py").write_text(FREEZES)
    result = fake.runpytest_subprocess("--tx", spec, "--tx", "popen", *ARGS, "--vla-timeout=1", timeout=180)
    output = result.stdout.str()
    frozen = [p for p in psutil.process_iter() if _stopped_in(p, home)]
    for process in frozen:  # the frozen worker on the 'workstation' is the user's to end there; end it here
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    assert "cannot be signalled from here" in output and "on root@127.0.0.1 (process" in output, output
    assert len(frozen) == 1 and f"end process {frozen[0].pid} on root@127.0.0.1" in output, output
    records = episode_records(run_dir(fake))
    assert len(records) == 6, records
    errors = sorted(r["error_kind"] for r in records.values() if r["outcome"] == "error")
    assert errors[0] == "crash" and set(errors[1:]) <= {"lost"}, errors
    assert {r["worker"] for r in records.values() if r["outcome"] != "error"} == {"gw1"}


def _stopped_in(process: psutil.Process, home: Path) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.status() == psutil.STATUS_STOPPED and process.cwd().startswith(str(home))
    return False


def test_ctrl_c_with_ssh_workers_keeps_what_they_finished(fake: pytest.Pytester, ssh_home: tuple[str, Path]) -> None:
    spec, home = ssh_home
    (home / "spy_policies.py").write_text((TESTS / "spy_policies.py").read_text())
    command = [sys.executable, "-m", "pytest", "--tx", f"2*{spec}", *ARGS, "--episodes=10"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    proc = subprocess.Popen(
        [*command, "--policy=spy_policies:Slow"],
        cwd=fake.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (fake.path / "results").is_dir() or len(_lines(fake.path / "results")) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["interrupted"] is True and summary["partial"] is True
    assert summary["n_completed"] == len(episode_records(run_dir(fake))) >= 2, "every finished episode is kept"
    assert summary["n_errors"] == 0, "an episode cut short by Ctrl-C is missing, never an error"


def _lines(results: Path) -> list[str]:
    return [line for log in results.glob("*/episodes/*.jsonl") for line in log.read_text().splitlines()]
