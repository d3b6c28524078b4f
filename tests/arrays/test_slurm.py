"""``vlaeval slurm`` against a real one-node Slurm cluster (slurmctld, slurmd and munged, started
for this module): an array of shards and its dependent merge give what one local session gives;
a cancelled array task and a killed shard leave a partial run that says so, and ``--complete``
runs exactly what is missing."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import episode_records, read_json
from slurm_cluster import one_node_cluster, wait_for_jobs

from pytest_vlaeval.arrays.submission import Submission, submission_key
from pytest_vlaeval.results.rundir import RunDir

pytestmark = [pytest.mark.slurm, pytest.mark.minutes(2)]

RUN = ["--benchmark=fake.yaml:short", "--policy=random", "--vla-results=cluster"]
JOBS_S = 240


@pytest.fixture(autouse=True)
def own_key(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key that seals submissions, in a folder of this test's (for vlaeval slurm and the test alike)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with one_node_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def vlaeval_slurm(fake: pytest.Pytester, cluster: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    command = [sys.executable, "-m", "pytest_vlaeval", "slurm", *args]
    return subprocess.run(command, cwd=fake.path, env={**env, **cluster}, capture_output=True, text=True, timeout=120)


def submitted(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The array and merge job ids ``vlaeval slurm`` printed."""
    found = re.search(r"submitted array job (\d+) .* and merge job (\d+) \(after it\)", done.stdout)
    assert done.returncode == 0 and found, done.stdout + done.stderr
    return [found.group(1), found.group(2)]


def merge_output(run: Path, number: int, folder: str = "array") -> str:
    (log,) = (run / folder / "logs").glob(f"merge-{number}_*.out")
    return log.read_text()


def outcomes(run: Path) -> dict[tuple[str, int], tuple[str, float, int]]:
    return {key: (r["outcome"], r["episode_return"], r["length"]) for key, r in episode_records(run).items()}


def test_an_array_of_three_shards_and_its_merge_equal_one_local_session(
    fake: pytest.Pytester, cluster: dict[str, str]
) -> None:
    jobs = submitted(vlaeval_slurm(fake, cluster, "--shards", "3", "--", *RUN))
    wait_for_jobs(cluster, jobs, JOBS_S)
    (run,) = (fake.path / "cluster").iterdir()
    labels = sorted(re.search(r"shard\d+of3", log.name).group() for log in (run / "episodes").iterdir())
    assert labels == ["shard1of3", "shard2of3", "shard3of3"], "one log per shard, no other"
    merged = merge_output(run, 1)
    assert "episodes: 6 completed, 0 errors, 0 missing of 6" in merged, merged
    assert re.search(r"shards finished over \d+ s: first shard \d/3 at ", merged), merged
    local = fake.runpytest_subprocess(*RUN[:2], "--vla-results=local", "-p", "no:cacheprovider")
    assert local.ret == pytest.ExitCode.TESTS_FAILED or local.ret == pytest.ExitCode.OK
    (alone,) = (fake.path / "local").iterdir()
    assert outcomes(run) == outcomes(alone)
    for name in ("summary.json", "Alpha-v0.json", "Beta-v0.json"):
        ours, theirs = read_json(run / name), read_json(alone / name)
        for volatile in ("written_at", "model"):
            ours.pop(volatile, None)
            theirs.pop(volatile, None)
        assert ours == theirs, name
    for name in ("report.html", "report.md", "array/array-1.sbatch", "array/merge-1.sbatch"):
        assert (run / name).is_file(), name
    kept = json.loads((run / "array" / "submissions.json").read_text())
    assert [job["array_job"] for job in kept["jobs"]] == [jobs[0]] and kept["pytest_args"] == RUN


def slow_array(fake: pytest.Pytester, cluster: dict[str, str]) -> tuple[list[str], Path]:
    """3 shards of 12 episodes of about a second each; the job ids and the run directory."""
    run_args = [*RUN[:1], "--policy=spy_policies:Slow", "--vla-results=cluster", "--episodes=6"]
    jobs = submitted(vlaeval_slurm(fake, cluster, "--shards", "3", "--", *run_args))
    return jobs, fake.path / "cluster" / next(p.name for p in _wait_for_dir(fake.path / "cluster"))


@pytest.mark.long
def test_a_cancelled_array_task_is_completed_with_exactly_what_it_missed(
    fake: pytest.Pytester, cluster: dict[str, str]
) -> None:
    jobs, run = slow_array(fake, cluster)
    victim = _wait_for_a_record(run, "shard2of3")
    subprocess.run(["scancel", f"{jobs[0]}_1"], env={**os.environ, **cluster}, check=True)
    wait_for_jobs(cluster, jobs, JOBS_S)
    first = episode_records(run)
    assert victim in first and len(first) < 12, "the cancelled task left its shard part done"
    assert f"vlaeval slurm --complete {run}" in merge_output(run, 1)
    before = {log.name: log.read_bytes() for log in (run / "episodes").iterdir()}

    again = submitted(vlaeval_slurm(fake, cluster, "--complete", str(run)))
    wait_for_jobs(cluster, again, JOBS_S)
    assert "episodes: 12 completed, 0 errors, 0 missing of 12" in merge_output(run, 2)
    listed = json.loads((run / "array" / "complete-2.episodes.json").read_text())
    assert sorted(map(tuple, listed)) == sorted(set(episode_records(run)) - set(first)), "exactly what was missing"
    after = [line for log in (run / "episodes").iterdir() for line in log.read_text().splitlines()]
    keys = [(r["task"], r["seed"]) for r in map(json.loads, after)]
    assert len(keys) == len(set(keys)) == 12, "no episode ran twice"
    for name, content in before.items():
        assert (run / "episodes" / name).read_bytes() == content, "the first array's logs are left as they were"
    assert read_json(run / "summary.json")["partial"] is False


def test_a_second_submission_of_a_queued_run_is_refused(fake: pytest.Pytester, cluster: dict[str, str]) -> None:
    run_args = [*RUN[:1], "--policy=spy_policies:Slow", "--vla-results=cluster", "--episodes=30"]  # a minute's work
    jobs = submitted(vlaeval_slurm(fake, cluster, "--shards", "3", "--", *run_args))
    again = vlaeval_slurm(fake, cluster, "--shards", "3", "--", *run_args)
    subprocess.run(["scancel", *jobs], env={**os.environ, **cluster}, check=True)
    assert again.returncode == 2, again.stdout + again.stderr
    queued = f"this run's jobs {', '.join(sorted(jobs))} are still queued or running: wait for them, or scancel them"
    assert again.stdout == f"vlaeval slurm: {queued}\n"
    wait_for_jobs(cluster, jobs, JOBS_S)
    (run,) = (fake.path / "cluster").iterdir()
    assert not (run / "array" / "array-2.sbatch").exists()
    assert [job["array_job"] for job in read_json(run / "array" / "submissions.json")["jobs"]] == [jobs[0]]


def test_a_run_named_with_a_percent_sign_runs_and_merges(fake: pytest.Pytester, cluster: dict[str, str]) -> None:
    jobs = submitted(vlaeval_slurm(fake, cluster, "--shards", "2", "--", *RUN, "--vla-run-name=r%jx"))
    wait_for_jobs(cluster, jobs, JOBS_S)
    run = fake.path / "cluster" / "r%jx"
    assert "episodes: 6 completed, 0 errors, 0 missing of 6" in merge_output(run, 1)
    assert len(list((run / "array" / "logs").glob("array-1_*.out"))) == 2


def test_complete_submits_the_whole_run_when_no_shard_started(fake: pytest.Pytester, cluster: dict[str, str]) -> None:
    """Every task of the first array ended before its pytest wrote anything (cancelled while queued,
    a node lost): no fingerprint, no episode log."""
    run = submitted_record(fake, jobs=("999990", "999991"))
    done = vlaeval_slurm(fake, cluster, "--complete", str(run))
    assert done.stdout.startswith(f"no shard of {run} started (no fingerprint.json, no episode log)"), done.stdout
    wait_for_jobs(cluster, submitted(done), JOBS_S)
    assert "episodes: 6 completed, 0 errors, 0 missing of 6" in merge_output(run, 2)


def test_a_run_the_previous_version_submitted_completes_in_its_own_folder(
    fake: pytest.Pytester, cluster: dict[str, str]
) -> None:
    """A run directory as the version before ``array/`` left it: its record in ``slurm/``, naming no
    scheduler, sealed with the account's ``slurm.key`` (the seal computed here, as that version did).
    ``--complete`` trusts it and keeps the run's scripts, record and output in ``slurm/``; no second
    key is made."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "pytest-vlaeval"
    config.mkdir(mode=0o700)
    key = secrets.token_hex(32)
    (config / "slurm.key").write_text(key)
    (config / "slurm.key").chmod(0o600)
    run = fake.path / "cluster" / "fake-short-random"
    (run / "slurm").mkdir(parents=True)
    sealed = json.dumps([RUN, 2, {}, [], str(fake.path), str(run)], sort_keys=True)
    jobs = [{"kind": "array", "array_job": "999990", "merge_job": "999991", "shards": 2}]
    (run / "slurm" / "submissions.json").write_text(
        json.dumps(
            {
                "pytest_args": RUN,
                "shards": 2,
                "scheduler_options": {},
                "merge_args": [],
                "python": sys.executable,
                "workdir": str(fake.path),
                "run_dir": str(run),
                "seal": hmac.new(key.encode(), sealed.encode(), hashlib.sha256).hexdigest(),
                "jobs": jobs,
            }
        )
    )
    done = vlaeval_slurm(fake, cluster, "--complete", str(run))
    wait_for_jobs(cluster, submitted(done), JOBS_S)
    assert "episodes: 6 completed, 0 errors, 0 missing of 6" in merge_output(run, 2, folder="slurm")
    assert (run / "slurm" / "array-2.sbatch").is_file() and not (run / "array").exists()
    kept = read_json(run / "slurm" / "submissions.json")
    assert kept["jobs"][0] == jobs[0] and len(kept["jobs"]) == 2 and kept["scheduler"] == "slurm"
    assert not (config / "arrays.key").exists()


def test_a_run_another_scheduler_submitted_is_refused_in_one_line(fake: pytest.Pytester) -> None:
    """Its jobs are not Slurm's to ask about, nor its options sbatch's: neither --complete nor a new
    submission of the run goes on; a name no vlaeval command has is refused as it is read."""
    run = submitted_record(fake)
    record = run / "array" / "submissions.json"
    rewrite(record, scheduler="kubernetes")
    refused = "the run was submitted with vlaeval kubernetes: submit or complete it with vlaeval kubernetes"
    for args in (["--complete", str(run)], ["--", *RUN]):
        done = vlaeval_slurm(fake, {}, *args)
        assert done.returncode == 2 and done.stdout == f"vlaeval slurm: {record}: {refused}\n", done.stdout
    rewrite(record, scheduler="slurm\x1b[2J")
    done = vlaeval_slurm(fake, {}, "--complete", str(run))
    assert done.returncode == 2 and "its scheduler is not the name of a vlaeval command" in done.stdout
    assert not (run / "array" / "array-2.sbatch").exists()


def test_a_killed_shard_leaves_a_partial_run_that_names_what_is_missing(
    fake: pytest.Pytester, cluster: dict[str, str]
) -> None:
    jobs, run = slow_array(fake, cluster)
    _wait_for_a_record(run, "shard3of3")
    os.kill(_array_task_pid(jobs[0], "2"), signal.SIGKILL)  # the shard's pytest, as the OOM killer would
    wait_for_jobs(cluster, jobs, JOBS_S)
    merged = merge_output(run, 1)
    summary = read_json(run / "summary.json")
    assert summary["partial"] is True and summary["n_missing"] > 0, merged
    assert f"{summary['n_missing']} missing of 12" in merged
    assert "fill the gaps with: pytest " in merged and f"vlaeval slurm --complete {run}" in merged


def _wait_for_dir(results: Path) -> list[Path]:
    deadline = time.monotonic() + JOBS_S
    while not results.is_dir() or not list(results.iterdir()):
        assert time.monotonic() < deadline, "no run directory appeared"
        time.sleep(0.2)
    return list(results.iterdir())


def _wait_for_a_record(run: Path, label: str) -> tuple[str, int]:
    """The first episode a shard recorded, once it has one."""
    deadline = time.monotonic() + JOBS_S
    while True:
        logs = list((run / "episodes").glob(f"*-{label}.jsonl")) if (run / "episodes").is_dir() else []
        lines = [line for log in logs for line in log.read_text().splitlines() if line.endswith("}")]
        if lines:
            record = json.loads(lines[0])
            return record["task"], record["seed"]
        assert time.monotonic() < deadline, f"{label} recorded nothing"
        time.sleep(0.2)


def _array_task_pid(array_job: str, task: str) -> int:
    """The pytest process of one array task (the batch script execs it)."""
    for proc in Path("/proc").iterdir():
        try:
            environ = dict(item.split("=", 1) for item in (proc / "environ").read_text().split("\0") if "=" in item)
            command = (proc / "cmdline").read_text()
        except (OSError, ValueError):
            continue
        if (
            environ.get("SLURM_ARRAY_JOB_ID") == array_job
            and environ.get("SLURM_ARRAY_TASK_ID") == task
            and "pytest" in command
        ):
            return int(proc.name)
    raise AssertionError(f"no process of array task {array_job}_{task}")


@pytest.mark.long
@pytest.mark.mikasa
def test_a_real_mikasa_array_merges_to_what_a_local_session_records(tmp_path: Path, cluster: dict[str, str]) -> None:
    """2 shards x 2 short tasks x 2 seeds on the cluster, beside the same episodes in one local session."""
    run_args = [
        "--benchmark=short",
        "--vla-tasks=RememberColor3-VLA-v0,FindImposterColor3-VLA-v0",  # 25 steps each
        "--episodes=2",
        "--policy=random",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "slurm", "--shards", "2", "--", *run_args, "--vla-results=cluster"],
        cwd=tmp_path,
        env={**env, **cluster},
        capture_output=True,
        text=True,
        timeout=300,
    )
    jobs = submitted(done)
    local = subprocess.run(  # while the array runs
        [sys.executable, "-m", "pytest", *run_args, "--vla-results=local", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert local.returncode in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), local.stdout[-2000:]
    wait_for_jobs(cluster, jobs, 900)
    (run,) = (tmp_path / "cluster").iterdir()
    (alone,) = (tmp_path / "local").iterdir()
    assert "episodes: 4 completed, 0 errors, 0 missing of 4" in merge_output(run, 1)
    assert len(list((run / "episodes").iterdir())) == 2, "one log per shard"
    assert outcomes(run) == outcomes(alone) and len(outcomes(run)) == 4
    ours, theirs = read_json(run / "summary.json"), read_json(alone / "summary.json")
    for field in ("sr_split", "per_task_sr", "per_task_mean_return", "n_completed", "partial"):
        assert ours[field] == theirs[field], field


def test_a_dry_run_prints_both_scripts_and_submits_nothing(fake: pytest.Pytester) -> None:
    options = ["--shards", "4", "--partition", "gpu", "--time", "2:00:00", "--gres", "gpu:1", "--account", "lab"]
    gate = ["--baseline", "base", "--assume", "nothing", "--undecided-exit", "0"]
    done = vlaeval_slurm(fake, {}, *options, *gate, "--dry-run", "--", *RUN)
    assert done.returncode == 0, done.stdout + done.stderr
    run = fake.path / "cluster" / "fake-short-random"
    _, array_name, array, merge_name, merge = re.split(r"^# (/\S+\.sbatch)$", done.stdout, flags=re.M)
    assert (array_name, merge_name) == (str(run / "array" / "array-1.sbatch"), str(run / "array" / "merge-1.sbatch"))
    for line in ("#SBATCH --array=0-3", "#SBATCH --partition=gpu", "#SBATCH --time=2:00:00", "#SBATCH --gres=gpu:1"):
        assert line in array, array
    assert "--vla-shard=auto --vla-rerun=incomplete --vla-placement=all" in array, "a worker per GPU Slurm gives"
    assert "#SBATCH --gres" not in merge and "#SBATCH --partition=gpu" in merge, "the merge asks for no GPU"
    assert f"merge {run} --baseline={fake.path / 'base'} --assume=nothing --undecided-exit=0" in merge, merge
    assert not (fake.path / "cluster").exists(), "a dry run writes nothing"


def test_a_run_name_with_a_percent_sign_is_escaped_where_slurm_expands_it(fake: pytest.Pytester) -> None:
    done = vlaeval_slurm(fake, {}, "--dry-run", "--", *RUN, "--vla-run-name=r%jx")
    assert done.returncode == 0, done.stdout + done.stderr
    logs = fake.path / "cluster" / "r%%jx" / "array" / "logs"
    assert f"#SBATCH --output={logs}/array-1_%A_%a.out\n" in done.stdout, done.stdout
    assert f"#SBATCH --output={logs}/merge-1_%j.out\n" in done.stdout, done.stdout
    assert f"merge {fake.path / 'cluster' / 'r%jx'}\n" in done.stdout, "only Slurm's file names are patterns"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--", "--benchmark=fake.yaml:nope"], "unknown split 'nope'"),
        (["--", *RUN, "--vla-sequential", "--vla-min-sr=0.5"], "--vla-sequential: the array shards the run itself"),
        (["--", *RUN, "--vla-shard=1/2"], "--vla-shard=1/2: the array shards the run itself"),
        (["--", *RUN, "--vla-baseline=base"], "give a baseline to vlaeval slurm --baseline"),
        (["--shards", "0", "--", *RUN], "--shards must be at least 1, got 0"),
        (
            ["--max-drop", "0.1", "--", *RUN],
            "--max-drop/--alpha/--assume/--undecided-exit set the merge's gate against --baseline DIR",
        ),
        ([], "give the run's pytest arguments after --"),
        (["--complete", "nowhere"], "was the run submitted with vlaeval slurm?"),
        (["--", *RUN, "--vla-run-name=a\\b"], "cannot name a path with a space or a backslash"),
    ],
)
def test_what_cannot_be_submitted_is_one_line_before_anything_is_written(
    fake: pytest.Pytester, args: list[str], expected: str
) -> None:
    done = vlaeval_slurm(fake, {}, *args)
    assert done.returncode == 2 and expected in done.stdout, done.stdout + done.stderr
    assert len(done.stdout.strip().splitlines()) == 1 and done.stdout.startswith("vlaeval slurm: ")
    assert not (fake.path / "cluster").exists()


def test_a_linked_array_folder_is_refused_never_written_through(fake: pytest.Pytester, tmp_path: Path) -> None:
    """The scripts and job ids go into the run's array/ folder: a link there (a received run's)
    is refused in one line before anything is written or submitted, never followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = fake.path / "cluster" / "fake-short-random"
    run.mkdir(parents=True)
    (run / "array").symlink_to(outside)
    done = vlaeval_slurm(fake, {}, "--shards", "2", "--", *RUN)
    assert done.returncode == 2 and "is a symbolic link" in done.stdout, done.stdout + done.stderr
    assert len(done.stdout.strip().splitlines()) == 1
    assert not list(outside.iterdir()), "nothing written through the link"


def submitted_record(fake: pytest.Pytester, jobs: tuple[str, str] = ("7", "8")) -> Path:
    """A run directory as ``vlaeval slurm --shards 2 -- RUN`` leaves it, sealed with this account's key."""
    run = fake.path / "cluster" / "fake-short-random"
    (run / "array").mkdir(parents=True)
    submission = Submission("slurm", RUN, 2, {}, [], sys.executable, str(fake.path), str(run))
    job = {"kind": "array", "array_job": jobs[0], "merge_job": jobs[1], "shards": 2}
    sealed = replace(submission, seal=submission.seal_with(submission_key(create=True, scheduler="slurm")), jobs=[job])
    sealed.write(RunDir(run))
    return run


def rewrite(record: Path, **changes: object) -> None:
    record.write_text(json.dumps({**json.loads(record.read_text()), **changes}))


def test_a_record_from_before_sealing_is_refused_by_complete_and_read_by_a_new_submission(
    fake: pytest.Pytester,
) -> None:
    """A submissions.json written before runs were sealed (no run_dir, no seal) still reads, so a
    new ``vlaeval slurm`` of that run can carry its jobs on; --complete refuses to run it."""
    run = submitted_record(fake)
    record = run / "array" / "submissions.json"
    old = {k: v for k, v in json.loads(record.read_text()).items() if k not in ("run_dir", "seal")}
    record.write_text(json.dumps(old))
    assert Submission.read(record).seal == ""
    done = vlaeval_slurm(fake, {}, "--complete", str(run))
    assert done.returncode == 2 and "was written before submissions were sealed" in done.stdout, done.stdout
    assert len(done.stdout.strip().splitlines()) == 1


def test_complete_runs_nothing_of_a_record_it_cannot_trust(fake: pytest.Pytester, tmp_path: Path) -> None:
    """--complete runs the command a run directory records (its collection imports the workdir's
    conftest.py): an edited record, a received one and a moved copy are refused before any of it runs."""
    marker = tmp_path / "conftest-ran"
    (fake.path / "planted").mkdir()
    (fake.path / "planted" / "conftest.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    run = submitted_record(fake)
    record = run / "array" / "submissions.json"
    untrusted = "is not as this account submitted it (edited, or submitted by someone else)"

    rewrite(record, workdir=str(fake.path / "planted"))  # my own run, edited
    done = vlaeval_slurm(fake, {}, "--complete", str(run))
    assert done.returncode == 2 and untrusted in done.stdout, done.stdout + done.stderr

    received = fake.path / "received" / run.name  # a copy from elsewhere: the command runs inside it
    (received / "array").mkdir(parents=True)
    shutil.copytree(fake.path / "planted", received / "planted")
    (received / "array" / "submissions.json").write_text(record.read_text())
    rewrite(received / "array" / "submissions.json", workdir="planted", run_dir=str(received), seal="\u00e9" * 64)
    done = vlaeval_slurm(fake, {}, "--complete", str(received))
    assert done.returncode == 2 and untrusted in done.stdout, done.stdout + done.stderr
    assert len(done.stdout.splitlines()) == 1 and not done.stderr

    rewrite(received / "array" / "submissions.json", run_dir=str(run))  # one that names where it came from
    done = vlaeval_slurm(fake, {}, "--complete", str(received))
    assert done.returncode == 2 and f"records the run at {run}, not here" in done.stdout, done.stdout
    assert not marker.exists(), "nothing the records name was run"

    rewrite(record, jobs=[{"array_job": "7; rm -rf /"}])
    done = vlaeval_slurm(fake, {}, "--complete", str(run))
    assert done.returncode == 2 and "its jobs are not a list of job ids" in done.stdout, done.stdout


def test_complete_needs_the_key_of_the_account_that_submitted(fake: pytest.Pytester) -> None:
    run = submitted_record(fake)
    key = Path(os.environ["XDG_CONFIG_HOME"]) / "pytest-vlaeval" / "arrays.key"
    key.chmod(0o644)
    done = vlaeval_slurm(fake, {}, "--complete", str(run))
    assert done.returncode == 2 and f"{key}: the key that seals submissions must be yours" in done.stdout
    key.unlink()
    done = vlaeval_slurm(fake, {}, "--complete", str(run))
    assert done.returncode == 2 and f"{key} is missing: no run was submitted" in done.stdout, done.stdout


def test_a_record_written_before_the_field_was_renamed_reads_and_keeps_its_seal(fake: pytest.Pytester) -> None:
    """``submissions.json`` once named the scheduler's options ``sbatch``: such a file reads as it
    did, its options in ``scheduler_options``, and its seal still holds (it covers values, not names)."""
    record = submitted_record(fake) / "array" / "submissions.json"
    data = json.loads(record.read_text())
    data["sbatch"] = data.pop("scheduler_options") | {"partition": "gpu"}
    sealed = Submission.read(record)
    record.write_text(json.dumps(data))
    old = Submission.read(record)
    assert old.scheduler_options == {"partition": "gpu"}
    assert replace(old, scheduler_options={}).seal_with(submission_key(create=False, scheduler="slurm")) == sealed.seal
