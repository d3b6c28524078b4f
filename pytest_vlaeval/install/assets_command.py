"""``vlaeval install-assets``: the data files a benchmark's wheel lacks (see ``envs/assets.py``)."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from pytest_vlaeval.envs import assets
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.spec import Benchmark, resolve_benchmark


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


def install_assets(benchmark: Benchmark, source: Path | None, force: bool, *, check_only: bool = False) -> list[str]:
    """Install each ``package_file`` asset (unless ``check_only``); one line per asset, problems
    prefixed ``FAILED:``. Asset packs another tool downloads are only checked."""
    warnings.filterwarnings("ignore", message="The pynvml package is deprecated")
    lines = []
    for name, spec in benchmark.assets.items():
        if spec["kind"] != "package_file" or check_only:
            problem = assets.problem(name, spec)
            lines.append(f"{name}: FAILED: {problem}" if problem else f"{name}: present")
            continue
        try:
            lines.append(assets.install_package_file(name, spec, source_dir=source, force=force))
        except (OSError, RuntimeError) as exc:
            lines.append(f"{name}: FAILED: {exc}")
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        benchmark, _ = resolve_benchmark(args.benchmark)
    except SpecError as exc:
        print(f"vlaeval install-assets: {exc}")
        return 2
    lines = install_assets(benchmark, args.source, args.force)
    print("\n".join(lines))
    return 1 if any(": FAILED: " in line for line in lines) else 0
