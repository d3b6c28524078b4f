"""The plugin's behaviour in real pytest sessions (pytester) on the fake benchmark."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from helpers import assert_one_line_usage_error, episode_records, read_json, run_dir

SHORT = ["--benchmark=fake.yaml:short"]


def outcomes_by_id(result: pytest.RunResult) -> dict[str, str]:
    """Node id -> PASSED/FAILED/ERROR from a ``-rA`` short summary."""
    found = {}
    for line in result.outlines:
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            found[rest.split(" ")[0]] = word
    return found


def test_inert_without_benchmark_and_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
        import sys

        def test_user_test_runs(pytestconfig):
            assert pytestconfig.pluginmanager.hasplugin("vlaeval")
            heavy = {"torch", "gymnasium", "mani_skill", "sapien", "yaml", "rich"} & set(sys.modules)
            assert not heavy, heavy
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_episode_node_ids_markers_and_no_user_tests(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_user="def test_mine(): pass")
    result = fake.runpytest("--benchmark=fake.yaml", "--co", "-q", "--strict-markers", "-m", "short and object")
    assert result.ret == 0
    ids = [line for line in result.outlines if "::" in line]
    assert ids == ["fake-short::Alpha-v0::100", "fake-short::Alpha-v0::101", "fake-short::Alpha-v0::102"]
    assert not (fake.path / "results").exists(), "collect-only must not write results"


def test_k_selection_and_episode_count(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*SHORT, "--co", "-q", "--episodes=2", "--vla-start-seed=7", "-k", "Beta")
    assert [line for line in result.outlines if "::" in line] == ["fake-short::Beta-v0::7", "fake-short::Beta-v0::8"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--benchmark=shortt"], "unknown benchmark 'shortt'; valid: short, medium, long, all, "),
        (
            ["--benchmark=fake.yaml:medium"],
            "unknown split 'medium' for benchmark 'fake'; valid: short, long, extra, crash, flaky, all",
        ),
        (
            ["--benchmark=fake.yaml:short", "--vla-tasks=Alpha-v0,Gama-v0"],
            "unknown task 'Gama-v0' in split 'short' of 'fake'; valid: Alpha-v0, Beta-v0",
        ),
        (["--benchmark=nope.yaml"], "benchmark file 'nope.yaml' not found"),
        (
            ["--benchmark=fake.yaml", "--policy=no_such_module:make"],
            "--policy 'no_such_module:make': module 'no_such_module' is not importable",
        ),
        (["--benchmark=fake.yaml", "--policy=randm"], "--policy 'randm': expected module:attr or one of random, zero"),
        (["--benchmark=fake.yaml", "--episodes=0"], "--episodes must be at least 1, got 0"),
    ],
)
def test_bad_input_is_one_clear_line(fake: pytest.Pytester, args: list[str], expected: str) -> None:
    result = fake.runpytest(*args)
    assert_one_line_usage_error(result, expected)


def test_outcomes_records_and_canonical_json(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*SHORT, "-rA")
    outcomes = outcomes_by_id(result)
    assert len(outcomes) == 6 and set(outcomes.values()) <= {"PASSED", "FAILED"}
    directory = run_dir(fake)
    assert directory.name == "fake-short-random"
    records = episode_records(directory)
    for (task, seed), record in records.items():
        assert outcomes[f"fake-short::{task}::{seed}"] == ("PASSED" if record["success"] else "FAILED")
        if not record["success"]:
            assert (
                f"no success in {record['length']} steps, return {record['episode_return']:.3f}" in result.stdout.str()
            )

    alpha = read_json(directory / "Alpha-v0.json")
    reference_keys = {
        "env_id", "split", "memory_type", "start_seed", "n_episodes", "successes", "returns", "sr", "mean_return",
        "benchmark_commit", "control_mode", "obs_mode", "wrapper_chain", "action_chunk_size", "model",
        "episode_lengths", "episode_seeds",
    }  # fmt: skip
    assert reference_keys <= set(alpha)
    assert alpha["episode_seeds"] == [100, 101, 102] and alpha["split"] == "Short"
    assert alpha["successes"] == [records[("Alpha-v0", s)]["success"] for s in (100, 101, 102)]
    assert alpha["sr"] == sum(alpha["successes"]) / 3
    assert alpha["model"] == {"name": "random", "config": {"action_dim": 7, "distribution": "uniform[-1,1]"}}
    assert alpha["action_chunk_size"] == 1

    summary = read_json(directory / "summary.json")
    assert {"split", "sr_split", "sr_per_memory_type", "tasks", "per_task_sr", "per_task_mean_return"} <= set(summary)
    beta = read_json(directory / "Beta-v0.json")
    assert summary["sr_split"] == (alpha["sr"] + beta["sr"]) / 2  # mean of task SRs, not pooled
    assert summary["sr_per_memory_type"] == {"Object": alpha["sr"], "Spatial": beta["sr"]}
    assert summary["split"] == "Short" and summary["partial"] is False and summary["n_completed"] == 6
    assert "vlaeval: Fake-Bench short split, policy random" in result.stdout.str()
    assert (directory / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result.stdout.fnmatch_lines(
        [
            f"vlaeval: Alpha-v0 SR {100 * alpha['sr']:.1f}% (3/3, 0 errors) | 3/6 episodes, 0m0?s, ETA 0m0?s (0m0?s-0m0?s)",
            f"vlaeval: Beta-v0 SR {100 * beta['sr']:.1f}% (3/3, 0 errors) | 6/6 episodes, 0m0?s, done",
        ]
    )


def test_a_benchmark_without_axes_of_its_own_groups_by_split_only(fake: pytest.Pytester) -> None:
    """No generic output names a memory type the benchmark file does not declare."""
    text = (fake.path / "fake.yaml").read_text()
    text = re.sub(r"\n  - \{field: memory_type[^\n]*", "", text)
    fake.makefile(".yaml", fake=re.sub(r", memory_type: \w+", "", text))
    result = fake.runpytest(*SHORT, "-m", "short")
    directory = run_dir(fake)
    summary, alpha = read_json(directory / "summary.json"), read_json(directory / "Alpha-v0.json")
    assert "memory_type" not in alpha and alpha["split"] == "Short"
    assert [a["field"] for a in summary["axes"]] == ["split"] and "sr_per_memory_type" not in summary
    assert set(summary["sr_per_split"]) == {"Short"} and "sr_per_memory_type_ci95" not in summary["ci95_methods"]
    assert "memory" not in result.stdout.str() and "memory" not in (directory / "report.html").read_text()
    assert (directory / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_zero_policy_fails_every_episode(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*SHORT, "--policy=zero")
    result.assert_outcomes(failed=6)
    assert read_json(run_dir(fake) / "summary.json")["sr_split"] == 0.0


POLICIES = """
import numpy as np

class Base:
    chunk_size = 1
    def reset(self, episode):
        pass

class Raises(Base):
    def act(self, obs):
        raise RuntimeError("model exploded")

class WrongShape(Base):
    def act(self, obs):
        return np.zeros((3, 6), dtype=np.float32)

class Nan(Base):
    def act(self, obs):
        return np.full(7, np.nan)

class Empty(Base):
    chunk_size = 4
    def act(self, obs):
        return np.zeros((0, 7))

class Overlong(Base):
    def act(self, obs):
        return np.zeros((8, 7))

class NoAct:
    chunk_size = 1
    def reset(self, episode):
        pass
"""


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("Raises", "policy.act raised RuntimeError: model exploded"),
        ("WrongShape", "policy returned shape (3, 6); expected (7,), (K, 7) or (1, K, 7) with 1 <= K <= chunk_size=1"),
        ("Nan", "policy returned NaN in an action chunk of shape (7,); expected finite values"),
        ("Empty", "policy returned an empty chunk (0, 7)"),
        ("Overlong", "policy returned 8 actions (8, 7) but declares chunk_size=1"),
        ("NoAct", "policy 'policies:NoAct' (NoAct) lacks act"),
    ],
)
def test_bad_policy_output_is_an_error_naming_the_problem(fake: pytest.Pytester, policy: str, message: str) -> None:
    fake.makepyfile(policies=POLICIES)
    result = fake.runpytest(*SHORT, f"--policy=policies:{policy}", "--vla-tasks=Alpha-v0", "--episodes=2", "-rA", "-vv")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([f"ERROR fake-short::Alpha-v0::100 - {message}*"])
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["n_errors"] == 2 and summary["n_completed"] == 0 and summary["sr_split"] is None
    assert summary["tasks_without_results"] == ["Alpha-v0"]
    if policy == "Raises":  # the policy's own traceback is kept for the user
        result.stdout.fnmatch_lines(["*episode error traceback*", "*in act*", "*RuntimeError: model exploded*"])


def test_env_and_asset_errors_are_errors_not_failures(fake: pytest.Pytester) -> None:
    result = fake.runpytest("--benchmark=fake.yaml:extra", "--episodes=2", "-rA", "-vv")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [
            "ERROR fake-extra::BrokenSim-v0::100 - cannot build BrokenSim-v0: the fake simulator refuses",
            "ERROR fake-extra::NeedsWidget-v0::100 - NeedsWidget-v0 cannot run: asset 'widget' belongs in package 'fake_env_assets_not_installed', which is not installed",
        ]
    )
    records = episode_records(run_dir(fake))
    assert {r["error_kind"] for r in records.values()} == {"env", "asset"}
    assert all(r["outcome"] == "error" and r["success"] is None for r in records.values())


def test_privileged_keys_never_reach_the_policy(fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.makepyfile(
        spy="""
        import json, os
        import numpy as np

        class Spy:
            chunk_size = 2
            def reset(self, episode):
                self.episode = episode.to_dict()
            def act(self, obs):
                with open(os.environ["SPY_LOG"], "a") as f:
                    f.write(json.dumps({"keys": sorted(obs), "instruction": obs["instruction"], "episode": self.episode}) + "\\n")
                return np.zeros((2, 7))
        """
    )
    log = fake.path / "spy.jsonl"
    monkeypatch.setenv("SPY_LOG", str(log))
    result = fake.runpytest(*SHORT, "--policy=spy:Spy", "--vla-tasks=Alpha-v0", "--episodes=1")
    result.assert_outcomes(failed=1)
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(seen) == 3  # 6 steps, chunks of 2
    for call in seen:
        assert call["keys"] == ["instruction", "proprio", "rgb"]
        assert call["instruction"] == "pick alpha"
        assert set(call["episode"]) == {"task", "seed", "instruction", "episode_index", "max_steps"}


def test_cached_action_buffer_survives_in_place_zeroing(fake: pytest.Pytester) -> None:
    """The fake env zeroes the previous action in place on reset, like 11 MIKASA envs do."""
    fake.makepyfile(
        cached="""
        import numpy as np

        class Cached:
            chunk_size = 1
            def __init__(self):
                self.action = np.full(7, 0.95, dtype=np.float32)
            def reset(self, episode):
                pass
            def act(self, obs):
                return self.action
        """
    )
    result = fake.runpytest(*SHORT, "--policy=cached:Cached", "--vla-tasks=Alpha-v0")
    result.assert_outcomes(passed=3)  # had the env's zeroing reached the cached buffer, later episodes would fail


def test_xdist_gives_the_same_records_as_serial(fake: pytest.Pytester) -> None:
    serial = fake.runpytest(*SHORT, "--vla-results=serial")
    parallel = fake.runpytest_subprocess(*SHORT, "-n", "2", "--vla-results=parallel")
    assert serial.parseoutcomes() == parallel.parseoutcomes()

    def comparable(root: str) -> dict:
        (directory,) = (fake.path / root).iterdir()
        records = episode_records(directory)
        return {k: (r["outcome"], r["episode_return"], r["length"]) for k, r in records.items()}

    assert comparable("serial") == comparable("parallel")
    workers = {r["worker"] for r in episode_records(next((fake.path / "parallel").iterdir())).values()}
    assert workers == {"gw0", "gw1"}


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


def test_interrupted_session_keeps_finished_episodes_and_marks_partial(fake: pytest.Pytester) -> None:
    fake.makepyfile(
        stopper=textwrap.dedent(
            """
            import numpy as np

            class StopOnGamma:
                chunk_size = 1
                def reset(self, episode):
                    if episode.task == "Gamma-v0":
                        raise KeyboardInterrupt
                def act(self, obs):
                    return np.zeros(7)
            """
        )
    )
    result = fake.runpytest_subprocess("--benchmark=fake.yaml", "--policy=stopper:StopOnGamma")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    summary = read_json(run_dir(fake) / "summary.json")
    assert summary["partial"] is True and summary["interrupted"] is True
    assert summary["n_completed"] == 6 and summary["tasks"] == ["Alpha-v0", "Beta-v0"]


@pytest.mark.parametrize(("mode", "expected"), [("failed", "failures"), ("all", "every episode")])
def test_videos_for_failed_or_all_episodes_are_written_and_attached(
    fake: pytest.Pytester, mode: str, expected: str
) -> None:
    import cv2

    result = fake.runpytest(*SHORT, f"--vla-video={mode}", "--junitxml=report.xml")
    records = episode_records(run_dir(fake))
    wanted = {key for key, r in records.items() if mode == "all" or not r["success"]}
    videos = {(p.parent.name, int(p.stem)) for p in (run_dir(fake) / "videos").glob("*/*.webm")}
    assert videos == wanted, expected
    for (task, seed), record in records.items():
        assert (record["video"] is not None) == ((task, seed) in wanted)
    some = next(iter(wanted))
    capture = cv2.VideoCapture(records[some]["video"])
    frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    capture.release()
    assert frames == records[some]["length"] + 1  # one before every step, one after the last
    assert f'<property name="video" value="{records[some]["video"]}"' in (fake.path / "report.xml").read_text()
    result.stdout.fnmatch_lines(["*episode video*"])


def test_live_panel_when_asked_and_plain_lines_otherwise(fake: pytest.Pytester) -> None:
    plain = fake.runpytest_subprocess(*SHORT, "-q", "--vla-results=plain")
    assert "╭" not in plain.stdout.str(), "no live panel when stdout is not a terminal"
    plain.stdout.fnmatch_lines(["vlaeval: Alpha-v0 SR *", "vlaeval: Beta-v0 SR * | 6/6 episodes, *, done"])
    live = fake.runpytest_subprocess(*SHORT, "-q", "--vla-live=on", "--vla-results=live")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", live.stdout.str())  # drop colours and cursor moves
    assert "─ vlaeval ─" in text and "SR so far" in text
    live.stdout.fnmatch_lines(["*vlaeval: Beta-v0 SR * | 6/6 episodes, *, done", "*2 failed, 4 passed*"])
    assert live.parseoutcomes() == plain.parseoutcomes()
