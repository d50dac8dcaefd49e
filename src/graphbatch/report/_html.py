"""A self-contained HTML page: figures embedded as base64 PNG, inline CSS, no network requests."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from .._validate import as_positive_int

__all__ = ["HtmlPage", "figure_png"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;margin-top:2em;
border-bottom:1px solid #ccc;padding-bottom:.2em}
figure{margin:1em 0;text-align:center}figure img{max-width:100%;height:auto;
border:1px solid #eee}figcaption{font-size:.9em;color:#555;margin-top:.4em}
figure.unavailable{border:1px dashed #c88;background:#fff6f6;padding:1em}
table{border-collapse:collapse;margin:1em 0;font-size:.88em}
th,td{border:1px solid #ddd;padding:.25em .6em}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums}
p.meta{color:#666;font-size:.9em}.error{color:#a00}
"""

# Marks each image with the size the browser decoded, so a headless check can read it from the DOM.
_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = document.querySelectorAll('figure.gb-figure img');
  var ok = 0;
  imgs.forEach(function (img) {
    img.setAttribute('data-rendered', img.naturalWidth + 'x' + img.naturalHeight);
    if (img.complete && img.naturalWidth > 0) { ok += 1; }
  });
  document.body.setAttribute('data-figures-rendered', String(ok));
});
"""


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """PNG bytes of a matplotlib figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _cell(v: Any) -> tuple[str, bool]:
    if v is None:
        return "–", False
    if isinstance(v, bool):
        return str(v), False
    if isinstance(v, int):
        return f"{v:,}", True
    if isinstance(v, float):
        if not math.isfinite(v):
            return "–", True
        if v == 0:
            return "0", True
        if abs(v) >= 1000:
            return f"{v:,.0f}", True
        return f"{v:.4g}", True
    return str(v), False


#: Largest accepted figure resolution (a larger one renders images of gigabytes).
MAX_DPI = 1200


class HtmlPage:
    """Collects headings, text, tables and figures; `render` returns one HTML document."""

    def __init__(self, title: str, dpi: int = 100) -> None:
        self.title = title
        self.dpi = as_positive_int(dpi, "dpi", MAX_DPI)
        self._parts: list[str] = []
        self.figure_ids: list[str] = []
        self.unavailable_ids: list[str] = []

    def heading(self, text: str, level: int = 2) -> None:
        self._parts.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str, cls: str | None = None) -> None:
        c = f' class="{cls}"' if cls else ""
        self._parts.append(f"<p{c}>{html.escape(text)}</p>")

    def figure(self, fig_id: str, fig: Figure, caption: str, dpi: int | None = None) -> None:
        """Embed ``fig`` as a base64 PNG inside ``<figure id=fig_id>`` (``dpi``: page default)."""
        dpi = self.dpi if dpi is None else int(dpi)
        data = base64.b64encode(figure_png(fig, dpi)).decode("ascii")
        w, h = (int(round(v * dpi)) for v in fig.get_size_inches())
        self.figure_ids.append(fig_id)
        self._parts.append(
            f'<figure class="gb-figure" id="{html.escape(fig_id)}">'
            f'<img alt="{html.escape(caption)}" width="{w}" height="{h}" '
            f'src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )

    def unavailable(self, fig_id: str, caption: str, reason: str) -> None:
        """A placeholder that says plainly why a figure is not in the report."""
        self.unavailable_ids.append(fig_id)
        self._parts.append(
            f'<figure class="unavailable" id="{html.escape(fig_id)}">'
            f"<p><strong>{html.escape(caption)}: unavailable.</strong> {html.escape(reason)}</p>"
            "</figure>"
        )

    def table(
        self,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[tuple[str, str]],
        table_id: str | None = None,
    ) -> None:
        """``columns``: ``(key, header)`` pairs; numbers right-aligned, NaN/None shown as ``–``."""
        tid = f' id="{html.escape(table_id)}"' if table_id else ""
        head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns)
        body = []
        for r in rows:
            cells = []
            for key, _ in columns:
                text, num = _cell(r.get(key))
                cls = ' class="num"' if num else ""
                cells.append(f"<td{cls}>{html.escape(text)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        self._parts.append(
            f"<table{tid}><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body)
            + "</tbody></table>"
        )

    def render(self) -> str:
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{_CSS}</style><script>{_SCRIPT}</script></head>"
            f'<body data-figures="{len(self.figure_ids)}">'
            f"<h1>{html.escape(self.title)}</h1>\n" + "\n".join(self._parts) + "\n</body></html>\n"
        )
