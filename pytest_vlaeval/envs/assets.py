"""Data files a benchmark needs beyond its wheel: checking them per task, and installing them.

Two kinds, declared in the benchmark file's ``assets`` block:

``package_file``
    A file that belongs inside an installed package but is not in its wheel (MIKASA's lamp
    mesh). Installed by ``vlaeval install-assets`` (and ``vlaeval install``) from ``$VLAEVAL_ASSET_DIR``
    or its pinned URL, verified by size and SHA-256, never overwriting a different file unless
    forced.
``external``
    Data another tool fetches (MIKASA: ManiSkill's YCB pack). Only checked, by the benchmark's own
    function ``check: module:function``, called with the asset's name and spec; it returns None
    or one actionable line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from pytest_vlaeval.importing import load_reference, split_reference

ASSET_DIR_ENV = "VLAEVAL_ASSET_DIR"
INSTALL_COMMAND = "vlaeval install-assets"


def problem(name: str, spec: dict[str, Any]) -> str | None:
    """Why asset ``name`` is unusable (one actionable line), or None when it is in place."""
    if spec["kind"] == "package_file":
        path = package_file_path(spec)
        if path is None:
            return f"asset {name!r} belongs in package {spec['package']!r}, which is not installed"
        if not path.is_file():
            return (
                f"asset {name!r} ({Path(spec['path']).name}) is missing from {path}; "
                f"run `{INSTALL_COMMAND}` (from ${ASSET_DIR_ENV} or its pinned URL)"
            )
        if path.stat().st_size != spec["size"] or sha256(path) != spec["sha256"]:
            return f"asset {name!r} at {path} does not match its pinned SHA-256; run `{INSTALL_COMMAND} --force`"
        return None
    if spec["kind"] == "external":
        reference = split_reference(str(spec.get("check", "")))
        if reference is None:
            return f"asset {name!r} of kind external needs check: module:function (what finds it)"
        return load_reference(*reference)(name, spec)
    return f"asset {name!r} has unknown kind {spec['kind']!r}"


def package_file_path(spec: dict[str, Any]) -> Path | None:
    found = importlib.util.find_spec(spec["package"])
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations))) / spec["path"]


def install_package_file(name: str, spec: dict[str, Any], *, source_dir: Path | None, force: bool = False) -> str:
    """Put a ``package_file`` asset in place; returns what was done, raises on any mismatch."""
    target = package_file_path(spec)
    if target is None:
        raise RuntimeError(f"asset {name!r}: package {spec['package']!r} is not installed")
    if target.is_file() and sha256(target) == spec["sha256"]:
        return f"{name}: already installed at {target}"
    if target.exists() and not force:
        raise RuntimeError(f"asset {name!r}: {target} exists with different content; pass --force to replace it")
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / Path(spec["path"]).name
        origin = _fetch(spec, source_dir, staged)
        size, digest = staged.stat().st_size, sha256(staged)
        if size != spec["size"] or digest != spec["sha256"]:
            raise RuntimeError(
                f"asset {name!r} from {origin}: got {size} bytes sha256 {digest}, expected {spec['size']} bytes {spec['sha256']}"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(staged, target)
    return f"{name}: installed {target} from {origin} ({spec.get('license', 'see benchmark file')})"


def _fetch(spec: dict[str, Any], source_dir: Path | None, dest: Path) -> str:
    filename = Path(spec["path"]).name
    if source_dir is not None:
        candidate = source_dir / filename
        if candidate.is_file():
            shutil.copyfile(candidate, dest)
            return str(candidate)
    if not spec.get("url"):
        raise RuntimeError(f"{filename} is not in {source_dir} and the benchmark file gives no URL")
    with urllib.request.urlopen(spec["url"], timeout=60) as response, dest.open("wb") as out:
        shutil.copyfileobj(response, out)
    return spec["url"]


def default_source_dir() -> Path | None:
    value = os.environ.get(ASSET_DIR_ENV)
    return Path(value) if value else None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
