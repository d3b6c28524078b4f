"""Where a policy with an interpreter of its own runs (``--vla-policy-placement``): the rule, on the
built-in benchmarks and a LeRobot checkpoint, and its refusals in a real session."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_usage_error

from pytest_vlaeval.benchmark.model import resolve_benchmark
from pytest_vlaeval.distribute import placement
from pytest_vlaeval.distribute.policy_placement import Workers, place_policy
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.install.stacks import LEROBOT_HOLDS
from pytest_vlaeval.lerobot.checkpoint import LeRobotCheckpoint
from pytest_vlaeval.policy.loading import parse_local_policy
from pytest_vlaeval.policy.sources import Given

CHECKPOINT = "lerobot:/ckpt"
BESIDE_LINE = "vlaeval: lerobot:/ckpt runs beside the env in the lerobot interpreter"


def no_gpu() -> bool:
    return False


def gpu() -> bool:
    return True


def not_asked() -> bool:
    raise AssertionError("whether a GPU is visible decides nothing here")


TWO = Workers(2)


def place(benchmark: str, asked: str = "auto", workers: Workers = TWO, gpu_visible=no_gpu, **kwargs):
    bench = resolve_benchmark(benchmark)[0]
    checkpoint = LeRobotCheckpoint.parse(CHECKPOINT, Given(benchmark=bench))
    return place_policy(checkpoint, bench, asked, workers, gpu_visible, **kwargs)


@pytest.mark.parametrize("benchmark", ["pusht", "metaworld", "aloha", "lerobot-libero"])
def test_a_checkpoint_runs_beside_the_env_where_its_interpreter_holds_the_benchmark(benchmark: str) -> None:
    placed = place(benchmark)
    assert (placed.served, placed.interpreter) == (False, "lerobot")
    assert placed.line == (
        f"{BESIDE_LINE} (2 workers, a copy each); --vla-policy-placement=served serves it from one process instead"
    )


def test_lerobots_interpreter_holds_what_its_install_puts_there() -> None:
    """The stacks a checkpoint runs beside are the ones ``vlaeval install lerobot`` pins (and its own)."""
    assert set(LeRobotCheckpoint.holds_stacks) == {"lerobot", *LEROBOT_HOLDS}
    assert resolve_benchmark("lerobot-libero")[0].stack == "lerobot"


def test_a_serial_session_gets_one_worker_beside_it() -> None:
    placed = place("pusht", workers=Workers(0), gpu_visible=not_asked)
    assert not placed.served and placed.line is not None and "(1 worker, a copy each)" in placed.line


def test_a_benchmark_its_interpreter_does_not_hold_is_served() -> None:
    placed = place("libero", gpu_visible=not_asked)
    assert (placed.served, placed.interpreter) == (True, None)
    assert placed.line == (
        "vlaeval: lerobot:/ckpt is served from one process in the lerobot interpreter "
        "(it does not hold LIBERO's stack, where the workers run)"
    )
    with pytest.raises(SpecError, match="the lerobot interpreter, which does not hold LIBERO's stack"):
        place("libero", "beside")


@pytest.mark.parametrize(
    ("workers", "gpu_visible", "why"),
    [
        (Workers(2, remote=True), not_asked, "workers on other hosts"),
        (Workers(4), gpu, "a GPU is visible: one copy on it for the 4 workers"),
    ],
)
def test_remote_workers_and_a_gpu_shared_by_several_are_served_unless_asked(workers, gpu_visible, why) -> None:
    placed = place("pusht", workers=workers, gpu_visible=gpu_visible)
    assert placed.served
    assert placed.line == (
        f"vlaeval: lerobot:/ckpt is served from one process in the lerobot interpreter ({why}); "
        "--vla-policy-placement=beside runs it in each worker instead"
    )
    beside = place("pusht", "beside", workers=workers, gpu_visible=not_asked)
    assert not beside.served and beside.line == f"{BESIDE_LINE} ({max(workers.count, 1)} workers, a copy each)"


@pytest.mark.parametrize("workers", [Workers(1), Workers(0), Workers(4, gpus_placed=True)])
def test_a_gpu_runs_beside_one_worker_or_workers_given_their_gpus(workers: Workers) -> None:
    assert not place("pusht", workers=workers, gpu_visible=gpu if workers.count > 1 else not_asked).served


def test_served_is_asked_for() -> None:
    placed = place("pusht", "served", gpu_visible=not_asked)
    assert placed.served and placed.line is not None and placed.line.endswith("(--vla-policy-placement=served)")


def test_the_users_own_server_is_served_and_never_beside() -> None:
    assert place("pusht", serve_given=True, gpu_visible=not_asked).served
    with pytest.raises(SpecError, match="--vla-serve and --vla-serve-python serve it from one process"):
        place("pusht", "beside", serve_given=True)


def test_a_policy_of_the_workers_own_interpreter_has_no_placement() -> None:
    bench = resolve_benchmark("pusht")[0]
    placed = place_policy(parse_local_policy("random"), bench, "auto", Workers(2), not_asked)
    assert (placed.served, placed.interpreter, placed.line) == (False, None, None)
    with pytest.raises(SpecError, match="--policy random runs in the workers' interpreter"):
        place_policy(parse_local_policy("random"), bench, "served", Workers(2), not_asked)


@pytest.mark.parametrize(
    ("environ", "visible"),
    [({"CUDA_VISIBLE_DEVICES": ""}, False), ({"CUDA_VISIBLE_DEVICES": "-1"}, False), ({}, True)],
)
def test_a_gpu_is_visible_unless_cuda_visible_devices_hides_them(environ, visible, monkeypatch, tmp_path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert placement.gpu_visible(environ) is visible
    smi.unlink()
    assert placement.gpu_visible({}) is False, "no nvidia-smi: no driver, no GPU"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--policy=random", "--vla-policy-placement=served"), "--policy random runs in the workers' interpreter"),
        (("--vla-serve=random", "--vla-policy-placement=beside"), "--vla-serve and --vla-serve-python serve it"),
    ],
)
def test_a_placement_that_cannot_be_is_one_line_before_any_episode(fake: pytest.Pytester, args, expected) -> None:
    result = fake.runpytest("--benchmark=fake.yaml:short", "-p", "no:cacheprovider", *args)
    assert_one_line_usage_error(result, expected)
