"""The controller only (the process the user started, not under ``--co``): the gate and its
baseline, the workers' interpreter and placement, the scheduler, the render check, the run
directory claimed, the policy server started, and the plugins that store, judge and report."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_vlaeval.configure.options import serves
from pytest_vlaeval.controller import pytest_html_extras
from pytest_vlaeval.controller.failures import FailedEpisodeSections
from pytest_vlaeval.controller.plugin import ResultsController
from pytest_vlaeval.distribute import scheduler
from pytest_vlaeval.distribute.backends import OwnInterpreter, WorkerBackends, place_workers
from pytest_vlaeval.distribute.scheduler import SchedulingVariant
from pytest_vlaeval.distribute.seed_blocks import SequentialBlocks
from pytest_vlaeval.distribute.whole_tasks import WholeTasks
from pytest_vlaeval.envs.preflight import preflight_problem
from pytest_vlaeval.episodes.lockstep import vectorized
from pytest_vlaeval.episodes.nodeid import parse_nodeid
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.gate.baseline import load_baseline
from pytest_vlaeval.gate.fixed import FixedGate
from pytest_vlaeval.gate.plan import PLAN_BUDGETS, Gate, budget_table
from pytest_vlaeval.gate.sequential_gate import SequentialGate
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
from pytest_vlaeval.policy.loading import LeRobotCheckpoint, LocalSpec
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.store import RunStore, fingerprint
from pytest_vlaeval.run_context import RunContext


@dataclass(frozen=True)
class Prepared:
    """What the controller's checks leave for its plugins and the episodes."""

    gate: FixedGate | SequentialGate | None
    served: str | None
    """The address of the session's policy server (``--vla-serve``, a LeRobot checkpoint), if any."""
    workers: WorkerBackends


def prepare(config: pytest.Config, run: RunContext, store: RunStore) -> Prepared:
    """Check, place the workers, claim the store and start the session's policy server, if any."""
    execution = run.execution
    try:
        gate = _gate(run)
        if config.getoption("vla_gate_plan"):
            _print_plan(gate, run)
        sequential = gate if run.gate.sequential else None
        worker, installed = _worker_python(config, run)
        workers = place_workers(config, worker)  # before xdist's own pytest_configure reads -n/--tx
        scheduler.install(config, run.selection, _scheduling_variant(run, sequential), execution.lockstep)  # type: ignore[arg-type]
        _preflight(run, worker.python if worker else None)
        server_python = _server_python(config, run.policy) if serves(config, run.policy) else None  # type: ignore[arg-type]
        store.check_writable(t.env_id for t in run.selection.tasks)  # the first thing that touches the disk
        num_envs = execution.lockstep if vectorized(run.selection.benchmark.env, execution.render) else 1
        store.claim(
            fingerprint(
                run.selection, run.policy.identity, execution.render, num_envs, execution.reference_order, installed
            )
        )
        store.holds_policy()  # a damaged policy file stops the session now, not at its first episode
        store.keep_spec(run.selection.benchmark)
    except (SpecError, ResultsUnwritable) as exc:
        raise pytest.UsageError(str(exc)) from None
    served = None
    if serves(config, run.policy):
        from pytest_vlaeval.serving.server.launcher import (
            serve_session,
        )  # serving code loads only when a session serves

        action_dim = run.selection.benchmark.env.action_dim
        served = serve_session(config, run.policy, run.dir.server_log, action_dim, server_python)  # type: ignore[arg-type]
    return Prepared(gate, served, workers)


def register(
    config: pytest.Config,
    run: RunContext,
    store: RunStore,
    latest: LatestRecords,
    prepared: Prepared,
) -> None:
    controller = ResultsController(run, store, latest, prepared.gate, prepared.workers)
    config.pluginmanager.register(controller, "vlaeval-controller")
    if pytest_html_extras.wanted(config):
        config.pluginmanager.register(
            pytest_html_extras.PytestHtmlExtras(controller.writer, Path(config.option.htmlpath))
        )
    if not config.getoption("vla_failure_details"):
        config.pluginmanager.register(FailedEpisodeSections(), "vlaeval-failure-sections")


def _scheduling_variant(run: RunContext, sequential: SequentialGate | None) -> SchedulingVariant | None:
    """The affinity scheduler's refinement, chosen once: the gate's seed blocks, whole tasks, or none."""
    if sequential is not None:
        return _sequential_blocks(sequential)
    return WholeTasks() if run.execution.reference_order else None


def _sequential_blocks(gate: SequentialGate) -> SequentialBlocks:
    """What the affinity scheduler needs of the sequential gate: an episode's block by node id,
    and whether to stop sending."""

    def block_of(nodeid: str) -> int:
        key = parse_nodeid(nodeid)
        return gate.block_of_seed(key[1]) if key else 0

    return SequentialBlocks(block_of, lambda: gate.done)


def _print_plan(gate: Gate | None, run: RunContext) -> None:
    """``--vla-gate-plan``: the seeds the gate needs to decide, then exit before any episode."""
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
    selection = run.selection
    baseline = None
    if run.gate.baseline is not None:
        baseline = load_baseline(
            run.gate.baseline, [t.env_id for t in selection.tasks], selection.seeds, benchmark=selection.benchmark
        )
    if run.gate.sequential:
        return SequentialGate.create(run.gate, selection, baseline)
    return FixedGate.create(baseline, selection.seeds, run.gate) if baseline else None


def _server_python(config: pytest.Config, policy: LocalSpec) -> Path | None:
    """The interpreter the session's policy server runs in (None: this one), checked to hold this
    package's very files, as a benchmark's own interpreter is."""
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
    return OwnInterpreter(python, probed.path), installed


def _preflight(run: RunContext, python: Path | None) -> None:
    """Check the render backend in a throwaway process, so a broken machine fails in one line."""
    module = run.selection.benchmark.env.preflight
    problem = (
        preflight_problem(module, run.execution.render, str(python) if python else sys.executable) if module else None
    )
    if problem:
        raise pytest.UsageError(f"render backend check failed: {problem}")
