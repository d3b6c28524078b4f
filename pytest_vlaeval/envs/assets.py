"""Data files a benchmark needs beyond its wheel: checking them per task, and installing them.

Two kinds, declared in the benchmark file's ``assets`` block (``benchmark_file.Asset``):

``package_file``
    A file that belongs inside an installed package but is not in its wheel (MIKASA's lamp
    mesh). Installed by ``vlaeval install-assets`` (and ``vlaeval install``) from ``$VLAEVAL_ASSET_DIR``
    or its pinned https URL, verified by size and SHA-256, never overwriting a different file unless
    forced. The package is found without importing anything, and the file's place, links resolved,
    must be inside the package's folder: a benchmark file is data, and may come from anyone.
``package_archive``
    A folder that belongs inside an installed package, shipped apart as one zip archive
    (LIBERO-Plus's ``assets.zip``, 6 GB). Installed by ``vlaeval install-assets`` from a local copy
    only (``$VLAEVAL_ASSET_DIR`` or ``--from``: never downloaded), once its size and SHA-256 match:
    the archive's folder ``member`` is extracted beside its place, every entry checked to stay
    inside it (no absolute or ``..`` names, no links), then moved into place whole, with a stamp
    holding the archive's SHA-256, which the check reads. A link standing where it goes (the
    stand-in a stack's set-up leaves) is replaced; a folder without the stamp only with ``--force``.
``external``
    Data another tool fetches (MIKASA: ManiSkill's YCB pack). Only checked, by the benchmark's own
    function ``check: module:function`` of the env factory's package, called with the asset's name
    and description; it returns None or one actionable line. That is code the file names, so only
    a session, which runs the file's env factory anyway, calls it (and ``vlaeval install`` for a
    built-in benchmark, whose code is this package's); ``unchecked`` says so everywhere else.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from importlib.machinery import PathFinder
from pathlib import Path, PurePosixPath

from pytest_vlaeval.benchmark.file import Asset, ExternalAsset, PackageArchiveAsset, PackageFileAsset
from pytest_vlaeval.benchmark.model import Benchmark, builtin_benchmarks
from pytest_vlaeval.importing import load_reference, split_reference

ASSET_DIR_ENV = "VLAEVAL_ASSET_DIR"
INSTALL_COMMAND = "vlaeval install-assets"
ARCHIVE_STAMP = ".vlaeval-archive-sha256"
"""The file in an extracted archive's folder holding the archive's SHA-256: written last, read by
the check, so a folder half extracted, or from another archive, is never taken for it."""


class AssetProblem(RuntimeError):
    """An asset that cannot be checked or installed where it is described; one line."""


def problem(name: str, asset: Asset, benchmark: str = "mikasa", search: Sequence[Path] | None = None) -> str | None:
    """Why asset ``name`` is unusable (one actionable line), or None when it is in place. Calls an
    external asset's check: only for a caller that runs the benchmark's env factory (module docstring).
    ``benchmark``: what ``vlaeval install-assets --benchmark`` takes to install it; ``search``:
    another interpreter's ``site-packages``, where its package is (``package_folder``)."""
    try:
        if isinstance(asset, ExternalAsset):
            return _check(name, asset)(name, asset)
        if isinstance(asset, PackageArchiveAsset):
            return archive_problem(name, asset, benchmark, search)
        path = package_file_path(name, asset, search)
    except AssetProblem as exc:
        return str(exc)
    if not path.is_file():
        return (
            f"asset {name!r} ({Path(asset.path).name}) is missing from {path}; "
            f"run `{INSTALL_COMMAND}` (from ${ASSET_DIR_ENV} or its pinned URL)"
        )
    if path.stat().st_size != asset.size or sha256(path) != asset.sha256:
        return f"asset {name!r} at {path} does not match its pinned SHA-256; run `{INSTALL_COMMAND} --force`"
    return None


def unchecked(name: str, asset: ExternalAsset) -> str:
    """What a command that does not run the benchmark's env factory says instead of calling a check."""
    return (
        f"not checked: its check {asset.check} is code the benchmark file names, which only a session "
        f"that runs the file's env.factory calls (a task that lists {name!r} reports it missing)"
    )


def _check(name: str, asset: ExternalAsset) -> Callable[[str, ExternalAsset], str | None]:
    """The check's function, when it is one defined in the module named (not one it imports from
    elsewhere, such as ``shutil.rmtree``); ``benchmark_file`` holds it to the env factory's package."""
    module, function = split_reference(asset.check) or ("", "")
    found = load_reference(module, function)
    if not inspect.isfunction(found) or found.__module__ != module:
        raise AssetProblem(f"asset {name!r}: its check {asset.check} is not a function defined in {module}")
    return found


def package_folder(package: str, search: Sequence[Path] | None = None) -> Path | None:
    """The folder of the installed top-level package ``package``, or None. Finding a top-level
    module's spec runs none of its code (a dotted name would import its parents). ``search``: the
    ``site-packages`` folders of another interpreter (a benchmark's own) to look in instead."""
    try:
        if search is None:
            found = importlib.util.find_spec(package)
        else:
            found = PathFinder.find_spec(package, [str(folder) for folder in search])
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec (__main__)
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))


def package_file_path(
    name: str, asset: PackageFileAsset | PackageArchiveAsset, search: Sequence[Path] | None = None
) -> Path:
    """Where the file (or the archive's folder) goes: under its package's folder, once links are
    resolved, or ``AssetProblem``. An archive's place itself may be a link (a stand-in, which its
    install replaces and never writes through), so only the folders above it are resolved."""
    folder = package_folder(asset.package, search)
    if folder is None:
        raise AssetProblem(f"asset {name!r} belongs in package {asset.package!r}, which is not installed")
    target = folder / asset.path
    placed = target.resolve() if isinstance(asset, PackageFileAsset) else target.parent.resolve() / target.name
    if not placed.is_relative_to(folder.resolve()):
        raise AssetProblem(
            f"asset {name!r}: path {asset.path} resolves to {placed}, outside package {asset.package!r} "
            f"at {folder.resolve()} (a link leads out); refusing to read or write it"
        )
    return target if isinstance(asset, PackageFileAsset) else placed


def install_package_file(
    name: str,
    asset: PackageFileAsset,
    *,
    source_dir: Path | None,
    force: bool = False,
    search: Sequence[Path] | None = None,
) -> str:
    """Put a ``package_file`` asset in place; returns what was done, raises on any mismatch.
    ``search``: another interpreter's ``site-packages`` (``package_folder``)."""
    target = package_file_path(name, asset, search)
    if target.is_file() and sha256(target) == asset.sha256:
        return f"{name}: already installed at {target}"
    if target.exists() and not force:
        raise AssetProblem(f"asset {name!r}: {target} exists with different content; pass --force to replace it")
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / Path(asset.path).name
        origin = _fetch(asset, source_dir, staged)
        size, digest = staged.stat().st_size, sha256(staged)
        if size != asset.size or digest != asset.sha256:
            raise AssetProblem(
                f"asset {name!r} from {origin}: got {size} bytes sha256 {digest}, expected {asset.size} bytes {asset.sha256}"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        _replace(staged, target)
    return f"{name}: installed {target} from {origin} ({asset.license or 'see benchmark file'})"


def _replace(staged: Path, target: Path) -> None:
    """Copy beside ``target`` and rename over it: a link at ``target`` is replaced, never written through."""
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as out:
        partial = Path(out.name)
        with staged.open("rb") as source:
            shutil.copyfileobj(source, out)
    try:
        os.replace(partial, target)
    except OSError:
        partial.unlink(missing_ok=True)
        raise


def _fetch(asset: PackageFileAsset, source_dir: Path | None, dest: Path) -> str:
    filename = Path(asset.path).name
    if source_dir is not None:
        candidate = source_dir / filename
        if candidate.is_file():
            shutil.copyfile(candidate, dest)
            return str(candidate)
    if not asset.url:
        raise AssetProblem(f"{filename} is not in {source_dir} and the benchmark file gives no URL")
    with urllib.request.urlopen(asset.url, timeout=60) as response, dest.open("wb") as out:
        for block in iter(lambda: response.read(1 << 20), b""):
            out.write(block)
            if out.tell() > asset.size:  # the digest check would refuse it: not a byte more on disk
                raise AssetProblem(f"{asset.url} sends more than the {asset.size} bytes the benchmark file pins")
    return asset.url


def archive_problem(
    name: str, asset: PackageArchiveAsset, benchmark: str, search: Sequence[Path] | None = None
) -> str | None:
    """Why the archive's folder is not in place (one line saying where to get the archive and how
    to stage it), or None when its stamp holds the archive's SHA-256."""
    target = package_file_path(name, asset, search)
    stamp = target / ARCHIVE_STAMP
    if not target.is_symlink() and stamp.is_file() and stamp.read_text().strip() == asset.sha256:
        return None
    source = f" from {asset.source}" if asset.source else ""
    return (
        f"asset {name!r} is not staged at {target}: it comes from {asset.file} ({asset.size:,} bytes, "
        f"SHA-256 {asset.sha256}){source}; put a copy in a folder and run "
        f"`{ASSET_DIR_ENV}=FOLDER {INSTALL_COMMAND} --benchmark {benchmark}`"
    )


def install_package_archive(
    name: str,
    asset: PackageArchiveAsset,
    *,
    source_dir: Path | None,
    force: bool = False,
    search: Sequence[Path] | None = None,
) -> str:
    """Put a ``package_archive`` asset in place from a local copy; returns what was done, raises
    ``AssetProblem`` on any mismatch, leaving what was there as it was."""
    target = package_file_path(name, asset, search)
    stamp = target / ARCHIVE_STAMP
    if not target.is_symlink() and stamp.is_file() and stamp.read_text().strip() == asset.sha256:
        return f"{name}: already installed at {target}"
    if target.exists() and not target.is_symlink() and not force:
        raise AssetProblem(
            f"asset {name!r}: {target} is a folder that is not this archive's; pass --force to replace it"
        )
    archive = source_dir / asset.file if source_dir is not None else None
    if archive is None or not archive.is_file():
        source = f" ({asset.source})" if asset.source else ""
        where = (
            f"is not in {source_dir}"
            if source_dir is not None
            else f"needs a folder holding a copy (${ASSET_DIR_ENV} or --from)"
        )
        raise AssetProblem(f"asset {name!r}: {asset.file}{source} {where}; it is never downloaded")
    size = archive.stat().st_size
    if size != asset.size or (digest := sha256(archive)) != asset.sha256:
        got = f"{size} bytes" if size != asset.size else f"sha256 {digest}"
        raise AssetProblem(f"asset {name!r} from {archive}: got {got}, expected {asset.size} bytes {asset.sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        count = _extract(archive, asset.member, staging)
        (staging / ARCHIVE_STAMP).write_text(asset.sha256 + "\n")
        _put_in_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return f"{name}: installed {target} ({count:,} files) from {archive} ({asset.license or 'see benchmark file'})"


def _extract(archive: Path, member: str, staging: Path) -> int:
    """The archive's entries under ``member/``, written below ``staging`` as their path below it;
    refused whole when one of them would leave it (an absolute or ``..`` name, a link) or none is
    under ``member``. Returns the number of files written."""
    prefix = PurePosixPath(member)
    count = 0
    with zipfile.ZipFile(archive) as zipped:
        entries = [entry for entry in zipped.infolist() if PurePosixPath(entry.filename).is_relative_to(prefix)]
        if not entries:
            raise AssetProblem(f"{archive} has no folder {member}")
        for entry in entries:
            relative = PurePosixPath(entry.filename).relative_to(prefix)
            is_link = (entry.external_attr >> 16) & 0o170000 == 0o120000
            if is_link or entry.filename.startswith("/") or ".." in relative.parts or "\\" in entry.filename:
                raise AssetProblem(f"{archive}: entry {entry.filename[:300]!r} would leave its folder; refusing it")
            destination = staging.joinpath(*relative.parts)
            if entry.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(entry) as source, destination.open("wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            count += 1
    return count


def _put_in_place(staging: Path, target: Path) -> None:
    """``staging`` renamed to ``target``: a link there is removed (never written through), a folder
    moved aside first and deleted once the new one is in place."""
    aside = None
    if target.is_symlink():
        target.unlink()
    elif target.exists():
        aside = target.with_name(f".{target.name}.replaced")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(target, aside)
    os.replace(staging, target)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def benchmark_argument(benchmark: Benchmark) -> str:
    """What ``--benchmark`` takes to name ``benchmark``: a built-in's name, else its file."""
    builtin = builtin_benchmarks().get(benchmark.name)
    same = builtin is not None and builtin.resolve() == Path(benchmark.source).resolve()
    return benchmark.name if same else benchmark.source


def default_source_dir() -> Path | None:
    value = os.environ.get(ASSET_DIR_ENV)
    return Path(value) if value else None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
