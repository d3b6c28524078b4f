"""The one way this package writes HTML: Jinja2 templates (``templates/``) rendered with
autoescaping, so a value from data (an env id, a message, a policy name, a received run's
summary) is text in the page, never markup. A page is self-contained: inline styles and
scripts, nothing fetched, so it opens from disk, zipped or served as it is.

Tables with class ``sortable`` sort on a header click (by each cell's ``data-value``); a form
with ``data-filters="TABLE_ID"`` hides the rows that do not match: a text field matches the
row's ``data-name``, a select field named ``F`` the row's ``data-F``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import jinja2

from pytest_vlaeval.benchmark.file import IDENTIFIER


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_vlaeval.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    environment.filters.update(pct=pct, interval=interval, seeds=seeds)
    return environment


def render(template: str, **context: Any) -> str:
    """A template of ``templates/``, every value escaped unless the template says otherwise."""
    return _environment().get_template(template).render(**context)


def attribute_name(field: str) -> str:
    """A group field as the name of a row's ``data-`` attribute and of its filter's select: HTML
    lowercases attribute names, so this does too. A field that is not an identifier (a received
    run's summary is data) never becomes markup: ``ValueError``."""
    if not re.fullmatch(IDENTIFIER, field):
        raise ValueError(f"axis field {field!r} is not an identifier")
    return field.lower()


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def interval(bounds: Sequence[float] | None) -> str:
    return "" if bounds is None else f"[{100 * bounds[0]:.0f}-{100 * bounds[1]:.0f}%]"


def seeds(values: Sequence[int]) -> str:
    return f"{len(values)}: {', '.join(map(str, values))}" if values else "0"
