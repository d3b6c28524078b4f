"""Real MIKASA-Robo-VLA episodes (software Vulkan here, the GPU path where there is one).

A few short episodes only (an env step costs ~0.13 s on a CPU): RememberColor3 (25 steps) and
InterceptSlow (60 steps), two seeds each, run once per fixture and shared by the assertions.
These tests need the simulator stack from `vlaeval install mikasa`; they fail, never skip, without it.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import episode_records, lone_runner, read_json, together
from mikasa_reference import reference_episode

from pytest_vlaeval.benchmark.model import resolve_benchmark, select
from pytest_vlaeval.episodes.lockstep_groups import LockstepGroups
from pytest_vlaeval.episodes.worker import Worker
from pytest_vlaeval.policy import EpisodeInfo, RandomPolicy
from pytest_vlaeval.policy.loading import parse_policy

pytestmark = [pytest.mark.mikasa, pytest.mark.minutes(4)]

TASKS = ("RememberColor3-VLA-v0", "InterceptSlow-VLA-v0")
SHORT = TASKS[0]
SEEDS = (4242424242, 4242424243)
YCB_TASK = "ShellGameTouch-VLA-v0"


def run_pytest(directory: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A real pytest session in its own process, as a user would start it (in ``env``, else this
    process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args], cwd=directory, capture_output=True, text=True, timeout=900, env=env
    )


def run_session(
    directory: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A real pytest session evaluating TASKS (and one YCB task) with the random policy."""
    directory.mkdir(parents=True, exist_ok=True)
    tasks = ",".join((*TASKS, YCB_TASK))
    args = ["--benchmark=short", f"--vla-tasks={tasks}", "--episodes=2", "-p", "no:cacheprovider", "-rA", "-vv"]
    proc = run_pytest(directory, *args, *extra, "--rootdir", str(directory), env=env)
    (run_dir,) = (directory / "results").iterdir()
    return proc, run_dir


def comparable(records: dict) -> dict:
    return {key: (r["success"], r["episode_return"], r["length"]) for key, r in records.items() if key[0] in TASKS}


def reference_episodes() -> dict[tuple[str, int], tuple[bool, float, int]]:
    """TASKS' SEEDS through the package's own ``run_episode``, each episode on a freshly built env,
    our random policy."""
    import torch

    class ReferencePolicy:
        """Our random policy behind the reference runner's ``forward`` interface."""

        def __init__(self, task: str, seed: int) -> None:
            self.policy = RandomPolicy()
            self.chunk_size = self.policy.chunk_size
            self.policy.reset(EpisodeInfo(task=task, seed=seed, instruction="", episode_index=0, max_steps=0))

        def forward(self, obs):
            return torch.as_tensor(self.policy.act(obs))

    return {
        (env_id, seed): reference_episode(env_id, ReferencePolicy(env_id, seed), seed)
        for env_id in TASKS
        for seed in SEEDS
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list:
    """At the same time: the reference episodes in this process, the serial session, and one under
    -n 2 in lockstep groups of two seeds, which must give the serial session's lone records (one
    session for each order, shared by the assertions: real episodes are the suite's costliest part)."""
    parallel, serial = tmp_path_factory.mktemp("parallel"), tmp_path_factory.mktemp("serial")
    env = dict(os.environ)  # the sessions' environment, before the reference sets its render backend here
    return together(
        reference_episodes,
        lambda: run_session(parallel, "-n", "2", "--vla-lockstep=2", env=env),
        lambda: run_session(serial, env=env),
    )


@pytest.fixture(scope="module")
def reference(runs: list) -> dict[tuple[str, int], tuple[bool, float, int]]:
    return runs[0]


@pytest.fixture(scope="module")
def parallel(runs: list) -> tuple[subprocess.CompletedProcess[str], Path]:
    return runs[1]


@pytest.fixture(scope="module")
def serial(runs: list) -> tuple[subprocess.CompletedProcess[str], Path]:
    return runs[2]


@pytest.mark.long
def test_xdist_session_writes_canonical_json(parallel: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, run_dir = parallel
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert run_dir.name.startswith("mikasa-short-random-")
    for env_id in TASKS:
        result = read_json(run_dir / f"{env_id}.json")
        assert result["env_id"] == env_id and result["split"] == "Short"
        assert result["episode_seeds"] == list(SEEDS) and result["n_episodes"] == 2
        assert len(result["successes"]) == len(result["returns"]) == len(result["episode_lengths"]) == 2
        assert result["sr"] == sum(result["successes"]) / 2
        assert result["control_mode"] == "pd_ee_delta_pose" and result["obs_mode"] == "rgb"
        assert result["wrapper_chain"] == "apply_mikasa_vla_wrappers(include_overlays=False)"
        assert result["benchmark_commit"] == "16634db18bef08128ed79346469c86fc12169aed"
        assert result["render_backend"] == "cpu" and result["start_seed"] == 4242424242
        assert all(0 < n <= 60 for n in result["episode_lengths"])
    summary = read_json(run_dir / "summary.json")
    srs = [read_json(run_dir / f"{t}.json")["sr"] for t in TASKS]
    assert summary["sr_split"] == sum(srs) / 2
    memory_types = {read_json(run_dir / f"{t}.json")["memory_type"] for t in TASKS}
    assert set(summary["sr_per_memory_type"]) == set(summary["sr_per_memory_type_ci95"]) == memory_types
    assert summary["tasks"] == list(TASKS) and summary["n_completed"] == 4
    workers = {r["worker"] for r in episode_records(run_dir).values() if r["task"] in TASKS}
    assert workers <= {"gw0", "gw1"} and workers


@pytest.mark.long
def test_missing_ycb_pack_is_an_error_that_says_how_to_get_it(
    parallel: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, run_dir = parallel
    records = [r for r in episode_records(run_dir).values() if r["task"] == YCB_TASK]
    assert [r["outcome"] for r in records] == ["error", "error"]
    assert "ManiSkill asset pack 'ycb' not found" in records[0]["message"]
    assert "python -m mani_skill.utils.download_asset ycb" in records[0]["message"]
    assert f"ERROR mikasa-short::{YCB_TASK}::4242424242 - {YCB_TASK} cannot run" in proc.stdout
    summary = read_json(run_dir / "summary.json")
    assert summary["tasks_without_results"] == [YCB_TASK] and summary["n_errors"] == 2 and summary["partial"]


@pytest.mark.long
def test_order_independence_serial_xdist_and_reversed(parallel, serial) -> None:
    by_xdist = comparable(episode_records(parallel[1]))
    by_serial = comparable(episode_records(serial[1]))
    assert len(by_xdist) == 4
    assert by_serial == by_xdist

    # In-process, the short task's seeds reversed on one env (the serial session switched tasks).
    benchmark, _ = resolve_benchmark("mikasa:short")
    runner = lone_runner(select(benchmark, "short", env_ids=[SHORT], episodes=2), "random")
    reversed_records = {}
    try:
        for index, seed in reversed(list(enumerate(SEEDS))):
            record = runner.run(benchmark.task(SHORT), seed, index)
            reversed_records[record.key] = record.to_dict()
    finally:
        runner.close()
    assert reversed_records and comparable(reversed_records) == {k: v for k, v in by_xdist.items() if k[0] == SHORT}
    assert runner.worker.env_builds == 1, "one env for the task, reused across its seeds"


@pytest.mark.long
def test_lockstep_groups_give_the_lone_records_in_any_order(parallel, serial) -> None:
    """Groups of two seeds (two CPU envs a group, one batched policy call a step) under -n 2, then
    the short task's block run in-process with its seeds reversed: every record is the lone episode's."""
    proc, run_dir = parallel
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    records = episode_records(run_dir)
    by_blocks = comparable(records)
    assert len(by_blocks) == 4 and by_blocks == comparable(episode_records(serial[1]))
    for env_id in TASKS:
        assert {records[env_id, seed]["lockstep"] for seed in SEEDS} == {2}
        assert len({records[env_id, seed]["worker"] for seed in SEEDS}) == 1, "a block runs on one worker"
    ycb = [records[YCB_TASK, seed] for seed in SEEDS]
    assert [r["error_kind"] for r in ycb] == ["asset", "asset"], "a block that cannot be built errs, whole"

    benchmark, _ = resolve_benchmark("mikasa:short")
    selection = select(benchmark, "short", env_ids=[SHORT], episodes=2)
    runner = LockstepGroups(Worker(selection, parse_policy("random"), "auto"), 2)
    try:
        group = list(reversed(list(zip(SEEDS, range(2), strict=True))))
        reversed_records = {r.key: r.to_dict() for r in runner.run_group(benchmark.task(SHORT), group)}
    finally:
        runner.close()
    assert len(reversed_records) == 2 and comparable(reversed_records) == {
        k: v for k, v in by_blocks.items() if k[0] == SHORT
    }
    assert runner.worker.env_builds == 1, "one group of envs for the task"


@pytest.mark.long
def test_parity_with_the_reference_run_episode_on_fresh_envs(serial, reference) -> None:
    """The package's own ``run_episode``, each episode on a freshly built env, same policy."""
    assert comparable(episode_records(serial[1])) == reference


def test_no_privileged_key_reaches_the_policy_on_a_task_with_task_cue() -> None:
    """RotateLenientPos adds ``task_cue`` (the target angle) to obs and ``oracle_info`` to info."""
    import spy_policies

    benchmark, _ = resolve_benchmark("mikasa:short")
    runner = lone_runner(
        select(benchmark, "short", env_ids=["RotateLenientPos-VLA-v0"], episodes=1), "spy_policies:Spy"
    )
    try:
        record = runner.run(benchmark.task("RotateLenientPos-VLA-v0"), SEEDS[0], 0)
        raw_obs, raw_info = runner.env_for(benchmark.task("RotateLenientPos-VLA-v0"), 1).env.reset(seed=SEEDS[0])
    finally:
        runner.close()
    assert record.outcome in ("success", "failure"), record.message
    assert "task_cue" in raw_obs and "oracle_info" in raw_info, "the env does carry privileged data"
    assert spy_policies.Spy.seen_keys == {("instruction", "proprio", "rgb")}
    assert "degrees" in spy_policies.Spy.instructions.pop() and spy_policies.Spy.calls == record.length
    # The env factory moved the simulator stack's import-time objects out of the collector.
    assert gc.get_freeze_count() > 0


def test_render_check_passes_on_this_machine() -> None:
    check = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval.envs.vulkan", "auto"], capture_output=True, text=True, timeout=300
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip().splitlines()[-1] in ("cpu", "gpu")


@pytest.mark.long
def test_rerun_of_failures_on_real_episodes_keeps_the_summary_whole(serial) -> None:
    """Rerun the short task's failed episodes of the serial run (``-k``): deterministic episodes
    fail again, and the summary still holds every task."""
    before = episode_records(serial[1])
    failed = sorted(key for key, r in before.items() if r["outcome"] == "failure")
    assert failed, "the random policy fails some of these episodes"
    proc, run_dir = run_session(serial[1].parent.parent, "--vla-rerun=failures", "-k", SHORT)
    assert run_dir == serial[1]
    assert f"--vla-rerun=failures: {len(failed)} of 6 episodes selected" in proc.stdout
    after = episode_records(run_dir)
    assert comparable(after) == comparable(before)
    rerun = sorted(key for key, r in after.items() if r["attempt"] == 2)
    assert rerun and rerun == [key for key in failed if key[0] == SHORT]
    summary = read_json(run_dir / "summary.json")
    assert summary["n_completed"] == 4 and summary["n_rerolled"] == 0 and summary["n_errors"] == 2


@pytest.mark.long
def test_video_recording_does_not_change_the_episode(serial, tmp_path: Path) -> None:
    import cv2

    benchmark, _ = resolve_benchmark("mikasa:short")
    selection = select(benchmark, "short", env_ids=[TASKS[0]], episodes=1)
    runner = lone_runner(selection, "random", video=("all", tmp_path))
    try:
        record = runner.run(benchmark.task(TASKS[0]), SEEDS[0], 0)
    finally:
        runner.close()
    without_video = episode_records(serial[1])[(TASKS[0], SEEDS[0])]
    assert (record.success, record.episode_return, record.length) == (
        without_video["success"],
        without_video["episode_return"],
        without_video["length"],
    )
    capture = cv2.VideoCapture(record.video)
    frames, width, height = (
        int(capture.get(p)) for p in (cv2.CAP_PROP_FRAME_COUNT, cv2.CAP_PROP_FRAME_WIDTH, cv2.CAP_PROP_FRAME_HEIGHT)
    )
    capture.release()
    assert record.video == str(tmp_path / TASKS[0] / f"{SEEDS[0]}.webm")
    assert (frames, width, height) == (record.length + 1, 768, 512)  # scene 512x512 | cameras 256 wide


def test_a_render_backend_that_cannot_work_fails_fast_in_one_line(tmp_path: Path) -> None:
    """Forcing the GPU path: on a machine without CUDA the session stops before any episode."""
    torch = pytest.importorskip("torch")

    forced_gpu = ["--benchmark=short", "--vla-tasks=RememberColor3-VLA-v0", "--episodes=1", "--vla-render=gpu"]
    check = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval.envs.vulkan", "gpu"], capture_output=True, text=True, timeout=300
    )
    if torch.cuda.is_available():
        assert check.returncode == 0 and check.stdout.strip().endswith("gpu"), check.stdout + check.stderr
    else:
        assert check.returncode == 1
        assert "no usable Vulkan device for --vla-render=gpu" in check.stdout and "--vla-render=cpu" in check.stdout
        run = run_pytest(tmp_path, *forced_gpu)
        assert run.returncode == pytest.ExitCode.USAGE_ERROR
        assert [line for line in run.stderr.splitlines() if line.startswith("ERROR:")] == [
            f"ERROR: render backend check failed: {check.stdout.strip()}"
        ]
        assert not (tmp_path / "results").exists()
    assert run_pytest(tmp_path, *forced_gpu, "--co", "-q").returncode == 0, "collect-only never needs a renderer"


def test_a_missing_asset_pack_never_waits_on_maniskills_download_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The env factory itself, without the runner's asset check in front: ManiSkill's stdin
    prompt for a missing pack becomes an AssetMissing error instead of a hang or an EOFError."""
    from mani_skill.utils import assets as maniskill_assets

    from pytest_vlaeval.envs.mikasa import make_env
    from pytest_vlaeval.errors import AssetMissing

    monkeypatch.setattr(maniskill_assets, "is_data_source_downloaded", lambda asset_id: False)  # on any machine
    benchmark, _ = resolve_benchmark("mikasa:short")
    with pytest.raises(AssetMissing, match=r"requires asset\(s\) ycb .*download_asset"):
        make_env(benchmark.task(YCB_TASK), benchmark, "auto")


@pytest.mark.long
def test_the_reference_order_equals_the_shipped_runner_bit_for_bit(tmp_path: Path) -> None:
    """--vla-reference-order under -n 2 against the benchmark's own evaluate_task (one env per task,
    seeds in order, plain resets), the same deterministic policy: every episode equal, to the last bit."""
    scripts = Path(__file__).resolve().parents[2] / "scripts"
    tasks = ("RememberColor3-VLA-v0", "FindImposterColor3-VLA-v0")  # 25 steps each
    shipped_json = tmp_path / "shipped.json"
    session = tmp_path / "session"
    session.mkdir()
    reference, proc = together(  # the shipped runner and the session at once: neither reads the other
        lambda: subprocess.run(
            [sys.executable, str(scripts / "bench_reference_order.py"), f"--tasks={','.join(tasks)}", "--seeds=3",
             "--policies=observed", "--render=cpu", "--jobs=2", "--shipped-only", f"--json={shipped_json}"],
            capture_output=True, text=True, timeout=900,
        ),
        lambda: subprocess.run(
            [sys.executable, "-m", "pytest", "--benchmark=short", f"--vla-tasks={','.join(tasks)}", "--episodes=3",
             "--policy=bench_reference_order:Observed", "--vla-reference-order", "-n", "2", "--vla-render=cpu",
             "-p", "no:cacheprovider", "--rootdir", str(session)],
            cwd=session, capture_output=True, text=True, timeout=900,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(scripts), os.environ.get("PYTHONPATH")]))},
        ),
    )  # fmt: skip
    assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:]
    shipped = {
        (result["task"], 4242424242 + i): (success, length, ret)
        for result in json.loads(shipped_json.read_text())
        for i, (success, length, ret) in enumerate(result["policies"]["observed"]["shipped"])
    }
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = (session / "results").iterdir()
    ours = {key: (r["success"], r["length"], r["episode_return"]) for key, r in episode_records(run).items()}
    assert ours == shipped
    assert read_json(run / "fingerprint.json")["order"] == "reference"
