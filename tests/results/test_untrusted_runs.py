"""A run directory is untrusted input: someone sends one, a crash or a full disk tears one, a
second session starts on it at the same time. Whatever it holds, a session, ``vlaeval merge`` and
``vlaeval compare`` answer in one line naming the file, before any episode where it can be known
then; two sessions never both claim one run."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_one_line_usage_error, run_dir

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import STALE_TEMPORARY_S, RunStore

SHORT = ["--benchmark=fake.yaml:short", "--episodes=2", "-p", "no:cacheprovider"]


def vlaeval(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def assert_one_line(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, output
    assert "Traceback" not in output and expected in output, output
    assert len([line for line in output.splitlines() if line.startswith("vlaeval ")]) == 1, output


def damage(run: Path, name: str) -> None:
    """Each way a received or torn run can hold something else than this package wrote."""
    summary = run / "summary.json"
    data = json.loads(summary.read_text())
    task = run / f"{data['tasks'][0]}.json"
    if name == "garbage summary":
        summary.write_text("<html>not json")
    elif name == "empty summary":
        summary.write_text("")
    elif name == "summary a list":
        summary.write_text("[]")
    elif name == "missing key":
        del data["sr_split"]
        summary.write_text(json.dumps(data))
    elif name == "NaN":
        task.write_text(re.sub(r'"sr": [0-9.]+', '"sr": NaN', task.read_text()))
    elif name == "missing task file":
        task.unlink()
    elif name == "a task outside the run":
        data["tasks"][0] = "../../../etc/passwd"
        summary.write_text(json.dumps(data))
    elif name == "a group SR as text":
        data["sr_per_memory_type"] = {"Object": "high"}
        summary.write_text(json.dumps(data))
    elif name == "a directory for the summary":
        summary.unlink()
        summary.mkdir()
    elif name == "a string for successes":
        task.write_text(json.dumps({**json.loads(task.read_text()), "successes": "yes"}))
    else:
        raise AssertionError(name)


DAMAGES = [
    "garbage summary",
    "empty summary",
    "summary a list",
    "missing key",
    "NaN",
    "missing task file",
    "a task outside the run",
    "a group SR as text",
    "a directory for the summary",
    "a string for successes",
]


@pytest.fixture
def two_runs(fake: pytest.Pytester) -> list[Path]:
    runs = []
    for policy in ("random", "zero"):
        fake.runpytest(*SHORT, f"--policy={policy}")
        runs.append(next(p for p in (fake.path / "results").iterdir() if policy in p.name))
    return runs


@pytest.mark.parametrize("name", DAMAGES)
def test_compare_refuses_a_damaged_run_in_one_line(two_runs: list[Path], tmp_path: Path, name: str) -> None:
    damage(two_runs[1], name)
    assert_one_line(vlaeval("compare", *map(str, two_runs), "--out", str(tmp_path), cwd=tmp_path), "vlaeval compare: ")


def test_compare_into_a_folder_it_cannot_write_is_one_line(two_runs: list[Path], tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    proc = vlaeval("compare", *map(str, two_runs), "--out", str(blocked), cwd=tmp_path)
    assert_one_line(proc, f"writing {blocked}/compare.md")


def test_nothing_a_received_run_names_or_holds_is_imported(
    two_runs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Merge and compare read a received run's benchmark file, whose ``env.factory`` names the
    module ``fake_env``: here that module, and the run's own ``conftest.py`` and ``fake_env.py``,
    would leave a file behind if imported. None is."""
    imported = tmp_path / "IMPORTED"
    trap = f"from pathlib import Path\nPath({str(imported)!r}).write_text(__name__)\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "fake_env.py").write_text(trap)
    for run in two_runs:
        (run / "conftest.py").write_text(trap)
        (run / "fake_env.py").write_text(trap)
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))  # where `fake_env` is the trap
    merged = vlaeval("merge", str(two_runs[0]), "--out", str(tmp_path / "merged"), cwd=elsewhere)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    compared = vlaeval("compare", *map(str, two_runs), "--out", str(tmp_path / "compared"), cwd=elsewhere)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert not imported.exists(), f"{imported.read_text()} was imported"
    subprocess.run([sys.executable, "-c", "import fake_env"], cwd=elsewhere, check=True)
    assert imported.read_text() == "fake_env", "the trap was armed"


@pytest.mark.parametrize("what", ["fingerprint", "policy"])
def test_merge_refuses_a_garbage_fingerprint_or_policy_in_one_line(fake: pytest.Pytester, what: str) -> None:
    fake.runpytest(*SHORT, "--vla-shard=1/2", "--vla-results=one")
    fake.runpytest(*SHORT, "--vla-shard=2/2", "--vla-results=two")
    shards = [next((fake.path / root).iterdir()) for root in ("one", "two")]
    (shards[1] / f"{what}.json").write_text('{"benchmark": ')
    proc = vlaeval("merge", *map(str, shards), "--out", str(fake.path / "merged"), cwd=fake.path)
    assert_one_line(proc, f"{what}.json is not the run's {what} as this package writes it")


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        ("garbage fingerprint", "fingerprint.json is not the run's fingerprint as this package writes it"),
        ("empty policy", "policy.json is not the run's policy as this package writes it"),
        ("a directory among the logs", "episodes/x.jsonl is among the run's episode logs but cannot be read"),
        ("a dangling link among the logs", "episodes/y.jsonl is among the run's episode logs but cannot be read"),
        ("a directory for the lock", ".lock is a directory, and the run writes its .lock there"),
        ("a directory for the report", "report.html is a directory, and the run writes its report.html there"),
        ("a directory for the chart", "summary.png is a directory, and the run writes its summary.png there"),
        ("a record with success 'no'", "line 1 is not an episode record (ValidationError: Expected `bool | null`"),
    ],
)
def test_a_session_on_a_damaged_run_stops_in_one_line(fake: pytest.Pytester, what: str, expected: str) -> None:
    fake.runpytest(*SHORT)
    run = run_dir(fake)
    if what == "garbage fingerprint":
        (run / "fingerprint.json").write_text("garbage")
    elif what == "empty policy":
        (run / "policy.json").write_text("")
    elif what == "a directory among the logs":
        (run / "episodes" / "x.jsonl").mkdir()
    elif what == "a dangling link among the logs":
        (run / "episodes" / "y.jsonl").symlink_to(run / "nowhere")
    elif what.startswith("a directory for the"):
        name = {"lock": ".lock", "report": "report.html", "chart": "summary.png"}[what.rsplit(" ", 1)[1]]
        if (run / name).exists():
            (run / name).unlink()
        (run / name).mkdir()
    else:
        (log,) = (run / "episodes").iterdir()
        first, *rest = log.read_text().splitlines()
        record = json.loads(first)
        log.write_text("\n".join([json.dumps({**record, "success": "no"}), *rest]) + "\n")
    before = sorted((run / "episodes").iterdir())
    result = fake.runpytest(*SHORT)
    assert_one_line_usage_error(result, expected)
    assert sorted((run / "episodes").iterdir()) == before, "no episode ran"


def test_a_crafted_record_is_type_checked_on_read(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.episodes.mkdir()
    record = {
        "task": "A-v0", "seed": 1, "outcome": "failure", "success": True, "episode_return": 0.0, "length": 3,
        "message": "m", "wall_time": 1.0, "worker": "gw0", "time": "t",
    }  # fmt: skip
    (run.episodes / "a.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(SpecError, match="outcome 'failure' with success True"):
        LatestRecords.read(run)


def test_stale_temporaries_are_removed_at_the_next_session(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT)
    run = run_dir(fake)
    stale, fresh = run / ".summary.json.killed.tmp", run / ".report.html.live.tmp"
    stale.write_text("{")
    fresh.write_text("<")
    old = time.time() - STALE_TEMPORARY_S - 60
    os.utime(stale, (old, old))
    fake.runpytest(*SHORT, "--vla-resume")
    assert not stale.exists() and fresh.exists(), "a live writer's temporary file is left alone"


def _claim(run: str, fingerprint: dict[str, Any], start: Any, results: Any) -> None:
    start.wait()
    try:
        RunStore(Path(run)).claim(fingerprint)
        results.put(fingerprint["policy"])
    except SpecError:
        results.put(None)


@pytest.mark.parametrize("attempt", range(3))
def test_of_sessions_claiming_one_run_at_once_only_one_kind_is_accepted(tmp_path: Path, attempt: int) -> None:
    """30 processes, half with one fingerprint and half with another, claim one run directory at
    the same instant: those accepted all hold the fingerprint that is on disk, whole."""
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(30), context.Queue()
    run = tmp_path / "run"
    processes = [
        context.Process(target=_claim, args=(str(run), {"policy": f"p{i % 2}", "pad": "x" * 4096}, start, results))
        for i in range(30)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    accepted = {results.get(timeout=10) for _ in processes} - {None}
    on_disk = json.loads((run / "fingerprint.json").read_text())["policy"]
    assert accepted == {on_disk}
    assert not list(run.glob(".*.tmp"))
    shutil.rmtree(run)


def test_a_merge_made_while_a_session_writes_is_brought_up_to_date(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first merge copies a log its session is still appending to; a second merge extends that
    copy. A copy that is not the start of its log names the file to remove. Ctrl-C is one line."""
    from pytest_vlaeval.cli import main

    fake.runpytest(*SHORT)
    run = run_dir(fake)
    (log,) = (run / "episodes").iterdir()
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:2]))  # the session has written two of its records so far
    merged = fake.path / "merged"
    assert main(["merge", str(run), "--out", str(merged)]) == 0
    log.write_text("".join(lines))  # ... and then the rest
    assert main(["merge", str(run), "--out", str(merged)]) == 0
    assert (merged / "episodes" / log.name).read_text() == "".join(lines)
    assert json.loads((merged / "summary.json").read_text())["n_completed"] == 4

    (merged / "episodes" / log.name).write_text("something else\n")
    proc = vlaeval("merge", str(run), "--out", str(merged), cwd=fake.path)
    assert_one_line(proc, f"is not a copy of {log} (nor the start of one): remove {merged / 'episodes' / log.name}")

    merge = importlib.import_module("pytest_vlaeval.merge")  # the module the command runs (pytester re-imports it)
    monkeypatch.setattr(merge, "_copy_log", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(["merge", str(run), "--out", str(fake.path / "third")]) == 130


def test_a_received_runs_linked_log_is_refused_never_copied(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """A run directory from elsewhere may hold a link where an episode log belongs: the merge
    refuses it, and copies and reads nothing through it."""
    from pytest_vlaeval.cli import main as vlaeval

    fake.runpytest("--benchmark=fake.yaml:short", "-p", "no:cacheprovider")
    (run,) = (fake.path / "results").iterdir()
    precious = fake.path / "precious.txt"
    precious.write_text("mine")
    (run / "episodes" / "stolen.jsonl").symlink_to(precious)
    out = fake.path / "merged"
    assert vlaeval(["merge", str(run), "--out", str(out)]) == 2
    assert "stolen.jsonl is a symbolic link, not an episode log" in capsys.readouterr().out
    assert not (out / "episodes" / "stolen.jsonl").exists() and precious.read_text() == "mine"


# -- links in a received run: nothing is written through one ---------------------------------------


def received_runs(fake: pytest.Pytester, namespaced: bool = False, shards: int = 2) -> list[Path]:
    """A received run (shard 1/2) and (``shards=2``) another shard of it (2/2); ``namespaced``: its
    tasks are ``ns/Alpha-v0`` and ``ns/Beta-v0``, written under the run's folder ``ns``."""
    if namespaced:
        spec = fake.path / "fake.yaml"
        spec.write_text(re.sub(r"env_id: (Alpha|Beta)-v0", r"env_id: ns/\1-v0", spec.read_text()))
    roots = ["received", "other"][:shards]
    for index, root in enumerate(roots, 1):
        fake.runpytest(*SHORT, f"--vla-shard={index}/2", f"--vla-results={root}")
    return [next((fake.path / root).iterdir()) for root in roots]


def link_out(path: Path, outside: Path) -> None:
    """Put a link to ``outside`` in place of ``path``, a file or folder of a received run: a folder
    is moved there first, and the files in it the run would write are made to say ``mine``."""
    if path.is_dir():
        path.rename(outside)
    else:
        path.unlink(missing_ok=True)
    if path.name == "ns":
        for name in ("Alpha-v0.json", "Beta-v0.json"):
            (outside / name).write_text("mine")
    path.symlink_to(outside)


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("how", ["merge", "resume"])
def test_a_received_runs_linked_report_and_chart_are_replaced_never_written_through(
    fake: pytest.Pytester, how: str
) -> None:
    from pytest_vlaeval.cli import main as vlaeval

    fake.runpytest(*SHORT)
    run = run_dir(fake)
    victims = {name: fake.path / f"victim-{name}" for name in ("report.md", "summary.png")}
    for name, victim in victims.items():
        victim.write_text("mine")
        link_out(run / name, victim)
    if how == "merge":  # in place, as the Slurm merge job runs it
        assert vlaeval(["merge", str(run)]) == 0
    else:
        fake.runpytest(*SHORT, "--vla-resume")
    assert [victim.read_text() for victim in victims.values()] == ["mine", "mine"]
    assert not any((run / name).is_symlink() for name in victims)
    assert (run / "report.md").read_text().startswith("## Fake-Bench")
    assert (run / "summary.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("what", ["episodes", "namespace", "lock"])
def test_a_received_runs_linked_folder_or_lock_is_refused_by_merge_never_followed(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    """A linked ``episodes/`` (where the other shard's log is copied), a linked folder of a namespaced
    task (where its canonical JSON goes), a linked ``.lock`` to a file that is not there."""
    from pytest_vlaeval.cli import main as vlaeval

    received, other = received_runs(fake, namespaced=what == "namespace")
    outside = fake.path / "outside"
    link = received / {"episodes": "episodes", "namespace": "ns", "lock": ".lock"}[what]
    link_out(link, outside)
    before = contents(outside) if outside.is_dir() else None
    capsys.readouterr()
    assert vlaeval(["merge", str(received), str(other)]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"vlaeval merge: {link} is a symbolic link, and a run's files are never read or written")
    assert len(out.splitlines()) == 1, out
    if before is None:
        assert not outside.exists(), "the link's target was not created"
    else:
        assert contents(outside) == before


@pytest.mark.parametrize("what", ["namespace", "lock", "videos"])
def test_a_session_on_a_received_run_with_a_linked_folder_or_lock_stops_before_any_episode(
    fake: pytest.Pytester, what: str
) -> None:
    (received,) = received_runs(fake, namespaced=what == "namespace", shards=1)
    outside = fake.path / "outside"
    link = received / {"namespace": "ns", "lock": ".lock", "videos": "videos"}[what]
    link_out(link, outside)
    before = contents(outside) if outside.is_dir() else None
    result = fake.runpytest(*SHORT, "--vla-shard=1/2", "--vla-results=received", "--vla-resume")
    assert_one_line_usage_error(result, f"{link} is a symbolic link, and a run's files are never read or written")
    if before is None:
        assert not outside.exists(), "the link's target was not created"
    else:
        assert contents(outside) == before


def test_the_run_directory_as_named_is_followed_where_it_is_a_link(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run moved to another disk and linked back under its name: a session that reruns its
    failures and a merge of it work in the folder the link leads to."""
    from pytest_vlaeval.cli import main as vlaeval

    args = [*SHORT, "--vla-run-name=mine"]
    fake.runpytest(*args)
    moved = fake.path / "other-disk" / "mine"
    moved.parent.mkdir()
    (fake.path / "results" / "mine").rename(moved)
    (fake.path / "results" / "mine").symlink_to(moved, target_is_directory=True)

    def logged() -> int:  # lines, not files: the rerun may append to the first's log (one process, one second)
        return sum(len(log.read_text().splitlines()) for log in (moved / "episodes").iterdir())

    before = logged()
    rerun = fake.runpytest(*args, "--vla-rerun=failures")
    assert rerun.ret in (0, 1) and "INTERNALERROR" not in rerun.stdout.str(), rerun.stdout.str()
    assert logged() > before, "the rerun's records are in the folder linked to"
    assert vlaeval(["merge", str(fake.path / "results" / "mine")]) == 0, capsys.readouterr().out
    assert (fake.path / "results" / "mine").is_symlink() and (moved / "summary.json").is_file()


def test_a_terminated_merge_says_to_run_it_again_as_an_interrupted_one_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """SIGTERM (a CI runner's cancel, ``scancel``) ends a merge as Ctrl-C does, with the same line;
    the handlers it installed are gone afterwards."""
    from pytest_vlaeval.cli import main as vlaeval

    merge = importlib.import_module("pytest_vlaeval.merge")

    def terminated(*args: Any) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt the merge")

    def unhandled(signum: int, frame: object) -> None:
        raise AssertionError("the merge left SIGTERM to the process's own handler")

    monkeypatch.setattr(merge, "merge", terminated)
    before = signal.signal(signal.SIGTERM, unhandled)  # the test's process survives a merge that handles nothing
    try:
        assert vlaeval(["merge", str(tmp_path)]) == 130
        assert signal.getsignal(signal.SIGTERM) is unhandled
    finally:
        signal.signal(signal.SIGTERM, before)
    interrupted = "vlaeval merge: interrupted; run it again to finish (what it copied is kept, whole)"
    assert capsys.readouterr().out == interrupted + "\n"


# -- what the tool prints of a received run: commands that run as they say, text that stays text --


def argv_of(command: str) -> list[str]:
    """The arguments the shell gives the printed command's program (``bash``: it reads ``$'...'``)."""
    program, _, _ = command.partition(" ")
    shown = subprocess.run(
        ["bash", "-c", f"{program}() {{ printf '%s\\0' \"$@\"; }}; {command}"], capture_output=True, check=True
    )
    return os.fsdecode(shown.stdout).split("\0")[:-1]


HOSTILE_LOG_NAMES = [
    "x'; touch PWNED; echo '.jsonl",
    "$(touch PWNED)`touch PWNED`.jsonl",
    "x\x1b[2J\u202e'; touch PWNED; echo '.jsonl",
    "x\n; touch PWNED.jsonl",
]


@pytest.mark.parametrize("name", HOSTILE_LOG_NAMES)
def test_the_advice_for_a_damaged_line_removes_that_line_and_runs_nothing_else(tmp_path: Path, name: str) -> None:
    """A received log's name chooses what goes into the printed ``sed`` command: run in a shell, the
    command removes the damaged line of that log, and makes no file (``PWNED``)."""
    from helpers import record

    from pytest_vlaeval.printable import UNSAFE

    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    log = run / "episodes" / name
    good = [json.dumps(record("Alpha-v0", seed, "success").to_dict()) + "\n" for seed in (100, 101)]
    log.write_text(good[0] + '{"task": "Alpha-v0", "se\n' + good[1])
    with pytest.raises(SpecError) as refused:
        LatestRecords.read(RunDir(run))
    message = str(refused.value)
    assert not UNSAFE.search(message), "the log's name is shown, not acted on by the terminal"
    advice = re.search(r"remove it with: (.*) \(its episode then counts as never run", message)
    assert advice is not None, message
    before = sorted(tmp_path.rglob("*"))
    subprocess.run(["bash", "-c", advice.group(1)], cwd=tmp_path, check=True)
    assert sorted(tmp_path.rglob("*")) == before, "the advice made no file"
    assert log.read_text() == "".join(good)
    assert len(LatestRecords.read(RunDir(run))) == 2


CONTROL_SEQUENCES = "\x1b]0;owned\x07\x1b[2J\x1b[H\x1b[32mvlaeval gate: PASS: all good\x1b[0m\x1b[8m\u202e"
"""Set the title, clear the screen, home the cursor, a green verdict, conceal; reverse what follows."""


def test_merge_prints_a_received_policy_as_text_in_a_command_that_names_it_exactly(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A received fingerprint's policy holds control sequences: merge prints none of them, and its
    "fill the gaps" command gives pytest that policy, byte for byte."""
    from pytest_vlaeval.cli import main
    from pytest_vlaeval.printable import UNSAFE

    fake.runpytest(*SHORT, "--vla-shard=1/2")
    run = run_dir(fake)
    fingerprint = json.loads((run / "fingerprint.json").read_text())
    policy = f"random{CONTROL_SEQUENCES}<img src=x onerror=alert(1)>|**PASS**"
    (run / "fingerprint.json").write_text(json.dumps({**fingerprint, "policy": policy}))
    merged = fake.path / "merged"
    assert main(["merge", str(run), "--out", str(merged)]) == 0
    printed = capsys.readouterr().out
    assert not UNSAFE.search(printed.replace("\n", "")), printed
    (fill,) = [line.split("fill the gaps with: ", 1)[1] for line in printed.splitlines() if "fill the gaps" in line]
    assert f"--policy={policy}" in argv_of(fill)
    report = (merged / "report.md").read_text()
    assert not UNSAFE.search(report.replace("\n", "")) and "<img" not in report and "**PASS**" not in report


def test_the_fill_command_names_a_built_in_only_where_the_run_was_made_with_it(tmp_path: Path) -> None:
    """A received run may call its benchmark ``pusht`` and keep another file: the command then
    names the file the run keeps, which is the one that can run it."""
    from pytest_vlaeval.benchmark.model import builtin_benchmarks, load_benchmark
    from pytest_vlaeval.merge import rerun_command

    pusht = load_benchmark(builtin_benchmarks()["pusht"])
    made_with_pusht = {
        "benchmark": "pusht",
        "benchmark_digest": pusht.digest,
        "split": "all",
        "tasks": [pusht.tasks[0].env_id],
        "episodes": 1,
        "start_seed": 0,
        "policy": "random",
        "render": "cpu",
    }
    run = RunDir(tmp_path)
    assert "--benchmark=pusht:all" in argv_of(rerun_command(made_with_pusht, run))  # type: ignore[arg-type]
    received = {**made_with_pusht, "benchmark_digest": "0" * 64}
    assert f"--benchmark={run.spec}:all" in argv_of(rerun_command(received, run))  # type: ignore[arg-type]
