"""``compare.html``: the split and group SRs as curves across the runs (e.g. checkpoints) with
their interval bands, drawn as inline SVG, and the comparison's table."""

from __future__ import annotations

from html import escape

from pytest_vlaeval.report.comparison import OVERALL, Comparison, PairedDifference, Row
from pytest_vlaeval.report.page import filters, interval, page, pct

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 820, 320, 100, 200, 16, 40
COLORS = ("#0b4f9c", "#c4432b", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#cf222e", "#57606a")


def render_comparison(comparison: Comparison) -> str:
    title = f"{comparison.benchmark} {comparison.split}: {len(comparison.runs)} runs compared"
    runs = "".join(
        f'<li><b>{escape(run.label)}</b> <span class="muted">policy {escape(run.policy)}</span></li>'
        for run in comparison.runs
    )
    body = (
        f"<h1>{escape(title)}</h1><ol>{runs}</ol>"
        f'<p class="muted">Bands and brackets: 95% intervals ({escape(comparison.interval_method)}). '
        "Differences: each run minus the first, paired on the seeds both completed, with the 95% interval "
        "of the method the regression gate would use for them.</p>"
        f"<h2>Split and group SR across the runs</h2>{chart(comparison)}"
        f"<h2>Table</h2>{_table(comparison)}"
    )
    return page(title, body)


def chart(comparison: Comparison) -> str:
    """One line per split or group over the runs in order, its interval as a band."""
    count = len(comparison.runs)
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: int) -> float:
        return LEFT + (plot_width * index / (count - 1) if count > 1 else plot_width / 2)

    def y(value: float) -> float:
        return TOP + plot_height * (1 - value)

    parts = [f'<svg id="curves" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img">']
    for tick in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_width}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eaeef2"/>'
            f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end">{100 * tick:.0f}%</text>'
        )
    for index, run in enumerate(comparison.runs):
        parts.append(
            f'<text x="{x(index):.1f}" y="{HEIGHT - BOTTOM + 16}" font-size="11" text-anchor="middle">'
            f"{escape(_short(run.label))}</text>"
        )
    for number, row in enumerate(comparison.curves):
        color = COLORS[number % len(COLORS)]
        points = [(i, e) for i, e in enumerate(row.estimates) if e is not None]
        if not points:
            continue
        upper = " ".join(f"{x(i):.1f},{y(e.interval[1]):.1f}" for i, e in points)
        lower = " ".join(f"{x(i):.1f},{y(e.interval[0]):.1f}" for i, e in reversed(points))
        line = " ".join(f"{x(i):.1f},{y(e.sr):.1f}" for i, e in points)
        name = _curve_name(row)
        parts.append(f'<g class="curve" data-name="{escape(name)}"><title>{escape(name)}</title>')
        if len(points) > 1:
            parts.append(f'<polygon points="{upper} {lower}" fill="{color}" fill-opacity="0.12" stroke="none"/>')
        else:
            ((i, e),) = points
            parts.append(
                f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(e.interval[0]):.1f}" y2="{y(e.interval[1]):.1f}" '
                f'stroke="{color}" stroke-opacity="0.4" stroke-width="6"/>'
            )
        width = 3 if row.axis == OVERALL else 1.5
        parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="{width}"/>')
        parts += [f'<circle cx="{x(i):.1f}" cy="{y(e.sr):.1f}" r="3" fill="{color}"/>' for i, e in points]
        legend_y = TOP + 14 * number + 6
        parts.append(
            f'<rect x="{WIDTH - RIGHT + 12}" y="{legend_y - 8}" width="10" height="10" fill="{color}"/>'
            f'<text x="{WIDTH - RIGHT + 26}" y="{legend_y + 1}" font-size="11">{escape(_short(name, 24))}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _curve_name(row: Row) -> str:
    return f"{row.name} split (overall)" if row.axis == OVERALL else f"{row.axis} {row.name}"


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _table(comparison: Comparison) -> str:
    heads = "".join(f"<th>{escape(_short(run.label))}</th>" for run in comparison.runs)
    heads += "".join(f"<th>{escape(_short(run.label))} - first</th>" for run in comparison.runs[1:])
    rows = []
    for row in comparison.rows:
        cells = "".join(
            f'<td class="num" data-value="{-1 if e is None else e.sr}">'
            + ("-" if e is None else f"{pct(e.sr)} {interval(e.interval)}")
            + "</td>"
            for e in row.estimates
        )
        cells += "".join(_difference_cell(d) for d in row.differences)
        rows.append(
            f'<tr data-name="{escape(row.name)}" data-axis="{escape(row.axis)}"><td>{escape(row.axis)}</td>'
            f"<td>{escape(row.name)}</td>{cells}</tr>"
        )
    axes = sorted({row.axis for row in comparison.rows})
    return (
        filters("comparison", [("axis", "row kind", axes)], "filter rows by name")
        + f'<table id="comparison" class="sortable"><thead><tr><th>kind</th><th>name</th>{heads}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _difference_cell(difference: PairedDifference | None) -> str:
    if difference is None:
        return '<td class="num" data-value="0">-</td>'
    return f'<td class="num" data-value="{difference.difference}">{escape(format_difference(difference))}</td>'


def format_difference(difference: PairedDifference) -> str:
    low, high = difference.interval
    return (
        f"{100 * difference.difference:+.1f} [{100 * low:+.0f}, {100 * high:+.0f}] pts, "
        f"{difference.seeds} seeds, {difference.method}"
    )
