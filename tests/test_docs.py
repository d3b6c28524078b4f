"""The docs: a strict MkDocs build, the generated options page, and every code block that is a
command or a Python snippet either run here or marked ``title="not run"`` (see docs/contributing.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = ("console", "bash", "sh", "shell", "python", "py")
NOT_RUN = 'title="not run"'


@dataclass(frozen=True)
class Block:
    language: str
    title: str | None
    text: str
    line: int


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, outermost only (a fence closes with as many backticks as opened it)."""
    found, fence, start, header = [], "", 0, ""
    lines = page.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not fence:
            opening = re.match(r"(`{3,})(.*)$", stripped)
            if opening:
                fence, start, header = opening.group(1), number, opening.group(2).strip()
        elif stripped == fence:
            language = header.split()[0] if header else ""
            title = re.search(r'title="([^"]*)"', header)
            found.append(Block(language, title and title.group(1), "\n".join(lines[start : number - 1]) + "\n", start))
            fence = ""
    return found


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.title != "not run" and (b.language in CODE or b.title)]


def run_page(page: Path, folder: Path) -> None:
    """Write the page's file blocks and run its snippets, in order, in ``folder``."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(folder),
    }
    for block in runnable(page):
        where = f"{page.name}:{block.line}"
        if block.title:
            (folder / block.title).write_text(block.text, encoding="utf-8")
            continue
        command = (
            [sys.executable, "-c", block.text] if block.language in ("python", "py") else ["bash", "-ec", block.text]
        )
        result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{where} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"


def test_every_code_block_is_a_known_kind_with_a_language() -> None:
    """A bare fence cannot say whether it is a command: every block names its language."""
    for page in PAGES:
        for block in blocks(page):
            assert block.language, f"{page.name}:{block.line}: a code block without a language"


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=lambda p: p.name)
def test_the_runnable_blocks_of_a_page_run(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)


def test_the_own_benchmark_example_evaluates_to_full_success(tmp_path: Path) -> None:
    run_page(ROOT / "docs" / "own-benchmark.md", tmp_path)
    summary = json.loads((tmp_path / "results" / "reach-all-reach_policy_GoToTarget" / "summary.json").read_text())
    assert summary["sr_split"] == 1.0 and summary["n_completed"] == 8
    task = json.loads((tmp_path / "results" / "reach-all-reach_policy_GoToTarget" / "Reach-v0.json").read_text())
    assert task["control_mode"] == "velocity" and 0 <= task["mean_closest"] < 0.05  # the adapter's extra field


def test_the_readme_policy_honours_the_contract(tmp_path: Path) -> None:
    run_page(ROOT / "README.md", tmp_path)
    probe = "from my_policy import MyPolicy\nfrom pytest_vlaeval.policy import as_action_chunk\n"
    probe += "p = MyPolicy(); p.reset(None); print(as_action_chunk(p.act({}), 7, p.chunk_size).shape)"
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "(8, 7)"


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    """A broken link, a missing anchor or a page left out of the navigation fails the build."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_options_page_is_current() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/options_page.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_every_option_pytest_lists_is_on_the_options_page() -> None:
    """Read from ``pytest --help``, independently of the page's generator."""
    help_text = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ours = re.findall(r"^  (--(?:vla-[a-z-]+|benchmark|policy|episodes))\b", help_text, re.M)
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert len(ours) > 20
    missing = [option for option in ours if f"`{option}" not in page]
    assert not missing, f"options missing from docs/options.md: {missing}"
    for ini in re.findall(r"^  (vla_[a-z_]+) \(", help_text, re.M):
        assert f"`{ini}`" in page
