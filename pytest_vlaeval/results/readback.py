"""Reading a run's files back, defensively: a run directory may come from someone else (``vlaeval
merge`` and ``compare`` read them without importing any code), or a crash or a full disk may have
torn a file. Every file is JSON as ``strict_json`` reads it (finite numbers, shallow nesting),
checked against the types this package writes it with (``schema``, by ``msgspec``); what
is not is one line naming the file and what is wrong, never a traceback or a guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, is_typeddict

import msgspec

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.strict_json import loads

T = TypeVar("T")


def read_json(path: Path, kind: type[T], what: str) -> T:
    """``path``'s JSON as ``kind`` (a TypedDict, dataclass or type), or ``SpecError`` naming it as ``what``."""
    try:
        data = loads(path.read_bytes())
    except IsADirectoryError:
        raise SpecError(f"{path} is a directory where the run's {what} belongs") from None
    except FileNotFoundError:
        raise SpecError(f"{path} is missing: the run has no {what}") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the run's {what} ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise SpecError(f"{path} is not the run's {what} as this package writes it (not JSON: {exc})") from None
    return convert(data, kind, f"{path} ({what})")


def convert(data: Any, kind: type[T], where: str) -> T:
    """``data`` as ``kind``, or ``SpecError`` saying where and what is wrong. A TypedDict's keys are
    checked and ``data`` itself comes back, with the keys the type does not name (a benchmark's
    axes add some to the canonical files)."""
    try:
        converted = msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise SpecError(f"{where} is not as this package writes it: {exc}") from None
    return data if is_typeddict(kind) else converted
