"""``vlaeval install NAME``: put a benchmark's pinned simulator stack into this interpreter (or into
one of its own), install the data files its wheel lacks, then check imports, versions and the
render device. ``vlaeval install lerobot`` makes the interpreter LeRobot's policies run in.

Nothing outside the interpreter changes unless ``--system-deps`` asks for the Debian packages
(software Vulkan or Mesa's EGL). Re-running is fast: only unmet steps run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from pytest_vlaeval.benchmark.install import Stack
from pytest_vlaeval.benchmark.model import resolve_benchmark
from pytest_vlaeval.bounded_run import STACK_OUTPUT_LIMIT, run_bounded
from pytest_vlaeval.envs.preflight import preflight_problem
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.install import installer, interpreters
from pytest_vlaeval.install.assets_command import add_source_options, install_assets
from pytest_vlaeval.install.stacks import stacks

PREFIX = "vlaeval install:"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "stack",
        nargs="?",
        choices=stacks(),
        help="the benchmark whose simulator stack to install, or lerobot (its policies)",
    )
    parser.add_argument("--list", action="store_true", help="print the stacks it installs, one a line, and stop")
    parser.add_argument(
        "--system-deps", action="store_true", help="also install the Debian packages it needs (apt-get; root or sudo)"
    )
    parser.add_argument("--check", action="store_true", help="change nothing: only check what is installed")
    parser.add_argument("--dry-run", action="store_true", help="print the commands it would run, run none")
    parser.add_argument(
        "--own-interpreter",
        action="store_true",
        help="into an interpreter of its own (Meta-World and LeRobot always are), not this one: "
        f"${interpreters.INTERPRETER_DIR_ENV}/NAME, else <this env>/vlaeval-interpreters/NAME",
    )
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="the Python that makes an interpreter of its own (default: this one when the stack supports "
        "its version, else python3.N on PATH or installed by pyenv, N in the stack's range)",
    )
    add_source_options(parser)


def target(args: argparse.Namespace) -> str | None:
    """The interpreter the stack goes into: None for this one, else its own interpreter's python."""
    stack = stacks()[args.stack]
    if stack.own_interpreter or args.own_interpreter:
        return str(interpreters.interpreter_python(stack.name))
    return None


def plan(args: argparse.Namespace) -> list[installer.Command] | str:
    """The commands to run, or one line saying why there can be none."""
    stack = stacks()[args.stack]
    commands = []
    if args.system_deps:
        debian = installer.read_debian()
        if debian is None:
            return f"--system-deps needs apt-get (Debian or Ubuntu); install {', '.join(stack.system_packages)} with this machine's package manager"
        commands += installer.system_plan(stack, debian)
    python = target(args)
    if python is None:
        python = sys.executable
        commands += installer.pip_plan(stack, installer.installed_version)
    else:
        home = interpreters.interpreter_home(stack.name)
        installed = interpreters.installed_in(Path(python))
        if not Path(python).is_file():
            why = f"an interpreter of its own for {stack.name} (its pins clash with other stacks')"
            base = interpreters.base_python(stack, args.python)
            commands.append(installer.Command(why, (base, "-m", "venv", str(home))))
            installed = interpreters.InstalledIn([])
        elif interpreters.package_mismatch(Path(python)):
            installed.forget("pytest-vlaeval")  # another copy than this one, even at this version: replace it
        commands += installer.pip_plan(stack, installed, python, interpreters.harness_steps())
    if stack.finish:
        commands.append(
            installer.Command(f"what {stack.name}'s packages cannot do themselves", (python, "-m", stack.finish))
        )
    return commands


def run(args: argparse.Namespace) -> int:
    if args.list:
        print("\n".join(stacks()))
        return 0
    if args.stack is None:
        print(f"{PREFIX} name a stack: {', '.join(stacks())} (or --list)")
        return 2
    try:
        return install(args)
    except SpecError as exc:  # no Python to make its interpreter with, or that one is not a Python
        print(f"{PREFIX} {exc}")
        return 1


def setup_problem(args: argparse.Namespace) -> str | None:
    """What stops the install before anything runs, in one line: a Python out of the stack's range."""
    stack = stacks()[args.stack]
    python = target(args)
    if python is None:
        if args.python is not None:
            return f"--python makes an interpreter of its own: add --own-interpreter to install {stack.name} there"
        return installer.python_problem(stack)
    if Path(python).is_file():
        return interpreters.interpreter_python_problem(stack, Path(python))
    return None


def finish_problems(stack: Stack, python: str, fix: str) -> list[str]:
    """What the stack's ``finish`` step finds not in place in its interpreter (its ``--check``), a
    line each ending in the fix."""
    if not stack.finish:
        return []
    check = run_bounded([python, "-m", stack.finish, "--check"], timeout=300, limit=STACK_OUTPUT_LIMIT)
    if check.returncode == 0:
        return []
    if check.overflowed:
        return [f"python -m {stack.finish} --check {check.stopped}: run `{fix}`"]
    lines = check.stdout.strip().splitlines() or [
        check.stderr.strip().splitlines()[-1] if check.stderr.strip() else "failed"
    ]
    return [f"{line}: run `{fix}`" for line in lines]


def install(args: argparse.Namespace) -> int:
    stack = stacks()[args.stack]
    benchmark = None if stack.policy else resolve_benchmark(stack.name)[0]
    python = target(args)
    problem = setup_problem(args)
    if problem:
        print(f"{PREFIX} {problem}")
        return 1
    if not args.check:
        commands = plan(args)
        if isinstance(commands, str):
            print(f"{PREFIX} {commands}")
            return 1
        for command in commands:
            print(f"{PREFIX} {command.why}\n  $ {command}", flush=True)
            if args.dry_run:
                continue
            status = subprocess.run(command.argv, input=command.stdin, text=True).returncode
            if status != 0:
                print(f"{PREFIX} `{command}` failed (exit {status}); fix what it says above and run again")
                return 1
        if not commands:
            print(f"{PREFIX} the {stack.name} packages are in place")
        if args.dry_run:
            return 0
    search = interpreters.site_packages(Path(python)) if python is not None else None
    for line in (
        install_assets(benchmark, args.source, args.force, check_only=args.check, search=search) if benchmark else ()
    ):
        print(
            f"{PREFIX} {line.replace(': FAILED: ', ': note: ')} (only the tasks that need it)"
            if ": FAILED: " in line
            else f"{PREFIX} {line}"
        )
    fix = (interpreters.install_command(stack.name) if python else None) or f"vlaeval install {stack.name}"
    if python is not None and not Path(python).is_file():
        print(f"{PREFIX} PROBLEM: no interpreter at {python}: run `{fix}`")
        return 1
    installed = installer.installed_version if python is None else interpreters.installed_in(Path(python))
    steps = () if python is None else interpreters.harness_steps()
    held = interpreters.package_mismatch(Path(python)) if python else None
    problems = [
        *([f"its interpreter holds {held}: run `{fix}`"] if held else []),
        *installer.version_problems(stack, installed, fix, steps),
        *installer.import_problems(stack, fix, python or sys.executable),
        *finish_problems(stack, python or sys.executable, fix),
    ]
    if not problems and benchmark is not None and benchmark.env.preflight:
        render = preflight_problem(benchmark.env.preflight, "auto", python or sys.executable)
        if render:
            problems.append(f"render check: {render}")
    for line in problems:
        print(f"{PREFIX} PROBLEM: {line}")
    if problems:
        return 1
    print(f"{PREFIX} {stack.name} is ready in {python or sys.executable}")
    return 0
