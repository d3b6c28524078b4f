"""Real Push-T episodes (gym-pusht, pure Python): a few seconds each, so they run in the default suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import episode_records, read_json


def test_pusht_episodes_run_to_the_protocol(tmp_path: Path) -> None:
    """LeRobot's protocol: seeds 1000 + i, 300 steps, a 2-dim absolute action; the zero policy (the
    pusher parked in a corner) never succeeds, and the same seeds give the same episodes under -n 2."""
    args = ["--benchmark=pusht", "--episodes=2", "--policy=zero", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    runs = {}
    for name, extra in (("serial", []), ("parallel", ["-n", "2"])):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *args, *extra, f"--vla-results={name}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # failed episodes, no error
        (run_dir,) = (tmp_path / name).iterdir()
        runs[name] = episode_records(run_dir)
    result = read_json(run_dir / "PushT-v0.json")
    assert result["episode_seeds"] == [1000, 1001] and result["start_seed"] == 1000
    assert result["successes"] == [False, False] and result["episode_lengths"] == [300, 300]
    assert result["action_chunk_size"] == 1 and result["split"] == "pusht"

    def outcome(records: dict) -> dict:
        return {key: (r["success"], r["episode_return"], r["length"]) for key, r in records.items()}

    assert outcome(runs["serial"]) == outcome(runs["parallel"])
    assert {r["render_backend"] for r in runs["serial"].values()} == {"pygame"}
