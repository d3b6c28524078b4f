"""Data files a benchmark's wheel lacks (``assets``): installed from a folder or the pinned URL,
verified, never overwritten silently."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pytest_vlaeval.envs import assets


@pytest.fixture
def package_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A fake installed package and the spec of a data file it lacks."""
    package = tmp_path / "site" / "fakepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    payload = b"mesh bytes"
    source = tmp_path / "source"
    source.mkdir()
    (source / "bulb.glb").write_bytes(payload)
    return {
        "kind": "package_file",
        "package": "fakepkg",
        "path": "objects/bulb.glb",
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "url": (source / "bulb.glb").as_uri(),
        "source": source,
    }


def test_asset_install_from_a_folder_verifies_and_is_idempotent(package_file: dict) -> None:
    source = package_file.pop("source")
    assert "is missing from" in assets.problem("bulb", package_file)
    assert "installed" in assets.install_package_file("bulb", package_file, source_dir=source)
    assert assets.problem("bulb", package_file) is None
    assert "already installed" in assets.install_package_file("bulb", package_file, source_dir=source)


def test_asset_install_falls_back_to_the_pinned_url(package_file: dict, tmp_path: Path) -> None:
    package_file.pop("source")
    message = assets.install_package_file("bulb", package_file, source_dir=tmp_path / "empty")
    assert package_file["url"] in message and assets.problem("bulb", package_file) is None


def test_asset_install_rejects_wrong_bytes_and_never_overwrites_silently(package_file: dict) -> None:
    source = package_file.pop("source")
    target = assets.package_file_path(package_file)
    (source / "bulb.glb").write_bytes(b"tampered!!")
    with pytest.raises(RuntimeError, match="expected 10 bytes"):
        assets.install_package_file("bulb", package_file, source_dir=source)
    assert not target.exists()
    target.parent.mkdir(parents=True)
    target.write_bytes(b"other file")
    assert "does not match its pinned SHA-256" in assets.problem("bulb", package_file)
    with pytest.raises(RuntimeError, match="exists with different content; pass --force"):
        assets.install_package_file("bulb", package_file, source_dir=source)
