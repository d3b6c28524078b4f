"""The docs: a strict MkDocs build, the generated options page, every code block that is a
command or a Python snippet either run here or marked ``title="not run"`` (see docs/contributing.md),
and every file and module the docs and the package's docstrings name there to be found."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_vlaeval"
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


FOREIGN = {
    "src/lerobot/": "LeRobot's source tree",
    "lerobot_eval.py": "LeRobot's evaluation script, lerobot-eval",
    "sapien_env.py": "ManiSkill's base env",
}
"""Other projects' files the docs and docstrings name: a path prefix or a bare name, and whose."""

FILE = re.compile(r"[\w./<>*-]*\w\.py\b")
"""A file named in code: ``name.py``, ``folder/name.py``, ``<protocol>_handler.py`` (a placeholder)."""
MODULE = re.compile(r"pytest_vlaeval(?:\.\w+)+(?::\w+)?")
"""A module of the package, maybe with one of its names: ``pytest_vlaeval.envs.mikasa:make_env``."""


def _our_file_names() -> set[str]:
    """The names of this repository's Python files, and of the files the docs' blocks write."""
    names = {path.name for path in ROOT.glob("*.py")}
    names |= {path.name for folder in (PACKAGE, ROOT / "tests", ROOT / "scripts") for path in folder.rglob("*.py")}
    return names | {block.title for page in PAGES for block in blocks(page) if block.title}


def file_exists(ref: str, folders: Sequence[Path], names: set[str]) -> bool:
    """``ref`` is a file of ours, a bare name anywhere (``names``) or a path under one of ``folders``,
    or another project's in ``FOREIGN``."""
    if any(ref == foreign or ref.startswith(foreign) for foreign in FOREIGN):
        return True
    pattern = re.sub(r"<[^>]*>", "*", ref)
    if "/" not in pattern:
        return any(Path(name).match(pattern) for name in names)
    return any(next(folder.glob(pattern), None) is not None for folder in folders)


def _defined_names(path: Path) -> set[str]:
    """The names a module defines or imports at its top level."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
    return names


def module_exists(ref: str) -> bool:
    """``pytest_vlaeval.a.b`` is a module of the package, and a name after it (``.Name``, ``:name``)
    one that module defines."""
    parts = re.split(r"[.:]", ref)[1:]
    for end in range(len(parts), -1, -1):
        base = PACKAGE.joinpath(*parts[:end])
        module = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
        if module is not None:
            return end == len(parts) or parts[end] in _defined_names(module)
    return False


def _prose(page: Path) -> Iterator[tuple[int, str]]:
    """The page's lines outside fenced blocks (their code is run, above), without the old names of a
    table headed ``| Before |`` (names.md: where a module went)."""
    fence, old_names = "", False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if fence:
            fence = "" if stripped == fence else fence
            continue
        opening = re.match(r"(`{3,})", stripped)
        if opening:
            fence = opening.group(1)
            continue
        old_names = stripped.startswith("| Before |") or (old_names and stripped.startswith("|"))
        yield number, "|".join(line.split("|")[2:]) if old_names else line


def missing_names(where: str, lines: Iterator[tuple[int, str]], folders: Sequence[Path], names: set[str]) -> list[str]:
    """``where:line: name`` for each file or module named in code (``...``) that is not there."""
    missing = []
    for number, line in lines:
        for span in re.findall(r"`+([^`]+)`+", line):
            if 'title="' in span:
                continue  # a block's title shown as syntax, not a file of this repository
            found = [ref for ref in FILE.findall(span) if not file_exists(ref, folders, names)]
            found += [ref for ref in MODULE.findall(span) if not module_exists(ref)]
            missing += [f"{where}:{number}: {ref}" for ref in found]
    return missing


def test_every_file_and_module_a_page_names_exists() -> None:
    """A module moved or renamed leaves no page naming its old file (the architecture page named
    ``engine.py`` long after it had become ``policy/batched.py``)."""
    names = _our_file_names()
    missing = [
        line
        for page in PAGES
        for line in missing_names(page.relative_to(ROOT).as_posix(), _prose(page), (ROOT, PACKAGE), names)
    ]
    assert not missing, "rename these in the pages (or add another project's file to FOREIGN):\n" + "\n".join(missing)


def test_every_file_and_module_a_docstring_names_exists() -> None:
    """The package's docstrings and comments name files relative to their own folder or above it."""
    names = _our_file_names()
    missing = []
    for source in sorted(PACKAGE.rglob("*.py")):
        lines = enumerate(source.read_text(encoding="utf-8").splitlines(), 1)
        folders = [source.parent, *(p for p in source.parent.parents if p == ROOT or ROOT in p.parents)]
        missing += missing_names(source.relative_to(ROOT).as_posix(), lines, folders, names)
    assert not missing, "rename these in the docstrings (or add another project's file to FOREIGN):\n" + "\n".join(
        missing
    )


def test_a_stale_name_is_caught() -> None:
    """The check can fail: a removed module, a module under another folder, a name a module does not
    define, and an old name outside a ``Before`` column."""
    names = _our_file_names()
    lines = [
        (1, "- `engine.py`, `batcher.py`: the policy thread"),
        (2, "see `install/lerobot_libero.py` and `envs/pusht.py`"),
        (3, "`pytest_vlaeval.envs.mikasa:make_env` and `pytest_vlaeval.episodes.nodeid.lockstep_blocks`"),
        (4, "`serving/server/<name>_handler.py`, `src/lerobot/envs/configs.py`, `lerobot_eval.py:559`"),
    ]
    assert missing_names("page", iter(lines), (ROOT, PACKAGE), names) == [
        "page:1: engine.py",
        "page:2: install/lerobot_libero.py",
        "page:3: pytest_vlaeval.episodes.nodeid.lockstep_blocks",
    ]


TRUST_HEADING = "## What a policy, a benchmark file or a received run can do to you"
"""operations.md's section on each input the tool reads: every claim there names the tests that hold it."""
NODE_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(?:\[[^`\]]*\])?`")
"""A test named in a page: ``tests/path.py::test_name``, maybe with a parameter id ``[case]``."""


def trust_section() -> str:
    """The section's text, from its heading to the next heading of its level."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    return text[text.index(TRUST_HEADING) + len(TRUST_HEADING) :].split("\n## ", 1)[0]


def bullets(text: str) -> list[str]:
    """The list items of ``text``, each with its continuation lines."""
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line)
        elif items and line.startswith("  ") and not items[-1].endswith("\n"):
            items[-1] += " " + line.strip()
        elif items:
            items[-1] += "\n"  # a blank line or a paragraph ends the item
    return [item.strip() for item in items]


@functools.cache
def _test_functions(path: Path) -> set[str]:
    """The test functions a test file defines, at its top level or in its classes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
    }


def missing_tests(text: str) -> list[str]:
    """``file::name`` for each test ``text`` names that its file (or the file itself) lacks; a
    parametrized test's case is checked by its function's name."""
    missing = []
    for file, name in dict.fromkeys(NODE_ID.findall(text)):
        path = ROOT / file
        if not path.is_file() or name not in _test_functions(path):
            missing.append(f"{file}::{name}")
    return missing


def test_every_claim_of_the_trust_section_names_tests_that_exist() -> None:
    """A test renamed or moved leaves no claim of what an input cannot do pointing at nothing, and
    no claim goes without the tests that hold it."""
    section = trust_section()
    claims = bullets(section)
    assert len(claims) > 50, "the section's claims are its bullets"
    unheld = [claim[:100] for claim in claims if "(held by " not in claim or not NODE_ID.search(claim)]
    assert not unheld, "name the tests that hold these claims: (held by `tests/path.py::test_name`)\n" + "\n".join(
        unheld
    )
    missing = missing_tests(section)
    assert not missing, "operations.md names tests that are not there (renamed or moved?):\n" + "\n".join(missing)


def test_a_test_that_is_not_there_is_caught() -> None:
    """The check can fail: a test renamed, a file moved, a case of a test that is not there."""
    text = (
        "- A claim. (held by `tests/test_docs.py::test_a_test_that_is_not_there_is_caught`,\n"
        "  `tests/test_docs.py::test_a_name_no_test_has`, `tests/policy/test_lerobot_policy.py::test_token_auth`,\n"
        "  `tests/serving/test_serving.py::test_token_auth[a case]`, `tests/serving/test_serving.py::test_gone[x]`)\n"
        "- Another claim, held by nothing.\n"
    )
    assert missing_tests(text) == [
        "tests/test_docs.py::test_a_name_no_test_has",
        "tests/policy/test_lerobot_policy.py::test_token_auth",
        "tests/serving/test_serving.py::test_gone",
    ]
    assert [claim for claim in bullets(text) if "(held by " not in claim] == ["- Another claim, held by nothing."]
