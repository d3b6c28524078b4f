"""Command line:

``python -m pytest_vlaeval install-assets [--benchmark NAME] [--from DIR] [--force]``
``python -m pytest_vlaeval merge RUN_DIR... [--out DIR]`` (see ``results/merge.py``)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from pytest_vlaeval.envs import assets
from pytest_vlaeval.spec import resolve_benchmark


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        from pytest_vlaeval.results.merge import main as merge_main

        return merge_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m pytest_vlaeval")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("merge", help="merge run directories (shards) into one run; see merge --help")
    install = commands.add_parser("install-assets", help="install the data files a benchmark's wheel lacks")
    install.add_argument("--benchmark", default="mikasa", help="benchmark name or YAML file [mikasa]")
    install.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=assets.default_source_dir(),
        help=f"folder holding the files (default ${assets.ASSET_DIR_ENV}); otherwise they are downloaded from their pinned URL",
    )
    install.add_argument("--force", action="store_true", help="replace a file whose content differs")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="The pynvml package is deprecated")

    benchmark, _ = resolve_benchmark(args.benchmark)
    status = 0
    for name, spec in benchmark.assets.items():
        if spec["kind"] != "package_file":
            problem = assets.problem(name, spec)
            print(f"{name}: {problem or 'present'}")
            continue
        try:
            print(assets.install_package_file(name, spec, source_dir=args.source, force=args.force))
        except (OSError, RuntimeError) as exc:
            print(f"{name}: FAILED: {exc}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
