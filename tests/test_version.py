"""The package's version and the digest of its files, which tells apart two copies of one version."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import make_interpreter_with_own_copy, package_copy

from pytest_vlaeval.version import package_digest


def digest_in(python: Path) -> str:
    """The digest that interpreter computes (run outside this clone, which ``-c`` would import)."""
    script = "from pytest_vlaeval.version import package_digest; print(package_digest())"
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True, cwd=python.parent)
    return done.stdout.strip()


def test_a_wheels_copy_digests_as_this_editable_install_and_one_changed_byte_does_not(tmp_path: Path) -> None:
    """Laid out as a wheel installs it (the benchmark files inside the package folder), with caches
    and an editor's hidden file beside the sources: the same digest. Then one byte of one file."""
    python = make_interpreter_with_own_copy(tmp_path / "copy")
    package = package_copy(tmp_path / "copy")
    (package / "__pycache__").mkdir(exist_ok=True)
    (package / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"\0")
    (package / ".spec.py.swp").write_bytes(b"\0")
    assert digest_in(python) == package_digest()
    spec = package / "benchmarks" / "pusht.yaml"
    spec.write_bytes(spec.read_bytes() + b" ")
    assert digest_in(python) != package_digest()
