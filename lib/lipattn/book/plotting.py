"""The book's plot style, set in one place.

Chapters call :func:`setup_notebook` once and :func:`figure` for every static
figure, so every plot shares fonts, grid and colours, and every explorer
frame has the same look.

**Drawn for the width they are shown at.** A figure inch is 100 CSS pixels:
:func:`figure` draws at most :data:`COLUMN_IN` = 6.72 in, the text column of
the site on a 1280-pixel desktop (672 CSS px), so a font of ``f`` points shows
at ``f * 100 / 72`` CSS px there (9 pt -> 12.5 px). Images are encoded at
:data:`DPR` = 2 device pixels per CSS pixel (sharp on HiDPI screens), and
every glyph is at least :data:`MIN_FONT_PT` (8 pt = 11.1 CSS px on the
desktop). A glyph, not a text's font size: mathtext draws sub- and
superscripts (a log axis's exponents, the 2 of ``$\\|J\\|_2$``) smaller than
the text, so a text with scripts is drawn large enough for its smallest
script (:func:`smallest_glyph_pt`). Matplotlib shrinks each script level by
0.7, TeX's ratio for print; importing this module sets it to
:data:`SCRIPT_SCALE` = 0.8 (a ratio common on screens), so that a label with
a subscript needs a 10-pt font rather than 11.4 pt and figures keep their
layout. On a phone
the site shows a figure no narrower than the width at which its smallest
glyph is :data:`PHONE_MIN_TEXT_PX` (``phone_min_width``), in a
sideways-scrolling box.

Each PNG carries what the site needs in its metadata (``css-width``,
``min-text-px``, the smallest glyph in CSS px, and ``alt``): the build
extension (:mod:`lipattn.book.sphinxext`) sizes the ``<img>`` to the column
from it and gives it the alt text.
"""

from __future__ import annotations

import io
import math
import re
import unicodedata
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cbook import is_math_text
from matplotlib.figure import Figure
from matplotlib.mathtext import MathTextParser
from matplotlib.text import Text

from .._validate import as_int_at_least, as_positive_float

__all__ = [
    "attention_panel",
    "STYLE_FILE", "use_style", "figure", "figure_png", "setup_notebook", "HALF_COLOR", "ONE_COLOR",
    "COLUMN_IN", "CSS_PX_PER_IN", "DPR", "MIN_FONT_PT", "PHONE_MIN_TEXT_PX", "legible",
    "describe", "set_alt", "glue_figure", "phone_min_width", "narrow_copy", "PHONE_COLUMN_IN",
    "smallest_glyph_pt", "SCRIPT_SCALE",
]

#: Path of the matplotlib style file shipped with the package.
STYLE_FILE = Path(__file__).with_name("book.mplstyle")

#: Colour of the reference line at 1/2 (the tight bound) in every figure.
HALF_COLOR = "#2ca02c"
#: Colour of the reference line at 1 (the loose bound) in every figure.
ONE_COLOR = "#7f7f7f"

#: CSS pixels per figure inch: a figure is shown at its size in inches times this.
CSS_PX_PER_IN = 100
#: The text column on a 1280-px desktop, in inches: 672 CSS px (the column is
#: 688 px without a scroll bar and 675 px with one), so figures show at their
#: natural size, unscaled.
COLUMN_IN = 6.72
#: Device pixels per CSS pixel in the encoded images (HiDPI screens).
DPR = 2
#: The smallest glyph in a figure, in points (11.1 CSS px at the column width).
MIN_FONT_PT = 8.0
#: The smallest text size, in CSS px, that a figure may show at on a phone.
PHONE_MIN_TEXT_PX = 9.0
#: Size of a sub- or superscript relative to its text, per level (matplotlib: 0.7).
SCRIPT_SCALE = 0.8


def _set_script_scale() -> None:
    from matplotlib import _mathtext

    # Matplotlib keeps the ratio in one module constant, read whenever a
    # formula is laid out (scripts, their shifts and spacing alike). Should a
    # release drop it, texts keep 0.7 and legible() raises their fonts further:
    # the measured sizes stay true either way.
    if hasattr(_mathtext, "SHRINK_FACTOR"):
        _mathtext.SHRINK_FACTOR = SCRIPT_SCALE
        MathTextParser._parse_cached.cache_clear()  # layouts made with the old ratio


def use_style() -> None:
    """Apply the book's matplotlib style globally (idempotent)."""
    plt.style.use(str(STYLE_FILE))


def figure(ncols: int = 1, nrows: int = 1, *, width: float = COLUMN_IN, height: float = 3.2,
           **subplot_kw) -> tuple[Figure, object]:
    """Create a figure in the book's style, drawn for the text column.

    Parameters
    ----------
    ncols, nrows : int
        Grid of axes.
    width, height : float
        Size in inches (one inch is shown as 100 CSS px). A width above
        :data:`COLUMN_IN` is drawn at :data:`COLUMN_IN` (same height), so that
        the text is shown at its point size rather than shrunk with the image.
    **subplot_kw
        Passed to :meth:`matplotlib.figure.Figure.subplots`.

    Returns
    -------
    fig : Figure
    axes : Axes or ndarray of Axes
    """
    for arg, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0 or value > 100:
            raise ValueError(f"{arg} must be a positive number of inches, at most 100; "
                             f"got {value!r}")
    for arg, value in (("ncols", ncols), ("nrows", nrows)):
        as_int_at_least(value, arg, 1, 64)
    with plt.style.context(str(STYLE_FILE)):
        fig = Figure(figsize=(min(float(width), COLUMN_IN), float(height)), layout="constrained")
        axes = fig.subplots(nrows, ncols, **subplot_kw)
    return fig, axes


def _texts(fig: Figure) -> list[Text]:
    return [t for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and t.get_figure() is not None]


_set_script_scale()
_MATHTEXT = MathTextParser("path")
#: Glyphs that mathtext sizes to fit other glyphs rather than to be read:
#: radical signs (sized to the radicand) and combining accents.
_FITTED = {"\u221a"}


def smallest_glyph_pt(text: Text) -> float:
    """The size, in points, of the smallest glyph that ``text`` draws.

    A plain text draws every glyph at its font size. In mathtext (a line with
    ``$...$``) sub- and superscripts, fractions and scripts of scripts are
    drawn smaller: this parses each line as matplotlib does when it draws it
    and returns the smallest glyph's size, leaving out the glyphs sized to fit
    (radical signs, combining accents). A text drawn with ``usetex`` is
    measured by its font size only.

    Parameters
    ----------
    text : matplotlib.text.Text
        A text artist.

    Returns
    -------
    float
        Points (1/72 in; a figure inch is :data:`CSS_PX_PER_IN` CSS px).
    """
    if not isinstance(text, Text):
        raise TypeError(f"text must be a matplotlib Text; got {type(text).__name__}")
    size = float(text.get_fontsize())
    if text.get_usetex() or not text.get_parse_math():
        return size
    prop = text.get_fontproperties()
    smallest = size
    for line in text.get_text().split("\n"):
        if not is_math_text(line):
            continue
        glyphs = _MATHTEXT.parse(line, dpi=72, prop=prop).glyphs
        sizes = [g[1] for g in glyphs
                 if chr(g[2]) not in _FITTED and not unicodedata.combining(chr(g[2]))]
        smallest = min([smallest, *sizes])
    return float(smallest)


def _groups(fig: Figure) -> dict[int, str]:
    """id(text) -> the group of texts drawn at one size: the entries of one
    legend, the tick labels of one panel (both its axes)."""
    group: dict[int, str] = {}
    for k, ax in enumerate(fig.axes):
        for axis in (ax.xaxis, ax.yaxis):
            for t in (*axis.get_ticklabels(which="both"), axis.get_offset_text()):
                group[id(t)] = f"ticks {k}"
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    for k, leg in enumerate(x for x in legends if x is not None):
        for t in (*leg.get_texts(), leg.get_title()):
            group[id(t)] = f"legend {k}"
    return group


def legible(fig: Figure, min_pt: float = MIN_FONT_PT) -> float:
    """Raise the texts of ``fig`` until every glyph is at least ``min_pt`` points.

    A glyph, not a font size (:func:`smallest_glyph_pt`): a text with sub- or
    superscripts gets a font large enough for its scripts. Texts that a reader
    compares side by side are raised together, to the size the most demanding
    of them needs: the entries of a legend, the tick labels of a panel (a log
    axis's exponents raise the other axis's labels too).

    The figure is drawn first, so tick labels and legend entries (created at
    draw time) are included, and again after raising, until every text drawn
    (new tick labels too) is legible. Returns the smallest glyph left, in points.
    """
    if FigureCanvasAgg is not type(fig.canvas):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    for _ in range(4):
        texts = _texts(fig)
        group = _groups(fig)
        need: dict[object, float] = {}
        for t in texts:
            key = group.get(id(t), id(t))
            # up to 1/100 pt, so that rounding never leaves a glyph below min_pt
            size = math.ceil(t.get_fontsize() * min_pt / smallest_glyph_pt(t) * 100) / 100
            need[key] = max(need.get(key, 0.0), size)
        raised = False
        for t in texts:
            size = need[group.get(id(t), id(t))]
            if t.get_fontsize() < size - 1e-9:
                t.set_fontsize(size)
                raised = True
        for k, ax in enumerate(fig.axes):  # ticks made at the next draw copy their size
            if raised and need.get(f"ticks {k}"):
                ax.tick_params(which="both", labelsize=need[f"ticks {k}"])
        if _wrap_titles(fig) or raised:
            fig.canvas.draw()
        if not raised:
            break
    return min((smallest_glyph_pt(t) for t in _texts(fig)), default=float(min_pt))


def _split(text: str) -> str | None:
    """``text`` with its space nearest the middle (outside ``$...$``) made a line break."""
    spaces, inside = [], False
    for i, ch in enumerate(text):
        if ch == "$":
            inside = not inside
        elif ch == " " and not inside:
            spaces.append(i)
    if "\n" in text or not spaces:
        return None
    i = min(spaces, key=lambda j: abs(j - len(text) / 2))
    return text[:i] + "\n" + text[i + 1:]


def _wrap_titles(fig: Figure) -> bool:
    """Break axes titles wider than their axes onto two lines (figures drawn
    for a narrow column); returns whether any title changed."""
    renderer = fig.canvas.get_renderer()
    changed = False
    for ax in fig.axes:
        width = ax.get_window_extent(renderer).width
        for title in (ax.title, ax._left_title, ax._right_title):
            text = title.get_text()
            if text and title.get_window_extent(renderer).width > 1.05 * width:
                wrapped = _split(text)
                if wrapped is not None:
                    title.set_text(wrapped)
                    changed = True
    return changed


_TEX_SYMBOLS = {
    "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥", "approx": "≈", "propto": "∝", "to": "→",
    "infty": "∞", "cdot": "·", "times": "×", "sqrt": "√", "ell": "ℓ", "partial": "∂",
    "sigma": "σ", "alpha": "α", "lambda": "λ", "tau": "τ", "rho": "ρ", "varepsilon": "ε",
    "epsilon": "ε", "Delta": "Δ", "mu": "μ", "pi": "π", "top": "ᵀ", "dots": "…", "ldots": "…",
}


def _plain(text: str) -> str:
    """A label without TeX markup, for alt text: ``$\\|J\\|_2$`` -> ``||J||_2``."""
    text = text.replace(r"\|", "||").replace(r"\,", " ")
    text = re.sub(r"\\([A-Za-z]+)", lambda m: _TEX_SYMBOLS.get(m.group(1), "\\" + m.group(1)),
                  text)
    text = re.sub(r"\\(mathrm|mathbb|operatorname|text|mathbf)\{([^}]*)\}", r"\2", text)
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)
    return re.sub(r"\s+", " ", text.replace("$", "").replace("{", "").replace("}", "")).strip()


def set_alt(fig: Figure, alt: str) -> Figure:
    """Give ``fig`` its alt text (what the figure shows, for a reader who cannot see it)."""
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError(f"alt must be a non-empty string; got {alt!r}")
    fig.lipattn_alt = alt.strip()
    return fig


def describe(fig: Figure) -> str:
    """Alt text of ``fig``: the text set by :func:`set_alt`, else one built from
    its titles, axis labels and legend entries."""
    alt = getattr(fig, "lipattn_alt", None)
    if alt:
        return alt
    axes = [ax for ax in fig.axes if ax.get_visible() and (ax.get_xlabel() or ax.get_ylabel()
                                                            or ax.get_title() or ax.lines)]
    parts = []
    sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
    head = f"Plot with {len(axes)} panel{'s' if len(axes) != 1 else ''}"
    parts.append(f"{head}: {_plain(sup)}." if sup else f"{head}.")
    for k, ax in enumerate(axes, start=1):
        bits = []
        if ax.get_title():
            bits.append(_plain(ax.get_title()))
        if ax.get_xlabel() or ax.get_ylabel():
            bits.append(f"{_plain(ax.get_ylabel()) or 'value'} against "
                        f"{_plain(ax.get_xlabel()) or 'position'}")
        labels = [_plain(str(h.get_label())) for h in ax.get_legend_handles_labels()[0]]
        if labels:
            bits.append("showing " + ", ".join(labels))
        if bits:
            parts.append(f"Panel {k}: " + "; ".join(bits) + ".")
    return " ".join(parts)


def phone_min_width(css_width: float, min_font_px: float) -> int:
    """The narrowest width (CSS px) at which a figure's smallest glyph,
    ``min_font_px`` at ``css_width``, is :data:`PHONE_MIN_TEXT_PX`; at most ``css_width``."""
    css_width = as_positive_float(css_width, "css_width")
    min_font_px = as_positive_float(min_font_px, "min_font_px")
    return int(min(css_width, math.ceil(css_width * PHONE_MIN_TEXT_PX / min_font_px)))


#: The text column on a 390-px phone, in inches (358 CSS px).
PHONE_COLUMN_IN = 3.58


def narrow_copy(fig: Figure) -> Figure | None:
    """A copy of ``fig`` for a phone: its panels stacked in one column,
    :data:`PHONE_COLUMN_IN` wide, or None when the figure has a single panel
    or a layout that cannot be stacked (panels spanning several cells).

    The copy is made by pickling, so ``fig`` itself is left as it is.
    """
    import pickle

    panels = []
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        if spec is None:
            continue  # colorbars and insets follow their parent axes
        rows, cols = spec.rowspan, spec.colspan
        if len(rows) != 1 or len(cols) != 1:
            return None
        gs = spec.get_gridspec()
        panels.append((rows.start * gs.ncols + cols.start, ax))
    grids = {id(ax.get_subplotspec().get_gridspec()) for _, ax in panels}
    if len(panels) < 2 or len(grids) != 1:
        return None
    gs = panels[0][1].get_subplotspec().get_gridspec()
    if gs.ncols < 2:
        return None
    try:
        copy = pickle.loads(pickle.dumps(fig))
    except Exception:  # noqa: BLE001 - some artists cannot be pickled: no narrow variant
        return None
    from matplotlib.gridspec import GridSpec

    order = {id(ax): k for k, ax in panels}
    axes = [ax for ax in copy.axes if ax.get_subplotspec() is not None]
    n = len(axes)
    panel_h = min(fig.get_figheight() / gs.nrows, 2.8)
    copy.set_size_inches(PHONE_COLUMN_IN, panel_h * n + 0.2)
    stack = GridSpec(n, 1, figure=copy)
    keys = sorted(range(n), key=lambda i: list(order.values())[i])
    for slot, i in enumerate(keys):
        axes[i].set_subplotspec(stack[slot, 0])
    return copy


def figure_png(fig: Figure, dpi: int | None = None) -> bytes:
    """Encode a static figure as PNG bytes, at :data:`DPR` device pixels per CSS pixel.

    The smallest glyph is raised to :data:`MIN_FONT_PT` first (:func:`legible`).
    The PNG's text chunks hold ``lipattn:css-width`` (CSS px),
    ``lipattn:min-text-px`` (the smallest glyph, in CSS px at that width) and
    ``lipattn:alt`` (:func:`describe`), which the build uses to size and
    describe the image.
    """
    import base64

    dpi = CSS_PX_PER_IN * DPR if dpi is None else dpi
    narrow = narrow_copy(fig)
    min_pt = legible(fig)
    buf = io.BytesIO()
    css_width = round(fig.get_figwidth() * CSS_PX_PER_IN)
    meta = {"lipattn:css-width": str(css_width),
            "lipattn:min-text-px": f"{min_pt * CSS_PX_PER_IN / 72:.2f}",
            "lipattn:alt": describe(fig)}
    if narrow is not None:
        narrow_pt = legible(narrow)
        small = io.BytesIO()
        narrow.savefig(small, format="png", dpi=dpi)
        meta["lipattn:narrow"] = base64.b64encode(small.getvalue()).decode("ascii")
        meta["lipattn:narrow-css-width"] = str(round(narrow.get_figwidth() * CSS_PX_PER_IN))
        meta["lipattn:narrow-min-text-px"] = f"{narrow_pt * CSS_PX_PER_IN / 72:.2f}"
    fig.savefig(buf, format="png", dpi=dpi, metadata=meta)
    return buf.getvalue()


def glue_figure(name: str, fig: Figure, alt: str) -> Figure:
    """Glue ``fig`` under ``name`` (not displayed), with its alt text.

    A chapter then shows it as a numbered figure with a caption, referenced
    by ``{numref}`name```::

        ```{glue:figure} fig-jacobian-norm
        :name: fig-jacobian-norm

        The caption, a sentence saying what the figure shows.
        ```
    """
    from myst_nb import glue

    set_alt(fig, alt)
    glue(name, fig, display=False)
    return fig


def setup_notebook() -> None:
    """Prepare a chapter's kernel: the book's style, and figures shown as PNG.

    Chapters build figures with :func:`figure` (no pyplot state), so a cell
    that ends with a figure must know how to display it; this registers that
    formatter with IPython. Outside IPython it only sets the style.
    """
    use_style()
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - the book's environment has IPython
        return
    ip = get_ipython()
    if ip is not None:
        ip.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def attention_panel(fig: Figure, ax, title: str, *, fontsize: float = 9.5):
    """An empty attention-matrix image on ``ax`` (weights 0..1, query rows, key columns).

    The explorers set its data with ``set_data(P)``; the extent is fixed, so a
    matrix of any size fills the panel. Returns the image artist.
    """
    img = ax.imshow(np.zeros((3, 3)), vmin=0, vmax=1, cmap="viridis", extent=(0, 1, 1, 0),
                    interpolation="none", aspect="auto")
    ax.set_xticks([0, 1])
    ax.set_xticklabels(["key 1", "key N"])
    ax.set_yticks([0, 1])
    ax.set_yticklabels(["query 1", "query N"])
    fig.colorbar(img, ax=ax, fraction=0.05, pad=0.02, label="attention weight")
    ax.set_title(title, fontsize=fontsize)
    return img
