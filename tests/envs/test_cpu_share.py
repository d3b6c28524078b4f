"""Each xdist worker's share of the cores for the math libraries' thread pools (``cpu_share``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from helpers import environ_restored

from pytest_vlaeval.envs import cpu_share


@pytest.fixture(autouse=True)
def _thread_variables_restored() -> Iterator[None]:
    """``share_cpu_threads`` sets these with ``os.environ.setdefault``; later tests (the real sessions
    that check each worker's share) must not inherit a count set here."""
    with environ_restored(*cpu_share.THREAD_VARIABLES, cpu_share.IDLE_THREADS[0]):
        yield


@pytest.fixture
def sixteen_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker on 16 cores with none of the pools' variables set (nor the idle-thread policy)."""
    monkeypatch.setattr(cpu_share.os, "sched_getaffinity", lambda pid: set(range(16)))
    unset_thread_variables(monkeypatch)


def unset_thread_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*cpu_share.THREAD_VARIABLES, cpu_share.IDLE_THREADS[0]):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("workers", "threads"), [(None, None), ("1", None), ("4", "4"), ("32", "1")])
def test_a_worker_sizes_the_math_libraries_pools_to_its_share(
    workers: str | None, threads: str | None, monkeypatch: pytest.MonkeyPatch, sixteen_cores: None
) -> None:
    """N xdist workers on 16 cores: OMP, MKL and OpenBLAS get 16 / N threads each; serial keeps their defaults."""
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    monkeypatch.setitem(cpu_share.sys.modules, "torch", None)  # not imported yet
    cpu_share.share_cpu_threads()
    assert [os.environ.get(name) for name in cpu_share.THREAD_VARIABLES] == [threads] * 3
    if threads:
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        cpu_share.share_cpu_threads()
        assert os.environ["OMP_NUM_THREADS"] == "3", "the user's own setting wins"


def test_a_worker_with_a_torch_policy_beside_the_env_leaves_torchs_pool_alone(
    monkeypatch: pytest.MonkeyPatch, sixteen_cores: None
) -> None:
    """A convolution's last bits depend on torch's thread count: beside the env it keeps torch's
    default (lerobot-eval's, a policy server's) whatever ``-n``; its idle threads sleep instead."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    monkeypatch.setitem(cpu_share.sys.modules, "torch", None)
    cpu_share.share_cpu_threads(policy_beside=True)
    assert [os.environ.get(name) for name in cpu_share.THREAD_VARIABLES] == [None, None, "4"]
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_torchs_pool_sized_by_the_user_is_left_alone(
    variable: str, monkeypatch: pytest.MonkeyPatch, sixteen_cores: None
) -> None:
    """Torch already imported (a conftest): a worker resizes its pool to the share, unless the user
    sized it by either variable torch reads (``cores.torch_pool_sized_by_user``, the rule a policy
    beside the env follows too)."""
    sized: list[int] = []
    fake_torch = type("Torch", (), {"set_num_threads": staticmethod(sized.append)})
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    monkeypatch.setitem(cpu_share.sys.modules, "torch", fake_torch)
    cpu_share.share_cpu_threads()
    assert sized == [4]
    unset_thread_variables(monkeypatch)
    monkeypatch.setenv(variable, "3")
    cpu_share.share_cpu_threads()
    assert sized == [4], f"{variable}=3 is the user's: torch's pool stays as they sized it"
