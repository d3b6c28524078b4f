"""Render backends (``render``, ``vulkan``): GPU or software Vulkan, lavapipe found and sized to a worker's
share of the cores, the user's own settings kept, and one actionable line when it is missing."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import assert_one_line_usage_error, environ_restored

from pytest_vlaeval.envs import render, vulkan


@pytest.fixture(autouse=True)
def _render_variables_restored() -> Iterator[None]:
    """``set_backend_env`` sets these with ``os.environ.setdefault``; later tests (real episodes on
    lavapipe among them) must not inherit a thread count or an ICD file set here."""
    with environ_restored("LP_NUM_THREADS", "VK_ICD_FILENAMES"):
        yield


def test_lavapipe_icd_is_found_by_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vulkan, "ICD_DIRS", (str(tmp_path / "none"), str(tmp_path)))
    assert vulkan.find_lavapipe_icd() is None
    (tmp_path / "lvp_icd.x86_64.json").write_text(json.dumps({"ICD": {}}))
    assert vulkan.find_lavapipe_icd() == str(tmp_path / "lvp_icd.x86_64.json")


@pytest.mark.parametrize(("workers", "threads"), [(None, "16"), ("1", "16"), ("4", "4"), ("16", "1"), ("32", "1")])
def test_software_render_threads_share_the_cores_among_workers(
    workers: str | None, threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of N xdist workers gets cores / N lavapipe threads, not a fixed count per process."""
    monkeypatch.setattr(vulkan.os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("LP_NUM_THREADS", raising=False)
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    vulkan.set_backend_env("cpu")
    assert os.environ["LP_NUM_THREADS"] == threads
    monkeypatch.setenv("LP_NUM_THREADS", "3")
    vulkan.set_backend_env("cpu")
    assert os.environ["LP_NUM_THREADS"] == "3", "the user's own setting wins"


@pytest.mark.torch
def test_render_backend_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")

    assert render.resolve_backend("cpu") == "cpu" and render.resolve_backend("gpu") == "gpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert render.resolve_backend("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert render.resolve_backend("auto") == "gpu"
    assert vulkan.make_kwargs("gpu") == {"sim_backend": "gpu", "render_backend": "gpu"}
    assert vulkan.make_kwargs("gpu-render") == {"sim_backend": "cpu", "render_backend": "gpu"}
    with pytest.raises(ValueError, match="valid: auto, gpu, gpu-render, cpu"):
        render.resolve_backend("vulkan")


def test_cpu_env_points_vulkan_at_lavapipe_but_respects_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vulkan, "ICD_DIRS", (str(tmp_path),))
    (tmp_path / "lvp_icd.json").write_text("{}")
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    vulkan.set_backend_env("cpu")
    assert vulkan.os.environ["VK_ICD_FILENAMES"] == str(tmp_path / "lvp_icd.json")
    monkeypatch.setenv("VK_ICD_FILENAMES", "/mine.json")
    vulkan.set_backend_env("cpu")
    assert vulkan.os.environ["VK_ICD_FILENAMES"] == "/mine.json"


def test_missing_software_vulkan_fails_fast_with_one_actionable_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vulkan, "ICD_DIRS", (str(tmp_path),))
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    problem = vulkan.check("cpu")
    assert problem.startswith("no software Vulkan driver (lavapipe ICD)") and "bookworm-backports" in problem
    assert "\n" not in problem


RENDER_CHECKS = {
    "loud_check": "print('a simulator stack says a lot on import\\n' * 5000)\nprint('no Vulkan device here')\nraise SystemExit(1)\n",
    "endless_check": "while True:\n    print('a simulator stack that never stops talking')\n",
}
"""Render checks (``env.preflight``) that fail: one after 200 KB of banners, past the 64 KiB an
interpreter's answer is read to, and one that prints without end."""


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("loud_check", "render backend check failed: no Vulkan device here"),
        ("endless_check", "render backend check failed: python -m endless_check wrote over 1 MiB and was stopped"),
    ],
)
def test_a_render_check_is_read_up_to_1_mib_and_stopped_past_it(
    fake: pytest.Pytester, module: str, expected: str
) -> None:
    """A check that loads a simulator stack may print long banners before its verdict: it is read up
    to 1 MiB a stream, and one that writes more is stopped; either way one line, before any episode."""
    fake.makepyfile(**{module: RENDER_CHECKS[module]})
    text = (
        (fake.path / "fake.yaml").read_text().replace("  action_dim: 7\n", f"  action_dim: 7\n  preflight: {module}\n")
    )
    fake.makefile(".yaml", checked=text)
    result = fake.runpytest("--benchmark=checked.yaml:short", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists()
