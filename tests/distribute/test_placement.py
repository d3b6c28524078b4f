"""``--vla-placement``: the parser, GPU discovery, and each worker's CUDA_VISIBLE_DEVICES in real sessions."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import types

import pytest
from helpers import episode_records, run_dir

from pytest_vlaeval.distribute import placement
from pytest_vlaeval.errors import SpecError


def no_gpu_query() -> int:
    raise AssertionError("the GPU count is asked only for 'all'")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0", ["0"]),
        ("3", ["3"]),
        ("0-3", ["0", "1", "2", "3"]),
        (" 0 - 1 ", ["0", "1"]),
        ("0-1:0-3", ["0", "0", "1", "1"]),  # two processes per GPU
        ("0:0-2", ["0", "0", "0"]),
        ("0-3:0-1", ["0,1", "2,3"]),  # two GPUs per process
        ("0-3:0", ["0,1,2,3"]),
        ("0-1,2-3:2-5", ["0", "1", "2", "2", "3", "3"]),  # a segment without processes: one per GPU
        ("4-5:0-1,0:2-3", ["4", "5", "0", "0"]),
        ("6,2", ["6", "2"]),
        ("0,2-3:1-4", ["0", "2", "2", "3", "3"]),
    ],
)
def test_valid_placements(spec: str, expected: list[str]) -> None:
    assert placement.visible_devices(spec, {}, gpu_count=no_gpu_query) == expected


@pytest.mark.parametrize(
    ("spec", "count", "expected"),
    [
        ("all", 4, ["0", "1", "2", "3"]),
        ("all:0-7", 4, ["0", "0", "1", "1", "2", "2", "3", "3"]),
        ("all:0-1", 4, ["0,1", "2,3"]),
        ("all:0", 3, ["0,1,2"]),
    ],
)
def test_all_uses_the_gpu_count(spec: str, count: int, expected: list[str]) -> None:
    assert placement.visible_devices(spec, {}, gpu_count=lambda: count) == expected


def test_indices_count_within_an_inherited_cuda_visible_devices() -> None:
    """A cluster scheduler's allocation is respected: index i is its i-th device."""
    environ = {"CUDA_VISIBLE_DEVICES": "4,6,GPU-a1b2"}
    assert placement.visible_devices("all", environ, gpu_count=no_gpu_query) == ["4", "6", "GPU-a1b2"]
    assert placement.visible_devices("1-2:0", environ, gpu_count=no_gpu_query) == ["6,GPU-a1b2"]
    with pytest.raises(SpecError, match=r"GPU 3 is not visible: CUDA_VISIBLE_DEVICES='4,6,GPU-a1b2' makes 3"):
        placement.visible_devices("2-3", environ, gpu_count=no_gpu_query)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "segment 1 is empty"),
        ("0,,1", "segment 2 is empty"),
        ("0-1,", "segment 2 is empty"),
        ("x", "segment 1 ('x'): 'x' is not an index, a range a-b or (for GPUs) all"),
        ("-1", "'-1' is not an index"),
        ("0-", "'0-' is not an index"),
        ("0-1-2", "'0-1-2' is not an index"),
        ("0:a", "segment 1 ('0:a'): 'a' is not an index"),
        ("0:0:1", "'0:1' is not an index"),
        ("0-3:all", "segment 1 ('0-3:all'): 'all' names GPUs, not processes"),
        ("3-1", "segment 1 ('3-1'): range '3-1' runs backwards"),
        ("0:1-0", "range '1-0' runs backwards"),
        ("0-1:1-2", "processes are numbered contiguously from 0, so this segment's processes start at 0, not 1"),
        (
            "0-1,2-3:3-4",
            "segment 2 ('2-3:3-4'): processes are numbered contiguously from 0, so this segment's processes start at 2, not 3",
        ),
        (
            "0-2:0-1",
            "segment 1 ('0-2:0-1'): 3 GPUs for 2 processes; one count must be an integer multiple of the other",
        ),
        ("0-1:0-2", "2 GPUs for 3 processes; one count must be an integer multiple"),
        ("0-1,1-2:2-3", "GPU 1 is in segment 1 and segment 2"),
    ],
)
def test_invalid_placements_say_which_rule_broke(spec: str, message: str) -> None:
    with pytest.raises(SpecError) as raised:
        placement.visible_devices(spec, {}, gpu_count=no_gpu_query)
    assert str(raised.value).startswith(f"--vla-placement {spec!r}: ") and message in str(raised.value)


def test_all_without_gpus_is_an_error() -> None:
    with pytest.raises(SpecError, match=r"'all' needs GPUs, and none is visible here"):
        placement.visible_devices("all", {}, gpu_count=lambda: 0)
    with pytest.raises(SpecError, match=r"'all' needs GPUs"):
        placement.visible_devices("all", {"CUDA_VISIBLE_DEVICES": ""}, gpu_count=no_gpu_query)


def test_gpu_count_from_nvidia_smi(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        textwrap.dedent(
            """\
            #!/bin/sh
            echo "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)"
            echo "  MIG 1g.10gb     Device  0: (UUID: MIG-2)"
            echo "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-3)"
            """
        )
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert placement.detect_gpu_count() == 2


def test_gpu_count_falls_back_to_torch(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(device_count=lambda: 3))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert placement.detect_gpu_count() == 3


ENV_SPY = textwrap.dedent(
    """
    import json, os
    import numpy as np

    class EnvSpy:
        '''Zero actions; logs which worker it runs in and the GPUs that worker was given.'''
        chunk_size = 1
        def reset(self, episode):
            with open(os.environ["ENV_SPY_LOG"], "a") as log:
                seen = [os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("CUDA_VISIBLE_DEVICES")]
                log.write(json.dumps(seen) + "\\n")
        def act(self, obs):
            return np.zeros(7)
    """
)


@pytest.fixture
def spy_log(fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    fake.makepyfile(envspy=ENV_SPY)
    log = fake.path / "env_spy.jsonl"
    monkeypatch.setenv("ENV_SPY_LOG", str(log))

    def devices_by_worker() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for line in log.read_text().splitlines():
            worker, devices = json.loads(line)
            found.setdefault(worker, set()).add(devices)
        return found

    return devices_by_worker


SESSION = ["--benchmark=fake.yaml:short", "--episodes=2", "--policy=envspy:EnvSpy", "-p", "no:cacheprovider"]


def test_each_worker_sees_its_gpus(fake: pytest.Pytester, spy_log, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = fake.runpytest_subprocess(*SESSION, "-n", "2", "--vla-placement=0-3:0-1")
    assert result.ret in (0, 1), result.stdout.str()
    assert spy_log() == {"gw0": {"0,1"}, "gw1": {"2,3"}}


def test_workers_come_from_the_placement_and_all_from_the_inherited_devices(
    fake: pytest.Pytester, spy_log, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    result = fake.runpytest_subprocess(*SESSION, "--vla-placement=all")  # no -n: one worker per process
    assert result.ret in (0, 1), result.stdout.str()
    assert spy_log() == {"gw0": {"5"}, "gw1": {"7"}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-n", "3", "--vla-placement=0-1"],
            "--vla-placement '0-1' places 2 worker(s) but -n/--tx starts 3; pass -n 2 or leave -n out",
        ),
        (["-n", "0", "--vla-placement=0"], "--vla-placement '0' places 1 worker(s) but -n/--tx starts 0"),
        (["-p", "no:xdist", "--vla-placement=0"], "places xdist workers, but pytest-xdist is disabled"),
        (["--vla-placement=0-1:0-2"], "2 GPUs for 3 processes"),
    ],
)
def test_placement_errors_are_one_line(fake: pytest.Pytester, args: list[str], message: str) -> None:
    result = fake.runpytest("--benchmark=fake.yaml:short", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and message in errors[0], result.errlines


@pytest.mark.torch
def test_each_worker_gets_its_share_of_the_cores_for_its_thread_pools(fake: pytest.Pytester) -> None:
    """Under -n 2 a worker's OpenMP and torch pools hold cores / 2 threads (not one per core each)."""
    env_share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    fake.runpytest_subprocess(
        "--benchmark=fake.yaml:short",
        "--episodes=2",
        "-n",
        "2",
        "--policy=spy_policies:ThreadsSeen",
        "-p",
        "no:cacheprovider",
    )
    configs = {json.dumps(r["model"]["config"], sort_keys=True) for r in episode_records(run_dir(fake)).values()}
    assert configs == {json.dumps({"omp": env_share, "torch_threads": int(env_share)}, sort_keys=True)}
