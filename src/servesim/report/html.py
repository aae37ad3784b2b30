"""One HTML page: tables, and the plots drawn by plotly.js from the installed ``plotly`` package
(no CDN, the page works offline). The page loads plotly.js from a file beside it
(``plotly-VERSION.min.js``, one copy per folder of reports: the page weighs what its data
weighs, some tens of kB, not plotly's 4.8 MB) or, self-contained, embeds it.

When every plot has drawn, the page sets ``data-plots-drawn`` on ``<body>`` to their number;
a script error sets ``data-errors``. The browser test reads both from the rendered DOM.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

from servesim.errors import ServesimError
from servesim.report.figures import Plot

PALETTE = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
]

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f2d3d;color:#fff;padding:18px 32px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#c9d3de;font-size:13px}
main{padding:8px 32px 32px;max-width:1500px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;background:#fff;margin-bottom:6px}
td,th{border:1px solid #e2e2e2;padding:4px 9px;text-align:left;vertical-align:top}
th{background:#f0f3f6} td.k{color:#555;white-space:nowrap}
.note{color:#666;font-size:12px;margin:2px 0 10px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(640px,1fr));gap:14px}
.plot{background:#fff;border:1px solid #e2e2e2;height:380px}
.scroll{max-height:520px;overflow:auto;display:inline-block}
.missing{background:#fff3cd;border:1px solid #e0c36a;padding:8px 12px;font-size:14px}
"""

SCRIPT = """
window.addEventListener('error', function (e) {
  var seen = document.body.getAttribute('data-errors') || '';
  document.body.setAttribute('data-errors', seen + e.message + ';');
});
(function () {
  if (typeof Plotly === 'undefined') {  // plotly-VERSION.min.js not beside the page
    var src = (document.getElementById('plotly-js') || {}).src || 'plotly.js';
    var note = document.createElement('p');
    note.className = 'missing';
    note.textContent = 'The plots need ' + src.split('/').pop() + ' in the folder of this page (servesim '
      + 'report writes it there; --self-contained embeds it in the page instead).';
    document.querySelector('main').prepend(note);
    document.body.setAttribute('data-errors', 'plotly.js not loaded: ' + src);
    return;
  }
  var figs = JSON.parse(document.getElementById('figures').textContent);
  var config = {responsive: true, displaylogo: false, displayModeBar: 'hover'};
  Promise.all(figs.map(function (f) {
    return Plotly.newPlot(document.getElementById(f.div), f.data, f.layout, config);
  })).then(function () {
    document.body.setAttribute('data-plots-drawn', String(figs.length));
  }, function (err) {
    document.body.setAttribute('data-errors', String(err));
  });
})();
"""


@dataclass
class Block:
    """One piece of the page: a heading, a table or a grid of plots."""

    kind: str  # "h2", "table", "plots", "note"
    text: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    key_column: bool = False  # first column holds labels


def plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ServesimError("an HTML report needs plotly: pip install 'servesim[report]'") from None
    return str(get_plotlyjs())


def plotly_js_name() -> str:
    """The file name of the installed plotly.js beside a page: ``plotly-VERSION.min.js`` (a
    page of another plotly version in the same folder keeps its own copy)."""
    try:
        from plotly.offline.offline import get_plotlyjs_version
    except ImportError:
        raise ServesimError("an HTML report needs plotly: pip install 'servesim[report]'") from None
    return f"plotly-{get_plotlyjs_version()}.min.js"


def figure(plot: Plot, div: str) -> dict[str, Any]:
    """A ``Plot`` as plotly.js arguments."""
    data = []
    for k, tr in enumerate(plot.traces):
        color = PALETTE[k % len(PALETTE)]
        d: dict[str, Any] = {"name": tr.name, "x": tr.x, "y": tr.y}
        if tr.kind == "bar":
            d.update(type="bar", marker={"color": color})
        else:
            d.update(type="scatter", mode="markers" if tr.kind == "markers" else "lines")
            d["line" if tr.kind == "line" else "marker"] = {
                "color": color,
                **({"dash": "dash"} if tr.dash else {}),
            }
        if tr.text is not None:
            d.update(text=tr.text, hovertemplate="%{text}<br>x=%{x}<br>y=%{y}<extra>%{fullData.name}</extra>")
        data.append(d)
    layout = {
        "title": {"text": html.escape(plot.title), "font": {"size": 14}, "x": 0.01, "xanchor": "left"},
        "xaxis": {"title": {"text": plot.xlabel}, "type": "log" if plot.log_x else "-", "automargin": True},
        "yaxis": {"title": {"text": plot.ylabel}, "type": "log" if plot.log_y else "-", "automargin": True},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.22},
        "barmode": "group",
        "template": None,
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
    }
    return {"div": div, "data": data, "layout": layout}


def _table(block: Block) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in block.header)
    body = []
    for row in block.rows:
        cells = [
            f'<td class="k">{html.escape(row[0])}</td>'
            if block.key_column
            else f"<td>{html.escape(row[0])}</td>"
        ] + [f"<td>{html.escape(c)}</td>" for c in row[1:]]
        body.append("<tr>" + "".join(cells) + "</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if any(block.header) else ""
    return f'<div class="scroll"><table>{thead}<tbody>{"".join(body)}</tbody></table></div>'


def render_page(title: str, subtitle: str, blocks: list[Block], plotly_src: str | None = None) -> str:
    """The whole page as text: styles, plotly.js (loaded from ``plotly_src``, a path relative to
    the page; embedded when None), the blocks and the figures' data."""
    parts: list[str] = []
    figs: list[dict[str, Any]] = []
    for block in blocks:
        if block.kind == "h2":
            parts.append(f"<h2>{html.escape(block.text)}</h2>")
        elif block.kind == "note":
            parts.append(f'<p class="note">{html.escape(block.text)}</p>')
        elif block.kind == "table":
            parts.append(_table(block))
        elif block.kind == "plots":
            divs = []
            for plot in block.plots:
                div = f"plot-{len(figs)}-{plot.id}"
                figs.append(figure(plot, div))
                divs.append(f'<div class="plot" id="{div}"></div>')
            parts.append(f'<div class="grid">{"".join(divs)}</div>')
    data = json.dumps(figs, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        + (
            f'<script id="plotly-js" src="{html.escape(plotly_src)}"></script>'
            if plotly_src
            else f"<script>{plotly_js()}</script>"
        )
        + "</head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p></header>"
        f"<main>{''.join(parts)}</main>"
        f'<script type="application/json" id="figures">{data}</script>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )
