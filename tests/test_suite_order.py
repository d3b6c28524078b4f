"""The suite's own order: files marked ``minutes`` are collected first, longest first, so that
``scripts/test.sh`` (``--no-loadscope-reorder``: xdist hands files out in collection order) never
starts a file of minutes last."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = (  # in path order: unmarked, minutes(2), minutes(6)
    "tests/envs/test_pusht.py",
    "tests/lerobot/test_lerobot_diffusion.py",
    "tests/lerobot/test_lerobot_parity_metaworld.py",
)


def test_the_longest_marked_file_is_collected_first_and_unmarked_files_last() -> None:
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--long",
            "-m",
            "long",
            *FILES,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    files = [line.split("::")[0] for line in collected.stdout.splitlines() if "::" in line]
    in_order = [name for index, name in enumerate(files) if index == 0 or files[index - 1] != name]
    assert in_order == list(reversed(FILES)), files


def test_scripts_test_sh_hands_files_out_in_collection_order() -> None:
    command = (ROOT / "scripts" / "test.sh").read_text().splitlines()[-1]
    assert "--dist loadfile --no-loadscope-reorder" in command, command
