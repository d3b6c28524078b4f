"""The controller process only (the one the user started, not under ``--co``): the gate and its
baseline, where the policy runs (beside the env or served), the workers' interpreter and placement,
the scheduler, the render check, the run directory claimed, the policy server started, and the
plugins that store, judge and report."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_vlaeval.benchmark.install import PipStep
from pytest_vlaeval.controller import pytest_html_extras
from pytest_vlaeval.controller.failures import FailedEpisodeSections
from pytest_vlaeval.controller.plugin import ResultsController
from pytest_vlaeval.distribute import scheduler
from pytest_vlaeval.distribute.backends import OwnInterpreter, WorkerBackends, on_this_host, place_workers, worker_specs
from pytest_vlaeval.distribute.placement import gpu_visible
from pytest_vlaeval.distribute.policy_placement import BESIDE_KEY, PolicyPlacement, Workers, place_policy
from pytest_vlaeval.distribute.scheduler import SchedulingVariant
from pytest_vlaeval.distribute.seed_blocks import SequentialBlocks
from pytest_vlaeval.distribute.whole_tasks import WholeTasks
from pytest_vlaeval.envs.preflight import preflight_problem
from pytest_vlaeval.episodes.lockstep import vectorized
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.gate.baseline import load_baseline
from pytest_vlaeval.gate.fixed import FixedGate
from pytest_vlaeval.gate.plan import PLAN_BUDGETS, budget_table
from pytest_vlaeval.gate.protocol import Gate, NoGate
from pytest_vlaeval.gate.sequential_gate import SequentialGate
from pytest_vlaeval.install.interpreters import (
    InstalledIn,
    how_to_install,
    installed_in,
    missing_plugins,
    package_mismatch,
    package_step,
    probe,
    session_python,
)
from pytest_vlaeval.policy.sources import PolicySource
from pytest_vlaeval.printable import terminal_safe
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.store import RunStore, fingerprint
from pytest_vlaeval.run_context import RunContext


@dataclass(frozen=True)
class Prepared:
    """What the controller's checks leave for its plugins and the episodes."""

    gate: Gate
    served: str | None
    """The address of the session's policy server (``--vla-serve``, a source served from an
    interpreter of its own), if any."""
    workers: WorkerBackends
    placement: PolicyPlacement


def prepare(config: pytest.Config, run: RunContext, store: RunStore) -> Prepared:
    """Check, place the workers, claim the store and start the session's policy server, if any."""
    execution = run.execution
    try:
        gate = _gate(run)
        if config.getoption("vla_gate_plan"):
            _print_plan(gate, run)
        placement = _policy_placement(config, run)  # before any interpreter starts
        worker, installed = _worker_python(config, run, placement)
        workers = place_workers(config, worker)  # before xdist's own pytest_configure reads -n/--tx
        scheduler.install(config, run.selection, _scheduling_variant(run, gate), execution.lockstep)
        _preflight(run, worker.python if worker else None)
        server_python = _server_python(config, run.policy) if placement.served else None
        store.check_writable(t.env_id for t in run.selection.tasks)  # the first thing that touches the disk
        num_envs = execution.lockstep if vectorized(run.selection.benchmark.env, execution.render) else 1
        store.claim(
            fingerprint(
                run.selection, run.policy.identity, execution.render, num_envs, execution.reference_order, installed
            )
        )
        config.add_cleanup(store.vacate)
        store.occupy()  # a second session started on the run at once would run its episodes again
        store.holds_policy()  # a damaged policy file stops the session now, not at its first episode
        store.keep_spec(run.selection.benchmark)
    except (SpecError, ResultsUnwritable) as exc:
        raise pytest.UsageError(terminal_safe(str(exc))) from None  # a value given may hold anything
    served = None
    if placement.served:
        from pytest_vlaeval.serving.server.launcher import (
            serve_session,
        )  # serving code loads only when a session serves

        action_dim = run.selection.benchmark.env.action_dim
        served = serve_session(config, run.policy, run.dir.server_log, action_dim, server_python)
    return Prepared(gate, served, workers, placement)


def register(
    config: pytest.Config,
    run: RunContext,
    store: RunStore,
    latest: LatestRecords,
    prepared: Prepared,
) -> None:
    controller = ResultsController(run, store, latest, prepared.gate, prepared.workers)
    config.pluginmanager.register(controller, "vlaeval-controller")
    if prepared.placement.line:
        config.pluginmanager.register(_Placed(prepared.placement), "vlaeval-policy-placement")
    if pytest_html_extras.wanted(config):
        config.pluginmanager.register(
            pytest_html_extras.PytestHtmlExtras(controller.writer, Path(config.option.htmlpath))
        )
    if not config.getoption("vla_failure_details"):
        config.pluginmanager.register(FailedEpisodeSections(), "vlaeval-failure-sections")


def _scheduling_variant(run: RunContext, gate: Gate) -> SchedulingVariant | None:
    """The affinity scheduler's refinement, chosen once: the gate's seed blocks, whole tasks, or none."""
    blocks = gate.seed_blocks()
    if blocks is not None:
        return SequentialBlocks.of(blocks)
    return WholeTasks() if run.execution.reference_order else None


def _print_plan(gate: Gate, run: RunContext) -> None:
    """``--vla-gate-plan``: the seeds the gate needs to decide, then exit before any episode."""
    profile = gate.profile()  # no gate: SpecError naming the options that give one
    baseline_seeds = None
    if gate.baseline is not None:
        start = run.selection.start_seed
        baseline_seeds = len(gate.baseline.paired_seeds(range(start, start + PLAN_BUDGETS[-1])))
    lines = budget_table(gate.design, profile, run.gate.plan_probability, baseline_seeds)
    print("\n".join(lines), flush=True)
    pytest.exit(f"--vla-gate-plan: no episode run (this run's budget: --episodes={run.selection.episodes})", 0)


def _gate(run: RunContext) -> Gate:
    """The gate this session judges by, its baseline read and checked now, before any episode runs."""
    selection = run.selection
    baseline = None
    if run.gate.baseline is not None:
        baseline = load_baseline(
            run.gate.baseline, [t.env_id for t in selection.tasks], selection.seeds, benchmark=selection.benchmark
        )
    if run.gate.sequential:
        return SequentialGate.create(run.gate, selection, baseline)
    return FixedGate.create(baseline, selection.seeds, run.gate) if baseline else NoGate()


def _server_python(config: pytest.Config, policy: PolicySource) -> Path | None:
    """The interpreter the session's policy server runs in (None: this one), checked to hold this
    package's very files, as a benchmark's own interpreter is."""
    named = config.getoption("vla_serve_python") or policy.interpreter
    if named is None:
        return None
    is_path = os.sep in named or named.startswith(".")
    by_option = f" (--vla-serve-python={named})" if config.getoption("vla_serve_python") else ""
    title = f"{policy.option} {policy.text}{by_option}"
    python = Path(named).expanduser().absolute() if is_path else session_python(named, title)
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


def _policy_placement(config: pytest.Config, run: RunContext) -> PolicyPlacement:
    """Where the session's policy runs: beside the env in each worker, or served from one process
    (``distribute.policy_placement``'s rule, ``--vla-policy-placement``)."""
    specs = worker_specs(config)
    workers = Workers(
        count=len(specs),
        remote=not all(on_this_host(spec) for spec in specs),
        gpus_placed=bool(config.getoption("vla_placement")),
    )
    serve_given = bool(config.getoption("vla_serve") or config.getoption("vla_serve_python"))
    asked = config.getoption("vla_policy_placement")
    return place_policy(run.policy, run.selection.benchmark, asked, workers, gpu_visible, serve_given)


def _worker_python(
    config: pytest.Config, run: RunContext, placement: PolicyPlacement
) -> tuple[OwnInterpreter | None, InstalledIn | None]:
    """The interpreter of its own the workers run in (the policy's, beside the env; else the
    benchmark's) and its distributions, read once (the plugin check and the fingerprint use them);
    (None, None): this one. Checked now: it exists, it holds this package's very files (an older
    copy would run the episodes), it has the session's plugins, and an in-process policy imports in
    it (else one line naming ``--vla-serve``): all asked of it in one start (``probe``), which also
    says its ``sys.path`` (the workers' path)."""
    benchmark = run.selection.benchmark
    name = placement.interpreter or benchmark.install.interpreter
    if name is None or config.option.collectonly:
        return None, None
    whose = f"--policy {run.policy.text}" if placement.interpreter else benchmark.title  # beside: never --vla-serve's
    python = session_python(name, whose)
    module = getattr(run.policy, "module", None) if not config.getoption("vla_serve") else None
    probed = probe(python, (module,) if module else ())
    held = probed.mismatch
    if held:
        raise SpecError(
            f"{whose}'s interpreter ({python}) holds {held}, so its workers would run other code than "
            f"this session: `{how_to_install(name, python, package_step())}` installs this one there"
        )
    installed = installed_in(python)
    loaded = [(dist.metadata["Name"], dist.version) for _, dist in config.pluginmanager.list_plugin_distinfo()]
    missing = missing_plugins(installed, loaded)
    if missing:
        pins = PipStep("the session's plugins", tuple(missing))
        raise SpecError(
            f"this session's pytest plugins {', '.join(missing)} are not in {whose}'s interpreter "
            f"({python}), where its workers run: `{how_to_install(name, python, pins)}` installs them, "
            "or leave them out with -p no:NAME"
        )
    if module is not None:
        problem = probed.imports[module]
        if problem:
            raise SpecError(
                f"--policy {run.policy.text!r} does not import in {whose}'s interpreter ({python}): "
                f"{problem}; run it in this environment and serve it to the workers with --vla-serve={run.policy.text}"
            )
    return OwnInterpreter(python, probed.path), installed


class _Placed:
    """Says where the policy runs, once, as the session starts; tells each worker whether it runs
    the policy beside the env."""

    def __init__(self, placement: PolicyPlacement) -> None:
        self.placement = placement

    @pytest.hookimpl(trylast=True)  # after pytest's header
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.placement.line:
            reporter.write_line(terminal_safe(self.placement.line), bold=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[BESIDE_KEY] = self.placement.interpreter is not None


def _preflight(run: RunContext, python: Path | None) -> None:
    """Check the render backend in a throwaway process, so a broken machine fails in one line."""
    module = run.selection.benchmark.env.preflight
    problem = (
        preflight_problem(module, run.execution.render, str(python) if python else sys.executable) if module else None
    )
    if problem:
        raise pytest.UsageError(f"render backend check failed: {terminal_safe(problem)}")
