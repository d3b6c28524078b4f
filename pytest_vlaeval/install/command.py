"""``vlaeval install NAME``: put a benchmark's pinned simulator stack into this interpreter (or into
one of its own), install the data files its wheel lacks, then check imports, versions and the
render device. ``vlaeval install lerobot`` makes the interpreter LeRobot's policies run in.

Nothing outside the interpreter changes unless ``--system-deps`` asks for the Debian packages
(software Vulkan or Mesa's EGL). Re-running is fast: only unmet steps run.

``vlaeval install A B C`` installs several: the Debian packages first, one apt-get at a time; then
this interpreter's stacks one after another (they share its site-packages) while each stack with an
interpreter of its own installs beside them, as many at a time as the machine has cores. Installing
is mostly one core's work (unpacking, compiling), so two cores nearly halve a fresh set-up.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
        "stacks",
        nargs="*",
        metavar="STACK",  # no choices=: argparse before 3.12 checks an empty list against them; run() checks
        help="the benchmarks whose simulator stacks to install, or lerobot (its policies); several install "
        f"at the same time where they can: {', '.join(stacks())}",
    )
    parser.add_argument("--list", action="store_true", help="print the stacks it installs, one a line, and stop")
    parser.add_argument(
        "--system-deps", action="store_true", help="also install the Debian packages it needs (apt-get; root or sudo)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing: only check what is installed")
    mode.add_argument(
        "--packages-only",
        action="store_true",
        help="install the packages and stop: no data files, no check (a later run does both)",
    )
    mode.add_argument("--dry-run", action="store_true", help="print the commands it would run, run none")
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


def for_stack(args: argparse.Namespace, name: str) -> argparse.Namespace:
    """The command's options for one of its stacks: ``args.stack``, which the single-stack steps
    (``target``, ``plan``, ``install``) read."""
    return argparse.Namespace(**{**vars(args), "stack": name})


def target(args: argparse.Namespace) -> str | None:
    """The interpreter the stack goes into: None for this one, else its own interpreter's python."""
    stack = stacks()[args.stack]
    if stack.own_interpreter or args.own_interpreter:
        return str(interpreters.interpreter_python(stack.name))
    return None


def system_commands(stack: Stack) -> list[installer.Command] | str:
    """The apt commands that put the stack's Debian packages in place (none when they are), or one
    line saying why there can be none."""
    if not stack.system_packages:
        return []
    debian = installer.read_debian()
    if debian is None:
        return f"--system-deps needs apt-get (Debian or Ubuntu); install {', '.join(stack.system_packages)} (for {stack.name}) with this machine's package manager"
    return installer.system_plan(stack, debian)


def run_commands(commands: list[installer.Command], dry_run: bool) -> int:
    """Each command, said first; the first that fails ends the run with a line saying so."""
    for command in commands:
        print(f"{PREFIX} {command.why}\n  $ {command}", flush=True)
        if dry_run:
            continue
        status = subprocess.run(command.argv, input=command.stdin, text=True).returncode
        if status != 0:
            print(f"{PREFIX} `{command}` failed (exit {status}); fix what it says above and run again")
            return 1
    return 0


def plan(args: argparse.Namespace) -> list[installer.Command] | str:
    """The commands to run, or one line saying why there can be none."""
    stack = stacks()[args.stack]
    commands = []
    if args.system_deps:
        system = system_commands(stack)
        if isinstance(system, str):
            return system
        commands += system
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
    if not args.stacks:
        print(f"{PREFIX} name a stack: {', '.join(stacks())} (or --list)")
        return 2
    unknown = [name for name in args.stacks if name not in stacks()]
    if unknown:
        print(f"{PREFIX} no stack named {', '.join(map(repr, unknown))}: choose from {', '.join(stacks())}")
        return 2
    names = list(dict.fromkeys(args.stacks))
    if len(names) > 1:
        return install_several(args, names)
    try:
        return install(for_stack(args, names[0]))
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
        if run_commands(commands, args.dry_run):
            return 1
        if not commands:
            print(f"{PREFIX} the {stack.name} packages are in place")
        if args.dry_run or args.packages_only:
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


# -- several stacks at once -------------------------------------------------------------------


def install_several(args: argparse.Namespace, names: list[str]) -> int:
    """Install ``names`` (see the module's docstring), each in a ``vlaeval install NAME`` process of
    its own whose lines begin ``[NAME]``; closing lines name each stack that failed or never ran.

    An interpreter of its own mirrors this one's pytest plugins, and this interpreter's stacks may
    bring more (ManiSkill brings typeguard's). So while this interpreter's lane runs, those stacks
    install their packages only; once every lane is done each runs again in full (from its first
    unmet step: the plugins', then its later steps, which find their packages in place), and that
    run's outcome is the stack's."""
    if args.system_deps and not (args.check or args.dry_run):
        for name in names:
            commands = system_commands(stacks()[name])
            if isinstance(commands, str):
                print(f"{PREFIX} {commands}")
                return 1
            if run_commands(commands, dry_run=False):
                return 1
    lanes = lanes_for(args, names)
    here = [name for name in names if _goes_here(args, name)]
    installing = not (args.check or args.dry_run or args.packages_only)
    again = [name for name in names if name not in here] if installing and here else []
    runner = _LaneRunner(args)
    try:
        statuses = dict(runner.run(lanes, lambda name: ["--packages-only"] if name in again else []))
        statuses.update(runner.run([[name] for name in again], lambda name: []))
    except KeyboardInterrupt:
        print(f"{PREFIX} interrupted; run the same command again (only unmet steps run)")
        return 130
    for name in names:
        status = statuses.get(name)
        if status is None:
            print(f"{PREFIX} {name}: not run (a stack before it in this interpreter failed)")
        elif status != 0:
            print(f"{PREFIX} {name}: FAILED (exit {status}); its lines above begin [{name}]")
    return 0 if all(statuses.get(name) == 0 for name in names) else 1


def lanes_for(args: argparse.Namespace, names: list[str]) -> list[list[str]]:
    """The stacks in lanes, in the order they start: this interpreter's in one (they share its
    site-packages), then each with an interpreter of its own alone, the policy stack (LeRobot's, the
    largest: four minutes of a fresh set-up's eight) first so that it never starts last."""
    here = [name for name in names if _goes_here(args, name)]
    own = sorted((name for name in names if name not in here), key=lambda name: not stacks()[name].policy)
    return [lane for lane in (here, *([name] for name in own)) if lane]


def _goes_here(args: argparse.Namespace, name: str) -> bool:
    """Whether stack ``name`` installs into this interpreter (else into one of its own)."""
    return target(for_stack(args, name)) is None


class _LaneRunner:
    """Runs lanes of ``vlaeval install NAME`` processes, as many lanes at a time as this process may
    use cores; a lane goes on to its next stack only while each before it succeeded."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.say = threading.Lock()
        self.stopping = threading.Event()
        self.running: set[subprocess.Popen[str]] = set()

    def run(self, lanes: list[list[str]], extra: Callable[[str], list[str]]) -> list[tuple[str, int]]:
        """Each lane's stacks' exit statuses; ``extra(name)``: more options for that stack."""
        if not lanes:
            return []
        with ThreadPoolExecutor(min(len(lanes), len(os.sched_getaffinity(0)))) as pool:
            try:
                return [status for lane in pool.map(lambda lane: self._lane(lane, extra), lanes) for status in lane]
            except KeyboardInterrupt:
                self.stop()  # before the pool waits for its lanes
                raise

    def stop(self) -> None:
        """No lane starts another stack; the running ones end (Ctrl-C reached them already, or not)."""
        with self.say:
            self.stopping.set()
            for proc in self.running:
                proc.terminate()

    def _lane(self, lane: list[str], extra: Callable[[str], list[str]]) -> list[tuple[str, int]]:
        statuses = []
        for name in lane:
            status = None if self.stopping.is_set() else self._one(name, extra(name))
            if status is None:
                break
            statuses.append((name, status))
            if status != 0:
                break
        return statuses

    def _one(self, name: str, extra: list[str]) -> int:
        """``vlaeval install NAME``, its lines (stdout and stderr) printed whole, each begun ``[NAME]``;
        no input (a prompt would wait unseen), bytes that are not UTF-8 replaced."""
        command = [sys.executable, "-m", "pytest_vlaeval", "install", name, *stack_options(self.args, name), *extra]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PIP_NO_INPUT": "1"}
        with subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            encoding="utf-8",
            errors="replace",
            env=env,
        ) as proc:
            with self.say:
                self.running.add(proc)
                if self.stopping.is_set():  # stopped while it started
                    proc.terminate()
            assert proc.stdout is not None
            for line in proc.stdout:
                with self.say:
                    print(f"[{name}] {line.rstrip(chr(10))}", flush=True)
            with self.say:
                self.running.discard(proc)
        return proc.returncode


def stack_options(args: argparse.Namespace, name: str) -> list[str]:
    """The options of ``vlaeval install NAME`` for one of several stacks: the same, but for the
    Debian packages, which ``install_several`` has put in place before (apt-get runs one at a time),
    and ``--python``, which only an interpreter of its own is made with."""
    flags = {
        "check": "--check",
        "dry_run": "--dry-run",
        "packages_only": "--packages-only",
        "own_interpreter": "--own-interpreter",
        "force": "--force",
    }
    options = [flag for dest, flag in flags.items() if getattr(args, dest)]
    if args.system_deps and (args.check or args.dry_run):
        options.append("--system-deps")
    if args.python is not None and not _goes_here(args, name):
        options += ["--python", args.python]
    if args.source is not None:
        options += ["--from", str(args.source)]
    return options
