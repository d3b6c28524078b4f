"""The sequential gate on real MIKASA-Robo-VLA episodes: a session under ``-n 2`` that stops
after a couple of blocks against a baseline built to regress (every episode a success)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import read_json

from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED

pytestmark = [pytest.mark.mikasa, pytest.mark.long, pytest.mark.minutes(1.5)]

TASKS = ("RememberColor3-VLA-v0", "FindImposterColor3-VLA-v0")  # 25 steps each
START_SEED = 4242424242
EPISODES = 16
BLOCK = 4


def test_real_session_stops_early_on_a_regression(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    seeds = [START_SEED + i for i in range(EPISODES)]
    for env_id in TASKS:  # the reference runner's schema, every episode solved
        data = {"env_id": env_id, "successes": [True] * EPISODES, "sr": 1.0, "episode_seeds": seeds}
        (baseline / f"{env_id}.json").write_text(json.dumps(data))
    args = [
        "--benchmark=short",
        f"--vla-tasks={','.join(TASKS)}",
        f"--episodes={EPISODES}",
        "--policy=zero",
        "--vla-sequential",
        f"--vla-block={BLOCK}",
        f"--vla-baseline={baseline}",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--rootdir", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    verdict = [line for line in proc.stdout.splitlines() if line.startswith("vlaeval gate:")]
    planned = [line for line in proc.stdout.splitlines() if line.startswith("vlaeval gate plan:")]
    assert proc.returncode == EXIT_GATE_FAILED, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    summary = read_json(run_dir / "summary.json")
    gate = summary["gate"]
    print(*planned, verdict[0], f"| episodes run: {summary['n_completed']} of {summary['n_expected']}", sep="\n")
    assert planned[0].startswith("vlaeval gate plan: betting confidence sequence (2 tasks < 10)")
    assert verdict[0].startswith("vlaeval gate: FAIL: split SR drop") and "stopped early" in verdict[0]
    assert "method: sequential betting confidence sequence" in verdict[0]
    assert gate["stopped_early"] and gate["looks"] < EPISODES // BLOCK
    assert summary["n_errors"] == 0 and summary["n_completed"] + gate["episodes_saved"] == summary["n_expected"]
    assert gate["complete_with"].endswith("--vla-resume")
