"""Shared test fixtures: paths of the repository and the built book."""

from __future__ import annotations

import io
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


@pytest.fixture(scope="session")
def built_html() -> Path:
    """The built site; the book/browser tests run after `make html`."""
    if not (HTML / "index.html").exists():
        pytest.fail("the book is not built: run `make html` first (make test does)")
    return HTML


def central_differences(f, X, h=1e-6):
    """Dense Jacobian of vec f at X by central differences (row-major vec), an
    independent reference for the library's analytic Jacobians, jvps and vjps."""
    import numpy as np
    cols = []
    for k in range(X.size):
        e = np.zeros(X.size)
        e[k] = h
        e = e.reshape(X.shape)
        cols.append((f(X + e) - f(X - e)).reshape(-1) / (2 * h))
    return np.column_stack(cols)


def drawn_glyph_pt(fig, hidden=()) -> float:
    """The smallest glyph ``fig`` draws, in points, read from the SVG that
    matplotlib writes for it (text kept as text: every glyph's font size,
    sub- and superscripts included), independently of
    :func:`lipattn.book.plotting.smallest_glyph_pt`. Radical signs and
    combining accents (sized to fit) are left out. ``hidden``: animated artists
    (an explorer's), drawn for the measurement."""
    import matplotlib

    for a in hidden:
        a.set_animated(False)
    try:
        buf = io.StringIO()
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            fig.savefig(buf, format="svg")
    finally:
        for a in hidden:
            a.set_animated(True)
    sizes = []
    for attrs, body in re.findall(r"<(?:tspan|text)\b([^>]*)>([^<]*)<", buf.getvalue()):
        size = re.search(r"font(?:-size)?:\s*([\d.]+)px", attrs)
        glyphs = [ch for ch in body.strip() if ch != "\u221a" and not unicodedata.combining(ch)]
        if size and glyphs:
            sizes.append(float(size.group(1)))
    assert sizes, "no text found in the SVG"
    return min(sizes)
