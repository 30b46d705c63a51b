"""The explorers of the scaling-and-saturation chapter: drag d, scale one row.

- :class:`DExplorer` (``"scaling-d"``): the head dimension d with and without the
  1/sqrt(d) scaling, at N keys: one attention row, the logits' histogram, the
  histogram of ``||J||_2`` over queries, and the means against d
  (:func:`d_explorer_data`, every frame precomputed);
- :class:`SigmaExplorer` (``"scaling-sigma"``): one row of logits scaled by sigma:
  its ``||J||_2`` falls exponentially, the mean over rows like 1/sigma
  (:func:`sigma_rows`).

The experiments and figures they share their draws with are in
:mod:`lipattn.book.viz.scaling`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from ..._validate import as_bool, as_int_at_least, as_seed
from ...scaling import saturation_per_row
from ...softmax import entropy, softmax, softmax_jacobian_norm
from .. import plotting
from ..widgets import Explorer, Slider
from .scaling import D_GRID, _base_draws, _log2_axis, nested_logits

__all__ = ["DExplorerData", "d_explorer_data", "DExplorer", "sigma_rows", "SigmaExplorer"]


# --------------------------------------------------------------------------
# The d-explorer
# --------------------------------------------------------------------------
_N_GRID = (2, 64, 1024)
#: d values on the explorer's slider (every power of 2 up to 64, then every 4th).
_D_SLIDER = (1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096)
_TOP = 16
_LOGIT_EDGES_T = np.linspace(-math.asinh(400.0), math.asinh(400.0), 73)  # asinh-space bins
_JAC_EDGES = np.linspace(0.0, 0.5, 41)
_HIST_FLOOR = 1e-5


def _queries_for(n_keys: int) -> int:
    """Queries per frame: 2000, fewer for large N (at most 2^18 logits a frame)."""
    return int(min(2000, max(256, 2**18 // n_keys)))


@dataclass(frozen=True)
class DExplorerData:
    """Everything the d-explorer shows, for one (N, scaling), at every d of D_GRID.

    Attributes
    ----------
    d : ndarray, shape (13,)
    jac, entropy, max_p, sigma : ndarray, shape (13, M)
        Per query: ``||J||_2``, ``H(p)``, ``max p`` (from
        :func:`lipattn.scaling.saturation_stats_from_logits`'s row statistics)
        and the logit standard deviation ``c ||q||`` given ``q``.
    logit_share : ndarray, shape (13, 72)
        Share of all M*N logits in each bin of ``sinh`` of 72 equal bins of
        ``asinh(s)`` over ``[-asinh 400, asinh 400]`` (clipped into the range).
    jac_share : ndarray, shape (13, 40)
        Share of the M queries with ``||J||_2`` in each of 40 equal bins of [0, 1/2].
    top_row : ndarray, shape (13, 16)
        The 16 largest attention weights of query 0, sorted (zero-padded if N < 16).
    """

    d: np.ndarray
    jac: np.ndarray
    entropy: np.ndarray
    max_p: np.ndarray
    sigma: np.ndarray
    logit_share: np.ndarray
    jac_share: np.ndarray
    top_row: np.ndarray


def d_explorer_data(n_keys: int, scaled: bool, seed: int = 0) -> DExplorerData:
    """Compute :class:`DExplorerData` (cached: the explorer is built from it once)."""
    return _d_explorer_data(as_int_at_least(n_keys, "n_keys", 1, 1024), as_bool(scaled, "scaled"),
                            as_seed(seed))


@lru_cache(maxsize=16, typed=True)
def _d_explorer_data(n_keys: int, scaled: bool, seed: int) -> DExplorerData:
    m = _queries_for(n_keys)
    jac, ent, mp, sig, lsh, jsh, top = ([] for _ in range(7))
    for d in D_GRID:
        s = nested_logits(d, n_keys, scaled, m, seed)
        h, p_max, j = saturation_per_row(s)
        r2, _ = _base_draws(2000, 1024, int(seed))
        sig.append(np.sqrt(r2[:m, D_GRID.index(d)] / (d if scaled else 1)))
        jac.append(j)
        ent.append(h)
        mp.append(p_max)
        t = np.clip(np.arcsinh(s.ravel()), _LOGIT_EDGES_T[0], _LOGIT_EDGES_T[-1])
        lsh.append(np.histogram(t, bins=_LOGIT_EDGES_T)[0] / t.size)
        jsh.append(np.histogram(j, bins=_JAC_EDGES)[0] / m)
        row = np.zeros(_TOP)
        p0 = np.sort(softmax(s[0]))[::-1][:_TOP]
        row[: p0.size] = p0
        top.append(row)
    arrs = [np.array(a) for a in (jac, ent, mp, sig, lsh, jsh, top)]
    for a in arrs:
        a.setflags(write=False)
    return DExplorerData(np.array(D_GRID), *arrs)


def _steps(edges: np.ndarray, heights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x, y of a step outline of a histogram (for Line2D.set_data)."""
    return np.repeat(edges, 2)[1:-1], np.repeat(heights, 2)


class DExplorer(Explorer, name="scaling-d", size=(8.4, 4.4),
                title="Drag the head dimension dₖ: attention with and without the 1/√dₖ scaling"):
    """Drag d with and without 1/sqrt(d): one row, the logits, ||J||_2 over queries, the means."""

    d = Slider(_D_SLIDER, label="head dimension dₖ", default=64)
    scaled = Slider((True, False), label="divide by √dₖ",
                    fmt=lambda v: "on (scaled)" if v else "off (unscaled)")
    n_keys = Slider(_N_GRID, label="number of keys N", default=64)
    presets = {
        "off, dₖ = 1": {"d": 1, "scaled": False, "n_keys": 64},
        "off, dₖ = 4096": {"d": 4096, "scaled": False, "n_keys": 64},
        "on, dₖ = 4096": {"d": 4096, "scaled": True, "n_keys": 64},
        "N = 2, off": {"d": 16, "scaled": False, "n_keys": 2},
    }

    def setup(self, fig: Figure):
        self._data = {(n, sc): d_explorer_data(n, sc) for n in _N_GRID for sc in (True, False)}
        (ax_p, ax_s), (ax_j, ax_m) = fig.subplots(2, 2)
        # (a) one attention row
        self._bars = ax_p.bar(np.arange(1, _TOP + 1), np.zeros(_TOP), color="C0")
        ax_p.set_ylim(0, 1.05)
        ax_p.set_xlim(0.3, _TOP + 0.7)
        ax_p.set_xticks([1, 4, 8, 12, 16])
        ax_p.set_xlabel("key rank (top 16)")
        ax_p.set_ylabel("weight")
        # the titles carry the read-outs, so they never cover the data
        self._row_text = ax_p.set_title("one query's attention row", fontsize=10)
        # (b) distribution of the logits
        x, y = _steps(np.sinh(_LOGIT_EDGES_T), np.zeros(_LOGIT_EDGES_T.size - 1))
        ref = np.diff(0.5 * (1 + np.vectorize(math.erf)(np.sinh(_LOGIT_EDGES_T) / math.sqrt(2))))
        ax_s.plot(*_steps(np.sinh(_LOGIT_EDGES_T), ref), color=plotting.ONE_COLOR, lw=1,
                  ls=":", label="N(0, 1)")
        (self._logit_line,) = ax_s.plot(x, y, color="C0", lw=1.6, label="logits $s_j$")
        ax_s.set_xscale("asinh", linear_width=1.0)
        ax_s.set_xlim(-400, 400)
        ax_s.xaxis.set_major_locator(FixedLocator([-100, -10, -1, 0, 1, 10, 100]))
        ax_s.xaxis.set_minor_locator(NullLocator())
        ax_s.set_xticklabels(["−100", "−10", "−1", "0", "1", "10", "100"])
        top = max(float(dat.logit_share.max()) for dat in self._data.values())
        ax_s.set_ylim(0, 1.08 * top)
        ax_s.set_xlabel("logit $s_j$ (asinh axis)")
        ax_s.set_ylabel("share per bin")
        ax_s.legend(loc="upper left", fontsize=8)
        self._logit_text = ax_s.set_title("logits of all queries", fontsize=10)
        # (c) histogram of ||J||_2 over queries
        x, y = _steps(_JAC_EDGES, np.full(_JAC_EDGES.size - 1, _HIST_FLOOR))
        (self._jac_line,) = ax_j.plot(x, y, color="C0", lw=1.6)
        self._jac_mean = ax_j.axvline(0.1, color="k", ls="--", lw=1.2, label="mean")
        self._jac_uniform = ax_j.axvline(0.1, color=plotting.ONE_COLOR, ls=":", lw=1.2,
                                         label="1/N (uniform p)")
        ax_j.axvline(0.5, color=plotting.HALF_COLOR, ls="--", lw=1, label="1/2 (sup)")
        ax_j.set_yscale("log")
        ax_j.set_ylim(2e-4, 1.5)
        ax_j.set_xlim(0, 0.52)
        ax_j.set_xlabel(r"$\|J\|_2$ of one query")
        ax_j.set_ylabel("share (log)")
        ax_j.legend(loc="upper center", fontsize=8, ncol=3, handlelength=1.2)
        self._jac_text = ax_j.set_title("‖J‖₂ across queries", fontsize=10)
        # (d) running means against d
        dd = np.array(D_GRID, float)
        self._curves, self._faint, self._refs = [], [], []
        for color, lab in (("C0", r"$\mathbb{E}\,\|J\|_2$"), ("C1", r"$\mathbb{E}[H]/\ln N$"),
                           ("C3", r"$\mathbb{E}[\max p]$")):
            (faint,) = ax_m.plot(dd, np.zeros_like(dd), color=color, lw=1, alpha=0.3)
            (line,) = ax_m.plot(dd[:1], [0.0], "o-", ms=3.5, color=color, label=lab)
            (ref,) = ax_m.plot([dd[0], dd[-1]], [0.0, 0.0], ":", color=color, lw=1)
            self._curves.append(line)
            self._faint.append(faint)
            self._refs.append(ref)
        _log2_axis(ax_m)
        ax_m.set_ylim(-0.02, 1.05)
        ax_m.set_xlabel("head dimension $d_k$")
        ax_m.legend(loc="lower center", bbox_to_anchor=(0.5, 0.98), ncol=3, fontsize=8.5)
        self._vline = ax_m.axvline(1.0, color="k", lw=0.8)
        return [*self._bars, self._row_text, self._logit_line, self._logit_text,
                self._jac_line, self._jac_mean, self._jac_uniform, self._jac_text,
                *self._faint, *self._curves, *self._refs, self._vline]

    def update(self, d: int, scaled: bool, n_keys: int) -> None:
        data = self._data[(n_keys, scaled)]
        k = D_GRID.index(d)
        for bar, h in zip(self._bars, data.top_row[k], strict=True):
            bar.set_height(h)
        s0 = data.sigma[k, 0]
        self._row_text.set_text(
            f"one query: σ = {s0:.3g}, max p = {data.max_p[k, 0]:.3f}, "
            f"‖J‖₂ = {data.jac[k, 0]:.2g}")
        self._logit_line.set_ydata(np.repeat(data.logit_share[k], 2))
        rms = math.sqrt(float(np.mean(data.sigma[k] ** 2)))
        self._logit_text.set_text(f"logits of all queries: sd = {rms:.3g}")
        self._jac_line.set_ydata(np.repeat(np.maximum(data.jac_share[k], _HIST_FLOOR), 2))
        jm = float(data.jac[k].mean())
        self._jac_mean.set_xdata([jm, jm])
        self._jac_uniform.set_xdata([1 / n_keys, 1 / n_keys])
        self._jac_text.set_text(f"‖J‖₂, {data.jac.shape[1]} queries: median "
                                f"{np.median(data.jac[k]):.2g}, {np.mean(data.jac[k] > 0.25):.0%}"
                                " > 1/4")
        dd = data.d.astype(float)
        means = (data.jac.mean(axis=1), data.entropy.mean(axis=1) / math.log(max(n_keys, 2)),
                 data.max_p.mean(axis=1))
        for line, faint, ref, y in zip(self._curves, self._faint, self._refs, means,
                                       strict=True):
            line.set_data(dd[: k + 1], y[: k + 1])
            faint.set_ydata(y)
            ref.set_ydata([y[0], y[0]])
        self._vline.set_xdata([d, d])


# --------------------------------------------------------------------------
# The sigma explorer
# --------------------------------------------------------------------------
_SIGMA_N = 16
_SIGMAS = tuple(float(f"{s:.2g}") for s in np.geomspace(0.1, 100.0, 13))
_CURVE_SIGMAS = np.geomspace(0.05, 200.0, 160)


@lru_cache(maxsize=2, typed=True)
def sigma_rows(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three fixed standard-normal rows (N = 16) whose top-two gaps sit at the
    1st, 50th and 90th percentiles of 4000 draws; and those gaps."""
    g = np.random.default_rng(as_seed(seed)).standard_normal((4000, _SIGMA_N))
    top2 = -np.partition(-g, 1, axis=1)[:, :2]
    gaps = top2[:, 0] - top2[:, 1]
    order = np.argsort(gaps)
    picks = order[(np.array([0.01, 0.50, 0.90]) * gaps.size).astype(int)]
    return g[picks], gaps[picks]


@lru_cache(maxsize=2, typed=True)
def _sigma_mean_curve(seed: int = 1, samples: int = 3000) -> np.ndarray:
    """E||J||_2 over random rows (N = 16) on _CURVE_SIGMAS (Monte Carlo, common draws)."""
    g = np.random.default_rng(seed).standard_normal((samples, _SIGMA_N))
    return np.array([float(np.mean(softmax_jacobian_norm(s * g))) for s in _CURVE_SIGMAS])


class SigmaExplorer(Explorer, name="scaling-sigma", size=(8.4, 3.1),
                    title="Scale one row of logits s = σ·g (N = 16): saturation of a single query"):
    """Scale one row's logits by sigma: its ||J||_2 falls exponentially, the mean like 1/sigma."""

    sigma = Slider(_SIGMAS, label="logit scale σ", default=_SIGMAS[6])
    row = Slider((0, 1, 2), label="row (gap between its top two scores g)", default=1,
                 fmt=lambda i: f"gap {sigma_rows()[1][i]:.2f}", kind="choice")
    presets = {
        "middle row, σ = 0.1": {"sigma": _SIGMAS[0], "row": 1},
        "middle row, σ = 100": {"sigma": _SIGMAS[-1], "row": 1},
        "near tie, σ = 100": {"sigma": _SIGMAS[-1], "row": 0},
    }

    def setup(self, fig: Figure):
        rows, self._gaps = sigma_rows()
        self._rows = rows
        self._row_curves = np.array([softmax_jacobian_norm(_CURVE_SIGMAS[:, None] * r[None, :])
                                     for r in rows])
        ax_p, ax_c = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.5]})
        self._bars = ax_p.bar(np.arange(1, _SIGMA_N + 1), np.zeros(_SIGMA_N), color="C0")
        ax_p.set_ylim(0, 1.05)
        ax_p.set_xticks([1, 4, 8, 12, 16])
        ax_p.set_xlabel("key rank (sorted by weight)")
        ax_p.set_ylabel("attention weight")
        ax_p.set_title(r"$p = \mathrm{softmax}(\sigma g)$")
        self._text = ax_p.text(0.97, 0.95, "", transform=ax_p.transAxes, ha="right", va="top",
                               fontsize=9, bbox={"fc": "white", "ec": "0.8", "alpha": 0.9})
        floor = 1e-300
        mean = _sigma_mean_curve()
        ax_c.plot(_CURVE_SIGMAS, mean, "k--", lw=1.6,
                  label=r"$\mathbb{E}\,\|J\|_2$ over random rows (~$1/\sigma$)")
        (self._row_line,) = ax_c.plot(_CURVE_SIGMAS, np.full(_CURVE_SIGMAS.size, 0.1),
                                      color="C0", label=r"this row's $\|J\|_2$")
        (self._hi,) = ax_c.plot(_CURVE_SIGMAS, np.full(_CURVE_SIGMAS.size, 0.1), ":",
                                color="C3", lw=1.4,
                                label=r"bounds $e^{-\sigma G}/N$ and $2(N-1)e^{-\sigma G}$")
        (self._lo,) = ax_c.plot(_CURVE_SIGMAS, np.full(_CURVE_SIGMAS.size, 0.1), ":",
                                color="C3", lw=1.4)
        ax_c.axhline(0.5, color=plotting.HALF_COLOR, ls="--", lw=1, label="1/2")
        ax_c.axhline(1 / _SIGMA_N, color=plotting.ONE_COLOR, ls=":", lw=1, label="1/N")
        (self._dot,) = ax_c.plot([1.0], [0.1], "o", color="C0", ms=7)
        ax_c.set_xscale("log")
        ax_c.set_yscale("log")
        ax_c.set_xlim(_CURVE_SIGMAS[0], _CURVE_SIGMAS[-1])
        ax_c.set_ylim(1e-7, 1.0)
        ax_c.set_xlabel(r"$\sigma$ (log axis)")
        ax_c.set_ylabel(r"$\|J\|_2$ (log axis)")
        ax_c.set_title("this row decays exponentially, the average like 1/σ")
        ax_c.legend(loc="lower left", fontsize=8)
        self._floor = floor
        return [*self._bars, self._text, self._row_line, self._hi, self._lo, self._dot]

    def update(self, sigma: float, row: int) -> None:
        g = self._rows[row]
        z = sigma * g
        p = softmax(z)
        for bar, h in zip(self._bars, np.sort(p)[::-1], strict=True):
            bar.set_height(h)
        norm = float(softmax_jacobian_norm(z))
        h = float(entropy(p))
        self._text.set_text(f"‖J‖₂ = {norm:.3g}\nH = {h:.3g} nats\nmax p = {p.max():.3f}")
        self._row_line.set_ydata(np.maximum(self._row_curves[row], self._floor))
        e = np.exp(-_CURVE_SIGMAS * self._gaps[row])
        self._hi.set_ydata(np.maximum(2 * (_SIGMA_N - 1) * e, self._floor))
        self._lo.set_ydata(np.maximum(e / _SIGMA_N, self._floor))
        self._dot.set_data([sigma], [max(norm, self._floor)])
