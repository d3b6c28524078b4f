"""``vlaeval merge``: shards from several sessions or machines into one run, equal to one unsharded
run; what a shard misses named; a received run's logs read in bounded memory; the fixed gate on
the whole run against a baseline."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import episode_records, peak_bytes, perfect_baseline, read_json, run_dir

from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED
from pytest_vlaeval.results.record import MAX_LINE_BYTES

SHORT = ["--benchmark=fake.yaml:short"]


def test_two_shards_merged_equal_one_unsharded_run(fake: pytest.Pytester) -> None:
    for name, extra in (("whole", []), ("a", ["--vla-shard=1/2"]), ("b", ["--vla-shard=2/2"])):
        fake.runpytest("--benchmark=fake.yaml:short", "--vla-tasks=Alpha-v0,Beta-v0", f"--vla-results={name}", *extra)
    (whole,) = (fake.path / "whole").iterdir()
    (a,) = (fake.path / "a").iterdir()
    (b,) = (fake.path / "b").iterdir()
    assert read_json(a / "summary.json")["n_completed"] != 6, "a shard alone is partial"
    out = fake.path / "merged"
    benchmark = str(fake.path / "fake.yaml")
    assert vlaeval(["merge", str(a), str(b), "--out", str(out), "--benchmark", benchmark]) == 0

    def canonical(directory: Path) -> dict[str, bytes]:
        """The canonical files byte for byte, but for the summary's timestamp."""
        files = {
            p.name: p.read_bytes()
            for p in directory.glob("*.json")
            if p.name not in ("fingerprint.json", "policy.json")
        }
        files["summary.json"] = re.sub(rb'"written_at": "[^"]*"', b"", files["summary.json"])
        # LeRobot's eval_s / eval_ep_s: the episodes' own wall time, which two sessions never share
        files["eval_info.json"] = re.sub(rb'"eval(_ep)?_s": [0-9.e+-]+', b"", files["eval_info.json"])
        return files

    assert canonical(out) == canonical(whole)
    assert "6 of 6 episodes completed" in (out / "report.html").read_text(encoding="utf-8")  # the merged run's page
    logs = sorted(p.name for p in (out / "episodes").iterdir())
    # again: nothing changes
    assert vlaeval(["merge", str(a), str(b), "--out", str(out), "--benchmark", benchmark]) == 0
    assert sorted(p.name for p in (out / "episodes").iterdir()) == logs and canonical(out) == canonical(whole)


def test_merge_reports_a_missing_shard_and_refuses_a_different_run(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.runpytest(*SHORT, "--vla-results=a", "--vla-shard=1/3")
    fake.runpytest(*SHORT, "--vla-results=z", "--policy=zero")
    (a,) = (fake.path / "a").iterdir()
    (z,) = (fake.path / "z").iterdir()
    benchmark = str(fake.path / "fake.yaml")
    assert vlaeval(["merge", str(a), "--out", str(fake.path / "m"), "--benchmark", benchmark]) == 0
    out = capsys.readouterr().out
    kept = fake.path / "m" / "benchmark.yaml"
    command = re.search(r"shard 2/3 has no episode log: run `(.*)`", out)
    assert command is not None and command.group(1).startswith(f"pytest --benchmark={kept}:short --policy=random")
    assert command.group(1).endswith("--vla-shard=2/3"), "a YAML-file benchmark is named by the copy the run keeps"
    args = shlex.split(command.group(1))[1:]
    assert fake.runpytest(*args, "-p", "no:cacheprovider", "--vla-results=shard2").ret in (0, 1), "the advice runs"
    assert "fill the gaps with: pytest " in out and "--vla-rerun=incomplete" in out
    assert vlaeval(["merge", str(a), str(z), "--out", str(fake.path / "m2"), "--benchmark", benchmark]) == 2
    assert "is not the same run" in capsys.readouterr().out and "policy" in out + "policy"


def test_merge_names_only_the_missing_shards_that_hold_episodes(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A split into a billion shards leaves all but the first few empty: merge names the missing
    ones that hold an episode, at the cost of the episodes, not of the shard count."""
    fake.runpytest(*SHORT, "--vla-results=a", "--vla-shard=1/1000000000")
    (a,) = (fake.path / "a").iterdir()
    assert vlaeval(["merge", str(a)]) == 0
    out = capsys.readouterr().out
    expected = re.search(r"episodes: 1 completed, 0 errors, (\d+) missing of (\d+)", out)
    assert expected is not None and int(expected.group(1)) == int(expected.group(2)) - 1 >= 1, out
    named = re.findall(r"shard (\d+)/1000000000 has no episode log", out)
    assert named == [str(i) for i in range(2, int(expected.group(2)) + 1)], out


def test_merge_checks_the_benchmark_file_a_received_run_keeps_before_writing(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy a run keeps is a benchmark file like any other: one whose axis would write over
    the summary's ``sr_split`` stops the merge in one line naming the file, and nothing is written."""
    fake.runpytest(*SHORT, "--episodes=1")
    directory = run_dir(fake)
    kept = directory / "benchmark.yaml"
    kept.write_text(kept.read_text().replace("summary: sr_per_memory_type}", "summary: sr_split}"))
    before = {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert vlaeval(["merge", str(directory)]) == 2
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and str(kept) in out, out
    assert "would write over the key 'sr_split' of summary.json" in out
    assert {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()} == before


def test_merge_shows_the_split_sr_as_a_session_does(fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """A run without a completed episode has no split SR: "-" from both, never "None"."""
    session = fake.runpytest("--benchmark=fake.yaml:extra", "--vla-tasks=BrokenSim-v0", "--episodes=1")
    session.stdout.fnmatch_lines(["episodes: 0 completed, 1 errors, 0 missing of 1; split SR -; *"])
    assert vlaeval(["merge", str(run_dir(fake))]) == 0
    assert "episodes: 0 completed, 1 errors, 0 missing of 1; split SR -\n" in capsys.readouterr().out


def test_merge_judges_the_whole_run_against_a_baseline(fake: pytest.Pytester, capsys: pytest.CaptureFixture) -> None:
    """The array's merge is where a sharded run meets its gate: the verdict in the merged run's
    files, the exit status a CI job reads, and a bad baseline refused before anything is written."""
    twenty = [*SHORT, "--episodes=20", "--policy=zero"]
    for index in (1, 2):
        fake.runpytest(*twenty, "--vla-results=zero", f"--vla-shard={index}/2")
    (zero,) = (fake.path / "zero").iterdir()
    perfect = perfect_baseline(zero, fake.path / "perfect")
    assert vlaeval(["merge", str(zero), "--baseline", str(perfect)]) == EXIT_GATE_FAILED
    out = capsys.readouterr().out
    assert "vlaeval gate: FAIL: split SR drop +1.000 paired on 20 seeds x 2 tasks" in out
    assert read_json(zero / "summary.json")["gate"]["verdict"] == "FAIL"
    assert "vlaeval gate: FAIL" in (zero / "report.md").read_text()
    assert "flips" in (zero / "report.html").read_text(), "the report lists the episodes that flipped"
    assert vlaeval(["merge", str(zero), "--baseline", str(perfect), "--max-drop", "1"]) == 7
    assert "vlaeval gate: UNDECIDED" in capsys.readouterr().out, "no data shows a drop above 1: undecided, exit 7"
    # The gate's options are pytest's (declared once): the exit status of an undecided gate, and what a PASS assumes.
    assert vlaeval(["merge", str(zero), "--baseline", str(perfect), "--max-drop", "1", "--undecided-exit", "0"]) == 0
    assert "vlaeval gate: UNDECIDED" in capsys.readouterr().out
    assert vlaeval(["merge", str(zero), "--baseline", str(perfect), "--assume", "nothing"]) == EXIT_GATE_FAILED
    assert "method: fixed betting confidence sequence, seeds as the unit (assuming nothing of the seeds)" in (
        capsys.readouterr().out
    )
    assert vlaeval(["merge", str(zero), "--baseline", str(zero)]) == 0
    assert "vlaeval gate: PASS: split SR drop +0.000" in capsys.readouterr().out
    fake.runpytest(*twenty, "--vla-results=half", "--vla-shard=1/2")
    (half,) = (fake.path / "half").iterdir()
    assert vlaeval(["merge", str(half), "--baseline", str(zero)]) == 1, "a PASS on part of the run is no pass"
    assert "vlaeval gate: PASS" in capsys.readouterr().out
    written = (zero / "summary.json").read_bytes()
    assert vlaeval(["merge", str(zero), "--baseline", str(fake.path / "nowhere")]) == 2
    assert "nowhere: no such directory" in capsys.readouterr().out
    assert (zero / "summary.json").read_bytes() == written, "a refused baseline leaves the run's files as they were"
    with pytest.raises(SystemExit) as refused:
        vlaeval(["merge", str(zero), "--baseline", str(perfect), "--alpha", "1"])
    assert refused.value.code == 2 and "argument --alpha: must be in (0, 1), got 1" in capsys.readouterr().err


def merged_within(*args: str) -> tuple[int, int]:
    """``vlaeval merge ARGS``: its exit status, and the most memory it allocated."""
    codes: list[int] = []
    peak = peak_bytes(lambda: codes.append(vlaeval(["merge", *args])))
    return codes[0], peak


def test_merge_leaves_out_records_of_other_episodes_in_bounded_memory(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.runpytest(*SHORT, "--episodes=1")
    directory = run_dir(fake)
    assert vlaeval(["merge", str(directory), "--out", str(fake.path / "warm")]) == 0  # imports, caches
    _, plain = merged_within(str(directory), "--out", str(fake.path / "plain"))
    assert received_log_of_other_episodes(directory, 2000).stat().st_size > 24_000_000
    capsys.readouterr()
    code, grown = merged_within(str(directory), "--out", str(fake.path / "merged"))
    assert code == 0 and grown < plain + 4_000_000
    assert "left out 2,000 records of episodes the run's fingerprint does not name" in capsys.readouterr().out
    assert read_json(fake.path / "merged" / "summary.json")["n_completed"] == 2


MEASURED = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"code": done.returncode, "peak": peak, "out": done.stdout + done.stderr}))
"""
"""Runs its arguments as a child, the only one: its peak resident memory is that child's."""


def merge_process(*args: str) -> tuple[int, int, str]:
    """A real ``vlaeval merge ARGS`` process: its exit status, its peak resident memory and its output."""
    command = [sys.executable, "-c", MEASURED, sys.executable, "-m", "pytest_vlaeval", "merge", *args]
    measured = json.loads(subprocess.run(command, capture_output=True, text=True, check=True, timeout=300).stdout)
    return measured["code"], measured["peak"], measured["out"]


def test_merge_passes_over_a_line_too_long_to_be_a_record_in_bounded_memory(fake: pytest.Pytester) -> None:
    """A torn line of 512 MiB (sparse zero bytes: no disk space) amid a log's records: merged into
    another directory or in place, it is named in one line, never read whole (reading 256 MiB of it
    to refuse it cost the merge half a gigabyte) nor copied, and the records around it are kept."""
    fake.runpytest(*SHORT, "--episodes=2")
    directory = run_dir(fake)
    code, plain, _ = merge_process(str(directory), "--out", str(fake.path / "plain"))
    assert code == 0
    (log,) = (directory / "episodes").glob("*.jsonl")
    records = log.read_bytes().splitlines(keepends=True)
    with log.open("wb") as f:
        f.write(b"".join(records[:2]))
        f.seek(2 * MAX_LINE_BYTES, 1)
        f.write(b"\n" + b"".join(records[2:]))
    warning = f"{log} line 3 passed over: longer than {MAX_LINE_BYTES // 2**20} MiB, so no episode record"
    for out in (fake.path / "merged", directory):  # another directory, then in place
        code, peak, printed = merge_process(str(directory), "--out", str(out))
        assert code == 0 and peak < plain + 64 * 2**20, (peak, plain)
        assert [line for line in printed.splitlines() if "passed over" in line] == [
            f"{warning} (none is written so long); the log's other lines are read"
        ], printed
        assert read_json(out / "summary.json")["n_completed"] == 4
    assert (fake.path / "merged" / "episodes" / log.name).read_bytes() == b"".join(records), "none of it copied"


def received_log_of_other_episodes(directory: Path, records: int) -> Path:
    """A log in ``directory`` of ``records`` padded records for seeds its run does not hold."""
    template = next(iter(episode_records(directory).values())) | {"detail": "x" * 12_000}
    log = directory / "episodes" / "received.jsonl"
    with log.open("w") as f:
        for seed in range(10_000, 10_000 + records):
            f.write(json.dumps(template | {"seed": seed}) + "\n")
    return log
