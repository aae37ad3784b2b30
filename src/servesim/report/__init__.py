"""HTML reports of servesim's output folders (runs, plans, validations) and comparisons of runs.

``write_report(run_dir, out_path)`` and ``write_comparison(run_dirs, out_path)``; the plots
are drawn with plotly (offline: its JavaScript beside the page, or embedded) or, for PNG/SVG,
matplotlib: the ``report`` extra.
"""

from servesim.report.build import paths_line, write_comparison, write_report

__all__ = ["paths_line", "write_comparison", "write_report"]
