"""``module:attr`` references (a ``--policy`` factory, a benchmark's env factory): one parser, one loader."""

from __future__ import annotations

import importlib
from typing import Any


def split_reference(reference: str) -> tuple[str, str] | None:
    """``(module, attr)`` of ``module:attr``, or None when the text is not of that form."""
    module, sep, attr = reference.partition(":")
    return (module, attr) if sep and module and attr else None


def load_reference(module: str, attr: str) -> Any:
    """Import ``module`` and return its ``attr`` (ImportError, AttributeError as Python raises them)."""
    return getattr(importlib.import_module(module), attr)
