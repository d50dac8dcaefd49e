"""The HTML report (matplotlib figures embedded in one self-contained page).

Optional extra: needs matplotlib (``graphbatch[bench]``). Import explicitly:
``from graphbatch.report import build_report, write_report``.
"""

from ._build import REPORT_FIGURES, build_report, write_report
from ._html import HtmlPage, figure_png

__all__ = ["REPORT_FIGURES", "HtmlPage", "build_report", "figure_png", "write_report"]
