"""A run's submissions file and the key that seals it, whatever the scheduler: where a run keeps
it (``array/``, or ``slurm/`` in a run the version before that made), the scheduler it names, and
the command the merge names from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_vlaeval.arrays.submission import Submission, completing_command, submission_key
from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.results.rundir import RunDir

SHORT = ["--benchmark=fake.yaml:short"]


def record(run: Path, folder: str, **changes: object) -> Path:
    """A submissions file in ``run/folder`` as ``vlaeval slurm`` writes it (unsealed), with ``changes``."""
    fields = {
        "scheduler": "slurm",
        "pytest_args": SHORT,
        "shards": 2,
        "scheduler_options": {},
        "merge_args": [],
        "python": sys.executable,
        "workdir": str(run.parent),
        "run_dir": str(run),
        "seal": "",
        "jobs": [],
    }
    path = run / folder / "submissions.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in {**fields, **changes}.items() if v is not None}))
    return path


def test_a_run_keeps_its_submissions_in_array_or_in_the_slurm_folder_an_earlier_version_made(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert RunDir(run).submissions == run / "array" / "submissions.json", "a new run's"
    earlier = record(run, "slurm", scheduler=None)  # the version before named no scheduler: Slurm's
    assert RunDir(run).submissions == earlier and Submission.read(earlier).scheduler == "slurm"
    assert completing_command(run) == f"vlaeval slurm --complete {run}"
    record(run, "array")
    assert RunDir(run).submissions == run / "array" / "submissions.json", "array/ wins once it holds one"


def test_the_command_that_completes_a_run_is_the_one_its_record_names(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert completing_command(run) is None, "a run never submitted as an array"
    path = record(run, "array", scheduler="kubernetes")
    assert completing_command(run) == f"vlaeval kubernetes --complete {run}"
    path.write_text(json.dumps({**json.loads(path.read_text()), "scheduler": "x; rm -rf ~"}))
    assert completing_command(run) is None, "a name no vlaeval command has is no advice"


def test_the_merge_of_a_partial_run_names_the_command_that_submitted_it(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.runpytest(*SHORT, "--vla-results=cluster", "--vla-shard=1/3")
    (run,) = (fake.path / "cluster").iterdir()
    record(run, "array", scheduler="kubernetes")
    assert vlaeval(["merge", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"or, on the cluster it was submitted to: vlaeval kubernetes --complete {run}\n" in out, out


def test_the_key_an_earlier_version_made_seals_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An account that submitted before the key was named for every scheduler keeps ``slurm.key``: the
    runs it sealed still complete, and no second key is made beside it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    folder = tmp_path / "pytest-vlaeval"
    folder.mkdir()
    (folder / "slurm.key").write_text("a" * 64)
    (folder / "slurm.key").chmod(0o600)
    assert submission_key(create=True, scheduler="slurm") == b"a" * 64
    assert not (folder / "arrays.key").exists()
    (folder / "slurm.key").unlink()
    made = submission_key(create=True, scheduler="slurm")
    assert made != b"a" * 64 and (folder / "arrays.key").read_bytes() == made
