"""Session wiring for ``--benchmark``: options -> selection -> the plugins that do the work.

Bad input stops here with one line (pytest's usage error), before any episode runs.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_vlaeval import termination
from pytest_vlaeval.distribute.indexed import AUTO, shard_from_environment
from pytest_vlaeval.envs.preflight import preflight_problem
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.install.interpreters import (
    InstalledIn,
    how_to_install,
    import_problem,
    installed_in,
    missing_plugins,
    package_mismatch,
    package_step,
    probe,
    session_python,
)
from pytest_vlaeval.install.stacks import PipStep
from pytest_vlaeval.results.subset import RERUN_MODES, parse_shard, read_episode_list
from pytest_vlaeval.run_context import WORKER_PLAN, RunContext
from pytest_vlaeval.spec import Benchmark, Selection, resolve_benchmark, select

if TYPE_CHECKING:
    from pytest_vlaeval.distribute.backends import OwnInterpreter
    from pytest_vlaeval.distribute.seed_blocks import SequentialBlocks
    from pytest_vlaeval.gate.fixed import FixedGate
    from pytest_vlaeval.gate.plan import Gate
    from pytest_vlaeval.gate.sequential_gate import SequentialGate
    from pytest_vlaeval.gate.settings import GateSettings
    from pytest_vlaeval.policy.loading import LocalPolicy, LocalSpec, PolicySpec
    from pytest_vlaeval.results.latest import LatestRecords
    from pytest_vlaeval.results.store import RunStore

RUN_CONTEXT = pytest.StashKey[RunContext]()
"""The session's ``RunContext`` on ``config.stash``, for tools that drive a session (``vlaeval slurm``
reads the run directory a command line names from a collect-only session)."""


def start(config: pytest.Config) -> None:
    """Every process collects the episodes; the controller also checks, stores and reports."""
    from pytest_vlaeval.results.latest import LatestRecords
    from pytest_vlaeval.results.store import RunStore

    try:
        worker_plan = getattr(config, "workerinput", {}).get(WORKER_PLAN)
        on_worker = worker_plan is not None  # this process's role, decided here once
        run = _run_context(config, on_worker)
        if on_worker:  # the controller chose; every worker runs the same list
            run = dataclasses.replace(run, episodes=frozenset((task, seed) for task, seed in worker_plan))
        else:
            store = RunStore(run.run_dir, run.store_label)
            # Read once: it plans this session and feeds the controller. Only the run's episodes are
            # kept: a log received into the run may hold any number of others.
            latest = LatestRecords.read(store.dir, run.selection.episode_ids)
            run = _plan(run, latest)
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[RUN_CONTEXT] = run
    from pytest_vlaeval.envs.cpu_share import share_cpu_threads
    from pytest_vlaeval.episodes.deadline import keep_session_stderr

    keep_session_stderr()
    share_cpu_threads()
    config.add_cleanup(termination.interrupt_on_termination())
    _register_markers(config, run.selection)
    for noise in run.selection.benchmark.env.filterwarnings:  # the simulator stack's, from its file
        config.addinivalue_line("filterwarnings", noise)
    controller = not on_worker and not config.option.collectonly
    gate, served = _prepare_controller(config, run, store) if controller else (None, None)
    _register_episodes(config, run, _policy_to_run(config, run, served), on_worker)
    if controller:
        _register_controller(config, run, store, latest, gate)


def _register_episodes(config: pytest.Config, run: RunContext, policy: PolicySpec, on_worker: bool) -> None:
    from pytest_vlaeval.episodes.collect import BenchmarkCollection, EpisodeReports, Plan
    from pytest_vlaeval.episodes.runner import EpisodeRunner

    runner = EpisodeRunner(
        run.selection,
        policy,
        run.render,
        run.timeout,
        (run.video, run.dir.videos),
        run.lockstep,
        run.reference_order,
    )
    note = None if on_worker else run.subset_note  # said once, by the process the user watches
    plan = Plan(run.selection, run.episodes, runner, run.retries, note, run.gate if run.gate.sequential else None)
    config.pluginmanager.register(BenchmarkCollection(plan), "vlaeval-collection")
    config.pluginmanager.register(EpisodeReports(), "vlaeval-reports")


def _policy_to_run(config: pytest.Config, run: RunContext, served_here: str | None) -> PolicySpec:
    """What this process's episodes build: the run's policy, or under ``--vla-serve`` the session's
    server (started here, or reaching an xdist worker through its ``workerinput``; none under ``--co``)."""
    if not _serves(config, run.policy):
        return run.policy
    from pytest_vlaeval.policy.loading import parse_policy
    from pytest_vlaeval.serving.url import SERVED_URL_KEY

    served = served_here or getattr(config, "workerinput", {}).get(SERVED_URL_KEY)
    return parse_policy(served) if served else run.policy


def _sequential_blocks(gate: SequentialGate) -> SequentialBlocks:
    """What the affinity scheduler needs of the sequential gate: an episode's block by node id,
    and whether to stop sending."""
    from pytest_vlaeval.distribute.seed_blocks import SequentialBlocks
    from pytest_vlaeval.episodes.nodeid import parse_nodeid

    def block_of(nodeid: str) -> int:
        key = parse_nodeid(nodeid)
        return gate.block_of_seed(key[1]) if key else 0

    return SequentialBlocks(block_of, lambda: gate.done)


def _prepare_controller(
    config: pytest.Config, run: RunContext, store: RunStore
) -> tuple[FixedGate | SequentialGate | None, str | None]:
    """Check, claim the store and start ``--vla-serve``'s server; returns the gate and the server's address."""
    from pytest_vlaeval.distribute import scheduler
    from pytest_vlaeval.distribute.backends import place_workers
    from pytest_vlaeval.episodes.runner import vectorized
    from pytest_vlaeval.results.store import fingerprint

    try:
        gate = _gate(run)
        if config.getoption("vla_gate_plan"):
            _print_plan(gate, run)
        sequential = gate if run.gate.sequential else None
        worker, installed = _worker_python(config, run)
        place_workers(config, worker)  # before xdist's own pytest_configure reads -n/--tx
        scheduler.install(
            config,
            run.selection,
            _sequential_blocks(sequential) if sequential else None,
            run.lockstep,
            whole_tasks=run.reference_order,
        )
        _preflight(run, worker.python if worker else None)
        server_python = _server_python(config, run.policy) if _serves(config, run.policy) else None  # type: ignore[arg-type]
        store.check_writable(t.env_id for t in run.selection.tasks)  # the first thing that touches the disk
        num_envs = run.lockstep if vectorized(run.selection.benchmark, run.render) else 1
        store.claim(
            fingerprint(run.selection, run.policy.identity, run.render, num_envs, run.reference_order, installed)
        )
        store.holds_policy()  # a damaged policy file stops the session now, not at its first episode
        store.keep_spec(run.selection.benchmark)
    except (SpecError, ResultsUnwritable) as exc:
        raise pytest.UsageError(str(exc)) from None
    served = None
    if _serves(config, run.policy):
        from pytest_vlaeval.serving.server.launcher import serve_session

        action_dim = run.selection.benchmark.env.action_dim
        served = serve_session(config, run.policy, run.dir.server_log, action_dim, server_python)  # type: ignore[arg-type]
    return gate, served


def _print_plan(gate: Gate | None, run: RunContext) -> None:
    """``--vla-gate-plan``: the seeds the gate needs to decide, then exit before any episode."""
    from pytest_vlaeval.gate.plan import PLAN_BUDGETS, budget_table

    if gate is None:
        raise SpecError("--vla-gate-plan plans a gate: add --vla-baseline=DIR or --vla-sequential --vla-min-sr=X")
    baseline_seeds = None
    if gate.baseline is not None:
        start = run.selection.start_seed
        baseline_seeds = len(gate.baseline.paired_seeds(range(start, start + PLAN_BUDGETS[-1])))
    lines = budget_table(gate.design, gate.profile(), run.gate.plan_probability, baseline_seeds)
    print("\n".join(lines), flush=True)
    pytest.exit(f"--vla-gate-plan: no episode run (this run's budget: --episodes={run.selection.episodes})", 0)


def _gate(run: RunContext) -> FixedGate | SequentialGate | None:
    """The gate this session judges by, its baseline read and checked now, before any episode runs."""
    from pytest_vlaeval.gate.baseline import load_baseline
    from pytest_vlaeval.gate.fixed import FixedGate
    from pytest_vlaeval.gate.sequential_gate import SequentialGate

    selection = run.selection
    baseline = None
    if run.gate.baseline is not None:
        baseline = load_baseline(
            run.gate.baseline, [t.env_id for t in selection.tasks], selection.seeds, benchmark=selection.benchmark
        )
    if run.gate.sequential:
        return SequentialGate.create(run.gate, selection, baseline)
    return FixedGate.create(baseline, selection.seeds, run.gate) if baseline else None


def _register_controller(
    config: pytest.Config,
    run: RunContext,
    store: RunStore,
    latest: LatestRecords,
    gate: FixedGate | SequentialGate | None,
) -> None:
    from pytest_vlaeval.controller import pytest_html_extras
    from pytest_vlaeval.controller.plugin import ResultsController

    controller = ResultsController(run, store, latest, gate)
    config.pluginmanager.register(controller, "vlaeval-controller")
    if pytest_html_extras.wanted(config):
        config.pluginmanager.register(
            pytest_html_extras.PytestHtmlExtras(controller.writer, Path(config.option.htmlpath))
        )
    if not config.getoption("vla_failure_details"):
        from pytest_vlaeval.controller.failures import FailedEpisodeSections

        config.pluginmanager.register(FailedEpisodeSections(), "vlaeval-failure-sections")


def _plan(run: RunContext, records: LatestRecords) -> RunContext:
    """Narrow the universe to this session's episodes: a shard, then what the store says."""
    from pytest_vlaeval.results.subset import shard, still_to_run

    universe = run.selection.episode_ids
    listed = list(run.episode_list) if run.episode_list is not None else None
    chosen = shard(run.selection, *run.shard, listed) if run.shard else listed if listed is not None else universe
    notes = [f"--vla-episode-list: {len(listed)} of {len(universe)} episodes"] if listed is not None else []
    if run.shard:
        notes.append(
            f"shard {run.shard[0]}/{run.shard[1]}: {len(chosen)} of {len(universe if listed is None else listed)} episodes"
        )
    if run.rerun:
        before = len(chosen)
        chosen = still_to_run(chosen, records, run.rerun)
        done = sum(1 for key in universe if key in records)
        notes.append(
            f"--vla-rerun={run.rerun}: {len(chosen)} of {before} episodes selected ({done} of {len(universe)} already recorded in {run.run_dir})"
        )
    return dataclasses.replace(
        run, episodes=frozenset(chosen), subset_note="vlaeval: " + "; ".join(notes) if notes else None
    )


def _run_context(config: pytest.Config, on_worker: bool) -> RunContext:
    """What the session was asked to do. A worker is handed its episodes by the controller, so it
    reads neither the scheduler's environment (``--vla-shard=auto``) nor ``--vla-episode-list``:
    a worker on another host has neither."""
    from pytest_vlaeval.results.store import run_dir_name

    benchmark, split = resolve_benchmark(config.getoption("benchmark"))
    tasks = config.getoption("vla_tasks")
    selection = select(
        benchmark,
        split,
        env_ids=[t.strip() for t in tasks.split(",") if t.strip()] if tasks else None,
        start_seed=config.getoption("vla_start_seed"),
        episodes=config.getoption("episodes"),
    )
    policy = _policy(config, benchmark)
    render = config.getoption("vla_render") or config.getini("vla_render")
    results_root = Path(config.getoption("vla_results") or config.getini("vla_results"))
    if not results_root.is_absolute():
        results_root = config.invocation_params.dir / results_root
    run_name = config.getoption("vla_run_name") or run_dir_name(selection, policy.identity)
    if run_name in (".", "..") or "/" in run_name or os.sep in run_name:
        raise SpecError(f"--vla-run-name {run_name!r}: expected a directory name, not a path")
    rerun = config.getoption("vla_rerun")
    if rerun is not None and rerun not in RERUN_MODES:
        raise SpecError(f"--vla-rerun {rerun!r}; valid: {', '.join(RERUN_MODES)}")
    if config.getoption("vla_resume"):
        if rerun not in (None, "missing"):
            raise SpecError(
                f"--vla-resume runs the episodes with no record; it does not combine with --vla-rerun={rerun}"
            )
        rerun = "missing"
    shard_arg = None if on_worker else config.getoption("vla_shard")
    from_scheduler = shard_arg == AUTO
    baseline = config.getoption("vla_baseline")
    listed = None if on_worker else config.getoption("vla_episode_list")
    if from_scheduler:
        shard_arg = shard_from_environment(os.environ)
        if baseline and not config.getoption("vla_sequential"):
            raise SpecError(
                "--vla-baseline judges a whole run; a shard of an array (--vla-shard=auto) sees part of it: "
                "give the baseline to the merge (vlaeval merge RUN_DIR --baseline DIR)"
            )
    retries = config.getoption("vla_retries")
    video = config.getoption("vla_video")
    lockstep = config.getoption("vla_lockstep") or 1
    reference_order = bool(config.getoption("vla_reference_order"))
    if reference_order:
        _check_reference_order(config, lockstep, rerun, shard_arg)
    if video != "none" and lockstep > 1:
        raise SpecError(
            f"--vla-video={video} records lone episodes; it does not combine with --vla-lockstep={lockstep}"
        )
    if video != "none" and importlib.util.find_spec("cv2") is None:
        raise SpecError(
            f"--vla-video={video} writes videos with OpenCV, which is not installed: pip install 'pytest-vlaeval[video]'"
        )
    run = RunContext(
        selection,
        policy,
        render,
        results_root / run_name,
        retries=retries,
        shard=parse_shard(shard_arg) if shard_arg else None,
        merged_later=from_scheduler,
        episode_list=tuple(read_episode_list(Path(listed), selection)) if listed else None,
        rerun=rerun,
        gate=_gate_settings(config),
        timeout=config.getoption("vla_timeout"),
        video=video,
        lockstep=lockstep,
        reference_order=reference_order,
    )
    return run


def _check_reference_order(config: pytest.Config, lockstep: int, rerun: str | None, shard: str | None) -> None:
    """``--vla-reference-order`` runs a task's seeds as one sequence, from its first: what would
    run part of a sequence, or split one, is refused."""
    conflicts = [
        ("--vla-resume" if config.getoption("vla_resume") else f"--vla-rerun={rerun}", rerun),
        ("--vla-shard", shard),
        ("--vla-episode-list", config.getoption("vla_episode_list")),
        ("--lf", config.getoption("lf", False)),
        ("--ff", config.getoption("failedfirst", False)),
        ("--vla-sequential", config.getoption("vla_sequential")),
        (f"--vla-lockstep={lockstep}", lockstep > 1),
        (f"--vla-retries={config.getoption('vla_retries')}", config.getoption("vla_retries")),
    ]
    named = [name for name, given in conflicts if given]
    if named:
        raise SpecError(
            f"--vla-reference-order runs each task's seeds in order in one env, from its first; {named[0]} would "
            f"break that sequence"
        )


def _gate_settings(config: pytest.Config) -> GateSettings:
    from pytest_vlaeval.gate.settings import GateSettings

    return GateSettings.checked(
        baseline=config.getoption("vla_baseline"),
        sequential=config.getoption("vla_sequential"),
        min_sr=config.getoption("vla_min_sr"),
        block=config.getoption("vla_block"),
        shard=config.getoption("vla_shard"),
        max_drop=config.getoption("vla_max_drop"),
        alpha=config.getoption("vla_gate_alpha"),
        assume=config.getoption("vla_gate_assume"),
        undecided_exit=config.getoption("vla_undecided_exit"),
        plan_probability=config.getoption("vla_gate_plan_probability"),
    )


def _policy(config: pytest.Config, benchmark: Benchmark) -> PolicySpec:
    """``--vla-serve``'s or ``--policy``'s spec, parsed; a typo'd module or an unusable LeRobot
    checkpoint is caught before any worker starts."""
    from pytest_vlaeval.policy.loading import LeRobotCheckpoint, LocalPolicy, parse_local_policy, parse_policy

    served = config.getoption("vla_serve")
    if served and config.getoption("policy"):
        raise SpecError("--vla-serve serves the policy it names; it does not combine with --policy")
    text = served or config.getoption("policy") or config.getini("vla_policy")
    option = "--vla-serve" if served else "--policy"
    local = served or "://" not in text
    policy = parse_local_policy(text, benchmark.lerobot.env_type, option) if local else parse_policy(text)
    if isinstance(policy, LocalPolicy):
        _check_importable(policy)
    if isinstance(policy, LeRobotCheckpoint):
        from pytest_vlaeval.policy.lerobot_checkpoint import check_checkpoint

        check_checkpoint(policy, benchmark)
    if config.getoption("vla_serve_python") and not _serves(config, policy):
        raise SpecError("--vla-serve-python names the interpreter a served policy runs in: add --vla-serve=SPEC")
    return policy


def _serves(config: pytest.Config, policy: PolicySpec) -> bool:
    """Whether the session serves its policy from a server process of its own: ``--vla-serve``, or
    a policy that runs in an interpreter of its own (a LeRobot checkpoint)."""
    from pytest_vlaeval.policy.loading import LeRobotCheckpoint

    return bool(config.getoption("vla_serve")) or isinstance(policy, LeRobotCheckpoint)


def _server_python(config: pytest.Config, policy: LocalSpec) -> Path | None:
    """The interpreter the session's policy server runs in (None: this one), checked to hold this
    package's very files, as a benchmark's own interpreter is."""
    from pytest_vlaeval.policy.loading import LeRobotCheckpoint

    named = config.getoption("vla_serve_python") or (
        LeRobotCheckpoint.INTERPRETER if isinstance(policy, LeRobotCheckpoint) else None
    )
    if named is None:
        return None
    is_path = os.sep in named or named.startswith(".")
    python = Path(named).expanduser().absolute() if is_path else session_python(named, f"--policy {policy.text}")
    if is_path and not python.is_file():
        raise SpecError(f"--vla-serve-python {named!r}: no such Python executable")
    held = package_mismatch(python)
    if held:
        how = how_to_install(named, python, package_step())
        raise SpecError(
            f"the policy server's interpreter ({python}) holds {held}, so it would serve with other code than "
            f"this session: `{how}` installs this one there"
        )
    return python


def _check_importable(policy: LocalPolicy) -> None:
    """Whether the module exists and binds the name, read without importing the user's module."""
    try:
        found = importlib.util.find_spec(policy.module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise SpecError(
            f"{policy.option} {policy.text!r}: module {policy.module!r} is not importable from {os.getcwd()} (is it installed or on sys.path?)"
        )
    names = _top_level_names(found.origin)
    if names is not None and policy.attr not in names:
        raise SpecError(
            f"{policy.option} {policy.text!r}: module {policy.module!r} ({found.origin}) defines no {policy.attr!r}"
        )


def _top_level_names(origin: str | None) -> set[str] | None:
    """The names a Python source file binds at module level, read without running it; None when
    that cannot be known statically (not a source file, a star import, a module ``__getattr__``)."""
    if not origin or not origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(origin).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None  # importing it will say what is wrong, in the episode's error
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue  # their bodies bind names in their own scope
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return None
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return None if "__getattr__" in names else names


def _register_markers(config: pytest.Config, selection: Selection) -> None:
    """One marker per split and per group along every other axis; a name on two axes (LIBERO-PRO's
    ``object``: a base suite and a perturbation) is one marker that selects both, and says so."""
    benchmark = selection.benchmark
    meanings: dict[str, list[str]] = {split: [f"the {split} split"] for split in benchmark.splits}
    for axis in benchmark.axes[1:]:
        for group in benchmark.groups(axis):
            meanings.setdefault(group.lower(), []).append(f"{axis.label} {group}")
    for name, what in meanings.items():
        config.addinivalue_line("markers", f"{name}: {benchmark.title} episodes of {' and of '.join(what)}")


def _worker_python(config: pytest.Config, run: RunContext) -> tuple[OwnInterpreter | None, InstalledIn | None]:
    """The interpreter of its own the benchmark's workers run in and its distributions, read once
    (the plugin check and the fingerprint use them); (None, None): this one. Checked now: it
    exists, it holds this package's very files (an older copy would run the episodes), it has the
    session's plugins, and an in-process policy imports in it (else one line naming ``--vla-serve``).
    Started once for its package and its ``sys.path`` (the workers' path), once more for the policy's import."""
    benchmark = run.selection.benchmark
    name = benchmark.env.interpreter
    if name is None or config.option.collectonly:
        return None, None
    python = session_python(name, benchmark.title)
    probed = probe(python)
    held = probed.mismatch
    if held:
        raise SpecError(
            f"{benchmark.title}'s interpreter ({python}) holds {held}, so its workers would run other code than "
            f"this session: `{how_to_install(name, python, package_step())}` installs this one there"
        )
    installed = installed_in(python)
    loaded = [(dist.metadata["Name"], dist.version) for _, dist in config.pluginmanager.list_plugin_distinfo()]
    missing = missing_plugins(installed, loaded)
    if missing:
        pins = PipStep("the session's plugins", tuple(missing))
        raise SpecError(
            f"this session's pytest plugins {', '.join(missing)} are not in {benchmark.title}'s interpreter "
            f"({python}), where its workers run: `{how_to_install(name, python, pins)}` installs them, "
            "or leave them out with -p no:NAME"
        )
    module = getattr(run.policy, "module", None)
    if module is not None and not config.getoption("vla_serve"):
        problem = import_problem(python, module)
        if problem:
            raise SpecError(
                f"--policy {run.policy.text!r} does not import in {benchmark.title}'s interpreter ({python}): "
                f"{problem}; run it in this environment and serve it to the workers with --vla-serve={run.policy.text}"
            )
    from pytest_vlaeval.distribute.backends import OwnInterpreter

    return OwnInterpreter(python, probed.path), installed


def _preflight(run: RunContext, python: Path | None) -> None:
    """Check the render backend in a throwaway process, so a broken machine fails in one line."""
    module = run.selection.benchmark.env.preflight
    problem = preflight_problem(module, run.render, str(python) if python else sys.executable) if module else None
    if problem:
        raise pytest.UsageError(f"render backend check failed: {problem}")
