"""Real LIBERO-Plus episodes (``benchmarks/libero-plus.yaml``), their workers in this environment (the
libero-plus stack beside LIBERO's), MuJoCo on EGL (Mesa's llvmpipe where there is no GPU).

LIBERO-Plus is LIBERO's loop with one trial per task on the package's perturbed tasks, so what these
tests add to ``test_libero.py`` is what LIBERO-Plus changes: tasks of several perturbation axes run
(a camera pose, a rewritten instruction, sensor noise that draws from numpy's global RNG at every
step), a variant that needs the asset archive is refused in one line, and the control arm's
episodes are the LIBERO benchmark's. Small on purpose (an episode's reset and wait steps alone cost
3 to 15 s on a CPU): episodes capped at STEPS policy steps by a copy of the benchmark file. The
parity cases compare, bit for bit, a reference loop written from the runner (``libero_reference``).
These tests need ``vlaeval install libero-plus``; they fail, never skip, without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REVERSED_ORDER, TESTS, assert_generated, digesting_session, episode_records, read_json, together

from pytest_vlaeval.benchmark import file as benchmark_file
from pytest_vlaeval.benchmark.model import builtin_benchmarks, load_benchmark

pytestmark = getattr(pytest.mark, "libero-plus")

STEPS = 2
SPATIAL = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
VARIANTS = {  # three axes of LIBERO-Spatial task 0: env id -> (dimension, family)
    f"{SPATIAL}_language_1_view_0_0_100_0_0_initstate_0": ("Language", "instruction"),
    f"{SPATIAL}_view_0_0_100_2_352_initstate_0": ("Camera", "camera_pose"),
    f"{SPATIAL}_view_0_0_100_0_0_initstate_0_noise_3": ("Noise", "motion_blur"),
}
ARCHIVE_VARIANT = f"{SPATIAL}_table_1"
"""A background variant: its scene is only in LIBERO-Plus's assets.zip."""
POLICY = "libero_reference:Deterministic"


def capped(directory: Path, steps: int) -> Path:
    """``benchmarks/libero-plus.yaml`` with every step budget cut to ``steps``: all 10,070 tasks, so
    the tasks' names in LeRobot's terms are the file's, written the same way every time (its data is
    then read back from the cache of large benchmark files)."""
    data = benchmark_file.read_yaml(builtin_benchmarks()["libero-plus"])
    for task in data["tasks"]:
        task["max_steps"] = steps
    path = directory / "libero-plus.yaml"
    path.write_text(yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
    return path


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """A real session with two workers: the three variants and the archive one, the deterministic
    policy writing each episode's digest."""
    folder = tmp_path_factory.mktemp("session")
    bench = capped(tmp_path_factory.mktemp("bench"), STEPS)
    tasks = ",".join([*VARIANTS, ARCHIVE_VARIANT])
    return digesting_session(folder, f"--benchmark={bench}", f"--vla-tasks={tasks}", f"--policy={POLICY}", "-n", "2")


def test_variants_of_three_axes_run_and_the_archive_one_is_refused_in_one_line(session: tuple) -> None:
    """Each runnable variant's episode runs its STEPS steps with the package's instruction; the one
    whose scene is in assets.zip is an error before any env is built, one line naming the archive,
    its size and SHA-256 and the command that stages a local copy."""
    proc, run_dir, seen = session
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "3 failed" in proc.stdout and "1 error" in proc.stdout, proc.stdout[-3000:]
    records = episode_records(run_dir)
    benchmark = load_benchmark(builtin_benchmarks()["libero-plus"])
    for env_id in VARIANTS:
        record = records[(env_id, 0)]
        assert record["outcome"] == "failure" and record["length"] == STEPS, record
        assert seen[(env_id, 0)]["instruction"] == benchmark.task(env_id).instruction
    assert seen[(f"{SPATIAL}_view_0_0_100_2_352_initstate_0", 0)]["instruction"].endswith(
        "place it on the plate view 0 0 100 2 352 initstate 0"
    )
    refused = records[(ARCHIVE_VARIANT, 0)]
    assert refused["outcome"] == "error" and "\n" not in refused["message"]
    assert refused["message"].startswith(f"{ARCHIVE_VARIANT} cannot run: asset 'libero_plus_assets' is not staged")
    for fact in ("assets.zip (6,395,849,578 bytes", "96764a4bfbdaea98d4411598caeab235458318fe0f549611b93d1a323027b3cf"):
        assert fact in refused["message"] + refused.get("detail", "")


def test_summary_groups_by_axis_and_family_with_base_task_clusters(session: tuple) -> None:
    _, run_dir, _ = session
    summary = read_json(run_dir / "summary.json")
    assert summary["sr_per_dimension"] == {"Camera": 0.0, "Language": 0.0, "Noise": 0.0}
    assert summary["sr_per_family"] == {"camera_pose": 0.0, "instruction": 0.0, "motion_blur": 0.0}
    assert summary["interval_clusters"] == "base"
    # One base task: one cluster, which leaves no spread to go by; a group of one task is Wilson's.
    assert summary["sr_split_ci95"] == [0.0, 1.0] and summary["sr_per_dimension_ci95"]["Camera"][1] < 1.0
    assert summary["tasks_without_results"] == [ARCHIVE_VARIANT]
    eval_info = read_json(run_dir / "eval_info.json")
    names = {(t["task_group"], t["task_id"]) for t in eval_info["per_task"]}
    benchmark = load_benchmark(builtin_benchmarks()["libero-plus"])
    assert names == {benchmark.lerobot.names[env_id] for env_id in VARIANTS}
    assert all(group == "libero_spatial" for group, _ in names)


def test_benchmark_file_matches_the_installed_package() -> None:
    """``benchmarks/libero-plus.yaml`` is what the generator makes from the pinned package: 10,030
    variants, 6,983 of them runnable without the archive."""
    benchmark = load_benchmark(assert_generated("libero-plus", "libero_plus_yaml.py"))
    variants = benchmark.selected("all")
    assert len(variants) == 10_030 and len(benchmark.selected("unperturbed")) == 40
    assert len(benchmark.selected("wheels")) == 6_983 and len(benchmark.selected("archive")) == 3_047
    counts = {group: len(benchmark.selected(f"dimension={group}")) for group in benchmark.groups(benchmark.axes[1])}
    assert counts == {
        "Background": 1076,
        "Camera": 1599,
        "Language": 1537,
        "Layout": 1525,
        "Light": 1142,
        "Noise": 1601,
        "Robot": 1550,
        "Unperturbed": 40,
    }


def test_the_stack_checks_out_in_this_environment() -> None:
    """LIBERO-Plus has no interpreter of its own: ``vlaeval install libero-plus --check`` finds its
    packages, its assets link and its config (the finish step's check) in the environment that runs
    the tests, and a session's workers start here."""
    assert load_benchmark(builtin_benchmarks()["libero-plus"]).install.interpreter is None
    done = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "install", "libero-plus", "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.splitlines()[-1] == f"vlaeval install: libero-plus is ready in {sys.executable}"


# -- parity: held variants of three more axes, in reverse order under -n 2, and the control arm --

HELD_BASE = "pick_up_the_alphabet_soup_and_place_it_in_the_basket"
"""LIBERO-Object task 0 (its scenes step about twice as fast as LIBERO-Spatial's)."""
HELD = (
    f"{HELD_BASE}_view_0_0_100_0_0_initstate_11",  # robot
    f"{HELD_BASE}_level1_sample1",  # layout
    f"{HELD_BASE}_view_0_0_100_0_0_initstate_0_noise_37",  # noise: fog, drawn from numpy's global RNG
)


def reference_in_libero_plus(folder: Path) -> dict[str, dict]:
    """The held variants' trials as the runner runs them, in a process of their own."""
    code = (
        "import json, sys\n"
        "from pytest_vlaeval.envs.libero import set_gl_backend\n"
        "set_gl_backend('auto')\n"  # the GL backend a session's worker uses
        "from libero_reference import reference_plus_episodes\n"
        "found = reference_plus_episodes('libero_object', sys.argv[2].split(','), int(sys.argv[3]))\n"
        "open(sys.argv[1], 'w').write(json.dumps(found))\n"
    )
    output = folder / "reference.json"
    done = subprocess.run(
        [sys.executable, "-c", code, str(output), ",".join(HELD), str(STEPS)],
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(output.read_text())


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> list:
    """The LIBERO benchmark's episode 0 of the held variants' base task (LIBERO's reference loop), a
    session running the held variants and their control in reverse order under -n 2, and the
    runner's trials, at once."""
    from pytest_vlaeval.envs.libero import set_gl_backend

    set_gl_backend("auto")
    from libero_reference import reference_episodes

    folder, reference = tmp_path_factory.mktemp("parity"), tmp_path_factory.mktemp("reference")
    (folder / "conftest.py").write_text(REVERSED_ORDER)
    bench = capped(tmp_path_factory.mktemp("bench"), STEPS)
    args = (f"--benchmark={bench}", f"--vla-tasks={','.join(HELD)}", "--vla-control-arm", f"--policy={POLICY}")
    return together(
        lambda: reference_episodes("libero_object", 0, 1, STEPS, seed=7),
        lambda: digesting_session(folder, *args, "-n", "2"),
        lambda: reference_in_libero_plus(reference),
    )


@pytest.mark.long
@pytest.mark.parity
def test_held_variants_equal_the_runner_in_reverse_order_under_two_workers(parity: list) -> None:
    """Robot pose, object layout and fog noise: each variant's one trial in the session is the
    runner's, bit for bit (every image, the instruction, every action, the return and success)."""
    _, (proc, run_dir, seen), reference = parity
    assert proc.returncode == 1, proc.stdout[-3000:]
    for env_id in HELD:
        assert seen[(env_id, 0)] == reference[env_id], env_id
    assert {r["worker"] for r in episode_records(run_dir).values()} == {"gw0", "gw1"}


@pytest.mark.long
@pytest.mark.parity
def test_the_control_arm_is_the_libero_benchmarks_episode_and_pairs_every_group(parity: list) -> None:
    """The control, run by the session's LIBERO-Plus workers, is LIBERO's episode 0 as LIBERO's
    reference loop runs it; summary.json pairs each group with it, and eval_info.json leaves it out."""
    libero, (_, run_dir, seen), _ = parity
    assert seen[(HELD_BASE, 0)] == libero[0]
    summary = read_json(run_dir / "summary.json")
    arm = summary["control_arm"]
    assert arm["tasks"] == [HELD_BASE] and arm["sr"] == 0.0 and arm["pair_by"] == "base"
    assert set(arm["paired"]["dimension"]) == {"Robot", "Layout", "Noise"}
    assert arm["paired"]["family"]["fog"] == {
        "n_tasks": 1,
        "sr": 0.0,
        "control_sr": 0.0,
        "difference": 0.0,
        "difference_ci95": [-1.0, 1.0],
    }
    assert summary["sr_per_base"] == {HELD_BASE: 0.0}  # the variants': the control is in no group
    assert summary["sr_per_dimension"] == {"Layout": 0.0, "Noise": 0.0, "Robot": 0.0}
    eval_info = read_json(run_dir / "eval_info.json")
    assert len(eval_info["per_task"]) == len(HELD)
    assert {t["task_group"] for t in eval_info["per_task"]} == {"libero_object"}
    assert "axes-chart" in (run_dir / "report.html").read_text(encoding="utf-8")
