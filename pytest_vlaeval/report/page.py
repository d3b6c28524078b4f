"""The frame of every HTML page this package writes: inline styles and scripts, nothing fetched,
so a page opens from disk, zipped or served as it is.

Tables with class ``sortable`` sort on a header click (by each cell's ``data-value``); a form
with ``data-filters="TABLE_ID"`` hides the rows that do not match: a text field matches the
row's ``data-name``, a select field named ``F`` the row's ``data-F``.
"""

from __future__ import annotations

from html import escape

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;color:#1f2328}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.headline{display:flex;gap:24px;flex-wrap:wrap;align-items:center}.big{font-size:32px;font-weight:600}
.muted{color:#59636e}.warn{color:#9a6700;font-weight:600}.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid #eaeef2;text-align:left;white-space:nowrap}
th{background:#f6f8fa}table.sortable th{cursor:pointer}table.sortable th:after{content:" \\2195";color:#afb8c1}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.not-evaluated td{color:#8c959f;font-style:italic}
.bar{display:inline-block;position:relative;width:140px;height:10px;background:#eaeef2;border-radius:2px;vertical-align:middle}
.bar .ci{position:absolute;top:0;height:10px;background:#8fb8e8}.bar .pt{position:absolute;top:-2px;width:2px;height:14px;background:#0b4f9c}
form.filters{display:flex;gap:8px;flex-wrap:wrap;margin:6px 0}form.filters input,form.filters select{font:inherit;padding:2px 4px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:6px 0}dl.facts dt{color:#59636e}dl.facts dd{margin:0}
details{margin:4px 0}summary{cursor:pointer}video{max-width:480px;display:block;margin:4px 0}
.ok{color:#1a7f37}.no{color:#cf222e}.err{color:#9a6700}
"""

SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var ascending = th.dataset.order !== "asc";
      table.querySelectorAll("th").forEach(function (other) { delete other.dataset.order; });
      th.dataset.order = ascending ? "asc" : "desc";
      function key(row) {
        var cell = row.cells[column], value = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent;
        var number = parseFloat(value);
        return isNaN(number) ? value.toLowerCase() : number;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), order = x < y ? -1 : x > y ? 1 : 0;
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
document.querySelectorAll("form[data-filters]").forEach(function (form) {
  var table = document.getElementById(form.dataset.filters), count = form.querySelector(".count");
  function apply() {
    var shown = 0, rows = table.tBodies[0].rows;
    Array.prototype.forEach.call(rows, function (row) {
      var visible = true;
      form.querySelectorAll("input,select").forEach(function (field) {
        var wanted = field.value.trim().toLowerCase();
        if (!wanted) return;
        var have = (field.tagName === "INPUT" ? row.dataset.name : row.dataset[field.name]) || "";
        if (field.tagName === "INPUT" ? have.toLowerCase().indexOf(wanted) < 0 : have.toLowerCase() !== wanted) visible = false;
      });
      row.hidden = !visible;
      shown += visible;
    });
    if (count) count.textContent = shown + " of " + rows.length + " shown";
  }
  form.addEventListener("input", apply);
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  apply();
});
"""


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n"
        f"<script>{SCRIPT}</script>\n</body></html>\n"
    )


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def interval(bounds: list[float] | tuple[float, float] | None) -> str:
    return "" if bounds is None else f"[{100 * bounds[0]:.0f}-{100 * bounds[1]:.0f}%]"


def sr_bar(value: float, bounds: list[float] | tuple[float, float]) -> str:
    """An SR on a 0-100% bar, its interval shaded."""
    low, high = 100 * bounds[0], 100 * bounds[1]
    return (
        f'<span class="bar" title="{pct(value)} {interval(bounds)}"><span class="ci" style="left:{low:.1f}%;'
        f'width:{max(high - low, 0.5):.1f}%"></span><span class="pt" style="left:{100 * value:.1f}%"></span></span>'
    )


def filters(table_id: str, fields: list[tuple[str, str, list[str]]], placeholder: str) -> str:
    """The filter form of a table: a name field and a select per ``(row attribute, label, values)``."""
    selects = "".join(
        f'<select name="{escape(name)}" aria-label="{escape(label)}"><option value="">any {escape(label)}</option>'
        + "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
        + "</select>"
        for name, label, values in fields
    )
    return (
        f'<form class="filters" data-filters="{table_id}"><input type="search" placeholder="{escape(placeholder)}" '
        f'aria-label="filter by name">{selects}<span class="count muted"></span></form>'
    )
