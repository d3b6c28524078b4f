"""Runs that outlive a session: reruns (``--lf`` too), resume after a kill, crashes and retries, shards
and merge, the gate, and the sessions a run refuses (another fingerprint, policy or render backend)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_one_line_usage_error, episode_records, perfect_baseline, read_json, run_dir

from pytest_vlaeval.benchmark.model import resolve_benchmark, select
from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.gate.stats import mcnemar_exact, wilson
from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED
from pytest_vlaeval.results.subset import shard

SHORT = ["--benchmark=fake.yaml:short"]


def all_records(directory: Path) -> list[dict]:
    return [
        json.loads(line)
        for log in sorted((directory / "episodes").glob("*.jsonl"))
        for line in log.read_text().splitlines()
    ]


def test_rerun_errors_selects_from_the_store_and_keeps_the_summary_whole(fake: pytest.Pytester) -> None:
    fake.runpytest("--benchmark=fake.yaml:extra", "--policy=spy_policies:Zero", "--episodes=2")
    assert read_json(run_dir(fake) / "summary.json")["n_errors"] == 4
    result = fake.runpytest(
        "--benchmark=fake.yaml:extra", "--policy=spy_policies:Zero", "--episodes=2", "--vla-rerun=errors", "--co", "-q"
    )
    result.stdout.fnmatch_lines(
        ["vlaeval: --vla-rerun=errors: 4 of 4 episodes selected (4 of 4 already recorded in *)"]
    )
    result = fake.runpytest(
        "--benchmark=fake.yaml:extra", "--policy=spy_policies:Zero", "--episodes=2", "--vla-rerun=failures"
    )
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED  # nothing failed: errors are not failures


def test_resume_after_the_session_is_killed_completes_without_recomputing(fake: pytest.Pytester) -> None:
    args = [
        sys.executable,
        "-m",
        "pytest",
        "--benchmark=fake.yaml",
        "--vla-tasks=Alpha-v0,Beta-v0,Gamma-v0",
        "--policy=spy_policies:SlowSuccess",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.Popen(args, cwd=fake.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    episodes = fake.path / "results"
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and len(all_records(next(episodes.iterdir())) if episodes.exists() and any(episodes.iterdir()) else []) < 3
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {(r["task"], r["seed"]): r for r in all_records(run_dir(fake))}
    assert 3 <= len(before) < 9, "killed mid-run"

    result = fake.runpytest(
        "--benchmark=fake.yaml",
        "--vla-tasks=Alpha-v0,Beta-v0,Gamma-v0",
        "--policy=spy_policies:SlowSuccess",
        "--vla-resume",
    )
    result.stdout.fnmatch_lines([f"vlaeval: --vla-rerun=missing: {9 - len(before)} of 9 episodes selected*"])
    after = all_records(run_dir(fake))
    assert len(after) == 9 and {(r["task"], r["seed"]) for r in after} == {
        (t, s) for t in ("Alpha-v0", "Beta-v0", "Gamma-v0") for s in (100, 101, 102)
    }
    assert all(r["attempt"] == 1 for r in after), "nothing recorded before was run again"
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["partial"] is False and summary["n_completed"] == 9


def test_sigkilled_worker_is_an_error_record_then_retried(fake: pytest.Pytester) -> None:
    result = fake.runpytest_subprocess(
        "--benchmark=fake.yaml:flaky", "--episodes=2", "-n", "2", "--vla-retries=1", "-rA"
    )
    records = all_records(run_dir(fake))
    crashed = [r for r in records if r["outcome"] == "error"]
    assert len(crashed) == 1 and crashed[0]["error_kind"] == "crash" and crashed[0]["attempt"] == 1
    assert crashed[0]["worker"] in ("gw0", "gw1") and "crashed" in crashed[0]["message"]
    retried = [r for r in records if r["seed"] == crashed[0]["seed"] and r["attempt"] == 2]
    assert len(retried) == 1 and retried[0]["outcome"] in ("success", "failure")
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["n_errors"] == 0 and summary["n_completed"] == 2
    assert "1 rerun" in result.stdout.lines[-1]


def test_episodes_lost_with_their_worker_are_errors_never_silently_missing(fake: pytest.Pytester) -> None:
    result = fake.runpytest_subprocess(
        "--benchmark=fake.yaml:crash", "--episodes=3", "-n", "1", "--max-worker-restart=0"
    )
    result.stdout.fnmatch_lines(["*1 error*"])
    records = all_records(run_dir(fake))
    assert [(r["seed"], r["error_kind"]) for r in records] == [(100, "crash"), (101, "lost"), (102, "lost")]
    summary = read_json(run_dir(fake) / "summary.json")
    assert (summary["n_errors"], summary["n_missing"], summary["interrupted"]) == (3, 0, False)


def test_errors_within_a_worker_are_retried(fake: pytest.Pytester) -> None:
    result = fake.runpytest(
        *SHORT, "--vla-tasks=Alpha-v0", "--episodes=1", "--policy=spy_policies:FailsFirst", "--vla-retries=2"
    )
    result.assert_outcomes(failed=1)
    records = all_records(run_dir(fake))
    assert [(r["attempt"], r["outcome"]) for r in records] == [(1, "error"), (2, "failure")]


def test_shards_are_deterministic_disjoint_and_balanced() -> None:
    benchmark, _ = resolve_benchmark("mikasa:short")
    selection = select(benchmark, "short")
    shards = [shard(selection, i, 4) for i in range(1, 5)]
    assert shards == [shard(selection, i, 4) for i in range(1, 5)]
    flat = [key for part in shards for key in part]
    assert sorted(flat) == sorted(selection.episode_ids) and len(flat) == len(set(flat))
    steps = {t.env_id: t.max_steps for t in selection.tasks}
    loads = [sum(steps[task] for task, _ in part) for part in shards]
    assert max(loads) / min(loads) < 1.1
    tiny = select(benchmark, "short", env_ids=["InterceptSlow-VLA-v0"], episodes=4)
    assert [len(shard(tiny, i, 2)) for i in (1, 2)] == [2, 2], "fewer tasks than shards: split by episode"


def test_gate_passes_and_fails_on_constructed_baselines(fake: pytest.Pytester) -> None:
    twenty = [*SHORT, "--episodes=20", "--vla-results=base"]
    fake.runpytest(*twenty)
    (base,) = (fake.path / "base").iterdir()
    same = fake.runpytest(*twenty, f"--vla-baseline={base}")
    same.stdout.fnmatch_lines(
        [
            "vlaeval gate: PASS: split SR drop +0.000 paired on 20 seeds x 2 tasks (one-sided 95% lower bound -* <= "
            "max drop 0.050; split SR * vs baseline * on those seeds); method: fixed betting confidence sequence, "
            "seeds as the unit (2 tasks < 10), alpha 0.05"
        ]
    )
    assert same.ret == pytest.ExitCode.OK, "with a baseline, failed episodes are the measurement: the gate decides"
    rejudged = fake.runpytest(*twenty, "--vla-rerun=errors", f"--vla-baseline={base}")
    rejudged.stdout.fnmatch_lines(["vlaeval: --vla-rerun=errors: 0 of 40 episodes selected*", "vlaeval gate: PASS: *"])
    assert rejudged.ret == pytest.ExitCode.OK, "re-judging a complete run runs nothing and passes"

    better = perfect_baseline(base, fake.path / "better")
    zero = [*SHORT, "--episodes=20", "--vla-results=zero", "--policy=zero"]
    result = fake.runpytest(*zero, f"--vla-baseline={better}")
    assert result.ret == EXIT_GATE_FAILED
    result.stdout.fnmatch_lines(
        [
            "vlaeval gate: FAIL: split SR drop +1.000 paired on 20 seeds x 2 tasks (one-sided 95% lower bound +0.* > "
            "max drop 0.050; split SR 0.000 vs baseline 1.000 on those seeds); method: fixed betting confidence*"
        ]
    )
    (zero_dir,) = (fake.path / "zero").iterdir()
    gate = read_json(zero_dir / "summary.json")["gate"]
    assert gate["paired_drop"] == 1.0 and gate["paired_seeds"] == 20 and gate["paired_drop_lower_bound"] > 0.05
    report = (zero_dir / "report.md").read_text()
    assert "vlaeval gate: FAIL" in report and "| Alpha-v0 | 100.0% | 0.0% |" in report

    # The issue changed these: a level no data can reach is UNDECIDED (said before any episode
    # runs), never PASS; a baseline that is not there stops the session at its start.
    strict = fake.runpytest(*zero, "--vla-rerun=errors", f"--vla-baseline={better}", "--vla-gate-alpha=1e-9")
    assert strict.ret == 7
    strict.stdout.fnmatch_lines(
        ["vlaeval gate: this run pairs 20 seeds with the baseline: too few to show a drop above 0.05 at alpha 1e-09*"]
    )
    missing = fake.runpytest(*twenty, f"--vla-baseline={fake.path / 'nowhere'}")
    assert_one_line_usage_error(missing, "--vla-baseline ")
    assert "nowhere: no such directory" in missing.errlines[0]


def test_a_gated_run_with_errored_episodes_never_passes(fake: pytest.Pytester) -> None:
    args = ["--benchmark=fake.yaml", "--vla-tasks=Alpha-v0,BrokenSim-v0", "--vla-results=r", "--episodes=20"]
    fake.runpytest(*args)
    (base,) = (fake.path / "r").iterdir()
    result = fake.runpytest(*args, f"--vla-baseline={base}")
    result.stdout.fnmatch_lines(
        ["vlaeval gate: PASS: * x 1 tasks *; not compared: not in the baseline: BrokenSim-v0; *"]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_report_goes_to_the_github_step_summary(fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    step_summary = fake.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    fake.runpytest(*SHORT)
    text = step_summary.read_text()
    assert text.startswith("## Fake-Bench: short split, policy random") and "| split Short |" in text


def test_incomplete_run_prints_the_command_that_completes_it(fake: pytest.Pytester) -> None:
    result = fake.runpytest("--benchmark=fake.yaml:extra", "--episodes=1", "-k", "Broken")
    result.stdout.fnmatch_lines(
        ["complete it with: pytest --benchmark=fake.yaml:extra --episodes=1 --basetemp=* --vla-rerun=incomplete"]
    )
    completed = fake.runpytest("--benchmark=fake.yaml:extra", "--episodes=1", "--vla-rerun=incomplete", "-rA", "-vv")
    completed.stdout.fnmatch_lines(
        ["vlaeval: --vla-rerun=incomplete: 2 of 2 episodes selected (1 of 2 already recorded in *)"]
    )


def test_statistics_known_values() -> None:
    assert mcnemar_exact(10, 2) == pytest.approx(158 / 4096)  # 2 * P(X <= 2), X ~ Bin(12, 1/2)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    low, high = wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert wilson(0, 10)[0] == 0.0 and round(wilson(0, 10)[1], 4) == 0.2775


HANGING = """
import signal
import time
import numpy as np

class Sleeps:
    chunk_size = 1
    def reset(self, episode):
        if episode.seed == 100:
            time.sleep(60)
    def act(self, obs):
        return np.zeros(7)

class Stuck:
    '''Blocks SIGALRM, as a simulator stuck in native code effectively does.'''
    chunk_size = 1
    def reset(self, episode):
        if episode.seed == 100:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(60)
    def act(self, obs):
        return np.zeros(7)
"""


def test_timeout_turns_a_hung_episode_into_an_error_and_goes_on(fake: pytest.Pytester) -> None:
    fake.makepyfile(hanging=HANGING)
    result = fake.runpytest(
        *SHORT, "--vla-tasks=Alpha-v0", "--policy=hanging:Sleeps", "--vla-timeout=0.5", "-rA", "-vv"
    )
    result.assert_outcomes(errors=1, failed=2)
    result.stdout.fnmatch_lines(["ERROR fake-short::Alpha-v0::100 - Alpha-v0 seed 100 exceeded --vla-timeout=0.5s"])
    assert [r["error_kind"] for r in all_records(run_dir(fake))] == ["timeout", None, None]


def test_a_worker_stuck_past_the_timeout_is_replaced(fake: pytest.Pytester) -> None:
    fake.makepyfile(hanging=HANGING)
    result = fake.runpytest_subprocess(
        *SHORT, "--vla-tasks=Alpha-v0", "--policy=hanging:Stuck", "--vla-timeout=0.5", "-n", "1"
    )
    result.assert_outcomes(errors=1, failed=2)
    records = all_records(run_dir(fake))
    assert [(r["seed"], r["error_kind"]) for r in records] == [(100, "crash"), (101, None), (102, None)]
    assert "stuck past 2x --vla-timeout" in records[0]["message"]


def test_worker_crash_is_an_error_record_never_a_failure(fake: pytest.Pytester) -> None:
    result = fake.runpytest_subprocess("--benchmark=fake.yaml:crash", "--episodes=2", "-n", "2", "-p", "no:randomly")
    records = episode_records(run_dir(fake))
    assert len(records) == 2
    assert all(r["outcome"] == "error" for r in records.values())
    assert any("crashed" in r["message"] for r in records.values()), records
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["n_errors"] == 2 and summary["sr_split"] is None
    assert result.ret == 1


def test_lf_reruns_failures_and_the_summary_stays_whole(fake: pytest.Pytester) -> None:
    first = fake.runpytest(*SHORT)
    failed = first.parseoutcomes().get("failed", 0)
    assert failed > 0
    second = fake.runpytest(*SHORT, "--lf", "-rA")
    assert sum(second.parseoutcomes().get(k, 0) for k in ("passed", "failed")) == failed
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["n_completed"] == 6 and summary["partial"] is False
    attempts = [r["attempt"] for r in episode_records(run_dir(fake)).values()]
    assert sorted(attempts).count(2) == failed


def test_fingerprint_mismatch_is_refused(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "--policy=zero")
    fingerprint = run_dir(fake) / "fingerprint.json"
    fingerprint.write_text(fingerprint.read_text().replace('"render": "auto"', '"render": "gpu"'))
    result = fake.runpytest(*SHORT, "--policy=zero")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: *fake-short-zero holds a run with a different fingerprint (render: 'gpu' -> 'auto')*"]
    )


def test_a_session_whose_policy_or_backend_differs_cannot_mix_into_a_run(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "--vla-tasks=Alpha-v0")
    identity = run_dir(fake) / "policy.json"
    assert json.loads(identity.read_text()) == {
        "model": {"name": "random", "config": {"action_dim": 7, "distribution": "uniform[-1,1]"}},
        "action_chunk_size": 1,
        "render_backend": "none",
    }
    identity.write_text(identity.read_text().replace('"none"', '"gpu"'))

    def logged() -> int:
        return sum(len(p.read_text().splitlines()) for p in (run_dir(fake) / "episodes").glob("*.jsonl"))

    before = logged()
    result = fake.runpytest_subprocess(*SHORT, "--vla-tasks=Alpha-v0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*refusing to mix episodes into this run: *render_backend: 'gpu' -> 'none'*"])
    assert logged() == before, "no record of the refused session is stored"


def test_a_rerun_replaces_an_errored_record_stamped_in_the_future(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A received log's errored record stamped in the year 9999: one ``--vla-rerun=errors`` runs the
    episode again and its record is the latest (numbered past the one it reran), so the error is gone
    and a second rerun has nothing to do."""
    fake.runpytest(*SHORT, "--episodes=1")
    directory = run_dir(fake)
    received = episode_records(directory)[("Alpha-v0", 100)] | {
        "outcome": "error", "success": None, "message": "env exploded", "error_kind": "env",
        "time": "9999-12-31T23:59:59+00:00",
    }  # fmt: skip
    (directory / "episodes" / "received.jsonl").write_text(json.dumps(received) + "\n")
    assert vlaeval(["merge", str(directory)]) == 0
    assert read_json(directory / "summary.json")["n_errors"] == 1, capsys.readouterr().out

    assert fake.runpytest(*SHORT, "--episodes=1", "--vla-rerun=errors").ret in (0, 1)
    assert read_json(directory / "summary.json")["n_errors"] == 0
    rerun = fake.runpytest(*SHORT, "--episodes=1", "--vla-rerun=errors")
    assert rerun.ret == pytest.ExitCode.NO_TESTS_COLLECTED
