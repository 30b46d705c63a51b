"""The explorers of the rank-collapse chapter: a stack of attention layers, and skips.

- :class:`StackExplorer` (``"collapse-stack"``): depth, weight scale and block type
  (attention only, with a skip, with a scaled skip, with an MLP): the tokens in the
  plane, the relative residual r_l against the cubic bound, and the attention matrix
  (:func:`stack_explorer_data`, every frame precomputed);
- :class:`SkipExplorer` (``"collapse-skip"``): the branch scale alpha of X + alpha f(X)
  and the weight scale: what grows and what shrinks over 20 layers (:func:`skip_data`).

The figures and experiments of the chapter, whose stacks these reuse, are in
:mod:`lipattn.book.viz.collapse`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure

from ..._validate import as_count
from ...collapse import cubic_constant, random_weights, relative_residual, residual, stack_states
from .. import plotting
from ..widgets import Explorer, Slider
from .collapse import _FLOOR, _SKIP, mlp_weights, tokens

__all__ = ["stack_explorer_data", "StackExplorer", "skip_data", "SkipExplorer"]


# --------------------------------------------------------------------------
# The explorer
# --------------------------------------------------------------------------
_N, _D, _L = 16, 32, 12
_LAYER_GRID = (0, 1, 2, 3, 4, 5, 6, 8, 12)
_SCALES = (0.5, 1.0, 2.0, 4.0)
_BLOCKS = ("pure", "mlp", "skip", "alpha")
_BLOCK_LABEL = {"pure": "attention only", "mlp": "attention + MLP (Lipschitz ≤ 4)",
                "skip": "X + f(X)", "alpha": "X + f(X)/√L"}


@lru_cache(maxsize=1, typed=True)
def stack_explorer_data() -> dict:
    """Every (scale, block) stack of the explorer: tokens, attention, r_l, one-step bounds."""
    X = tokens(_N, _D, seed=3)
    R0 = residual(X)
    _, _, vt = np.linalg.svd(R0, full_matrices=False)
    proj = vt[:2].T  # top-2 principal directions of the input's residual
    base = random_weights(_D, 1.0, _L + 1, seed=3)
    mlp = mlp_weights(_D, 4.0, _L + 1, seed=3)
    out = {}
    for s in _SCALES:
        W = tuple(s * w for w in base)
        c = np.array([cubic_constant(W[0][k], W[1][k], W[2][k]) for k in range(_L + 1)])
        for block in _BLOCKS:
            skip = block in ("skip", "alpha")
            alpha = 1 / math.sqrt(_L) if block == "alpha" else 1.0
            Xs, Ps = stack_states(X, *W, _L + 1, skip=skip, alpha=alpha,
                                  mlp=mlp if block == "mlp" else None)
            Xs = Xs[: _L + 1]
            norms = np.linalg.norm(Xs, axis=(1, 2))
            res = residual(Xs)
            pts = res @ proj * math.sqrt(_N) / norms[:, None, None]
            r = np.maximum(relative_residual(Xs), _FLOOR)
            rn = np.linalg.norm(res, axis=(1, 2))
            bound = np.full(_L + 1, np.nan)
            if block in ("pure", "mlp"):
                lip = 4.0 if block == "mlp" else 1.0
                bound[1:] = lip * c[:_L] * rn[:_L] ** 3 / np.maximum(norms[1:], 1e-300)
            out[(s, block)] = {"pts": pts, "P": Ps, "r": r, "bound": bound}
    return out


class StackExplorer(
        Explorer, name="collapse-stack", size=(8.4, 3.3),
        title="A stack of attention layers: tokens, relative residual, attention matrix"):
    """Depth, weight scale and block type: tokens, r_l with the cubic bound, attention."""

    layer = Slider(_LAYER_GRID, label="layer l", default=0)
    scale = Slider(_SCALES, label="weight scale s", default=1.0)
    block = Slider(_BLOCKS, label="block", fmt=lambda b: _BLOCK_LABEL[b])
    presets = {"attention only, s = 1": {"block": "pure", "scale": 1.0, "layer": 0},
               "attention only, s = 4": {"block": "pure", "scale": 4.0, "layer": 0},
               "X + f(X), s = 2": {"block": "skip", "scale": 2.0, "layer": 12},
               "X + f(X)/√L, s = 4": {"block": "alpha", "scale": 4.0, "layer": 12}}

    def setup(self, fig: Figure):
        self._data = stack_explorer_data()
        ax_t, ax_r, ax_p = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.35, 1]})
        (self._ghost,) = ax_t.plot([], [], ".", color="0.8", ms=4)
        (self._pts,) = ax_t.plot([], [], "o", color="C0", ms=4)
        ax_t.set_xlim(-1.2, 1.2)
        ax_t.set_ylim(-1.2, 1.2)
        ax_t.set_aspect("equal")
        ax_t.set_xticks([-1, 0, 1])
        ax_t.set_yticks([-1, 0, 1])
        ax_t.set_xlabel("PC 1 of res$(X_0)$")
        ax_t.set_title("(token − mean) / RMS token norm", fontsize=9)
        ell = np.arange(_L + 1)
        (self._faint,) = ax_r.plot(ell, np.ones(_L + 1), color="C0", lw=1, alpha=0.3)
        (self._curve,) = ax_r.plot([0], [1.0], "o-", color="C0", ms=3, label="$r_l$")
        (self._bnd,) = ax_r.plot([], [], "v", color="C3", ms=5,
                                 mfc="none", label=r"cubic bound from $l-1$")
        ax_r.axhline(2.2e-16, color=plotting.ONE_COLOR, lw=0.8, ls="--")
        ax_r.text(_L, 6e-16, "float64 rounding", ha="right", fontsize=7,
                  color=plotting.ONE_COLOR)
        self._vline = ax_r.axvline(0, color="k", lw=0.8)
        ax_r.set_yscale("log")
        ax_r.set_ylim(_FLOOR, 3)
        ax_r.set_xlim(-0.4, _L + 0.4)
        ax_r.set_xlabel("layer $l$")
        ax_r.legend(loc="center right", fontsize=7.5)
        self._rtext = ax_r.set_title("", fontsize=9)
        self._img = ax_p.imshow(np.full((_N, _N), 1 / _N), cmap="Blues",
                                norm=PowerNorm(0.5, vmin=0, vmax=1), interpolation="nearest")
        ax_p.set_xticks([0, _N - 1], ["1", str(_N)])
        ax_p.set_yticks([0, _N - 1], ["1", str(_N)])
        ax_p.set_xlabel("key")
        ax_p.set_ylabel("query")
        ax_p.set_title("attention matrix $P_l$", fontsize=9)
        return [self._ghost, self._pts, self._faint, self._curve, self._bnd, self._vline,
                self._rtext, self._img]

    def update(self, layer: int, scale: float, block: str) -> None:
        data = self._data[(scale, block)]
        pts = data["pts"]
        ghost = pts[:layer].reshape(-1, 2) if layer else np.zeros((0, 2))
        self._ghost.set_data(ghost[:, 0], ghost[:, 1])
        self._pts.set_data(pts[layer][:, 0], pts[layer][:, 1])
        r = data["r"]
        ell = np.arange(_L + 1)
        self._faint.set_ydata(r)
        self._curve.set_data(ell[: layer + 1], r[: layer + 1])
        b = data["bound"]
        shown = ~np.isnan(b) & (ell <= layer)
        self._bnd.set_data(ell[shown], np.clip(b[shown], _FLOOR, 1e3))
        self._vline.set_xdata([layer, layer])
        self._rtext.set_text(f"relative residual r_{layer} = {r[layer]:.1e}")
        self._img.set_data(data["P"][layer])


# --------------------------------------------------------------------------
# The skip explorer
# --------------------------------------------------------------------------
_SKIP_L = 20
_ALPHAS = (0.0, 0.125, 0.25, 1 / math.sqrt(_SKIP_L), 0.5, 1.0)
_SKIP_SCALES = (0.5, 1.0, 2.0, 4.0)


def _alpha_label(a: float) -> str:
    if a == 0:
        return "0 (attention only)"
    if math.isclose(a, 1 / math.sqrt(_SKIP_L)):
        return f"1/√{_SKIP_L}"
    return f"{a:g}"


@lru_cache(maxsize=1, typed=True)
def skip_data(seeds: int = 5) -> dict:
    """Medians over seeds of ``||res X_l||_F`` and ``sqrt(N) ||xbar_l||`` (both divided by
    ``||X_0||_F``) and of ``r_l``, for X + alpha f(X) stacks (alpha = 0 means no skip,
    X <- f(X)); N = 16, d = 32, L = 20. ``out[(scale, alpha)][key]`` has shape (L + 1,)."""
    seeds = as_count(seeds, "seeds", maximum=1000)
    out = {}
    for s in _SKIP_SCALES:
        for a in _ALPHAS:
            ab, mean, rel = [], [], []
            for seed in range(seeds):
                X = tokens(_N, _D, seed)
                W = tuple(s * w for w in random_weights(_D, 1.0, _SKIP_L, seed))
                Xs, _ = stack_states(X, *W, _SKIP_L, skip=a > 0, alpha=a if a > 0 else 1.0)
                res = np.linalg.norm(residual(Xs), axis=(1, 2))
                ab.append(np.maximum(res / np.linalg.norm(Xs[0]), _FLOOR))
                m = np.linalg.norm(Xs.mean(axis=1), axis=1) * math.sqrt(_N)
                mean.append(m / np.linalg.norm(Xs[0]))
                rel.append(np.maximum(relative_residual(Xs), _FLOOR))
            out[(s, a)] = {k: np.median(np.array(v), axis=0)
                           for k, v in (("abs", ab), ("mean", mean), ("rel", rel))}
    return out


class SkipExplorer(
        Explorer, name="collapse-skip", size=(8.4, 3.7),
        title="Skip connections X + α f(X): what grows, what shrinks "
              "(20 layers, median of 5 seeds)"):
    """Branch scale alpha and weight scale s: residual, mean token and their ratio."""

    alpha = Slider(_ALPHAS, label="branch scale α", default=1.0, fmt=_alpha_label)
    scale = Slider(_SKIP_SCALES, label="weight scale s", default=1.0)
    presets = {"α = 1, s = 1": {"alpha": 1.0, "scale": 1.0},
               "α = 1/8, s = 1": {"alpha": 0.125, "scale": 1.0},
               "α = 1/√20, s = 4": {"alpha": 1 / math.sqrt(20), "scale": 4.0},
               "α = 1/8, s = 4": {"alpha": 0.125, "scale": 4.0},
               "no skips": {"alpha": 0.0, "scale": 1.0}}

    def setup(self, fig: Figure):
        self._data = skip_data()
        ax_a, ax_r = fig.subplots(1, 2)
        ell = np.arange(_SKIP_L + 1)
        (self._abs,) = ax_a.plot(ell, np.ones(_SKIP_L + 1), "o-", ms=3, color=_SKIP,
                                 label=r"$\|\mathrm{res}\,X_l\|_F$")
        (self._mean,) = ax_a.plot(ell, np.ones(_SKIP_L + 1), "s-", ms=3, color="C1",
                                  label=r"$\sqrt{N}\,\|\bar x_l\|$ (mean token)")
        ax_a.set_yscale("log")
        ax_a.set_ylim(_FLOOR, 1e12)
        ax_a.set_xlabel("layer $l$")
        ax_a.set_title(r"norms divided by $\|X_0\|_F$", fontsize=9)
        (self._rel,) = ax_r.plot(ell, np.ones(_SKIP_L + 1), "o-", ms=3, color=_SKIP,
                                 label="$r_l$ measured")
        (self._heur,) = ax_r.plot(ell, np.ones(_SKIP_L + 1), "--", color=plotting.ONE_COLOR,
                                  label=r"$r_0 (1 + \alpha^2 s^2)^{-l/2}$ (equal rows of $P$)")
        ax_r.set_yscale("log")
        ax_r.set_ylim(_FLOOR, 3)
        ax_r.set_xlabel("layer $l$")
        handles = ax_a.get_legend_handles_labels()[0] + ax_r.get_legend_handles_labels()[0]
        fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8)
        self._text = ax_r.set_title("", fontsize=9)
        return [self._abs, self._mean, self._rel, self._heur, self._text]

    def update(self, alpha: float, scale: float) -> None:
        d = self._data[(scale, alpha)]
        self._abs.set_ydata(d["abs"])
        self._mean.set_ydata(np.maximum(d["mean"], _FLOOR))
        self._rel.set_ydata(d["rel"])
        ell = np.arange(_SKIP_L + 1)
        if alpha > 0:
            self._heur.set_data(ell, d["rel"][0] * (1 + alpha**2 * scale**2) ** (-ell / 2))
        else:  # no skip: no heuristic
            self._heur.set_data([], [])
        self._text.set_text(f"relative residual: r_20 = {d['rel'][-1]:.1e}")
