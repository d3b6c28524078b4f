"""The ``vlaeval`` command and its installer: the plan (what would run), the check's lines, and one
real ``vlaeval install mikasa --check`` in this interpreter."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import assert_one_line_usage_error, make_interpreter_with_own_copy, package_copy

from pytest_vlaeval.bounded_run import Finished
from pytest_vlaeval.cli import COMMANDS
from pytest_vlaeval.envs import assets
from pytest_vlaeval.install import command, installer, interpreters
from pytest_vlaeval.install.command import plan
from pytest_vlaeval.install.stacks import stacks

MIKASA, LIBERO = stacks()["mikasa"], stacks()["libero"]
SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]
MESA_25 = {"mesa-vulkan-drivers": "25.0.7-2~bpo12+1", "libvulkan1": "1.3.239.0-1"}


def versions_meeting(stack_name: str, **overrides: str | None) -> installer.InstalledVersion:
    """An interpreter holding exactly what the stack pins, but for ``overrides`` (None: absent)."""
    candidates = ["1.0", "0.60", "1.26.4", "2.15.2", "2.4", "3.1.7", "80.0"]
    pinned: dict[str, str | None] = {}
    for step in stacks()[stack_name].steps:
        for requirement in step.pinned():
            fits = list(requirement.specifier.filter(candidates)) or [next(iter(requirement.specifier)).version]
            pinned[normal(requirement.name)] = fits[0]
    pinned.update({normal(name): value for name, value in overrides.items()})
    return lambda distribution: pinned.get(normal(distribution))


def normal(name: str) -> str:
    return name.lower().replace("_", "-")


def vlaeval(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_vlaeval", *args], capture_output=True, text=True)


# -- the command ------------------------------------------------------------------------------


def test_help_lists_every_subcommand_without_importing_them() -> None:
    probe = (
        "import sys\nfrom pytest_vlaeval.cli import COMMANDS, main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('imported:', [m for m, _ in COMMANDS.values() if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    for name in COMMANDS:
        assert f"    {name}" in result.stdout
    assert "imported: []" in result.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_subcommand_has_help(name: str) -> None:
    result = vlaeval(name, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: vlaeval {name}")


def test_the_only_console_script_is_vlaeval() -> None:
    scripts = {
        e.name for e in importlib.metadata.distribution("pytest-vlaeval").entry_points if e.group == "console_scripts"
    }
    assert scripts == {"vlaeval"}


def test_an_unknown_stack_is_one_line_naming_the_choices() -> None:
    result = vlaeval("install", "pusht", "no-such\x1b[2J")
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        f"vlaeval install: no stack named 'no-such\\x1b[2J': choose from {', '.join(stacks())}"
    ]


# -- several stacks at once -------------------------------------------------------------------


SEVERAL = ["mikasa", "pusht", "aloha", "libero", "metaworld", "lerobot"]
"""Three stacks of this interpreter, three with interpreters of their own."""


def several_args(**options: object) -> argparse.Namespace:
    defaults = {"check": False, "dry_run": False, "packages_only": False, "own_interpreter": False, "force": False}
    return argparse.Namespace(
        **{"stacks": SEVERAL, "system_deps": True, "python": None, "source": None, **defaults, **options}
    )


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """What ``install_several`` starts, in order, every ``vlaeval install NAME`` succeeding: apt
    commands as ("apt", stack), stacks as (stack, *extra options)."""
    events: list[tuple] = []
    monkeypatch.setattr(command, "system_commands", lambda stack: [installer.Command(stack.name, ("true",))])
    monkeypatch.setattr(command, "run_commands", lambda commands, dry_run: events.append(("apt", commands[0].why)))
    monkeypatch.setattr(command._LaneRunner, "_one", lambda self, name, extra: events.append((name, *extra)) or 0)
    return events


def test_several_stacks_install_debian_packages_first_then_lanes_then_own_interpreters_in_full(
    started: list[tuple],
) -> None:
    """apt-get for every stack, one after another, before any stack installs; then every lane, the
    interpreters of their own with their packages only; then those again in full (their check
    sees this interpreter's plugins as its stacks left them)."""
    assert command.install_several(several_args(), SEVERAL) == 0
    assert started[:6] == [("apt", name) for name in SEVERAL]
    first = started[6:12]
    assert [event for event in first if len(event) == 1] == [("mikasa",), ("pusht",), ("libero",)], "in order"
    packages = {(name, "--packages-only") for name in ("aloha", "lerobot", "metaworld")}
    assert {event for event in first if len(event) == 2} == packages
    assert sorted(started[12:]) == [("aloha",), ("lerobot",), ("metaworld",)]


@pytest.mark.parametrize("mode", ["check", "dry_run", "packages_only"])
def test_several_stacks_that_install_nothing_more_run_once(started: list[tuple], mode: str) -> None:
    assert command.install_several(several_args(**{mode: True}), SEVERAL) == 0
    stacks_started = [event for event in started if event[0] != "apt"]
    assert sorted(stacks_started) == sorted((name,) for name in SEVERAL), "one pass, no --packages-only"
    assert len(started) - len(stacks_started) == (6 if mode == "packages_only" else 0), "apt-get only to install"


def test_interpreters_of_their_own_alone_install_in_one_pass(started: list[tuple]) -> None:
    own = ["aloha", "lerobot"]
    assert command.install_several(several_args(stacks=own), own) == 0
    assert sorted(started[2:]) == [("aloha",), ("lerobot",)], "no lane of this interpreter: no plugins to wait for"


def test_an_interpreter_of_its_own_is_judged_by_its_full_run(
    monkeypatch: pytest.MonkeyPatch, started: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    """A first pass that failed (this interpreter's lane changed the packages it runs from) is run
    again in full, and that run decides; one failing in full is named."""
    outcome = {("lerobot", "--packages-only"): 1, ("metaworld",): 1}

    def one(self: object, name: str, extra: list[str]) -> int:
        started.append((name, *extra))
        return outcome.get((name, *extra), 0)

    monkeypatch.setattr(command._LaneRunner, "_one", one)
    assert command.install_several(several_args(), SEVERAL) == 1
    assert ("lerobot",) in started
    assert [event for event in started if event[0] == "metaworld"] == [("metaworld", "--packages-only"), ("metaworld",)]
    assert capsys.readouterr().out.splitlines() == [
        "vlaeval install: metaworld: FAILED (exit 1); its lines above begin [metaworld]"
    ]


def test_ctrl_c_stops_every_lane_in_one_line() -> None:
    """SIGINT to the command's process group, as a terminal sends it, once the first stack has spoken:
    no stack starts after it, the running ones end, one line, exit status 130."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_vlaeval", "install", "pusht", "libero", "libero-plus", "--check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline()]
    assert lines[0].startswith("[pusht] "), lines
    os.killpg(proc.pid, signal.SIGINT)
    lines += proc.stdout.readlines()
    assert proc.wait(timeout=60) == 130, "".join(lines)
    assert lines[-1] == "vlaeval install: interrupted; run the same command again (only unmet steps run)\n", lines
    assert not [line for line in lines if line.startswith("[libero-plus]")], "no stack starts after Ctrl-C"


def test_a_stopped_runner_ends_its_running_stack_and_starts_no_other(capsys: pytest.CaptureFixture[str]) -> None:
    """``_LaneRunner.stop`` (what Ctrl-C calls before the lanes are waited for) ends the real
    ``vlaeval install pusht --check`` it started, and libero after it in the lane never starts;
    stopped, the runner starts nothing more. The Ctrl-C case above cannot reach this: there the
    terminal's SIGINT ends the children first."""
    parser = argparse.ArgumentParser()
    command.configure(parser)
    runner = command._LaneRunner(parser.parse_args(["pusht", "libero", "--check"]))
    statuses: list[tuple[str, int]] = []
    lane = threading.Thread(target=lambda: statuses.extend(runner.run([["pusht", "libero"]], lambda name: [])))
    lane.start()
    deadline = time.monotonic() + 60
    while not runner.running:
        assert time.monotonic() < deadline and lane.is_alive(), "pusht's check never started"
        time.sleep(0.01)
    runner.stop()
    lane.join(timeout=60)
    assert statuses == [("pusht", -signal.SIGTERM)], capsys.readouterr().out
    assert runner.run([["libero"]], lambda name: []) == [], "a stopped runner starts nothing"
    assert "[libero]" not in capsys.readouterr().out


def test_each_of_several_stacks_gets_every_option_but_the_debian_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new option of ``vlaeval install`` reaches the per-stack commands, or this fails; --python
    only where an interpreter is made."""
    monkeypatch.delenv(assets.ASSET_DIR_ENV, raising=False)  # --from's default
    parser = argparse.ArgumentParser()
    command.configure(parser)
    flags = ["--check", "--own-interpreter", "--force"]
    args = parser.parse_args(["pusht", "aloha", *flags, "--python", "py", "--from", "/assets", "--system-deps"])
    expected = [*flags, "--system-deps", "--python", "py", "--from", "/assets"]
    assert command.stack_options(args, "pusht") == expected, "--system-deps kept in a run that installs nothing"
    for mode in ("--dry-run", "--packages-only"):
        assert mode in command.stack_options(parser.parse_args(["pusht", "aloha", mode]), "pusht")
    told = {o for action in parser._actions for o in action.option_strings}
    assert told - {"-h", "--help", "--list", "--dry-run", "--packages-only"} <= set(expected)
    installing = parser.parse_args(["pusht", "aloha", "--system-deps", "--python", "py"])
    assert command.stack_options(installing, "pusht") == [], "apt-get ran before, one at a time; pusht is here"
    assert command.stack_options(installing, "aloha") == ["--python", "py"]


def test_lanes_keep_this_interpreters_stacks_together_and_start_the_policy_stack_early() -> None:
    names = ["mikasa", "pusht", "aloha", "libero", "metaworld", "lerobot"]
    args = argparse.Namespace(own_interpreter=False)
    assert command.lanes_for(args, names) == [
        ["mikasa", "pusht", "libero"],
        ["lerobot"],
        ["aloha"],
        ["metaworld"],
    ]
    assert command.lanes_for(args, ["aloha", "lerobot"]) == [["lerobot"], ["aloha"]]
    every_own = command.lanes_for(argparse.Namespace(own_interpreter=True), ["pusht", "libero"])
    assert every_own == [["pusht"], ["libero"]], "--own-interpreter: no site-packages shared"


def test_several_stacks_checked_at_once_say_which_failed_and_which_never_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real ``vlaeval install`` processes: Meta-World's interpreter is not Python (its lane fails);
    gym_pusht shadowed by a module that cannot import fails pusht's check, so libero after it in
    this interpreter's lane never runs; every line of a stack carries its name."""
    monkeypatch.setenv(interpreters.INTERPRETER_DIR_ENV, str(tmp_path))
    (tmp_path / "metaworld" / "bin").mkdir(parents=True)
    (tmp_path / "metaworld" / "bin" / "python").symlink_to("/bin/sh")
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "gym_pusht.py").write_text("raise ImportError('shadowed on purpose')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "shadow"))
    result = vlaeval("install", "pusht", "libero", "metaworld", "--check")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert f"[metaworld] vlaeval install: the interpreter at {tmp_path / 'metaworld'} does not run; " in "\n".join(
        lines
    )
    shadowed = [line for line in lines if "shadowed on purpose" in line]
    assert shadowed and all(line.startswith("[pusht] vlaeval install: PROBLEM: ") for line in shadowed), lines
    assert not [line for line in lines if line.startswith("[libero]")]
    assert lines[-3:] == [
        "vlaeval install: pusht: FAILED (exit 1); its lines above begin [pusht]",
        "vlaeval install: libero: not run (a stack before it in this interpreter failed)",
        "vlaeval install: metaworld: FAILED (exit 1); its lines above begin [metaworld]",
    ]
    assert all(line.startswith(("[pusht] ", "[metaworld] ", "vlaeval install: ")) for line in lines), lines


# -- the pip plan -----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["mikasa", "libero", "lerobot"])
def test_nothing_runs_when_the_stack_is_in_place(stack: str) -> None:
    assert installer.pip_plan(stacks()[stack], versions_meeting(stack)) == []


def test_sapien_replaced_by_maniskill_reruns_only_the_no_deps_step() -> None:
    commands = installer.pip_plan(MIKASA, versions_meeting("mikasa", sapien="3.0.0b1"), python="py")
    assert [str(c) for c in commands] == [
        "py -m pip install --disable-pip-version-check --no-deps mikasa-robo-suite==1.0.0 sapien==3.0.3"
    ]


def test_a_step_that_must_run_reruns_every_later_step() -> None:
    """ManiSkill brings SAPIEN 3.0.0b1: reinstalling it must be followed by SAPIEN 3.0.3 again."""
    commands = installer.pip_plan(MIKASA, versions_meeting("mikasa", mani_skill=None))
    assert len(commands) == 2
    assert "mani_skill==3.0.0b15" in commands[0].argv and "sapien==3.0.3" in commands[1].argv


def test_an_existing_torch_build_is_kept_and_a_missing_one_is_installed() -> None:
    assert installer.pip_plan(MIKASA, versions_meeting("mikasa", torch="2.5.1+cu124")) == []
    commands = installer.pip_plan(MIKASA, versions_meeting("mikasa", torch=None))
    assert len(commands) == 3 and commands[0].argv[-1] == "torch==2.13.0"


def test_libero_installs_its_shipped_requirements_hash_checked() -> None:
    command = installer.pip_plan(LIBERO, versions_meeting("libero", mujoco="3.3.0"))[0]
    assert command.argv[-4:-1] == ("--no-deps", "--require-hashes", "-r")
    shipped = command.argv[-1]
    assert shipped.endswith("libero-requirements.txt")
    assert "mujoco==3.2.3 --hash=sha256:" in Path(shipped).read_text(encoding="utf-8")


# -- the system plan --------------------------------------------------------------------------


def test_the_backports_suite_comes_from_the_mirror_apt_already_uses(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://a.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    one_line = tmp_path / "sources.list"
    one_line.write_text("# a comment\ndeb http://b.example/debian bookworm main\n")
    assert installer.configured_mirror([tmp_path / "absent", deb822], "bookworm") == "http://a.example/debian"
    assert installer.configured_mirror([one_line], "bookworm") == "http://b.example/debian"
    assert installer.configured_mirror([one_line], "trixie") is None


def test_system_packages_on_debian_12_come_from_backports_added_once() -> None:
    mirror = "http://mirror.example/debian"
    commands = installer.system_plan(MIKASA, installer.Debian("bookworm", versions={}, is_root=True, mirror=mirror))
    assert [c.argv[0] for c in commands] == ["tee", "env", "env"]
    assert commands[0].stdin == installer.backports_entry(mirror)
    assert f"URIs: {mirror}\nSuites: bookworm-backports" in commands[0].stdin
    assert commands[2].argv[-5:] == ("-qq", "-t", "bookworm-backports", "mesa-vulkan-drivers", "libvulkan1")
    configured = installer.system_plan(MIKASA, installer.Debian("bookworm", backports_configured=True, is_root=False))
    assert [c.argv[:2] for c in configured] == [("sudo", "env"), ("sudo", "env")]


def test_no_system_packages_when_present_or_on_a_gpu_machine() -> None:
    assert installer.system_plan(MIKASA, installer.Debian("bookworm", versions=MESA_25)) == []
    assert installer.system_plan(MIKASA, installer.Debian("trixie", has_gpu=True)) == []
    old_mesa = {**MESA_25, "mesa-vulkan-drivers": "22.3.6-1+deb12u1"}
    assert installer.system_plan(MIKASA, installer.Debian("bookworm", versions=old_mesa, backports_configured=True))
    # MuJoCo renders through Mesa's EGL even beside a GPU, so LIBERO's packages are not skipped.
    assert installer.system_plan(LIBERO, installer.Debian("trixie", has_gpu=True))


def test_without_system_deps_the_plan_never_touches_the_system(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(installer, "read_debian", lambda: pytest.fail("read the system without --system-deps"))
    monkeypatch.setattr(installer, "installed_version", lambda name: None)
    commands = plan(argparse.Namespace(stack="mikasa", system_deps=False, own_interpreter=False))
    assert commands and all(c.argv[1:4] == ("-m", "pip", "install") for c in commands)


def test_system_deps_without_apt_is_one_line_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(installer, "read_debian", lambda: None)
    line = plan(argparse.Namespace(stack="libero", system_deps=True, own_interpreter=False))
    assert isinstance(line, str) and "libegl1" in line and "\n" not in line


@pytest.mark.parametrize("name", [*stacks(), "fakesim", "sh"])
def test_vlaeval_install_is_advised_only_for_an_interpreter_it_makes(name: str) -> None:
    """The advice parses as ``vlaeval install`` and installs into interpreter ``name`` itself; a
    name of the user's gets none (that command refuses it)."""
    advice = interpreters.install_command(name)
    if name not in stacks():
        assert advice is None
        return
    parser = argparse.ArgumentParser()
    command.configure(parser)
    words = shlex.split(advice)
    assert words[:2] == ["vlaeval", "install"]
    parsed = parser.parse_args(words[2:])
    assert parsed.stacks == [name]
    assert command.target(command.for_stack(parsed, name)) == str(interpreters.interpreter_python(name))


def test_a_stack_in_this_environment_ends_with_its_finish_step_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """LIBERO-Plus goes into the caller's environment: the link and config pip cannot make are made
    there too, after its packages, as in an interpreter of its own."""
    monkeypatch.setattr(installer, "installed_version", lambda name: None)
    commands = plan(argparse.Namespace(stack="libero-plus", system_deps=False, own_interpreter=False))
    assert not isinstance(commands, str)
    assert commands[-1].argv == (sys.executable, "-m", "pytest_vlaeval.envs.libero_plus_setup")
    assert all(c.argv[:4] == (sys.executable, "-m", "pip", "install") for c in commands[:-1])


@pytest.mark.parametrize("copy", ["this one", "edited"])
def test_the_plan_replaces_another_copy_of_this_package_even_at_this_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy: str
) -> None:
    """So ``vlaeval install NAME``, which a session's refusal of that copy advises, fixes it."""
    monkeypatch.setenv(interpreters.INTERPRETER_DIR_ENV, str(tmp_path))
    python = make_interpreter_with_own_copy(tmp_path / "pusht")
    if copy == "edited":
        (package_copy(tmp_path / "pusht") / "benchmark/model.py").write_text("# another copy\n")
    commands = plan(argparse.Namespace(stack="pusht", system_deps=False, own_interpreter=True))
    assert not isinstance(commands, str)
    replacing = [c.argv for c in commands if "--force-reinstall" in c.argv]
    if copy == "this one":
        assert replacing == []
    else:
        assert replacing == [installer.pip_command(interpreters.package_step(), str(python)).argv]
        assert commands[0].argv == replacing[0]  # then every later step, as after any unmet step


def test_an_interpreter_of_its_own_that_is_not_python_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(interpreters.INTERPRETER_DIR_ENV, str(tmp_path))
    (tmp_path / "pusht" / "bin").mkdir(parents=True)
    (tmp_path / "pusht" / "bin" / "python").symlink_to("/bin/sh")
    args = argparse.Namespace(
        stacks=["pusht"], system_deps=False, own_interpreter=True, check=False, dry_run=True, python=None, list=False
    )
    assert command.run(args) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"vlaeval install: the interpreter at {tmp_path / 'pusht'} does not run; ")


# -- the check --------------------------------------------------------------------------------


def test_the_check_of_an_interpreter_of_its_own_advises_that_install_and_names_a_stale_copy_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``vlaeval install pusht --own-interpreter --check`` on an interpreter with an older copy of
    this package and no gym-pusht: every line advises the command that installs there, and the copy
    is one line (its version check said it again). pygame prints a banner as it is imported here:
    that is no failure to import."""
    monkeypatch.setenv(interpreters.INTERPRETER_DIR_ENV, str(tmp_path))
    make_interpreter_with_own_copy(tmp_path / "pusht", leave_out=("gym_pusht",))
    (package_copy(tmp_path / "pusht") / "version.py").write_text('__version__ = "0.0.1"\n')
    metadata = next((tmp_path / "pusht").glob("lib/python3*/site-packages/pytest_vlaeval-*.dist-info/METADATA"))
    metadata.write_text("Metadata-Version: 2.1\nName: pytest-vlaeval\nVersion: 0.0.1\n")
    args = argparse.Namespace(
        stacks=["pusht"], system_deps=False, own_interpreter=True, check=True, dry_run=False, python=None,
        source=None, force=False, list=False,
    )  # fmt: skip
    assert command.run(args) == 1
    lines = capsys.readouterr().out.splitlines()
    fix = ": run `vlaeval install pusht --own-interpreter`"
    assert lines == [
        f"vlaeval install: PROBLEM: its interpreter holds pytest-vlaeval 0.0.1, not this session's "
        f"{importlib.metadata.version('pytest-vlaeval')}{fix}",
        f"vlaeval install: PROBLEM: gym-pusht is not installed{fix}",
        f"vlaeval install: PROBLEM: cannot import gym_pusht: ModuleNotFoundError: No module named 'gym_pusht'{fix}",
    ]


def test_the_check_of_a_stack_in_this_environment_runs_its_finish_check_here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What LIBERO-Plus's finish step finds not in place in the caller's environment is a problem
    of ``vlaeval install libero-plus --check``, one line naming the fix (its packages, imports and
    assets stand in here as in place)."""
    asked = []

    def finish_check(argv: list[str], timeout: float, limit: int) -> Finished:
        asked.append(argv)
        return Finished(1, "the config is stale\n", "", False, limit)

    monkeypatch.setattr(command, "run_bounded", finish_check)
    monkeypatch.setattr(installer, "version_problems", lambda *args: [])
    monkeypatch.setattr(installer, "import_problems", lambda *args: [])
    monkeypatch.setattr(command, "install_assets", lambda *args, **kwargs: [])
    monkeypatch.setattr(command, "preflight_problem", lambda *args: None)
    args = argparse.Namespace(
        stacks=["libero-plus"], system_deps=False, own_interpreter=False, check=True, dry_run=False, python=None,
        source=None, force=False, list=False,
    )  # fmt: skip
    assert command.run(args) == 1
    assert asked == [[sys.executable, "-m", "pytest_vlaeval.envs.libero_plus_setup", "--check"]]
    assert capsys.readouterr().out.splitlines() == [
        "vlaeval install: PROBLEM: the config is stale: run `vlaeval install libero-plus`"
    ]


def test_a_wrong_version_is_one_line_naming_the_fix() -> None:
    lines = installer.version_problems(MIKASA, versions_meeting("mikasa", sapien="3.0.0b1"), "vlaeval install mikasa")
    assert lines == ["sapien 3.0.0b1 is installed, the stack needs sapien==3.0.3: run `vlaeval install mikasa`"]


def test_an_unsupported_python_is_refused_before_anything_runs() -> None:
    assert installer.python_problem(MIKASA, (3, 11)) is None
    problem = installer.python_problem(MIKASA, (3, 12))
    assert problem and "3.10 to 3.11" in problem


def test_a_module_that_fails_to_import_is_named() -> None:
    broken = dataclasses.replace(LIBERO, imports=("json", "no_such_module_here"))
    assert installer.import_problems(broken, "vlaeval install libero") == [
        "cannot import no_such_module_here: ModuleNotFoundError: No module named 'no_such_module_here': "
        "run `vlaeval install libero`"
    ]


@pytest.mark.mikasa
def test_install_mikasa_check_in_this_interpreter() -> None:
    result = vlaeval("install", "mikasa", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mikasa is ready" in result.stdout
    assert "PROBLEM" not in result.stdout


# -- optional extras ---------------------------------------------------------------------------


def test_video_without_opencv_is_refused_before_any_episode(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cv2", None)
    result = fake.runpytest(*SHORT, "--vla-video=failed")
    assert_one_line_usage_error(result, "pip install 'pytest-vlaeval[video]'")


def test_the_plugin_check_names_each_loaded_plugin_the_interpreter_lacks_or_holds_at_another_version(
    tmp_path: Path,
) -> None:
    """The session's pytest plugins must be in a benchmark's interpreter at their versions (a
    plugin's worker half missing there breaks every worker's end); this package and the harness
    are pinned apart and never reported."""
    from pytest_vlaeval.install.interpreters import InstalledIn, missing_plugins, pytest_plugins

    for name, version in (("pytest_foo", "1.0"), ("pytest-bar", "2.0")):
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    installed = InstalledIn([tmp_path])
    loaded = [("pytest-foo", "1.0"), ("pytest-bar", "2.1"), ("pytest-baz", "0.3"), ("pytest-xdist", "0.0")]
    loaded.append(("pytest_vlaeval", "0.0"))
    assert missing_plugins(installed, loaded) == ["pytest-bar==2.1", "pytest-baz==0.3"]
    plugins = pytest_plugins()
    assert "pytest-xdist" not in plugins and "pytest-vlaeval" not in plugins, plugins
    assert plugins == {n: importlib.metadata.version(n) for n in plugins}, "each at this env's version"
