"""Where a policy with an interpreter of its own runs (``--vla-policy-placement``): beside the env in
each worker, or served to all the workers from one process.

Beside the env, the workers start in the policy's interpreter and each builds the policy itself
(its own copy of the checkpoint): no hop to a server per step, and every worker computes its own
forward passes on its share of the cores. That needs the benchmark's simulator stack in the
policy's interpreter (``PolicySource.holds_stacks``). Served, one process loads the policy once and
answers every worker: what a policy whose interpreter cannot hold the benchmark needs, and what
shares one GPU's copy among many workers.

The rule, decided once in the controller before any interpreter starts (``auto``): served when the
policy's interpreter does not hold the benchmark's stack, when workers run on other hosts (``--tx
ssh=``, ``socket=``: the policy's interpreter and checkpoint are this host's), or when a GPU is
visible and several workers would each load a copy onto it (unless ``--vla-placement`` gave each
worker its GPUs); beside otherwise. ``--vla-serve`` (with ``--vla-serve-python``) is the user's own
server, always served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from pytest_vlaeval.choices import POLICY_PLACEMENTS
from pytest_vlaeval.errors import SpecError

if TYPE_CHECKING:
    from pytest_vlaeval.benchmark.model import Benchmark
    from pytest_vlaeval.policy.loading import PolicySpec
    from pytest_vlaeval.policy.sources import PolicySource

OPTION = "--vla-policy-placement"
AUTO, BESIDE, SERVED = POLICY_PLACEMENTS
BESIDE_KEY = "vla_policy_beside"
"""The ``workerinput`` key that tells a worker it runs the policy beside the env (its share of the
cores leaves torch's pool alone: ``envs.cpu_share``)."""


@dataclass(frozen=True)
class Workers:
    """The workers the session starts, as the placement rule reads them."""

    count: int
    """0: a serial session (beside the env, it gets one worker in the policy's interpreter)."""
    remote: bool = False
    """Some run on other hosts (``--tx ssh=``, ``socket=``, a ``via``)."""
    gpus_placed: bool = False
    """``--vla-placement`` gave each its GPUs."""


@dataclass(frozen=True)
class PolicyPlacement:
    """Where the session's policy runs, and the start-up line that says so (None: nothing to say)."""

    served: bool
    """A server process of the session's answers the workers (``--vla-serve``, or a policy served
    from its interpreter)."""
    interpreter: str | None = None
    """Beside the env: the policy's interpreter, which the workers start in."""
    line: str | None = None


def place_policy(
    policy: PolicySpec,
    benchmark: Benchmark,
    asked: str,
    workers: Workers,
    gpu_visible: Callable[[], bool],
    serve_given: bool = False,
) -> PolicyPlacement:
    """The placement of ``policy`` on ``benchmark`` under ``--vla-policy-placement=asked``;
    ``gpu_visible`` is asked only where the answer decides. ``serve_given``: ``--vla-serve`` or
    ``--vla-serve-python``, the user's own server. ``SpecError`` in one line for a placement that
    cannot be."""
    if serve_given:
        if asked == BESIDE:
            raise SpecError(
                f"{OPTION}={BESIDE} runs the policy in each worker; --vla-serve and --vla-serve-python serve it "
                "from one process: give one or the other"
            )
        return PolicyPlacement(served=True)
    interpreter = policy.interpreter
    if interpreter is None:
        if asked != AUTO:
            raise SpecError(
                f"{OPTION}={asked} places a policy that runs in an interpreter of its own (lerobot:PATH); "
                f"--policy {policy.text} runs in the workers' interpreter (serve one with --vla-serve=SPEC)"
            )
        return PolicyPlacement(served=False)
    source = cast("PolicySource", policy)  # only a source names an interpreter of its own
    where = f"the {interpreter} interpreter"
    if benchmark.stack not in source.holds_stacks:
        if asked == BESIDE:
            raise SpecError(
                f"{OPTION}={BESIDE}: {source.text} runs in {where}, which does not hold {benchmark.title}'s stack "
                f"({benchmark.stack}), so the workers cannot run there; it holds: {', '.join(source.holds_stacks)}"
            )
        return _served(source, where, f"it does not hold {benchmark.title}'s stack, where the workers run")
    count = max(workers.count, 1)
    if asked == SERVED:
        return _served(source, where, f"{OPTION}={SERVED}")
    if asked == AUTO:
        if workers.remote:
            return _served(source, where, "workers on other hosts", override=True)
        if count > 1 and not workers.gpus_placed and gpu_visible():
            return _served(source, where, f"a GPU is visible: one copy on it for the {count} workers", override=True)
    workers_said = f"{count} worker{'s' if count > 1 else ''}, a copy each"
    return PolicyPlacement(
        served=False,
        interpreter=interpreter,
        line=(
            f"vlaeval: {source.text} runs beside the env in {where} ({workers_said})"
            + ("" if asked == BESIDE else f"; {OPTION}={SERVED} serves it from one process instead")
        ),
    )


def _served(source: PolicySource, where: str, why: str, override: bool = False) -> PolicyPlacement:
    instead = f"; {OPTION}={BESIDE} runs it in each worker instead" if override else ""
    return PolicyPlacement(
        served=True, line=f"vlaeval: {source.text} is served from one process in {where} ({why}){instead}"
    )
