"""Figures, experiments and the explorer of the Lipschitz-constant chapter.

Everything is computed with :mod:`lipattn.lipschitz`; this module arranges it.
The chapter's pictures use identity weights in d = 2 (so A = I/sqrt 2) and
three input families, all with largest token norm t:

- ``"random"``: N fixed random unit directions, scaled by t;
- ``"two-sided"``: t (0, u, -u, u, ...), the family of the t^2 growth;
- ``"sink"``: x_1 = t u, x_j = t u / 2, the family of the sqrt(N) growth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from ..._validate import (
    as_choice,
    as_count,
    as_int_at_least,
    as_positive_float,
    as_seed,
    safe_norm,
    safe_product,
    scale_of,
)
from ...adversarial import sink_tokens, two_sided_tokens
from ...attention import attention_matrix, check_attention_args
from ...bounds import card_bound, kim_l2_bound, local_lipschitz_bound
from ...l2attention import l2_local_lipschitz
from ...lipschitz import local_lipschitz
from ...models.encoder_sublayers import SublayerConstants
from .. import plotting
from .._check import as_counts, as_reals, as_result
from ..widgets import Explorer, Slider

__all__ = [
    "CONFIGS",
    "IDENTITY",
    "tokens",
    "castin_code_bound",
    "two_sided_constant_mp",
    "GrowthCurves",
    "growth_curves",
    "fig_t_growth",
    "sink_table",
    "fig_sqrt_n",
    "looseness_sample",
    "fig_looseness",
    "fig_trained",
    "LipschitzExplorer",
    "cost_table",
    "cost_html",
]

#: The input families of the chapter.
CONFIGS = ("random", "two-sided", "sink")
#: Identity weights in d = 2, as a tuple (W_Q, W_K, W_V).
IDENTITY = (np.eye(2), np.eye(2), np.eye(2))
_U = np.array([1.0, 0.0])
#: Largest number of tokens of the chapter's experiments (the exact constants cost N^2).
_MAX_N = 10**4


@lru_cache(maxsize=8, typed=True)
def _directions(N: int, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed).standard_normal((N, 2))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    g.setflags(write=False)
    return g


def tokens(config: str, t: float, N: int) -> np.ndarray:
    """The chapter's input of family ``config`` at scale ``t`` with ``N`` tokens, shape (N, 2)."""
    config = as_choice(config, "config", CONFIGS)
    t = as_positive_float(t, "t", allow_zero=True)
    N = as_int_at_least(N, "N", 2, _MAX_N)
    if config == "random":
        return t * np.array(_directions(N))
    if config == "two-sided":
        return two_sided_tokens(t, N, 2)
    if config == "sink":
        return sink_tokens(t, N, _U)
    raise ValueError(f"config must be one of {CONFIGS}; got {config!r}")


def castin_code_bound(X: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, W_V: np.ndarray) -> float:
    r"""The bound evaluated by the code released with Castin, Ablin & Peyré (2024).

    For one head: :math:`\|W_V\|_2\sqrt{\rho^2 r^2 (N + 1) + N}` with ``r`` the
    largest distance between two tokens and :math:`\rho = \max_i \|A x_i\|`
    (here the larger of :math:`\|A x_i\|` and :math:`\|A^\top x_i\|`, so that
    the transpose convention cannot make it smaller), :math:`A = W_Q W_K^\top/\sqrt{d_k}`.
    """
    X, W_Q, W_K, W_V = check_attention_args(X, W_Q, W_K, W_V)
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, d) (one sequence); got shape {X.shape}")
    # X = x Xs, W = w Ws with Xs, Ws of order 1 (powers of two: exact), so that no
    # square overflows or underflows; the products are taken without overflow.
    x, q, k, v = (scale_of(M) for M in (X, W_Q, W_K, W_V))
    Xs = X / x
    As = (W_Q / q) @ (W_K / k).T / math.sqrt(W_Q.shape[1])
    diff = Xs[:, None, :] - Xs[None, :, :]
    r = float(np.max(safe_norm(diff, axis=-1)))
    rho = max(float(np.max(safe_norm(Xs @ As.T, axis=1))),
              float(np.max(safe_norm(Xs @ As, axis=1))))
    N = X.shape[0]
    name, what = "X, W_Q, W_K, W_V", "Castin et al.'s code bound"
    t = safe_product(rho, r, math.sqrt(N + 1), q, k, x, x, name=name, what=what)
    root = math.hypot(t, math.sqrt(N))  # sqrt(t^2 + N), without squaring t
    return safe_product(float(np.linalg.norm(W_V / v, 2)), v, root, name=name, what=what)


# --------------------------------------------------------------------------
# growth in t
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class GrowthCurves:
    """Exact constants, bounds and the audited formula along one family.

    Attributes
    ----------
    t : ndarray, shape (T,)
    exact, bound, card, l2, castin : ndarray, shape (T,)
        Dot-product exact constant (matrix-free), the chapter's bound, the card
        formula (C = 1), the exact constant of L2 attention, Castin et al.'s
        code bound.
    kim : float
        The L2 bound of Kim et al. (independent of t).
    config : str
    N : int
    """

    t: np.ndarray
    exact: np.ndarray
    bound: np.ndarray
    card: np.ndarray
    l2: np.ndarray
    castin: np.ndarray
    kim: float
    config: str
    N: int


def growth_curves(config: str, N: int, ts) -> GrowthCurves:
    """:class:`GrowthCurves` of family ``config`` with N tokens on the grid ``ts``."""
    config = as_choice(config, "config", CONFIGS)
    N = as_int_at_least(N, "N", 2, _MAX_N)
    ts = as_reals(ts, "ts")
    if np.any(ts < 0) or ts.size > 10**4:
        raise ValueError(f"ts must hold at most 10**4 scales t >= 0; got {ts.size} "
                         f"with minimum {ts.min()!r}")
    W = IDENTITY
    rows = []
    for t in ts:
        X = tokens(config, float(t), N)
        rows.append((local_lipschitz(X, *W, method="lanczos"), local_lipschitz_bound(X, *W),
                     card_bound(X, *W), l2_local_lipschitz(X, W[0], W[2], method="lanczos"),
                     castin_code_bound(X, *W)))
    cols = [np.array(c) for c in zip(*rows, strict=True)]
    return GrowthCurves(ts, *cols, kim=kim_l2_bound(N, W[0], W[2]), config=config, N=N)


def fig_t_growth(curves: GrowthCurves) -> Figure:
    """Log-log: exact constant, bound, card formula, L2 attention against t."""
    curves = as_result(curves, "curves", cls=GrowthCurves, producer="growth_curves")
    fig, ax = plotting.figure(1, width=8.4, height=3.6)
    c = curves
    ax.loglog(c.t, c.exact, "o-", ms=3.5, color="C0", lw=2,
              label=r"exact $\|Df(X_t)\|_2$ (dot-product)")
    ax.loglog(c.t, c.bound, "--", color="C2", label="this chapter's bound")
    ax.loglog(c.t, c.card, "-.", color="C3", label="card formula, C = 1")
    big = c.t >= 1
    ax.loglog(c.t[big], math.sqrt(2) / 3 * c.t[big] ** 2, ":", color="k", lw=1,
              label=r"$(\sqrt{2}/3)\,t^2$")
    ax.loglog(c.t, c.l2, "s-", ms=3, color="C1", label="exact, L2 self-attention")
    ax.axhline(c.kim, color="C1", ls=":", lw=1.2, label="Kim et al.'s L2 bound")
    ax.set_ylim(0.3, None)
    ax.set_xlabel("input scale t  (tokens t·(0, e₁, −e₁))")
    ax.set_ylabel("local Lipschitz constant")
    ax.legend(loc="upper left", fontsize=8.5, ncol=2)
    return fig


# --------------------------------------------------------------------------
# sqrt(N) at fixed radius
# --------------------------------------------------------------------------
def sink_table(radii, Ns) -> dict:
    """Exact constants of the sink input, ``table[R]`` an array over ``Ns``."""
    radii = as_reals(radii, "radii", positive=True)
    Ns = as_counts(Ns, "Ns", minimum=2, maximum=_MAX_N)
    if radii.size * len(Ns) > 10**4:
        raise ValueError(f"radii and Ns must make at most 10**4 pairs; got {radii.size * len(Ns)}")
    return {float(R): np.array([local_lipschitz(sink_tokens(float(R), n, _U), *IDENTITY,
                                                method="lanczos") for n in Ns])
            for R in radii}


def fig_sqrt_n(table: dict, Ns) -> Figure:
    """Log-log: the sink input's constant against N at several radii, with sqrt(N)."""
    table = as_result(table, "table", producer="sink_table")
    Ns = np.asarray(as_counts(Ns, "Ns", minimum=2, maximum=_MAX_N), dtype=float)
    for R, vals in table.items():
        if np.shape(vals) != Ns.shape:
            raise ValueError(f"table[{R!r}] must have one value per entry of Ns, shape "
                             f"{Ns.shape}; got shape {np.shape(vals)}")
    fig, ax = plotting.figure(1, width=8.4, height=3.4)
    for k, (R, vals) in enumerate(table.items()):
        ax.loglog(Ns, vals, "o-", ms=3.5, color=f"C{k}", label=f"radius R = {R:g}")
    ax.loglog(Ns, np.sqrt(Ns), "k:", lw=1.2, label=r"$\sqrt{N}$")
    ax.set_xlabel("number of tokens N")
    ax.set_ylabel(r"exact $\|Df(X)\|_2$, sink input")
    ax.legend(loc="upper left", fontsize=8.5)
    return fig


# --------------------------------------------------------------------------
# looseness of the bound on random and adversarial inputs
# --------------------------------------------------------------------------
def looseness_sample(samples: int = 200, seed: int = 0) -> dict:
    """Ratios bound / exact on random and adversarial inputs.

    Random weights (Gaussian, scaled by 1/sqrt d), N in 2..24, d in 2..6,
    token scale log-uniform in [0.1, 10]; the input is one of: Gaussian tokens,
    the two-sided family, the sink input (along a random direction), or a
    cluster of near-duplicates. Returns ``{"random": ratios, "adversarial": ratios}``.
    """
    samples = as_count(samples, "samples", maximum=10**6)
    rng = np.random.default_rng(as_seed(seed))
    out: dict[str, list[float]] = {"random": [], "adversarial": []}
    for k in range(samples):
        N, d = int(rng.integers(2, 25)), int(rng.integers(2, 7))
        scale = 10 ** rng.uniform(-1, 1)
        Wq, Wk, Wv = (rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(3))
        kind = k % 4
        if kind == 0:
            X = scale * rng.standard_normal((N, d))
        elif kind == 1:
            X = two_sided_tokens(scale, N, d)
        elif kind == 2:
            X = sink_tokens(scale, N, rng.standard_normal(d))
        else:
            X = scale * rng.standard_normal((N, d))
            X[1:] = X[0] + 1e-2 * scale * rng.standard_normal((N - 1, d))
        ratio = local_lipschitz_bound(X, Wq, Wk, Wv) / local_lipschitz(X, Wq, Wk, Wv)
        out["random" if kind == 0 else "adversarial"].append(ratio)
    return {k: np.array(v) for k, v in out.items()}


def fig_looseness(ratios: dict) -> Figure:
    """Histogram of bound / exact (log axis) for random and adversarial inputs."""
    ratios = as_result(ratios, "ratios", ("random", "adversarial"), producer="looseness_sample")
    fig, ax = plotting.figure(1, width=8.4, height=3.0)
    allr = np.concatenate(list(ratios.values()))
    edges = np.geomspace(1.0, max(2.0, float(allr.max()) * 1.05), 30)
    for k, (name, r) in enumerate(ratios.items()):
        ax.hist(r, bins=edges, alpha=0.6, color=f"C{k}", label=f"{name} inputs ({r.size})")
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("bound / exact local constant (log axis; never below 1)")
    ax.set_ylabel("inputs")
    ax.legend(fontsize=8.5)
    return fig


_VARIANT_NAMES = {"pre": "Pre-LN", "post": "Post-LN"}


def fig_trained(const: dict) -> Figure:
    """Per-layer constants of a trained model's attention sublayers.

    Parameters
    ----------
    const : dict
        ``const[variant, state]`` is a :class:`~lipattn.models.encoder_sublayers.SublayerConstants`
        for ``variant`` in ``("pre", "post")`` and ``state`` in
        ``("init", "trained")``. Lines: medians over the batch; triangles: maxima.
    """
    const = as_result(const, "const", [(v, s) for v in ("pre", "post")
                                       for s in ("init", "trained")],
                      producer="lipattn.book.pretrained.measure(...).const")
    fig, axes = plotting.figure(2, width=8.4, height=3.9, sharey=True)
    series = (("card", "card formula, C = 1", "C3"), ("bound", "proved bound", "C2"),
              ("exact", "exact", "C0"))
    top = max(float(getattr(c, k).max()) for c in const.values() for k in ("card", "bound"))
    for ax, v in zip(axes, ("pre", "post"), strict=True):
        for state, ls, mk in (("init", ":", "o"), ("trained", "-", "s")):
            c: SublayerConstants = const[v, state]
            layers = np.arange(1, c.exact.shape[0] + 1)
            for key, label, color in series:
                vals = getattr(c, key)
                ax.plot(layers, np.median(vals, axis=1), ls=ls, marker=mk, ms=4,
                        color=color, label=f"{label}, {state} (median)")
                ax.plot(layers, vals.max(axis=1), ls="none", marker="^", ms=4,
                        color=color, alpha=0.45 if state == "init" else 1.0)
        ax.set_yscale("log")
        ax.set_ylim(1.0, 1.3 * top)
        ax.set_xticks(layers)
        ax.set_xlabel("layer")
        ax.set_title(f"{_VARIANT_NAMES[v]} (lr = 1e-2), 16 sequences")
    axes[0].set_ylabel("local constant (log; ▲ = max)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=8)
    return fig


# --------------------------------------------------------------------------
# the explorer
# --------------------------------------------------------------------------
_T_GRID = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
_N_GRID = (4, 16, 64)
_NAMES = {"random": "random", "two-sided": "two-sided (t² family)", "sink": "sink (√N family)"}


@lru_cache(maxsize=1, typed=True)
def _explorer_data() -> dict:
    """All curves of the explorer, computed once (matrix-free exact constants)."""
    return {(cfg, N): growth_curves(cfg, N, _T_GRID) for cfg in CONFIGS for N in _N_GRID}


class LipschitzExplorer(
        Explorer, name="lipschitz-t", size=(8.4, 3.1),
        title="Local Lipschitz constant of self-attention against the input scale t"):
    """Scale t, tokens N and the input family: exact constant vs bound vs card formula."""

    t = Slider(_T_GRID, label="input scale t (largest token norm)", default=4.0)
    N = Slider(_N_GRID, label="tokens N", default=16)
    config = Slider(CONFIGS, label="input family", default="two-sided", fmt=lambda c: _NAMES[c])
    presets = {"two-sided, N = 4, t = 1/4": {"config": "two-sided", "N": 4, "t": 0.25},
               "two-sided, N = 4, t = 8": {"config": "two-sided", "N": 4, "t": 8.0},
               "sink, N = 64, t = 2": {"config": "sink", "N": 64, "t": 2.0},
               "sink, N = 64, t = 6": {"config": "sink", "N": 64, "t": 6.0}}

    def setup(self, fig: Figure):
        self._data = _explorer_data()
        ax, ax_p = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
        t = np.array(_T_GRID)
        styles = (("exact", "o-", "C0", "exact (dot-product)"), ("bound", "--", "C2", "our bound"),
                  ("card", "-.", "C3", "card formula, C = 1"),
                  ("l2", "s-", "C1", "exact, L2 attention"))
        self._lines = {}
        for key, ls, color, label in styles:
            (line,) = ax.plot(t, np.ones_like(t), ls, ms=3, color=color, label=label)
            self._lines[key] = line
        (self._kim,) = ax.plot([t[0], t[-1]], [1, 1], ":", color="C1", lw=1.2,
                               label="Kim et al.'s L2 bound")
        (self._dot,) = ax.plot([1.0], [1.0], "o", ms=9, mfc="none", mec="k", mew=1.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(t[0] / 1.2, t[-1] * 1.2)
        ax.xaxis.set_major_locator(FixedLocator([0.25, 0.5, 1, 2, 4, 8]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels(["¼", "½", "1", "2", "4", "8"])
        ax.set_ylim(0.4, 2000)
        ax.set_xlabel("input scale t")
        ax.set_ylabel("local Lipschitz constant")
        ax.legend(loc="upper left", fontsize=8, ncol=2)
        self._title = fig.suptitle(" ", fontsize=9)
        self._img = plotting.attention_panel(fig, ax_p, "attention matrix P", fontsize=9.5)
        return [*self._lines.values(), self._kim, self._dot, self._title, self._img]

    def update(self, t: float, N: int, config: str) -> None:
        c = self._data[(config, N)]
        k = _T_GRID.index(t)
        for key, line in self._lines.items():
            line.set_ydata(getattr(c, key))
        self._kim.set_ydata([c.kim, c.kim])
        self._dot.set_data([t], [c.exact[k]])
        P = attention_matrix(tokens(config, t, N), *IDENTITY[:2])
        self._img.set_data(P)
        self._title.set_text(f"exact {c.exact[k]:.3g}, bound {c.bound[k]:.3g}, "
                             f"formula {c.card[k]:.3g}")


# --------------------------------------------------------------------------
# cost of the two methods
# --------------------------------------------------------------------------
def cost_table(sizes, dense_max_side: int = 1200, seed: int = 0) -> list[dict]:
    """Time the dense Jacobian + SVD against the matrix-free method at (N, d) sizes.

    Random tokens and weights (Gaussian, weights scaled by 1/sqrt d), d_k = d_v = d.
    The dense path runs only when ``N * d <= dense_max_side``. Each row has
    ``N, d, dense_s, lanczos_s, products, rel_diff, dense_gb`` (the memory the
    dense Jacobian needs); ``dense_s`` and ``rel_diff`` are ``None`` where the dense
    path did not run.
    """
    import time

    from ...lipschitz import attention_jacobian, local_lipschitz_info

    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise TypeError("sizes must be a non-empty list of (N, d) pairs; "
                        f"got {type(sizes).__name__} {sizes!r:.40}")
    pairs = []
    for pair in sizes:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"sizes must be a list of (N, d) pairs; got an entry {pair!r}")
        N, d = (as_count(v, "each N and d of sizes", maximum=10**5) for v in pair)
        if N * d > 10**6:
            raise ValueError(f"sizes must have N * d <= 10**6; got ({N}, {d})")
        pairs.append((N, d))
    dense_max_side = as_count(dense_max_side, "dense_max_side", maximum=5000)
    rows = []
    rng = np.random.default_rng(as_seed(seed))
    for N, d in pairs:
        X = rng.standard_normal((N, d))
        W = [rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(3)]
        t0 = time.perf_counter()
        fast = local_lipschitz_info(X, *W, method="lanczos")
        lanczos_s = time.perf_counter() - t0
        dense_s = rel = None
        if N * d <= dense_max_side:
            t0 = time.perf_counter()
            dense = float(np.linalg.norm(attention_jacobian(X, *W), 2))
            dense_s = time.perf_counter() - t0
            rel = abs(dense - fast.value) / dense
        rows.append({"N": N, "d": d, "dense_s": dense_s, "lanczos_s": lanczos_s,
                     "products": fast.products, "rel_diff": rel,
                     "dense_gb": 8.0 * (N * d) ** 2 / 1e9})
    return rows


def cost_html(rows: list[dict]) -> str:
    """The rows of :func:`cost_table` as an HTML table."""
    head = ("N", "d", "dense Jacobian (memory)", "dense + SVD", "matrix-free", "products",
            "relative difference")
    if not isinstance(rows, (list, tuple)) or not rows:
        raise TypeError("rows must be a non-empty list of dicts (as returned by cost_table); "
                        f"got {type(rows).__name__} {rows!r:.40}")
    for r in rows:
        as_result(r, "each entry of rows", ("N", "d", "dense_s", "lanczos_s", "products",
                                            "rel_diff", "dense_gb"), producer="cost_table")
    out = ["<table class='table'><thead><tr>" + "".join(f"<th>{h}</th>" for h in head)
           + "</tr></thead><tbody>"]
    for r in rows:
        dense = "—" if r["dense_s"] is None else f"{r['dense_s']:.3g} s"
        rel = "—" if r["rel_diff"] is None else f"{r['rel_diff']:.1e}"
        mem = f"{r['dense_gb'] * 1e3:.3g} MB" if r["dense_gb"] < 1 else f"{r['dense_gb']:.3g} GB"
        cells = (r["N"], r["d"], mem, dense, f"{r['lanczos_s'] * 1e3:.3g} ms", r["products"], rel)
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "".join(out) + "</tbody></table>"


def two_sided_constant_mp(t: float, dps: int = 60):
    r""":math:`L(X_t)` on :math:`X_t = t(0, e_1, -e_1)` (d = 2, identity weights) in mpmath.

    An independent reference for Chapter 6's expansion
    :math:`L = (\sqrt2/3)t^2 + \frac13 + O(t^{-2})`: the Jacobian splits into the
    3 x 3 block :math:`P` (second coordinates) and the Jacobian
    :math:`M_{ik} = P_{ik} + a\delta_{ik} v_i + a x_i P_{ik}(x_k - m_i)` of the
    one-dimensional map :math:`x \mapsto P(x)x` (first coordinates), with
    :math:`a = 1/\sqrt2`, and :math:`L = \max(\|M\|_2, \|P\|_2)`, computed with
    ``dps`` digits.

    Returns
    -------
    mpmath.mpf
    """
    import mpmath

    t = as_positive_float(t, "t", allow_zero=True)
    dps = as_int_at_least(dps, "dps", 15, 10**5)
    with mpmath.workdps(dps):
        a = 1 / mpmath.sqrt(2)
        x = [mpmath.mpf(0), mpmath.mpf(t), -mpmath.mpf(t)]
        rng = range(3)
        E = [[mpmath.exp(a * xi * xj) for xj in x] for xi in x]
        P = [[E[i][j] / mpmath.fsum(E[i]) for j in rng] for i in rng]
        m = [mpmath.fsum(P[i][j] * x[j] for j in rng) for i in rng]
        v = [mpmath.fsum(P[i][j] * (x[j] - m[i]) ** 2 for j in rng) for i in rng]
        M = [[P[i][k] + a * (i == k) * v[i] + a * x[i] * P[i][k] * (x[k] - m[i])
              for k in rng] for i in rng]
        return max(max(mpmath.svd_r(mpmath.matrix(B), compute_uv=False)) for B in (M, P))
