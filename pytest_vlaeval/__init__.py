"""pytest-vlaeval: evaluate Vision-Language-Action policies on simulation benchmarks with pytest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_vlaeval.version import __version__

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_vlaeval.api import Summary
    from pytest_vlaeval.report.comparison import Comparison

__all__ = ["__version__", "compare", "evaluate"]


def evaluate(policy: Any, benchmark: str = "short", **kwargs: Any) -> Summary:
    """Evaluate a policy from Python (see ``pytest_vlaeval.api.evaluate``); imported on first use,
    so that importing this package, which every pytest run does, stays cheap."""
    from pytest_vlaeval.api import evaluate as run

    return run(policy, benchmark, **kwargs)


def compare(*runs: str | Path) -> Comparison:
    """Compare run directories with the first, in the order given (see
    ``pytest_vlaeval.report.comparison``); raises ``ComparisonError`` on runs that cannot be compared."""
    from pytest_vlaeval.report.comparison import compare as run

    return run(runs)
