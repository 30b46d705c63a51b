"""The book's plot style (lipattn/book/plotting.py): figure text legible at the
size it is shown, sub- and superscripts included."""

from __future__ import annotations

import io

import pytest
from conftest import drawn_glyph_pt
from matplotlib.text import Text
from PIL import Image

from lipattn.book import plotting


def _hard_figure():
    """Texts whose smallest glyph is far below their font size: a log axis's
    exponents, subscripts, a fraction, a script of a script, a radical, an
    accent; and plain text below the minimum."""
    fig, (a, b) = plotting.figure(2, width=6.72, height=3.0)
    a.set_yscale("log")
    a.plot([1, 2, 3], [1e-3, 1e0, 1e2], label=r"$\|J\|_2$ at $\tau = 1/\sqrt{d_k}$")
    a.plot([1, 2, 3], [1e-2, 1e-1, 1e1], label=r"$\sqrt{N}\,\|\bar x_l\|$")
    a.legend(fontsize=6)
    a.set_title(r"$r_l \approx a^{3^l}$", fontsize=10)
    b.plot([0, 1], [0, 1])
    b.set_xlabel(r"$\frac{1}{2}$ of the way")
    b.text(0.1, 0.8, "a note", fontsize=5)
    return fig


def test_smallest_glyph_is_the_smallest_script():
    fig, ax = plotting.figure()
    plain = ax.text(0, 0, "plain", fontsize=9)
    sub = ax.text(0, 0, r"$\|J\|_2$", fontsize=10)
    nested = ax.text(0, 0, r"$a^{3^l}$", fontsize=10)
    two_lines = ax.text(0, 0, "first line\n$x_i$ second", fontsize=10)
    fitted = ax.text(0, 0, r"$\sqrt{N}\,\bar x$", fontsize=10)  # radical and accent sized to fit
    dollars = ax.text(0, 0, r"costs \$5", fontsize=10)  # an escaped dollar is no math
    assert plotting.smallest_glyph_pt(plain) == 9
    k = plotting.SCRIPT_SCALE  # per script level (matplotlib's own is 0.7)
    assert k == 0.8
    assert plotting.smallest_glyph_pt(sub) == pytest.approx(10 * k)
    assert plotting.smallest_glyph_pt(nested) == pytest.approx(10 * k * k)
    assert plotting.smallest_glyph_pt(two_lines) == pytest.approx(10 * k)
    assert plotting.smallest_glyph_pt(fitted) == 10
    assert plotting.smallest_glyph_pt(dollars) == 10
    with pytest.raises(TypeError, match="^text must be a matplotlib Text; got str"):
        plotting.smallest_glyph_pt("x")


def test_legible_raises_every_glyph_as_drawn():
    """After legible, the SVG that matplotlib writes (every glyph's font size)
    has no glyph below 8 pt, and legible reports that smallest glyph. Before,
    only font sizes were raised: the exponents of a log axis stayed at 0.7 of
    8 pt (7.8 CSS px) and a script of a script at 0.49."""
    fig = _hard_figure()
    assert drawn_glyph_pt(fig) < 6  # the failure this guards against
    got = plotting.legible(fig)
    drawn = drawn_glyph_pt(fig)
    assert drawn >= plotting.MIN_FONT_PT - 1e-9
    assert got == pytest.approx(drawn, abs=0.011)
    # nothing larger than needed: some glyph sits at the minimum
    assert drawn < plotting.MIN_FONT_PT + 0.02
    # a plain text is raised to the minimum, not past it
    note = next(t for t in fig.findobj(Text) if t.get_text() == "a note")
    assert note.get_fontsize() == plotting.MIN_FONT_PT
    # the texts of a legend, and the tick labels of a panel, share one size
    a, b = fig.axes
    assert len({t.get_fontsize() for t in a.get_legend().get_texts()}) == 1
    ticks = {t.get_fontsize() for t in a.get_xticklabels() + a.get_yticklabels() if t.get_text()}
    assert len(ticks) == 1 and ticks.pop() >= plotting.MIN_FONT_PT / plotting.SCRIPT_SCALE - 0.01


def test_script_scale_is_what_matplotlib_draws():
    """The script ratio set by the module is the one matplotlib lays formulas
    out with (read from the SVG it writes)."""
    fig, ax = plotting.figure(width=2, height=1)
    ax.set_axis_off()
    ax.text(0, 0, "$x_i$", fontsize=10)
    assert drawn_glyph_pt(fig) == pytest.approx(10 * plotting.SCRIPT_SCALE, abs=1e-3)


def test_png_declares_its_smallest_glyph_as_drawn():
    """figure_png's metadata (what the site sizes the figure by, and the browser
    test measures) is the drawn smallest glyph, for the desktop image and for
    its stacked phone variant."""
    fig = _hard_figure()
    png = plotting.figure_png(fig)
    with Image.open(io.BytesIO(png)) as im:
        meta = dict(im.text)
    assert "lipattn:min-font-px" not in meta  # the old key declared font sizes only
    px = float(meta["lipattn:min-text-px"])
    assert px == pytest.approx(drawn_glyph_pt(fig) * 100 / 72, abs=0.02) and px >= 11.1
    import base64

    assert float(meta["lipattn:narrow-min-text-px"]) >= 11.1
    narrow = Image.open(io.BytesIO(base64.b64decode(meta["lipattn:narrow"])))
    assert narrow.size[0] == 2 * int(meta["lipattn:narrow-css-width"])
