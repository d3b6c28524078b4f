"""LeRobot's ``eval_info.json`` both ways: every run writes it beside the canonical files, with
lerobot-eval's keys and our seeds; a lerobot-eval output directory is a gate's baseline and a run
``vlaeval compare`` shows, paired by seed; a file that is not one is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import TESTS, assert_one_line_usage_error, read_json, record, run_dir

import pytest_vlaeval
from pytest_vlaeval.benchmark.model import load_benchmark, resolve_benchmark, select
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.baseline import load_baseline
from pytest_vlaeval.report.compare import markdown_table
from pytest_vlaeval.results.canonical import summary
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--vla-live=off"]

# lerobot-eval 0.6.1's keys, in its order (scripts/lerobot_eval.py: eval_policy_all, TaskMetrics).
TOP = ["per_task", "per_group", "overall"]
TASK = ["task_group", "task_id", "metrics"]
METRICS = ["sum_rewards", "max_rewards", "successes", "video_paths", "predicted_video_paths"]
GROUP = ["avg_sum_reward", "avg_max_reward", "pc_success", "n_episodes", "video_paths", "predicted_video_paths"]
OVERALL = ["avg_sum_reward", "avg_max_reward", "pc_success", "n_episodes", "eval_s", "eval_ep_s"]
OVERALL += ["video_paths", "predicted_video_paths"]

REAL = TESTS / "data" / "lerobot_eval" / "pusht" / "eval_info.json"
"""A file written by lerobot-eval itself (Push-T, --seed=1000), where the suite has one."""

CHECKPOINT = """
import numpy as np


class Middle:
    chunk_size = 1

    def reset(self, episode):
        pass

    def act(self, obs):
        return np.full(7, 0.65, dtype=np.float32)  # the fake env's bar is 0.5 + 0.1 * (seed % 5)
"""


def lerobot_file(directory: Path, tasks: dict[tuple[str, int], list[bool]]) -> Path:
    """An eval_info.json as lerobot-eval writes it (no seeds), in ``directory``."""
    per_task = [
        {
            "task_group": group,
            "task_id": task_id,
            "metrics": {
                "sum_rewards": [float(s) for s in successes],
                "max_rewards": [float(s) for s in successes],
                "successes": successes,
                "video_paths": [],
                "predicted_video_paths": [],
            },
        }
        for (group, task_id), successes in tasks.items()
    ]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "eval_info.json").write_text(json.dumps({"per_task": per_task, "per_group": {}, "overall": {}}))
    return directory


def assert_lerobot_keys(info: dict) -> None:
    assert list(info) == TOP
    for task in info["per_task"]:
        assert [k for k in task if k != "vlaeval"] == TASK
        assert list(task["metrics"]) == METRICS
    for group in info["per_group"].values():
        assert list(group) == GROUP
    assert list(info["overall"]) == OVERALL


# -- written ------------------------------------------------------------------------------


def test_a_pusht_run_writes_lerobots_eval_info_from_its_records(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pytest", "--benchmark=pusht", "--episodes=2", "--policy=random"]
    command += ["-p", "no:cacheprovider", "--rootdir", str(tmp_path), "--vla-results=results", "--vla-live=off"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = (tmp_path / "results").iterdir()
    info, summary, task = (read_json(run / name) for name in ("eval_info.json", "summary.json", "PushT-v0.json"))

    assert_lerobot_keys(info)
    (entry,) = info["per_task"]
    assert (entry["task_group"], entry["task_id"]) == ("pusht", 0)  # lerobot-eval --env.type=pusht
    assert entry["vlaeval"] == {"benchmark": "pusht", "env_id": "PushT-v0", "seeds": [1000, 1001]}
    metrics = entry["metrics"]
    assert metrics["successes"] == task["successes"]
    assert metrics["sum_rewards"] == task["returns"]
    records = {}
    for log in (run / "episodes").glob("*.jsonl"):
        records |= {(r := json.loads(line))["seed"]: r for line in log.read_text().splitlines()}
    assert metrics["max_rewards"] == [records[seed]["extras"]["max_reward"] for seed in (1000, 1001)]
    for totals in (info["per_group"]["pusht"], info["overall"]):
        assert totals["pc_success"] == summary["pc_success"]
        assert totals["avg_max_reward"] == pytest.approx(summary["avg_max_reward"])
        assert totals["n_episodes"] == 2


def test_a_session_writes_it_and_a_rerun_rewrites_it_with_the_canonical_files(fake: pytest.Pytester) -> None:
    fake.makepyfile(checkpoint=CHECKPOINT)
    args = [*SHORT, "--policy=checkpoint:Middle"]
    assert fake.runpytest(*args).ret == pytest.ExitCode.TESTS_FAILED
    run = run_dir(fake)
    info = read_json(run / "eval_info.json")
    assert_lerobot_keys(info)
    assert [(t["task_group"], t["task_id"]) for t in info["per_task"]] == [("short", 0), ("short", 1)]
    for entry in info["per_task"]:
        task = read_json(run / f"{entry['vlaeval']['env_id']}.json")
        assert entry["metrics"]["successes"] == task["successes"] == [True, True, False]
        assert entry["vlaeval"]["seeds"] == task["episode_seeds"] == [100, 101, 102]
        assert entry["metrics"]["max_rewards"] == [None] * 3  # the fake benchmark has no avg_max_reward extra
    assert info["overall"]["pc_success"] == pytest.approx(100 * 4 / 6)
    assert info["overall"]["avg_max_reward"] is None

    (run / "eval_info.json").write_text('{"per_task": []}')  # a stale file the rerun must not leave
    assert fake.runpytest(*args, "--vla-rerun=failures").ret == pytest.ExitCode.TESTS_FAILED
    assert read_json(run / "eval_info.json") == {**info, "overall": read_json(run / "eval_info.json")["overall"]}


# -- read ---------------------------------------------------------------------------------


def test_a_lerobot_eval_file_is_a_baseline_paired_by_its_seed(tmp_path: Path) -> None:
    benchmark = load_benchmark(TESTS / "fake.yaml")
    directory = lerobot_file(tmp_path / "lerobot", {("short", 0): [True, False, True], ("short", 1): [False] * 3})
    env_ids, seeds = ["Alpha-v0", "Beta-v0"], [100, 101, 102]

    baseline = load_baseline(Path(f"{directory}:seed=100"), env_ids, seeds, benchmark=benchmark)
    assert baseline.outcomes == {"Alpha-v0": {100: True, 101: False, 102: True}, "Beta-v0": dict.fromkeys(seeds, False)}
    shifted = load_baseline(Path(f"{directory / 'eval_info.json'}:seed=101"), env_ids, seeds, benchmark=benchmark)
    assert shifted.outcomes["Alpha-v0"] == {101: True, 102: False, 103: True}
    assert shifted.paired_seeds(seeds) == [101, 102]


def test_our_own_eval_info_is_a_baseline_by_its_seeds(fake: pytest.Pytester) -> None:
    fake.makepyfile(checkpoint=CHECKPOINT)
    fake.runpytest(*SHORT, "--policy=checkpoint:Middle")
    file = run_dir(fake) / "eval_info.json"
    baseline = load_baseline(file, ["Alpha-v0"], [100, 101, 102], benchmark=load_benchmark(fake.path / "fake.yaml"))
    assert baseline.outcomes == {"Alpha-v0": {100: True, 101: True, 102: False}}
    assert baseline.missing == ()


def test_a_session_gates_against_lerobot_eval_and_compare_shows_it(fake: pytest.Pytester) -> None:
    fake.makepyfile(checkpoint=CHECKPOINT)
    lerobot = lerobot_file(fake.path / "lerobot", {("short", 0): [True] * 3, ("short", 1): [True] * 3})
    result = fake.runpytest(*SHORT, "--policy=checkpoint:Middle", f"--vla-baseline={lerobot}:seed=100")
    gate = read_json(run_dir(fake) / "summary.json")["gate"]
    assert gate["baseline"] == f"{lerobot}:seed=100", result.stdout.str()[-2000:]
    assert gate["paired_seeds"] == 3
    assert gate["paired_drop"] == pytest.approx(1 / 3)  # seed 102 fails on both tasks here, and succeeds there

    comparison = pytest_vlaeval.compare(f"{lerobot}:seed=100", run_dir(fake))
    assert [run.policy for run in comparison.runs] == ["lerobot-eval", "checkpoint:Middle"]
    overall = comparison.rows[0]
    assert [e.sr for e in overall.estimates if e] == [1.0, pytest.approx(2 / 3)]
    (difference,) = overall.differences
    assert difference is not None and (difference.difference, difference.seeds) == (pytest.approx(-1 / 3), 3)


def test_compare_shows_lerobots_avg_max_reward_beside_ours(tmp_path: Path) -> None:
    """A lerobot-eval run's max_rewards are the benchmark's extra LeRobot summarises as
    avg_max_reward (here the fake benchmark's, renamed so), so compare shows theirs beside ours."""
    bench = tmp_path / "bench.yaml"
    bench.write_text((TESTS / "fake.yaml").read_text().replace("summary: mean_bar", "summary: avg_max_reward"))
    benchmark = load_benchmark(bench)
    ours = RunDir(tmp_path / "ours")
    latest = LatestRecords(ours)
    for task in ("Alpha-v0", "Beta-v0"):
        for seed in (100, 101, 102):
            latest.add(record(task, seed, "success", extras={"bar": 0.25}))
    body, per_task = summary(select(benchmark, "short"), latest, interrupted=False)
    ours.path.mkdir()
    ours.summary.write_text(json.dumps(body))
    for result in per_task:
        ours.task(result["env_id"]).write_text(json.dumps(result))
    ours.spec.write_text(bench.read_text())
    lerobot = lerobot_file(tmp_path / "lerobot", {("short", 0): [True, False, True], ("short", 1): [True] * 3})

    comparison = pytest_vlaeval.compare(f"{lerobot}:seed=100", ours.path)
    assert [dict(run.metrics) for run in comparison.runs] == [{"avg_max_reward": "0.8333"}, {"avg_max_reward": "0.25"}]
    assert "1. lerobot:seed=100 (policy lerobot-eval; avg\\_max\\_reward 0.8333)" in markdown_table(comparison)


def test_compare_with_a_lerobot_eval_run_of_fewer_tasks_compares_the_tasks_both_have(tmp_path: Path) -> None:
    """lerobot-eval over Alpha-v0 alone beside our run of Alpha-v0 (every seed) and Beta-v0 (none):
    our overall row is Alpha-v0's 100%, not 50% over a task theirs never ran, and the table says so."""
    benchmark = load_benchmark(TESTS / "fake.yaml")
    ours = RunDir(tmp_path / "ours")
    latest = LatestRecords(ours)
    for task, outcome in (("Alpha-v0", "success"), ("Beta-v0", "failure")):
        for seed in (100, 101, 102):
            latest.add(record(task, seed, outcome))
    body, per_task = summary(select(benchmark, "short"), latest, interrupted=False)
    ours.path.mkdir()
    ours.summary.write_text(json.dumps(body))
    for result in per_task:
        ours.task(result["env_id"]).write_text(json.dumps(result))
    ours.spec.write_text((TESTS / "fake.yaml").read_text())
    lerobot = lerobot_file(tmp_path / "lerobot", {("short", 0): [True, True, False]})

    comparison = pytest_vlaeval.compare(f"{lerobot}:seed=100", ours.path)
    assert [e.sr if e else None for e in comparison.rows[0].estimates] == [pytest.approx(2 / 3), 1.0]
    assert comparison.note is not None and "(1 of 2): they leave out Beta-v0" in comparison.note
    assert comparison.note in markdown_table(comparison).splitlines()


# -- refused ------------------------------------------------------------------------------

ONE_TASK = {"task_group": "short", "task_id": 0}
GOOD_METRICS = {"sum_rewards": [0.0], "max_rewards": [0.0], "successes": [True]}


@pytest.mark.parametrize(
    ("content", "suffix", "expected"),
    [
        ("{not json", ":seed=100", "is not JSON"),
        ('{"per_task": [], "overall": {"pc_success": NaN}}', ":seed=100", "NaN is not JSON"),
        ("{}", ":seed=100", "is not LeRobot's eval_info.json: Object missing required field `per_task`"),
        (
            {"per_task": [{**ONE_TASK, "task_id": "0", "metrics": GOOD_METRICS}]},
            ":seed=100",
            "Expected `int`, got `str` - at `$.per_task[0].task_id`",
        ),
        (
            {"per_task": [{**ONE_TASK, "metrics": {**GOOD_METRICS, "successes": [1]}}]},
            ":seed=100",
            "Expected `bool`, got `int` - at `$.per_task[0].metrics.successes[0]`",
        ),
        (
            {"per_task": [{**ONE_TASK, "metrics": {**GOOD_METRICS, "sum_rewards": [0.0, 1.0]}}]},
            ":seed=100",
            "has 2 sum_rewards, 1 max_rewards and 1 successes",
        ),
        (
            {"per_task": [{"task_group": "pusht", "task_id": 0, "metrics": GOOD_METRICS}]},
            ":seed=100",
            "is another benchmark's: its task_group/task_id 'pusht' 0 name no task of fake",
        ),
        (
            {"per_task": [{**ONE_TASK, "metrics": GOOD_METRICS}, {**ONE_TASK, "metrics": GOOD_METRICS}]},
            ":seed=100",
            "lists the task Alpha-v0 twice",
        ),
        ({"per_task": [{**ONE_TASK, "metrics": GOOD_METRICS}]}, "", "keeps no seeds (lerobot-eval ran episode i"),
        (
            {
                "per_task": [
                    {
                        **ONE_TASK,
                        "metrics": GOOD_METRICS,
                        "vlaeval": {"benchmark": "pusht", "env_id": "PushT-v0", "seeds": [1000]},
                    }
                ]
            },
            "",
            "says it is task 'PushT-v0' of benchmark 'pusht', where fake names it Alpha-v0",
        ),
    ],
)
def test_a_file_that_is_not_a_lerobot_eval_of_this_benchmark_is_refused_in_one_line(
    tmp_path: Path, content: object, suffix: str, expected: str
) -> None:
    (tmp_path / "eval_info.json").write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(SpecError) as refused:
        load_baseline(Path(f"{tmp_path}{suffix}"), ["Alpha-v0"], [100], benchmark=load_benchmark(TESTS / "fake.yaml"))
    assert expected in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_link_in_a_lerobot_eval_directory_is_not_followed(tmp_path: Path) -> None:
    outside = lerobot_file(tmp_path / "outside", {("short", 0): [True]}) / "eval_info.json"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "eval_info.json").symlink_to(outside)
    with pytest.raises(SpecError, match="is a symbolic link; name the file it leads to"):
        load_baseline(tmp_path / "run", ["Alpha-v0"], [100], benchmark=load_benchmark(TESTS / "fake.yaml"))


def test_a_pipe_named_eval_info_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "eval_info.json")  # nobody writes it: opening it plainly would wait forever
    with pytest.raises(SpecError, match=r"eval_info\.json is not a regular file"):
        load_baseline(Path(f"{tmp_path}:seed=100"), ["Alpha-v0"], [100], benchmark=load_benchmark(TESTS / "fake.yaml"))


def test_a_directory_named_eval_info_is_refused_by_its_name(tmp_path: Path) -> None:
    """Not "Is a directory: 3": the descriptor's number where the file's name belongs."""
    (tmp_path / "eval_info.json").mkdir()
    with pytest.raises(SpecError) as refused:
        load_baseline(Path(f"{tmp_path}:seed=100"), ["Alpha-v0"], [100], benchmark=load_benchmark(TESTS / "fake.yaml"))
    assert str(refused.value) == f"--vla-baseline {tmp_path}:seed=100: {tmp_path / 'eval_info.json'} is a directory"


def test_a_file_past_64_mib_is_refused_unread(tmp_path: Path) -> None:
    """A sparse file of 1 GiB (no disk space): read to the bound and refused, never parsed."""
    with (tmp_path / "eval_info.json").open("wb") as file:
        file.truncate(2**30)
    with pytest.raises(SpecError) as refused:
        load_baseline(Path(f"{tmp_path}:seed=100"), ["Alpha-v0"], [100], benchmark=load_benchmark(TESTS / "fake.yaml"))
    assert str(refused.value) == (
        f"--vla-baseline {tmp_path}:seed=100: {tmp_path / 'eval_info.json'} is larger than 64 MiB, "
        "more than an eval_info.json holds"
    )


def test_a_lerobot_eval_files_own_totals_are_never_read(fake: pytest.Pytester) -> None:
    """Its ``overall`` and ``per_group`` say 100% success where its episodes all failed: compare
    shows the SRs of its episodes."""
    fake.runpytest(*SHORT, "--policy=zero")
    directory = lerobot_file(fake.path / "lerobot", {("short", 0): [False] * 3, ("short", 1): [False] * 3})
    info = json.loads((directory / "eval_info.json").read_text())
    totals = {"pc_success": 100.0, "n_episodes": 6, "avg_sum_reward": 1.0, "avg_max_reward": 1.0}
    info |= {"overall": totals, "per_group": {"short": totals}}
    (directory / "eval_info.json").write_text(json.dumps(info))
    comparison = pytest_vlaeval.compare(f"{directory}:seed=100", run_dir(fake))
    assert [run.policy for run in comparison.runs] == ["lerobot-eval", "zero"]
    assert {row.estimates[0].sr for row in comparison.rows if row.estimates[0]} == {0.0}


def test_pc_success_is_lerobots_float() -> None:
    """LeRobot writes the mean of the successes times 100: 1 of 3 is 33.33333333333333, where
    100 * 1 / 3 would be 33.333333333333336."""
    from pytest_vlaeval.lerobot.eval_info import _means

    records = [record("Alpha-v0", seed, "success" if seed == 0 else "failure") for seed in range(3)]
    assert _means(records, None)["pc_success"] == float(np.mean([1.0, 0.0, 0.0]) * 100) == 33.33333333333333


def test_a_session_refuses_a_seedless_baseline_before_any_episode(fake: pytest.Pytester) -> None:
    lerobot = lerobot_file(fake.path / "lerobot", {("short", 0): [True] * 3})
    result = fake.runpytest(*SHORT, "--policy=zero", f"--vla-baseline={lerobot}")
    assert_one_line_usage_error(result, "keeps no seeds (lerobot-eval ran episode i with its --seed + i)")


def test_compare_needs_one_of_our_runs_to_name_a_lerobot_runs_tasks(tmp_path: Path) -> None:
    lerobot = lerobot_file(tmp_path / "lerobot", {("short", 0): [True]})
    with pytest.raises(ValueError, match="does not say which benchmark it ran: compare it beside one of our runs"):
        pytest_vlaeval.compare(f"{lerobot}:seed=100")


# -- the benchmark files' names ------------------------------------------------------------


def test_the_built_in_benchmarks_name_their_tasks_as_lerobot_eval_does() -> None:
    metaworld, _ = resolve_benchmark("metaworld")
    names = metaworld.lerobot
    assert names.env_type == "metaworld"
    assert names.names["assembly-v3"] == ("hard", 0)  # DIFFICULTY_TO_TASKS["hard"][0]
    assert names.env_id("very_hard", 4) == "pick-place-wall-v3"
    assert names.env_id("metaworld-push-v3", 0) == names.env_id("push-v3", 0) == "push-v3"  # --env.task=push-v3
    assert names.env_id("push-v3", 1) is None
    libero, _ = resolve_benchmark("libero")
    assert libero.lerobot.names[libero.tasks[0].env_id] == ("libero_spatial", 0)
    assert libero.lerobot.env_type is None  # LeRobot's LIBERO observations are not this file's
    pusht = resolve_benchmark("pusht")[0].lerobot
    assert (pusht.env_type, pusht.names) == ("pusht", {"PushT-v0": ("pusht", 0)})


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("lerobot: {task_group: suite}", "lerobot.task_group 'suite' is not one of the axes"),
        ("lerobot: {group_names: {medium: m}}", "lerobot.group_names renames ['medium'], not groups along 'split'"),
        ("lerobot: {group_names: {short: x, long: x}}", "lerobot.group_names gives two groups one name"),
        ("lerobot: {group_names: {short: Beta-v0}, single_task_prefixes: ['']}", "names a task like a group"),
        (
            "lerobot: {env_type: 'no/such'}",
            "a name: a letter or digit, then letters, digits or _.+- - at `lerobot.env_type`",
        ),
        ("lerobot: {env_typ: pusht}", "unknown field `env_typ`"),
        ("lerobot: {env_type: pusht, task_group: memory_type, single_task_prefixes: ['']}", None),
    ],
)
def test_a_benchmark_files_lerobot_block_is_checked(tmp_path: Path, block: str, expected: str | None) -> None:
    text = (TESTS / "fake.yaml").read_text()
    (tmp_path / "bench.yaml").write_text(text.replace("protocol:", f"{block}\nprotocol:", 1))
    if expected is None:
        names = load_benchmark(tmp_path / "bench.yaml").lerobot
        assert (names.names["Gamma-v0"], names.env_id("Alpha-v0", 0)) == (("Object", 1), "Alpha-v0")
        assert names.env_type == "pusht"
        return
    with pytest.raises(SpecError) as refused:
        load_benchmark(tmp_path / "bench.yaml")
    assert expected in str(refused.value)


@pytest.mark.skipif(not REAL.exists(), reason="no file written by lerobot-eval in the suite")
def test_a_file_written_by_lerobot_eval_has_our_keys_and_reads_as_pushts(tmp_path: Path) -> None:
    info = read_json(REAL)
    assert_lerobot_keys(info)
    pusht, _ = resolve_benchmark("pusht")
    n = len(info["per_task"][0]["metrics"]["successes"])
    baseline = load_baseline(Path(f"{REAL}:seed=1000"), ["PushT-v0"], range(1000, 1000 + n), benchmark=pusht)
    assert baseline.outcomes["PushT-v0"] == dict(
        zip(range(1000, 1000 + n), info["per_task"][0]["metrics"]["successes"], strict=True)
    )
