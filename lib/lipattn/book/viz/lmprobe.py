"""Figures of Chapter 8's comparison with Castin et al. and of its interventions.

The measurements are :mod:`lipattn.book.lmprobe`'s, precomputed into the
shipped ``measurements.json``; this module only draws them.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .. import plotting
from .._check import as_result

__all__ = ["fig_growth", "fig_interventions"]


def _reference(ax, ks: np.ndarray, y0: float, power: float, style: str, label: str) -> None:
    ax.plot(ks, y0 * (ks / ks[0]) ** power, style, color=plotting.ONE_COLOR, lw=1,
            label=label)


def fig_growth(growth: dict, random: dict) -> Figure:
    r"""Median exact constant of each attention layer alone against the window
    length n (band: 10-90 % over windows), for the trained model (left) and for
    random initialisations of it (right, over seeds and windows), log-log, with
    the slopes 1/2 and 1/4 drawn from the shortest n of the largest median.

    ``growth``: :func:`lipattn.book.lmprobe.attention_growth`'s dict; ``random``:
    the same with a leading seed axis (``measurements.json``'s ``growth_random``).
    """
    g = as_result(growth, "growth", ("lengths", "attn"), producer="attention_growth")
    r = as_result(random, "random", ("lengths", "attn"), producer="attention_growth")
    fig, axes = plotting.figure(2, width=8.4, height=3.3)
    for ax, d, title in ((axes[0], g, "trained"), (axes[1], r, "random initialisation")):
        ks = np.asarray(d["lengths"], float)
        A = np.asarray(d["attn"], float)
        A = A.reshape(-1, *A.shape[-2:])              # (runs, L, K)
        lo, mid, hi = np.quantile(A, [0.1, 0.5, 0.9], axis=0)
        for i in range(A.shape[1]):
            ax.fill_between(ks, lo[i], hi[i], color=f"C{i}", alpha=0.15, lw=0)
            ax.plot(ks, mid[i], "o-", ms=3, color=f"C{i}", label=f"layer {i + 1}")
        y0 = mid[:, 0].max()
        _reference(ax, ks, y0, 0.5, "--", r"$\propto n^{1/2}$")
        _reference(ax, ks, y0, 0.25, ":", r"$\propto n^{1/4}$")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("window length n (bytes)")
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel(r"attention alone, $\|J\|_2$")
    axes[0].legend(fontsize=7, ncol=2)
    return fig


def fig_interventions(res: dict) -> Figure:
    """Per window, the stack's constant after replacing bytes over its own constant
    (median over draws): at the top positions of its most sensitive direction
    (x) against as many random positions (y), with the diagonal; and the
    first byte (grey crosses, at the same x). Linear axes: the ratios are
    near 1."""
    d = as_result(res, "res", ("base", "top", "random", "first"),
                  producer="byte_interventions")
    base = np.asarray(d["base"], float)[:, None]
    med = {a: np.median(np.asarray(d[a], float) / base, axis=1)
           for a in ("top", "random", "first")}
    fig, ax = plotting.figure(1, width=4.6, height=3.6)
    ax.plot(med["top"], med["random"], "o", ms=4, alpha=0.75, color="C0",
              label="random positions")
    ax.plot(med["top"], med["first"], "x", ms=4, alpha=0.75, color="0.45",
              label="first byte")
    allv = np.concatenate(list(med.values()))
    pad = 0.05 * (allv.max() - allv.min())
    lim = [allv.min() - pad, allv.max() + pad]
    ax.plot(lim, lim, "--", color=plotting.ONE_COLOR, lw=1, label="equal change")
    ax.axhline(1, color="0.7", lw=0.8)
    ax.axvline(1, color="0.7", lw=0.8)
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel("top positions replaced: constant / original")
    ax.set_ylabel("control: constant / original")
    ax.legend(fontsize=7)
    return fig
