"""The book's plot style, set in one place.

Chapters call :func:`setup_notebook` once and :func:`figure` for every static
figure, so every plot shares fonts, grid and colours, and every explorer
frame has the same look.

**Drawn for the width they are shown at.** A figure inch is 100 CSS pixels:
:func:`figure` draws at most :data:`COLUMN_IN` = 6.72 in, the text column of
the site on a 1280-pixel desktop (672 CSS px), so a font of ``f`` points shows
at ``f * 100 / 72`` CSS px there (9 pt -> 12.5 px). Images are encoded at
:data:`DPR` = 2 device pixels per CSS pixel (sharp on HiDPI screens), and
every text is at least :data:`MIN_FONT_PT` (8 pt = 11.1 CSS px on the desktop).
On a phone the site shows a figure no narrower than the width at which its
smallest text is :data:`PHONE_MIN_TEXT_PX` (``phone_min_width``), in a
sideways-scrolling box.

Each PNG carries what the site needs in its metadata (``css-width``,
``min-font-px``, ``alt``): the build extension (:mod:`lipattn.book.sphinxext`)
sizes the ``<img>`` to the column from it and gives it the alt text.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from .._validate import as_int_at_least, as_positive_float

__all__ = [
    "attention_panel",
    "STYLE_FILE", "use_style", "figure", "figure_png", "setup_notebook", "HALF_COLOR", "ONE_COLOR",
    "COLUMN_IN", "CSS_PX_PER_IN", "DPR", "MIN_FONT_PT", "PHONE_MIN_TEXT_PX", "legible",
    "describe", "set_alt", "glue_figure", "phone_min_width", "narrow_copy", "PHONE_COLUMN_IN",
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
#: The smallest font in a figure, in points (11.1 CSS px at the column width).
MIN_FONT_PT = 8.0
#: The smallest text size, in CSS px, that a figure may show at on a phone.
PHONE_MIN_TEXT_PX = 9.0


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


def legible(fig: Figure, min_pt: float = MIN_FONT_PT) -> float:
    """Raise every visible text of ``fig`` to at least ``min_pt`` points.

    The figure is drawn first, so tick labels and legend entries (created at
    draw time) are included. Returns the smallest font size left, in points.
    """
    if FigureCanvasAgg is not type(fig.canvas):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    sizes = []
    for t in _texts(fig):
        if t.get_fontsize() < min_pt:
            t.set_fontsize(min_pt)
        sizes.append(float(t.get_fontsize()))
    if _wrap_titles(fig):
        fig.canvas.draw()
    return min(sizes, default=float(min_pt))


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
    """The narrowest width (CSS px) at which a figure's smallest text is
    :data:`PHONE_MIN_TEXT_PX`; at most ``css_width``."""
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

    The smallest text is raised to :data:`MIN_FONT_PT` first (:func:`legible`).
    The PNG's text chunks hold ``lipattn:css-width`` (CSS px),
    ``lipattn:min-font-px`` (CSS px at that width) and ``lipattn:alt``
    (:func:`describe`), which the build uses to size and describe the image.
    """
    import base64

    dpi = CSS_PX_PER_IN * DPR if dpi is None else dpi
    narrow = narrow_copy(fig)
    min_pt = legible(fig)
    buf = io.BytesIO()
    css_width = round(fig.get_figwidth() * CSS_PX_PER_IN)
    meta = {"lipattn:css-width": str(css_width),
            "lipattn:min-font-px": f"{min_pt * CSS_PX_PER_IN / 72:.2f}",
            "lipattn:alt": describe(fig)}
    if narrow is not None:
        narrow_pt = legible(narrow)
        small = io.BytesIO()
        narrow.savefig(small, format="png", dpi=dpi)
        meta["lipattn:narrow"] = base64.b64encode(small.getvalue()).decode("ascii")
        meta["lipattn:narrow-css-width"] = str(round(narrow.get_figwidth() * CSS_PX_PER_IN))
        meta["lipattn:narrow-min-font-px"] = f"{narrow_pt * CSS_PX_PER_IN / 72:.2f}"
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
