"""``vlaeval``: the package's one command, with a subcommand per module.

Each subcommand module exposes ``configure(parser)`` and ``run(args) -> int``. Only the chosen
one is imported, so ``vlaeval --help`` stays fast however heavy a subcommand's imports are.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "install": ("pytest_vlaeval.install.command", "put a benchmark's simulator stack into this Python and check it"),
    "install-assets": ("pytest_vlaeval.install.assets_command", "install the data files a benchmark's wheel lacks"),
    "serve": ("pytest_vlaeval.serving.command", "serve one policy to many episodes over websockets"),
    "merge": ("pytest_vlaeval.merge", "merge run directories (shards) into one run"),
    "slurm": ("pytest_vlaeval.arrays.slurm", "run an evaluation as a Slurm job array of shards, then merge it"),
    "compare": ("pytest_vlaeval.report.compare", "compare runs (e.g. checkpoints) side by side, paired by seed"),
}
"""Subcommand name -> (module with ``configure`` and ``run``, one line of help)."""

PROG = "vlaeval"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog=PROG, description="Evaluate VLA policies with pytest: the helper commands.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    modules = {}
    for name, (module_name, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        if name == chosen:
            modules[name] = importlib.import_module(module_name)
            modules[name].configure(sub)
    args = parser.parse_args(argv)
    return modules[args.command].run(args)
