"""The book's plot style, set in one place.

Chapters call :func:`use_style` once (through ``lipattn.setup_page``) and
:func:`figure` for every static figure, so every plot shares fonts, grid and
colours, and every explorer frame has the same look.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

__all__ = [
    "attention_panel",
    "STYLE_FILE", "use_style", "figure", "figure_png", "setup_notebook", "HALF_COLOR", "ONE_COLOR",
]

#: Path of the matplotlib style file shipped with the package.
STYLE_FILE = Path(__file__).with_name("book.mplstyle")

#: Colour of the reference line at 1/2 (the tight bound) in every figure.
HALF_COLOR = "#2ca02c"
#: Colour of the reference line at 1 (the loose bound) in every figure.
ONE_COLOR = "#7f7f7f"


def use_style() -> None:
    """Apply the book's matplotlib style globally (idempotent)."""
    plt.style.use(str(STYLE_FILE))


def figure(ncols: int = 1, nrows: int = 1, *, width: float = 8.4, height: float = 3.2,
           **subplot_kw) -> tuple[Figure, object]:
    """Create a figure in the book's style, sized for the page.

    Parameters
    ----------
    ncols, nrows : int
        Grid of axes.
    width, height : float
        Size in inches. Figures are shown at 100 dpi, and the page's text
        column is about 840 px wide, so 8.4 in is drawn at its natural size.
    **subplot_kw
        Passed to :meth:`matplotlib.figure.Figure.subplots`.

    Returns
    -------
    fig : Figure
    axes : Axes or ndarray of Axes
    """
    with plt.style.context(str(STYLE_FILE)):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, **subplot_kw)
    return fig, axes


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """Encode a static figure as PNG bytes (used by the notebook formatter)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


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
