"""The figure of the audit's claim 8: input sensitivity of deep stacks.

The measurements are :func:`lipattn.book.sensitivity.input_sensitivity`; this
module runs the scan the page shows and draws it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure

from ..._validate import as_count
from .. import plotting
from .._check import as_result
from ..sensitivity import Sensitivity, input_sensitivity

__all__ = ["DEPTHS", "depth_scan", "fig_sensitivity"]

#: Depths of the scan.
DEPTHS = (3, 6, 12, 24, 48)
_COLORS = {"post": "C1", "pre": "C0"}
_NAMES = {"post": "Post-LN", "pre": "Pre-LN"}


def depth_scan(d: int = 16, seeds: int = 3) -> dict[str, Sensitivity]:
    """Post-LN and Pre-LN at :data:`DEPTHS`, plus Pre-LN at the largest depth
    with branches scaled by ``1/sqrt(L)`` (key ``"pre_scaled"``)."""
    return _depth_scan(as_count(d, "d", maximum=256), as_count(seeds, "seeds", maximum=100))


@lru_cache(maxsize=2, typed=True)
def _depth_scan(d: int, seeds: int) -> dict[str, Sensitivity]:
    out = {v: input_sensitivity(DEPTHS, d, variant=v, seeds=seeds) for v in ("post", "pre")}
    L = DEPTHS[-1]
    out["pre_scaled"] = input_sensitivity((L,), d, variant="pre", seeds=seeds,
                                          alpha=1 / np.sqrt(L))
    return out


def fig_sensitivity(scan: dict[str, Sensitivity]) -> Figure:
    """Left: end-to-end local constant against the product of per-layer ones,
    by depth (median over seeds, band min-max). Right: the per-layer constants
    of the deepest stacks."""
    scan = as_result(scan, "scan", ("post", "pre", "pre_scaled"), producer="depth_scan")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.3)
    for v in ("post", "pre"):
        r, c = scan[v], _COLORS[v]
        for arr, ls, what in ((r.product, "--", "product of layers"),
                              (r.end_to_end, "-", "whole stack")):
            ax1.fill_between(r.depths, arr.min(1), arr.max(1), color=c, alpha=0.15, lw=0)
            ax1.plot(r.depths, np.median(arr, 1), ls, marker="o", ms=3.5, color=c,
                     label=f"{_NAMES[v]}: {what}")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xticks(scan["post"].depths, [str(L) for L in scan["post"].depths])
    ax1.minorticks_off()
    ax1.set_xlabel("depth L")
    ax1.set_ylabel(r"local constant $\|J\|_2$")
    ax1.set_title("bound vs measured, at initialisation", fontsize=10)
    ax1.legend(fontsize=7.5, loc="upper left")
    layers = np.arange(1, scan["post"].layer_norms.shape[1] + 1)
    for key, c, ls, lab in (("post", _COLORS["post"], "-", "Post-LN"),
                            ("pre", _COLORS["pre"], "-", "Pre-LN"),
                            ("pre_scaled", _COLORS["pre"], ":",
                             rf"Pre-LN, branches $\times 1/\sqrt{{{layers[-1]}}}$")):
        ax2.plot(layers, np.median(scan[key].layer_norms, 0), ls, color=c, lw=1.6, label=lab)
    ax2.axhline(1, color=plotting.ONE_COLOR, ls="--", lw=1)
    ax2.set_yscale("log")
    ax2.set_xlabel("layer l")
    ax2.set_ylabel(r"$\Vert J_l\Vert_2$ (median over seeds)")
    ax2.set_title(f"per-layer constants, L = {layers[-1]}", fontsize=10)
    ax2.legend(fontsize=7.5)
    return fig
