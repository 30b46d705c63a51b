"""Figures, experiments and explorers of the softmax-Jacobian chapter.

Everything is computed with :mod:`lipattn.softmax`; this module only arranges
it. Randomness comes from ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle
from matplotlib.ticker import FixedLocator

from ..._validate import as_count, as_int_at_least, as_positive_float, as_real_float, as_seed
from ...softmax import entropy, softmax, softmax_jacobian, softmax_jacobian_norm
from .. import plotting
from .._check import as_counts, as_result
from ..widgets import Explorer, Slider

__all__ = [
    "SearchResult",
    "norm_search",
    "fig_norm_search",
    "simplex_grid",
    "fig_simplex",
    "lipschitz_ratios",
    "fig_lipschitz_ratios",
    "explorer_logits",
    "fig_attention_diagram",
    "LogitsExplorer",
    "SaturationExplorer",
]


# --------------------------------------------------------------------------
# Random and adversarial search for the largest ||J||_2
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchResult:
    """Outcome of :func:`norm_search`.

    Attributes
    ----------
    random : ndarray, shape (trials,)
        ``||J(z)||_2`` for random logits ``z = s * g`` with ``g ~ N(0, I_n)``
        and a log-uniform scale ``s`` in ``[1e-2, 1e2]``.
    adversarial : ndarray, shape (steps,)
        Best ``||J||_2`` so far of the coordinate search, which starts from
        the best random point (clipped to the box).
    best_logits : ndarray, shape (n,)
        The logits where the coordinate search ended.
    box : float
        The search keeps every logit in ``[-box, box]``.
    box_sup : float
        ``sup ||J||_2`` over that box, reached at two logits ``box`` and the
        others ``-box``: ``1/2 - box_gap``.
    box_gap : float
        ``(n - 2) e / (2 (2 + (n - 2) e))`` with ``e = exp(-2 box)``, computed
        in closed form (positive; ``1/2 - box_sup`` would lose digits).
    """

    random: np.ndarray
    adversarial: np.ndarray
    best_logits: np.ndarray
    box: float
    box_sup: float
    box_gap: float


def norm_search(n: int = 6, trials: int = 20000, steps: int = 300, seed: int = 0,
                box: float = 10.0) -> SearchResult:
    """Search for logits with a large softmax-Jacobian spectral norm.

    Two searches. A random one: ``trials`` logit vectors at log-uniform scales.
    An adversarial one: a coordinate search started from the best random
    point, with one step size per logit; each step tries ``z +- step_i e_i``
    for every ``i`` (one batched norm evaluation), moves to the best candidate
    if it increases ``||J||_2`` and doubles that coordinate's step, and
    otherwise halves every step. Logits stay in ``[-box, box]``: the norm
    approaches 1/2 only as the gap between the tied top logits and the rest
    grows without bound, and beyond a gap of about 37 the sum ``2 + (n - 2)
    e^{-gap}`` rounds to 2 in double precision, so the computed norm would be
    exactly 1/2 (a rounding artefact). Inside the box the supremum is
    ``1/2 - box_gap`` (Chapter 1, theorem "tight bound" (2)) and the search
    can be compared with it.

    Parameters
    ----------
    n : int
        Number of logits (>= 3).
    trials : int
        Number of random logit vectors (>= 1).
    steps : int
        Number of coordinate-search steps (>= 1).
    seed : int
        Seed of ``np.random.default_rng``.
    box : float
        Positive bound on the logits of the coordinate search, at most 15 so
        that ``box_gap`` is resolved by ``1/2 - ||J||_2`` in double precision.

    Returns
    -------
    SearchResult
    """
    n = as_int_at_least(n, "n", 3, 10**4)
    trials = as_count(trials, "trials", maximum=10**7 // n)
    steps = as_count(steps, "steps", maximum=10**6 // n)
    box = as_positive_float(box, "box")
    if box > 15.0:
        raise ValueError(f"box must be a positive number <= 15; got {box!r}")
    rng = np.random.default_rng(as_seed(seed))
    scales = 10.0 ** rng.uniform(-2, 2, size=(trials, 1))
    logits = scales * rng.standard_normal((trials, n))
    random = softmax_jacobian_norm(logits)

    z = np.clip(logits[int(np.argmax(random))], -box, box)
    best = float(softmax_jacobian_norm(z))
    step = np.ones(n)
    eye = np.eye(n)
    history = np.empty(steps)
    for t in range(steps):
        moves = step[:, None] * eye
        cand = np.clip(np.vstack([z + moves, z - moves]), -box, box)
        vals = softmax_jacobian_norm(cand)
        k = int(np.argmax(vals))
        if vals[k] > best:
            z, best = cand[k], float(vals[k])
            step[k % n] *= 2.0
        else:
            step *= 0.5
        np.clip(step, 1e-12, 2.0 * box, out=step)
        history[t] = best
    e = math.exp(-2.0 * box)
    gap = (n - 2) * e / (2.0 * (2.0 + (n - 2) * e))
    return SearchResult(random=random, adversarial=history, best_logits=z, box=box,
                        box_sup=1.0 / (2.0 + (n - 2) * e), box_gap=gap)


def fig_norm_search(result: SearchResult) -> Figure:
    """Histogram of the random search; distance to 1/2 of the coordinate search."""
    result = as_result(result, "result", cls=SearchResult, producer="norm_search")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.0)
    ax1.hist(result.random, bins=60, color="C0", alpha=0.8)
    ax1.axvline(0.5, color=plotting.HALF_COLOR, ls="--", label="1/2")
    ax1.set_xlabel(r"$\|J(z)\|_2$ for random logits")
    ax1.set_ylabel("count")
    ax1.set_xlim(0, 0.55)
    ax1.legend(loc="upper left")
    steps = np.arange(1, result.adversarial.size + 1)
    ax2.plot(steps, 0.5 - result.adversarial, color="C1", label="coordinate search")
    ax2.axhline(0.5 - float(result.random.max()), color="C0", ls=":",
                label="best random logits")
    ax2.axhline(result.box_gap, color=plotting.HALF_COLOR, ls="--",
                label=rf"box optimum, $|z_i| \leq {result.box:g}$")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("step")
    ax2.set_ylabel(r"$1/2 - \|J\|_2$ (best so far)")
    ax2.set_ylim(result.box_gap / 10, 1.0)
    ax2.legend(loc="upper right", fontsize=8)
    return fig


# --------------------------------------------------------------------------
# ||J||_2 over the probability simplex for n = 3
# --------------------------------------------------------------------------
#: Largest grid of :func:`simplex_grid`: about resolution**2 / 2 points (5 * 10**5 here).
_MAX_RESOLUTION = 1000


def simplex_grid(resolution: int = 120) -> tuple[np.ndarray, np.ndarray]:
    """``||J||_2`` at the interior points of a barycentric grid of the 2-simplex.

    Parameters
    ----------
    resolution : int
        Grid points per edge, 4 to 1000.

    Returns
    -------
    p : ndarray, shape (m, 3)
        Interior probability vectors ``(i, j, k) / resolution``.
    norms : ndarray, shape (m,)
        ``||diag(p) - p p^T||_2`` at each, computed from the logits ``log p``.
    """
    r = as_int_at_least(resolution, "resolution", 4, _MAX_RESOLUTION)
    idx = [(i, j, r - i - j) for i in range(1, r) for j in range(1, r - i)]
    p = np.array(idx, dtype=float) / r
    return p, softmax_jacobian_norm(np.log(p))


def fig_simplex(resolution: int = 120) -> Figure:
    """Heatmap of ``||J||_2`` over the simplex, with the centre and edge midpoints."""
    p, norms = simplex_grid(resolution)
    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])
    xy = p @ corners
    fig, ax = plotting.figure(1, width=6.0, height=4.8)
    tpc = ax.tripcolor(xy[:, 0], xy[:, 1], norms, shading="gouraud", cmap="viridis",
                       vmin=0, vmax=0.5)
    fig.colorbar(tpc, ax=ax, label=r"$\|J\|_2$")
    ax.plot(*np.vstack([corners, corners[:1]]).T, color="k", lw=1)
    mids = (corners + np.roll(corners, -1, axis=0)) / 2
    ax.plot(mids[:, 0], mids[:, 1], "o", color="C3", ms=7,
            label="edge midpoints (norm → 1/2)")
    ax.plot(*corners.mean(axis=0), "s", color="w", mec="k", ms=7, label="centre (norm 1/3)")
    for name, (x, y), dx, dy in zip(("$p_1=1$", "$p_2=1$", "$p_3=1$"), corners,
                                    (-0.06, 0.06, 0.0), (-0.05, -0.05, 0.05), strict=True):
        ax.text(x + dx, y + dy, name, ha="center", va="center")
    ax.set_aspect("equal")
    ax.set_xlim(-0.12, 1.12)
    ax.set_ylim(-0.1, 0.95)
    ax.set_axis_off()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2)
    return fig


# --------------------------------------------------------------------------
# Lipschitz ratios: the constant is 1/2 in l2 and l-inf, whatever n is
# --------------------------------------------------------------------------
def lipschitz_ratios(ns: tuple[int, ...] = (2, 4, 16, 64, 256, 1024), pairs: int = 4000,
                     seed: int = 0) -> dict[str, np.ndarray]:
    """Largest observed ``||softmax(x) - softmax(y)|| / ||x - y||`` for each ``n``.

    The pairs are random logits ``x`` plus small and large perturbations, and
    near-tie pairs ``x = (t, t, -30, ...)`` with ``y = x + eps (1, -1, 0, ...)``,
    where the ratio approaches 1/2.

    Returns
    -------
    dict with keys ``"n"``, ``"l2"``, ``"linf"`` (ndarrays of shape (len(ns),)).
    """
    ns = as_counts(ns, "ns", minimum=2, maximum=10**5)
    pairs = as_count(pairs, "pairs", maximum=10**7 // max(ns))
    rng = np.random.default_rng(as_seed(seed))
    out = {"n": np.asarray(ns), "l2": np.empty(len(ns)), "linf": np.empty(len(ns))}
    for k, n in enumerate(ns):
        x = 3.0 * rng.standard_normal((pairs, n))
        dx = 10.0 ** rng.uniform(-4, 1, size=(pairs, 1)) * rng.standard_normal((pairs, n))
        tie = np.full((1, n), -30.0)
        tie[0, :2] = 0.0
        dtie = np.zeros((1, n))
        dtie[0, :2] = [1e-4, -1e-4]
        x = np.vstack([x, tie])
        dx = np.vstack([dx, dtie])
        diff = softmax(x + dx) - softmax(x)
        out["l2"][k] = np.max(np.linalg.norm(diff, axis=1) / np.linalg.norm(dx, axis=1))
        out["linf"][k] = np.max(np.abs(diff).max(axis=1) / np.abs(dx).max(axis=1))
    return out


def fig_lipschitz_ratios(ratios: dict[str, np.ndarray]) -> Figure:
    """The observed ratios against the true constant 1/2 and the loose sqrt(n)."""
    ratios = as_result(ratios, "ratios", ("n", "l2", "linf"), producer="lipschitz_ratios")
    fig, ax = plotting.figure(1, width=6.5, height=3.2)
    n = ratios["n"]
    ax.plot(n, ratios["l2"], "o-", ms=10, mfc="none", mew=1.8,
            label=r"largest $\ell_2$ ratio observed")
    ax.plot(n, ratios["linf"], "s--", ms=4, label=r"largest $\ell_\infty$ ratio observed")
    ax.plot(n, np.sqrt(n), ":", color=plotting.ONE_COLOR, label=r"claimed bound $\sqrt{n}$")
    ax.axhline(0.5, color=plotting.HALF_COLOR, ls="--", label="true constant 1/2")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of logits n")
    ax.set_ylabel(r"$\|\sigma(x)-\sigma(y)\| \,/\, \|x-y\|$")
    ax.set_ylim(0.3, 60)
    ax.legend(loc="upper left")
    return fig


# --------------------------------------------------------------------------
# Where the softmax Jacobian sits in self-attention
# --------------------------------------------------------------------------
def fig_attention_diagram() -> Figure:
    """Schematic of single-head self-attention, tokens as rows, with the place of
    the softmax Jacobians: a perturbation of X reaches f(X) through the logits
    and the row-wise J_i (logit path) and through V (value path)."""
    fig, ax = plotting.figure(1, width=8.4, height=3.3)
    ax.set_xlim(0, 16.8)
    ax.set_ylim(0, 6.6)
    ax.set_axis_off()
    ax.set_aspect("equal")

    def box(x, y, w, h, label, sub="", color="0.92", ec="0.3", lw=1.2):
        ax.add_patch(Rectangle((x, y), w, h, fc=color, ec=ec, lw=lw))
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=14)
        if sub:
            ax.text(x + w / 2, y - 0.25, sub, ha="center", va="top", fontsize=10, color="0.3")

    def arrow(x0, y0, x1, y1, text="", color="0.2", dy=0.18, ls="-"):
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=12,
                                     color=color, lw=1.3, ls=ls))
        if text:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2 + dy, text, ha="center", va="bottom",
                    fontsize=10, color=color)

    box(0.2, 2.3, 1.2, 2.0, "$X$", r"$N \times d$")
    box(2.6, 4.3, 1.0, 1.6, "$Q$", "$XW_Q$")
    box(2.6, 1.9, 1.0, 1.6, "$K$", "$XW_K$")
    box(4.9, 2.6, 1.9, 1.9, r"$S$", r"$QK^\top/\sqrt{d_k}$, $N \times N$")
    box(8.3, 2.6, 1.9, 1.9, r"$P$", "softmax of each row", color="#fde8c8", ec="C1", lw=2)
    box(11.4, 0.3, 1.0, 1.6, "$V$", "$XW_V$")
    box(13.9, 2.6, 1.0, 1.9, "$f(X)$", r"$PV$, $N \times d_v$")
    arrow(1.4, 3.6, 2.6, 5.1)
    arrow(1.4, 3.1, 2.6, 2.7)
    arrow(1.4, 2.6, 11.4, 1.1, color="C0")
    arrow(3.6, 5.1, 4.9, 4.0)
    arrow(3.6, 2.7, 4.9, 3.1)
    arrow(6.8, 3.55, 8.3, 3.55, r"row $i$: $J_i$", color="C1")
    arrow(10.2, 3.55, 13.9, 3.55, "logit path (through $J_i$)", color="C1")
    arrow(12.4, 1.1, 13.9, 2.7, color="C0")
    ax.text(13.3, 0.9, "value path\n(P fixed)", ha="left", va="center", fontsize=10,
            color="C0")
    ax.text(9.25, 5.05, r"$dp_i = ds_i\, J_i$,  $J_i = \mathrm{diag}(p_i) - p_i p_i^\top$",
            ha="center", va="bottom", fontsize=11, color="C1")
    return fig


# --------------------------------------------------------------------------
# Explorers
# --------------------------------------------------------------------------
_BASE_LOGITS = np.array([0.0, 1.0, 0.5, 0.0, -1.0])


def explorer_logits(z1: float) -> np.ndarray:
    """The logits the ``softmax-logits`` explorer shows: ``(z1, 1, 0.5, 0, -1)``.

    Returns
    -------
    z : ndarray, shape (5,)
    """
    z = _BASE_LOGITS.copy()
    z[0] = as_real_float(z1, "z1")
    return z


class LogitsExplorer(Explorer, name="softmax-logits", size=(8.4, 3.1),
                     title="Logits and temperature: p, the Jacobian J, and its eigenvalues"):
    """Move one logit and the temperature; watch p, J and the spectrum of J."""

    z1 = Slider(tuple(float(v) for v in np.round(np.arange(-3.0, 6.01, 0.75), 2)), label="logit z₁",
                default=1.5)
    tau = Slider((0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 4.0), label="temperature τ", default=1.0)
    presets = {
        "peak: z₁ = 1.5": {"z1": 1.5, "tau": 1.0},
        "dip: z₁ = 0.75": {"z1": 0.75, "tau": 1.0},
        "above 1: τ = 0.25": {"z1": 0.75, "tau": 0.25},
        "one-hot: z₁ = 6": {"z1": 6.0, "tau": 1.0},
    }

    def setup(self, fig: Figure):
        n = _BASE_LOGITS.size
        ax_p, ax_j, ax_e = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.05, 1]})
        self._bars = ax_p.bar(np.arange(1, n + 1), np.zeros(n), color="C0")
        ax_p.set_ylim(0, 1.42)  # room for the read-out above the bars
        ax_p.set_yticks(np.linspace(0, 1, 6))
        ax_p.set_xticks(np.arange(1, n + 1))
        ax_p.set_xlabel("token i")
        ax_p.set_title(r"$p = \mathrm{softmax}(z/\tau)$")
        self._im = ax_j.imshow(np.zeros((n, n)), vmin=-0.5, vmax=0.5, cmap="RdBu_r")
        ax_j.set_xticks(range(n), [str(i) for i in range(1, n + 1)])
        ax_j.set_yticks(range(n), [str(i) for i in range(1, n + 1)])
        ax_j.grid(False)
        ax_j.set_title(r"$J = (\mathrm{diag}(p) - pp^\top)/\tau$")
        fig.colorbar(self._im, ax=ax_j, shrink=0.85, extend="both")
        ax_e.axhline(1.0, color=plotting.ONE_COLOR, ls=":", label="1 (loose bound)")
        ax_e.axhline(0.5, color=plotting.HALF_COLOR, ls="--", label="1/2")
        (self._tau_line,) = ax_e.plot([-0.5, n - 0.5], [0.5, 0.5], color="C1", ls="-.",
                                      label=r"$1/(2\tau)$")
        (self._eig,) = ax_e.plot(np.arange(n), np.zeros(n), "o", color="C0", ms=7,
                                 label="eigenvalues of J")
        ax_e.set_xlim(-0.5, n - 0.5)
        ax_e.set_ylim(-0.05, 2.25)
        ax_e.xaxis.set_major_locator(FixedLocator(range(n)))
        ax_e.set_xticklabels([f"λ{i}" for i in range(1, n + 1)])
        ax_e.set_title(r"spectrum of J, $\lambda_1 \geq \dots \geq \lambda_5$")
        ax_e.legend(loc="upper right", bbox_to_anchor=(1.0, 0.86), fontsize=8)
        self._text = ax_p.text(0.97, 0.97, "", transform=ax_p.transAxes, ha="right", va="top",
                               fontsize=9, bbox={"fc": "white", "ec": "0.8", "alpha": 0.9})
        return [*self._bars, self._im, self._tau_line, self._eig, self._text]

    def update(self, z1: float, tau: float) -> None:
        z = explorer_logits(z1)
        p = softmax(z, temperature=tau)
        jac = softmax_jacobian(z, temperature=tau)
        for bar, h in zip(self._bars, p, strict=True):
            bar.set_height(h)
        self._im.set_data(jac)
        self._eig.set_ydata(np.linalg.eigvalsh(jac)[::-1])
        self._tau_line.set_ydata([0.5 / tau, 0.5 / tau])
        norm = float(softmax_jacobian_norm(z, temperature=tau))
        self._text.set_text(f"‖J‖₂ = {norm:.3g}\n1/(2τ) = {0.5 / tau:.3g}\nmax p = {p.max():.3g}")


_SAT_LOGITS = np.random.default_rng(0).standard_normal(8)
_SAT_SCALES = tuple(float(f"{a:.3g}") for a in np.geomspace(0.05, 50.0, 31))


class SaturationExplorer(Explorer, name="softmax-saturation", size=(8.4, 3.0),
                         title="Saturation: scale the logits z = a·z₀ and watch ‖J‖₂ vanish"):
    """Scale fixed logits up; the softmax saturates and ``||J||_2`` vanishes."""

    scale = Slider(_SAT_SCALES, label="logit scale a", default=_SAT_SCALES[10])
    presets = {
        "uniform: a = 0.05": {"scale": _SAT_SCALES[0]},
        "saturated: a = 50": {"scale": _SAT_SCALES[-1]},
    }

    def setup(self, fig: Figure):
        n = _SAT_LOGITS.size
        ax_p, ax_c = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
        self._bars = ax_p.bar(np.arange(1, n + 1), np.zeros(n), color="C0")
        ax_p.set_ylim(0, 1)
        ax_p.set_xticks(np.arange(1, n + 1))
        ax_p.set_xlabel("token (sorted by p)")
        ax_p.set_title(r"$p = \mathrm{softmax}(a z_0)$, $n = 8$")
        grid = np.geomspace(0.02, 80.0, 300)
        z = grid[:, None] * _SAT_LOGITS[None, :]
        p = softmax(z)
        curves = {
            r"$\|J\|_2$": softmax_jacobian_norm(z),
            r"entropy $H(p)/\ln n$": entropy(p) / np.log(n),
            r"$\max\, p$": p.max(axis=1),
        }
        for (label, y), color in zip(curves.items(), ("C0", "C1", "C3"), strict=True):
            ax_c.plot(grid, y, color=color, label=label)
        ax_c.axhline(0.5, color=plotting.HALF_COLOR, ls="--", lw=1, label="1/2")
        ax_c.set_xscale("log")
        ax_c.set_xlim(grid[0], grid[-1])
        ax_c.set_ylim(-0.02, 1.05)
        ax_c.set_xlabel("logit scale a (log axis)")
        ax_c.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=8.5)
        self._vline = ax_c.axvline(1.0, color="k", lw=1)
        (self._dots,) = ax_c.plot([1, 1, 1], [0, 0, 0], "o", color="k", ms=5)
        self._text = ax_c.text(0.98, 0.5, "", transform=ax_c.transAxes, ha="right",
                               va="center", fontsize=9,
                               bbox={"fc": "white", "ec": "0.8", "alpha": 0.9})
        return [*self._bars, self._vline, self._dots, self._text]

    def update(self, scale: float) -> None:
        z = scale * _SAT_LOGITS
        p = softmax(z)
        for bar, h in zip(self._bars, np.sort(p)[::-1], strict=True):
            bar.set_height(h)
        norm = float(softmax_jacobian_norm(z))
        h = float(entropy(p)) / np.log(p.size)
        self._vline.set_xdata([scale, scale])
        self._dots.set_data([scale] * 3, [norm, h, p.max()])
        self._text.set_text(f"a = {scale:.3g}\n‖J‖₂ = {norm:.3g}\nH/ln n = {h:.3g}\n"
                            f"max p = {p.max():.3g}")
