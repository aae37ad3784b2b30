"""Static images of a report's plots (``--format png|svg``), drawn with matplotlib: one file
per plot, named by the plot's id. (Not plotly's kaleido: it needs a downloaded Chrome.)"""

from __future__ import annotations

from pathlib import Path

from servesim.errors import ServesimError
from servesim.report.figures import Plot
from servesim.report.html import PALETTE


def save_plot(plot: Plot, path: Path) -> None:
    """Draw ``plot`` into ``path`` (its suffix, .png or .svg, picks the format)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ServesimError("PNG/SVG plots need matplotlib: pip install 'servesim[report]'") from None
    fig, ax = plt.subplots(figsize=(8, 4.6), dpi=120)
    try:
        bars = [t for t in plot.traces if t.kind == "bar"]
        for k, tr in enumerate(plot.traces):
            color = PALETTE[k % len(PALETTE)]
            y = [float("nan") if v is None else v for v in tr.y]
            if tr.kind == "bar":
                width = 0.8 / len(bars)
                pos = [i + (bars.index(tr) - (len(bars) - 1) / 2) * width for i in range(len(tr.x))]
                ax.bar(pos, y, width=width, label=tr.name, color=color)
                ax.set_xticks(range(len(tr.x)), [str(x) for x in tr.x], rotation=30, ha="right")
            elif tr.kind == "markers":
                ax.scatter(tr.x, y, s=14, label=tr.name, color=color, alpha=0.8)
            else:
                ax.plot(tr.x, y, label=tr.name, color=color, linestyle="--" if tr.dash else "-")
        if plot.log_x:
            ax.set_xscale("log")
        if plot.log_y:
            ax.set_yscale("log")
        ax.set_title(plot.title, fontsize=11)
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(plot.ylabel)
        ax.grid(True, alpha=0.3)
        if plot.traces:
            ax.legend(fontsize=8)
        # Fixed margins: tight_layout measures every tick label and costs as much as the drawing.
        fig.subplots_adjust(left=0.1, right=0.97, top=0.92, bottom=0.22 if bars else 0.13)
        fig.savefig(path)
    finally:
        plt.close(fig)
