"""Real LIBERO-PRO episodes (``benchmarks/libero-pro.yaml``; MuJoCo on EGL, Mesa's llvmpipe where
there is no GPU).

LIBERO-PRO is LIBERO's env on perturbed BDDL files, so what these tests add to ``test_libero.py`` is
what PRO changes: the instruction the policy gets (the BDDL file's, which the package's
``task.language`` is not in the semantic and task suites), env ids that carry their split (the 16
suites share the original task names), and perturbed scenes and init states. Small on purpose (an
episode's reset and wait steps alone cost 2-5 s on a CPU): task 0 of two perturbation families,
episodes capped at STEPS policy steps by a copy of the benchmark file, compared bit for bit with a
reference loop written from LIBERO-PRO's runner (``libero_reference.reference_pro_episodes``).
These tests need ``vlaeval install libero``; they fail, never skip, without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    ROOT,
    TESTS,
    assert_generated,
    capped_benchmark,
    digesting_session,
    episode_records,
    libero_episodes_on_one_env,
    read_json,
    together,
)

from pytest_vlaeval.benchmark.model import load_benchmark, resolve_benchmark, select
from pytest_vlaeval.envs import libero
from pytest_vlaeval.errors import EnvError, SpecError

pytestmark = [pytest.mark.libero, pytest.mark.minutes(1.5)]

STEPS = 3
EPISODES = 4
NAME = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
"""Task 0 of every Spatial suite: the package names it the same in all five."""
TRAP = f"spatial_task.{NAME}"
"""The instruction trap: the file name (``task.language``) says FILE_SAYS, the BDDL file BDDL_SAYS."""
SWAP = "object_swap.pick_up_the_alphabet_soup_and_place_it_in_the_basket"
"""Position perturbation: the original instruction, a perturbed scene (LIBERO-Object's scenes step
about twice as fast as LIBERO-Spatial's here)."""
SUITES = {TRAP: "libero_spatial_task", SWAP: "libero_object_swap"}
FILE_SAYS = "pick up the black bowl between the plate and the ramekin and place it on the plate"
BDDL_SAYS = "pick the akita black bowl not between the plate and the ramekin and place it on the plate"
POLICY = "libero_reference:Deterministic"


def reference_episodes(folder: Path) -> dict[str, list[dict]]:
    """Episodes 0..EPISODES-1 of both tasks as LIBERO-PRO's runner runs them, the two tasks in two
    processes at once (each is one env, run in order, as the runner runs a task)."""
    code = (
        "import json, sys\n"
        "from pytest_vlaeval.envs.libero import set_gl_backend\n"
        "set_gl_backend('auto')\n"  # the GL backend and package paths a session's worker uses
        "from libero_reference import reference_pro_episodes\n"
        "episodes = reference_pro_episodes(sys.argv[1], 0, int(sys.argv[2]), int(sys.argv[3]), seed=7)\n"
        "with open(sys.argv[4], 'w') as stream:\n"
        "    json.dump(episodes, stream)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    outputs = {env_id: folder / f"{env_id}.json" for env_id in SUITES}
    logs = {env_id: folder / f"{env_id}.log" for env_id in SUITES}
    procs = {}
    for env_id, suite in SUITES.items():
        with logs[env_id].open("w") as log:  # a file, not a pipe: neither child can block on a full one
            procs[env_id] = subprocess.Popen(
                [sys.executable, "-c", code, suite, str(EPISODES), str(STEPS), str(outputs[env_id])],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    found = {}
    for env_id, proc in procs.items():
        assert proc.wait(timeout=600) == 0, logs[env_id].read_text()[-3000:]
        found[env_id] = json.loads(outputs[env_id].read_text())
    return found


@pytest.fixture(scope="module")
def short_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``benchmarks/libero-pro.yaml`` with every step budget cut to STEPS (a CI-sized episode)."""
    return capped_benchmark("libero-pro", STEPS, tmp_path_factory.mktemp("bench"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, short_benchmark: Path) -> list:
    """A real session in its own process (both tasks, EPISODES episodes each, two xdist workers, the
    deterministic policy writing each episode's digest) and the reference episodes, at the same time."""
    directory, folder = tmp_path_factory.mktemp("session"), tmp_path_factory.mktemp("reference")
    args = [f"--benchmark={short_benchmark}", f"--vla-tasks={','.join(SUITES)}", f"--policy={POLICY}"]
    return together(
        lambda: digesting_session(directory, *args, f"--episodes={EPISODES}", "-n", "2"),
        lambda: reference_episodes(folder),
    )


@pytest.fixture(scope="module")
def session(runs: list) -> tuple:
    return runs[0]


@pytest.fixture(scope="module")
def reference(runs: list) -> dict[str, list[dict]]:
    return runs[1]


@pytest.mark.long
def test_the_policy_gets_the_bddl_instruction_not_the_file_name(session: tuple) -> None:
    """The trap: in LIBERO-PRO's task suite the package's ``task.language`` (from the file name) is
    the original instruction; the policy in a real session gets the BDDL file's perturbed one."""
    from libero.libero import benchmark as libero_benchmark

    package_task = libero_benchmark.get_benchmark_dict()["libero_spatial_task"]().get_task(0)
    assert package_task.name == NAME and package_task.language == FILE_SAYS
    assert load_benchmark(ROOT / "benchmarks" / "libero-pro.yaml").task(TRAP).instruction == BDDL_SAYS
    proc, _, seen = session
    assert {seen[(TRAP, k)]["instruction"] for k in range(EPISODES)} == {BDDL_SAYS}, proc.stdout[-3000:]
    assert {seen[(SWAP, k)]["instruction"] for k in range(EPISODES)} == {
        "pick the alphabet soup and place it in the basket"
    }


@pytest.mark.long
@pytest.mark.parity
def test_session_episodes_equal_libero_pro_runner(session: tuple, reference: dict[str, list[dict]]) -> None:
    """Under -n 2, each task's episodes 0..3 are the runner's: the same first image, instruction,
    observations, actions, return and success (one digest), bit for bit."""
    proc, run_dir, seen = session
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # no success in 3 steps: failures
    assert f"{2 * EPISODES} failed" in proc.stdout
    for env_id in SUITES:
        for k in range(EPISODES):
            assert f"::{env_id}::{k} " in proc.stdout
        assert [seen[(env_id, k)] for k in range(EPISODES)] == reference[env_id], env_id
    records = episode_records(run_dir)
    assert {r["worker"] for r in records.values()} <= {"gw0", "gw1"}
    for env_id, base, perturbation in ((TRAP, "spatial", "task"), (SWAP, "object", "position")):
        result = read_json(run_dir / f"{env_id}.json")
        assert result["split"] == env_id.partition(".")[0]
        assert result["base"] == base and result["perturbation"] == perturbation
        assert result["episode_seeds"] == list(range(EPISODES)) and result["episode_lengths"] == [STEPS] * EPISODES
    summary = read_json(run_dir / "summary.json")
    assert summary["benchmark"] == "LIBERO-PRO"
    assert summary["sr_per_base"] == {"spatial": 0.0, "object": 0.0}
    assert summary["sr_per_perturbation"] == {"task": 0.0, "position": 0.0}


@pytest.mark.long
@pytest.mark.parity
def test_episodes_out_of_order_equal_the_runner(reference: dict[str, list[dict]]) -> None:
    """One env, episode 1 first (one reset replayed), then 0 (a step back re-seeds): the runner's
    episodes 1 and 0 of the position suite's task."""
    episodes, _ = libero_episodes_on_one_env("libero-pro", SWAP, STEPS, seeds=(1, 0))
    seen = {episode.seed: episode.digest for episode in episodes}
    assert [seen[0], seen[1]] == reference[SWAP][:2]
    assert [episode.result.extras for episode in episodes] == [{"replayed_resets": 1}, {"replayed_resets": 0}]
    assert episodes[-1].reseeded


def test_env_ids_name_the_package_task_of_their_split() -> None:
    """``<split>.<name>`` finds the task in its split's suite; a name under another split's
    prefix, or the bare name, is no task of the suite."""
    benchmark, _ = resolve_benchmark("libero-pro")
    suite, index = libero.suite_task(benchmark.task(TRAP), benchmark)
    assert (suite.name, index) == ("libero_spatial_task", 0)
    for wrong in (SWAP, NAME):
        with pytest.raises(EnvError, match="is not a task of libero_spatial_task"):
            libero.suite_task(dataclasses.replace(benchmark.task(TRAP), env_id=wrong), benchmark)


def test_a_stale_instruction_is_refused_before_the_env_is_built() -> None:
    """The file is checked against the BDDL file's instruction (the one sent), not ``task.language``."""
    benchmark, _ = resolve_benchmark("libero-pro")
    stale = dataclasses.replace(benchmark.task(TRAP), instruction=FILE_SAYS)
    with pytest.raises(EnvError, match=f"benchmark file says '{FILE_SAYS}', LIBERO says '{BDDL_SAYS}'"):
        libero.make_env(stale, benchmark, "auto")
    options = {**benchmark.env.options, "instruction_source": "name"}
    unknown = dataclasses.replace(benchmark, env=dataclasses.replace(benchmark.env, options=options))
    with pytest.raises(EnvError, match="instruction_source is 'name'; expected one of task, bddl"):
        libero.make_env(benchmark.task(TRAP), unknown, "auto")


def test_the_environment_perturbation_is_refused_with_its_reason() -> None:
    """The package registers ``libero_*_env`` without resources: the file says so, and selecting
    one is one line saying why; the package fails as the file says."""
    from libero.libero import benchmark as libero_benchmark

    benchmark, _ = resolve_benchmark("libero-pro")
    assert sorted(benchmark.unavailable_splits) == ["10_env", "goal_env", "object_env", "spatial_env"]
    with pytest.raises(SpecError, match=r"'spatial_env' of 'libero-pro' cannot run here: .*ships none"):
        select(benchmark, "spatial_env")
    suite = libero_benchmark.get_benchmark_dict()["libero_spatial_env"]()
    assert suite.n_tasks == 10
    with pytest.raises(FileNotFoundError, match="Initialization states unavailable"):
        suite.get_task_init_states(0)


def test_benchmark_file_matches_the_installed_package() -> None:
    """``benchmarks/libero-pro.yaml`` is what the generator makes from the pinned package."""
    benchmark = load_benchmark(assert_generated("libero-pro", "libero_yaml.py", "--pro"))
    assert len(benchmark.tasks) == 160 and len(benchmark.splits) == 16
    assert {t.env_id.partition(".")[0] for t in benchmark.tasks} == set(benchmark.splits)
    assert not any(c in t.env_id for t in benchmark.tasks for c in "/:")
