"""Figures and experiments of the rank-collapse chapter (its explorers are
:mod:`lipattn.book.viz.collapse_explorers`).

Everything is computed with :mod:`lipattn.collapse` and
:mod:`lipattn.attention`; this module only arranges it. Weights are i.i.d.
Gaussian with entries ``N(0, s^2/d)`` (:func:`lipattn.collapse.random_weights`),
a fresh set per layer; randomness comes from ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure

from ..._validate import (
    as_count,
    as_float_in,
    as_int_at_least,
    as_positive_float,
    as_real_float,
    as_seed,
)
from ...attention import attention_matrix, self_attention
from ...collapse import (
    cubic_constant,
    cubic_leading_term,
    query_gradient,
    random_weights,
    relative_residual,
    residual,
    spectral_2norm,
    stack_states,
    trajectory,
)
from .. import plotting
from .._check import as_counts, as_reals, as_result

__all__ = [
    "tokens",
    "mlp_weights",
    "fig_intro",
    "leading_coefficient_table",
    "fig_leading",
    "SignatureRun",
    "signature_run",
    "fig_signature",
    "skip_curves",
    "fig_skips",
    "mlp_curves",
    "fig_mlp",
    "regime_grid",
    "fig_regime",
    "gradient_table",
    "fig_gradient",
    "init_sharpness",
]

_FLOOR = 1e-17
_PURE, _SKIP, _ALPHA = "C3", "C0", "C2"
#: Bounds on sizes: beyond them a figure's experiment would run for hours.
_MAX_SIDE, _MAX_LAYERS, _MAX_SEEDS, _MAX_SIZE = 10**5, 10**4, 10**4, 10**8


def _check_size(size: int, name: str) -> None:
    if size > _MAX_SIZE:
        raise ValueError(f"{name} must be at most {_MAX_SIZE}; got {size}")


def _checked_stack(n, d, scale, layers, *seeds):
    """Validated (n, d, scale, layers[, seeds]) of a stack experiment.

    Weight scales lie in [1e-6, 1e6]: beyond, the logits of a deep stack
    overflow or its residuals underflow to 0 in float64.
    """
    scale = as_float_in(scale, "scale", 1e-6, 1e6)
    out = (as_count(n, "n", maximum=_MAX_SIDE), as_count(d, "d", maximum=_MAX_SIDE),
           scale, as_count(layers, "layers", maximum=_MAX_LAYERS))
    _check_size(out[0] * out[1] * out[3], "n * d * layers")
    return out + tuple(as_count(s, "seeds", maximum=_MAX_SEEDS) for s in seeds)


def tokens(n: int, d: int, seed: int = 0, mean: float = 0.0) -> np.ndarray:
    """``n`` standard-normal tokens in ``R^d`` plus ``mean`` in every coordinate, (n, d)."""
    n, d = as_count(n, "n", maximum=_MAX_SIDE), as_count(d, "d", maximum=_MAX_SIDE)
    seed, mean = as_seed(seed), as_real_float(mean, "mean")
    _check_size(n * d, "n * d")
    return np.random.default_rng(10_000 + seed).standard_normal((n, d)) + mean


def mlp_weights(d: int, lip: float, layers: int, seed: int = 0,
                hidden: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer ReLU-MLP weights with ``||W_1||_2 = 1`` and ``||W_2||_2 = lip``.

    The MLP ``relu(Y W_1) W_2`` is then at most ``lip``-Lipschitz (row-wise, in
    the Euclidean norm). The product of norms is only an upper bound; for
    random matrices the largest local Jacobian norm is well below it.
    Shapes (layers, d, h) and (layers, h, d), ``h = 4d`` unless given.
    """
    d, layers = as_count(d, "d", maximum=_MAX_SIDE), as_count(layers, "layers", maximum=_MAX_LAYERS)
    lip, seed = as_positive_float(lip, "lip"), as_seed(seed)
    h = 4 * d if hidden is None else as_count(hidden, "hidden", maximum=_MAX_SIDE)
    _check_size(layers * d * h, "layers * d * hidden")
    rng = np.random.default_rng(20_000 + seed)
    W1 = rng.standard_normal((layers, d, h))
    W2 = rng.standard_normal((layers, h, d))
    W1 /= spectral_2norm(W1)[:, None, None]
    W2 *= lip / spectral_2norm(W2)[:, None, None]
    return W1, W2


# --------------------------------------------------------------------------
# A first picture: tokens in the plane
# --------------------------------------------------------------------------
def fig_intro(n: int = 24, scale: float = 1.5, layers: int = 4, seed: int = 1) -> Figure:
    """Tokens in R^2 under pure attention with W_V = I, one panel per layer."""
    n, _, scale, layers = _checked_stack(n, 2, scale, layers)
    if layers > 12:
        raise ValueError(f"layers must be at most 12 (one panel each); got {layers}")
    seed = as_seed(seed)
    X = tokens(n, 2, seed)
    W_Q, W_K, _ = random_weights(2, scale, layers, seed)
    Xs, _ = stack_states(X, W_Q, W_K, np.eye(2), layers)
    r = relative_residual(Xs)
    fig, axes = plotting.figure(layers + 1, width=8.4, height=2.3, sharex=True, sharey=True)
    lim = 1.1 * np.abs(X).max()
    for ell, ax in enumerate(axes):
        for k in range(ell):
            ax.plot(Xs[k][:, 0], Xs[k][:, 1], ".", color="0.8", ms=3)
        ax.plot(Xs[ell][:, 0], Xs[ell][:, 1], "o", color="C0", ms=4)
        ax.set_title(f"layer {ell}: r = {r[ell]:.1e}", fontsize=9)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    return fig


# --------------------------------------------------------------------------
# The leading-order coefficient
# --------------------------------------------------------------------------
def leading_coefficient_table(n: int = 6, d: int = 4, scale: float = 1.5, seed: int = 3,
                              eps: np.ndarray | None = None) -> dict[str, np.ndarray | float]:
    """``||res f(1 xbar^T + eps R)||_F / ||eps R||_F^3`` against eps, the exact leading
    coefficient and the bound ``c``."""
    n, d, scale, _ = _checked_stack(n, d, scale, 1)
    seed = as_seed(seed)
    eps = np.geomspace(1.0, 3e-4, 15) if eps is None else _as_eps(eps)
    rng = np.random.default_rng(seed)
    W_Q, W_K, W_V = (w[0] for w in random_weights(d, scale, 1, seed))
    xbar = rng.standard_normal(d)
    R = residual(rng.standard_normal((n, d)))
    R /= np.linalg.norm(R)
    ratio = np.array([np.linalg.norm(residual(self_attention(xbar + e * R, W_Q, W_K, W_V)))
                      / e**3 for e in eps])
    lead = float(np.linalg.norm(cubic_leading_term(R, W_Q, W_K, W_V)))
    return {"eps": eps, "ratio": ratio, "lead": lead, "c": cubic_constant(W_Q, W_K, W_V)}


def _as_eps(eps) -> np.ndarray:
    """``eps``: positive reals at most 1e3, at most 10**4 of them."""
    eps = as_reals(eps, "eps", positive=True, maximum=1e3)
    if eps.size > 10**4:
        raise ValueError(f"eps must have at most 10**4 entries; got {eps.size}")
    return eps


def fig_leading(table: dict) -> Figure:
    """The ratio against eps (converging to the leading coefficient) and its relative error."""
    table = as_result(table, "table", ("eps", "ratio", "lead", "c"),
                      producer="leading_coefficient_table")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.0)
    e = table["eps"]
    ax1.plot(e, table["ratio"], "o-", ms=3, color="C0",
             label=r"$\|\mathrm{res}\,f(X)\|_F / \|\mathrm{res}\,X\|_F^3$")
    ax1.axhline(table["lead"], color="k", ls="--", lw=1.2,
                label=r"leading term $\|RAR^\top R W_V\|_F/N$")
    ax1.axhline(table["c"], color="C3", ls=":", lw=1.6, label="bound $c$ (theorem)")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_ylim(table["lead"] / 4, 20 * table["c"])
    ax1.set_xlabel(r"$\varepsilon = \|\mathrm{res}\,X\|_F$")
    ax1.legend(loc="upper left", fontsize=8)
    rel = np.abs(table["ratio"] / table["lead"] - 1)
    ax2.loglog(e, rel, "o-", ms=3, color="C0", label="relative error")
    ax2.loglog(e, rel[-1] * e / e[-1], "--", color=plotting.ONE_COLOR,
               label=r"slope 1 ($\propto\varepsilon$)")
    ax2.set_xlabel(r"$\varepsilon$")
    ax2.set_title("distance to the leading coefficient", fontsize=10)
    ax2.legend(loc="lower right", fontsize=8)
    return fig


# --------------------------------------------------------------------------
# The signature figure: float64 stops, mpmath goes on
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class SignatureRun:
    """One pure-attention stack in float64 and in mpmath.

    Attributes
    ----------
    log_f64, log_mp : ndarray, shape (L + 1,)
        ``log10 r_l`` in float64 and with ``dps`` digits.
    log_bound : ndarray, shape (L + 1,)
        ``log10`` of the cubic bound on ``r_l``, unrolled from layer ``start``
        (NaN before it).
    start : int
        First layer at which ``c_l ||res_l||^2 < 1``.
    dps : int
    """

    log_f64: np.ndarray
    log_mp: np.ndarray
    log_bound: np.ndarray
    start: int
    dps: int


@lru_cache(maxsize=2, typed=True)
def signature_run(n: int = 8, d: int = 8, scale: float = 1.0, layers: int = 8,
                  dps: int = 600, seed: int = 0) -> SignatureRun:
    """The float64 and mpmath trajectories of one stack, and the unrolled cubic bound."""
    n, d, scale, layers = _checked_stack(n, d, scale, layers)
    if layers > 64:
        raise ValueError(f"layers must be at most 64 (the digits grow as 3**layers); got {layers}")
    dps = as_int_at_least(dps, "dps", 15, 10**5)
    seed = as_seed(seed)
    X = tokens(n, d, seed, mean=1.0)
    W = random_weights(d, scale, layers, seed)
    log_f64 = trajectory(X, *W, layers, log10=True)
    log_mp = trajectory(X, *W, layers, dps=dps, log10=True)
    log_abs = trajectory(X, *W, layers, dps=dps, log10=True, absolute=True)
    log_norm = log_abs - log_mp  # log10 ||X_l||_F
    logc = np.log10([cubic_constant(W[0][k], W[1][k], W[2][k]) for k in range(layers)])
    start = next(k for k in range(layers) if logc[k] + 2 * log_abs[k] < 0)
    bound = np.full(layers + 1, np.nan)
    b = log_abs[start]
    for k in range(start, layers + 1):
        bound[k] = b - log_norm[k]
        if k < layers:
            b = logc[k] + 3 * b
    for a in (log_f64, log_mp, bound):
        a.setflags(write=False)
    return SignatureRun(log_f64, log_mp, bound, start, dps)


def fig_signature(run: SignatureRun) -> Figure:
    """Digits of collapse -log10 r_l on a log axis, and the exponent ratio."""
    run = as_result(run, "run", cls=SignatureRun, producer="signature_run")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.3)
    L = run.log_mp.size - 1
    ell = np.arange(L + 1)
    floor = -(run.dps - 5)
    ok = run.log_mp > floor
    ax1.plot(ell[ok], -run.log_mp[ok], "o-", color="C0", label=f"mpmath, {run.dps} digits")
    ax1.plot(ell, -run.log_f64, "s--", color="C1", ms=4, label="float64")
    b = ~np.isnan(run.log_bound)
    ax1.plot(ell[b], -run.log_bound[b], ":", color="C3", lw=2,
             label=f"cubic bound from layer {run.start}")
    ax1.axhline(16, color=plotting.ONE_COLOR, lw=0.8, ls="--")
    ax1.text(0.1, 19, "float64 rounding", fontsize=8, color=plotting.ONE_COLOR)
    ax1.set_yscale("log")
    ax1.set_ylim(0.1, 3 * run.dps)
    ax1.set_xlabel("layer $l$")
    ax1.set_ylabel(r"$-\log_{10} r_l$ (log axis)")
    ax1.set_title(r"digits of collapse: a line means $\log r_l \approx 3^l \log a$", fontsize=10)
    ax1.legend(loc="upper left", fontsize=8)
    lr = run.log_mp
    good = (lr[:-1] < -0.5) & (lr[1:] > floor)
    ratio = lr[1:][good] / lr[:-1][good]
    ax2.plot(ell[1:][good], ratio, "o-", color="C0", label=r"$\log r_{l+1} / \log r_l$ (mpmath)")
    fgood = good & (run.log_f64[1:] > -15)
    ax2.plot(ell[1:][fgood], run.log_f64[1:][fgood] / run.log_f64[:-1][fgood], "s--",
             color="C1", ms=4, label="float64 (until rounding)")
    ax2.axhline(3, color="k", ls="--", lw=1, label="3")
    ax2.set_ylim(1, 5)
    ax2.set_xlim(-0.3, L + 0.3)
    ax2.set_xlabel("layer $l + 1$")
    ax2.legend(loc="upper right", fontsize=8)
    return fig


# --------------------------------------------------------------------------
# Skip connections and MLPs
# --------------------------------------------------------------------------
def skip_curves(n: int = 16, d: int = 64, scale: float = 1.0, layers: int = 20,
                seeds: int = 5) -> dict[str, dict[str, np.ndarray]]:
    """Absolute and relative residuals against depth for pure attention, X + f(X) and
    X + f(X)/sqrt(L); ``out[mode][kind]`` has shape (seeds, layers + 1)."""
    n, d, scale, layers, seeds = _checked_stack(n, d, scale, layers, seeds)
    modes = {"pure": (False, 1.0), "skip": (True, 1.0), "alpha": (True, 1 / math.sqrt(layers))}
    out: dict[str, dict[str, np.ndarray]] = {}
    for mode, (skip, alpha) in modes.items():
        rel, ab = [], []
        for s in range(seeds):
            X = tokens(n, d, s)
            W = random_weights(d, scale, layers, s)
            rel.append(trajectory(X, *W, layers, skip=skip, alpha=alpha))
            ab.append(trajectory(X, *W, layers, skip=skip, alpha=alpha, absolute=True))
        out[mode] = {"rel": np.array(rel), "abs": np.array(ab) / np.array(ab)[:, :1]}
    return out


_MODE_STYLE = {"pure": (_PURE, "pure attention"), "skip": (_SKIP, r"$X + f(X)$"),
               "alpha": (_ALPHA, r"$X + f(X)/\sqrt{L}$")}


def fig_skips(curves: dict, scale: float = 1.0) -> Figure:
    """Median (line) and range over seeds (band) of the absolute and relative residual."""
    curves = as_result(curves, "curves", tuple(_MODE_STYLE), producer="skip_curves")
    scale = as_float_in(scale, "scale", 1e-6, 1e6)
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.3)
    for mode, (color, label) in _MODE_STYLE.items():
        for ax, kind in ((ax1, "abs"), (ax2, "rel")):
            y = np.maximum(curves[mode][kind], _FLOOR)
            ell = np.arange(y.shape[1])
            ax.fill_between(ell, y.min(0), y.max(0), color=color, alpha=0.2, lw=0)
            ax.plot(ell, np.median(y, 0), "o-", ms=3, color=color, label=label)
    ax1.set_yscale("log")
    ax1.set_ylim(_FLOOR, 1e4)
    ax1.set_ylabel(r"$\|\mathrm{res}\,X_l\|_F / \|\mathrm{res}\,X_0\|_F$")
    ax1.set_title("absolute residual", fontsize=10)
    ax2.set_yscale("log")
    ax2.set_ylim(_FLOOR, 2)
    ax2.set_ylabel(r"$r_l = \|\mathrm{res}\,X_l\|_F / \|X_l\|_F$")
    ax2.set_title(f"relative residual (weight scale {scale:g})", fontsize=10)
    for ax in (ax1, ax2):
        ax.set_xlabel("layer $l$")
    ax1.legend(loc="lower left", fontsize=8)
    return fig


def mlp_curves(lips: tuple[float, ...] = (0.5, 4, 64, 4096), n: int = 16, d: int = 64,
               layers: int = 8, seeds: int = 20) -> dict[float | None, np.ndarray]:
    """Relative residual of attention followed by a ReLU MLP of Lipschitz constant at most
    ``lip``, no skips; ``out[lip]`` has shape (seeds, layers + 1).

    ``out[None]`` is the attention-only baseline with the *same* attention weights and
    tokens (seed ``s`` draws them identically for every ``lip``), so the curves are a
    paired comparison.
    """
    n, d, _, layers, seeds = _checked_stack(n, d, 1.0, layers, seeds)
    lips = tuple(as_reals(lips, "lips", positive=True, maximum=1e6))
    out: dict[float | None, np.ndarray] = {}
    for lip in (None, *lips):
        rows = []
        for s in range(seeds):
            W = random_weights(d, 1.0, layers, s)
            mlp = None if lip is None else mlp_weights(d, lip, layers, s)
            rows.append(trajectory(tokens(n, d, s), *W, layers, mlp=mlp))
        out[lip] = np.array(rows)
    return out


def fig_mlp(curves: dict[float | None, np.ndarray]) -> Figure:
    """Median relative residual against depth: attention only (``curves[None]``) and
    attention + MLP for each Lipschitz bound."""
    pure = as_result(curves, "curves", (None,), producer="mlp_curves")[None]
    fig, ax = plotting.figure(1, width=8.4, height=3.0)
    ell = np.arange(pure.shape[1])
    ax.plot(ell, np.median(np.maximum(pure, _FLOOR), 0), "o-", color=_PURE, ms=3,
            label="attention only")
    styles = ("s--", "^-.", "D:", "v--", "x-.")
    mlps = [(lip, y) for lip, y in curves.items() if lip is not None]
    for k, (lip, y) in enumerate(mlps):
        y = np.maximum(y, _FLOOR)
        ax.plot(ell[: y.shape[1]], np.median(y, 0), styles[k % 5], ms=4 + k, mfc="none",
                color=f"C{k + 4}", label=f"attention + MLP, Lipschitz ≤ {lip:g}")
    ax.set_yscale("log")
    ax.set_ylim(_FLOOR, 2)
    ax.set_xlim(-0.3, pure.shape[1] - 0.7)
    ax.set_xlabel("layer $l$")
    ax.set_ylabel(f"$r_l$ (median of {pure.shape[0]} seeds)")
    ax.legend(loc="upper right", fontsize=8)
    return fig


# --------------------------------------------------------------------------
# The regime map
# --------------------------------------------------------------------------
def regime_grid(scales: np.ndarray | None = None, layers: int = 16, n: int = 16, d: int = 64,
                seeds: int = 8) -> dict[str, np.ndarray]:
    """``log10 r_l`` of pure stacks on a grid of weight scales, shape (seeds, S, layers + 1)."""
    n, d, _, layers, seeds = _checked_stack(n, d, 1.0, layers, seeds)
    scales = (np.geomspace(0.25, 16, 13) if scales is None
              else as_reals(scales, "scales", positive=True, maximum=1e6))
    _check_size(scales.size * seeds * layers, "scales.size * seeds * layers")
    logr = np.empty((seeds, scales.size, layers + 1))
    for s in range(seeds):
        X = tokens(n, d, s)
        base = random_weights(d, 1.0, layers, s)
        for k, sc in enumerate(scales):
            logr[s, k] = trajectory(X, *(sc * w for w in base), layers, log10=True)
    return {"scale": scales, "log_r": logr}


def fig_regime(grid: dict[str, np.ndarray], alive: float = 1e-3) -> Figure:
    """Heatmaps: median log10 r_l, and the share of seeds with r_l > ``alive``."""
    grid = as_result(grid, "grid", ("scale", "log_r"), producer="regime_grid")
    alive = as_float_in(alive, "alive", 0.0, 1.0, lo_open=True)
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.4)
    sc, lr = grid["scale"], np.maximum(grid["log_r"], -16.5)
    L = lr.shape[2] - 1
    extent = (-0.5, sc.size - 0.5, -0.5, L + 0.5)
    im1 = ax1.imshow(np.median(lr, 0).T, origin="lower", aspect="auto", extent=extent,
                     cmap="viridis", vmin=-16.5, vmax=0)
    fig.colorbar(im1, ax=ax1, label=r"median $\log_{10} r_l$")
    share = np.mean(lr > math.log10(alive), axis=0)
    im2 = ax2.imshow(share.T, origin="lower", aspect="auto", extent=extent, cmap="magma",
                     vmin=0, vmax=1)
    fig.colorbar(im2, ax=ax2, label=f"share of seeds with $r_l > {alive:g}$")
    ticks = np.arange(0, sc.size, 2)
    for ax in (ax1, ax2):
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{sc[t]:.2g}" for t in ticks])
        ax.set_xlabel("weight scale $s$ (entries $N(0, s^2/d)$)")
        ax.set_ylabel("layer $l$")
    return fig


# --------------------------------------------------------------------------
# Query gradients near collapse
# --------------------------------------------------------------------------
def gradient_table(n: int = 16, d: int = 16, seed: int = 0,
                   eps: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """``||dL/dW_Q||_F`` for ``X = 1 xbar^T + eps R`` (unit ``||R||_F``) and a fixed
    random upstream gradient, against the relative residual of ``X``."""
    n, d, _, _ = _checked_stack(n, d, 1.0, 1)
    seed = as_seed(seed)
    eps = np.geomspace(3.0, 1e-4, 16) if eps is None else _as_eps(eps)
    rng = np.random.default_rng(seed)
    W_Q, W_K, W_V = (w[0] for w in random_weights(d, 1.0, 1, seed))
    xbar = rng.standard_normal(d)
    R = residual(rng.standard_normal((n, d)))
    R /= np.linalg.norm(R)
    G = rng.standard_normal((n, d))
    g = np.array([np.linalg.norm(query_gradient(xbar + e * R, W_Q, W_K, W_V, G))
                  for e in eps])
    r = np.array([float(relative_residual(xbar + e * R)) for e in eps])
    return {"eps": eps, "r": r, "grad": g}


def fig_gradient(table: dict[str, np.ndarray]) -> Figure:
    """The query-weight gradient against the relative residual, log-log."""
    table = as_result(table, "table", ("eps", "r", "grad"), producer="gradient_table")
    fig, ax = plotting.figure(1, width=6.0, height=3.0)
    ax.loglog(table["r"], table["grad"], "o-", ms=3, color="C0",
              label=r"$\|\partial L/\partial W_Q\|_F$")
    k = -1
    ax.loglog(table["r"], table["grad"][k] * (table["r"] / table["r"][k]) ** 2, "--",
              color=plotting.ONE_COLOR, label="slope 2")
    ax.set_xlabel("relative residual $r(X)$ of the layer's input")
    ax.set_ylabel("gradient norm")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def init_sharpness(ds: tuple[int, ...] = (16, 64, 256, 1024), n: int = 16,
                   seeds: int = 5) -> dict[int, float]:
    """Mean over rows and seeds of max_j P_ij for one layer at initialisation
    (standard-normal tokens, weights N(0, 1/d)); 1/n would be uniform attention."""
    ds = as_counts(ds, "ds", maximum=_MAX_SIDE)
    n, _, _, _, seeds = _checked_stack(n, max(ds), 1.0, 1, seeds)
    out = {}
    for d in ds:
        vals = []
        for s in range(seeds):
            W_Q, W_K, _ = random_weights(d, 1.0, 1, s)
            P = attention_matrix(tokens(n, d, s), W_Q[0], W_K[0])
            vals.append(P.max(axis=1).mean())
        out[d] = float(np.mean(vals))
    return out
