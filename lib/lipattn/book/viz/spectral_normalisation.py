"""Spectral normalisation itself: why the spectral norm, how training keeps it, what it leaves.

The second half of the spectral-normalisation chapter (the first, power
iteration, is :mod:`lipattn.book.viz.spectral`):

- the composition bound: the product of spectral norms against a ReLU network's
  constant (:func:`mlp_bounds`, :func:`fig_mlp`; :mod:`lipattn.compositions`);
- training: a drifting weight normalised with a persistent or a fresh power-iteration
  vector (:func:`tracking_summary`, :func:`fig_tracking`, the explorer
  :class:`TrackingExplorer`), and PyTorch's evaluation-mode sigma and its gradient
  (:func:`pytorch_eval_sigma`, :func:`sn_weight_vjp`);
- the entropy floor that normalised logits leave (:func:`fig_entropy_floor`;
  :mod:`lipattn.min_entropy`).

Randomness comes from ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure

from ..._validate import as_bool, as_count, as_int_at_least, as_real_array, as_seed, safe_product
from ...compositions import pattern_bound, product_bound, relu_mlp_jacobian_norms
from ...min_entropy import entropy_floor
from ...spectral import matrix_with_spectrum, track_drift
from .. import plotting
from .._check import as_counts, as_reals, as_result
from ..widgets import Explorer, Slider

__all__ = ["random_mlp", "relu_mlp_search", "paired_pattern_bound", "mlp_bounds",
           "pytorch_eval_sigma", "sn_weight_vjp", "fig_mlp", "tracking_summary", "fig_tracking",
           "random_logit_entropies", "fig_entropy_floor", "TrackingExplorer"]


# --------------------------------------------------------------------------
# Why the spectral norm: the composition bound
# --------------------------------------------------------------------------
def random_mlp(widths, seed: int = 0) -> list[np.ndarray]:
    """He-initialised bias-free ReLU network weights, shapes (w_0, w_1), (w_1, w_2), ..."""
    widths = as_counts(widths, "widths", maximum=10**4)
    if len(widths) < 2 or len(widths) > 1000:
        raise ValueError(f"widths must list 2 to 1000 layer widths; got {len(widths)}")
    rng = np.random.default_rng(as_seed(seed))
    return [rng.standard_normal((a, b)) * math.sqrt(2 / a)
            for a, b in zip(widths[:-1], widths[1:], strict=True)]


def relu_mlp_search(weights, restarts: int = 2, gens: int = 120, pool: int = 2000,
                    seed: int = 0) -> tuple[float, np.ndarray]:
    """A lower bound on the Lipschitz constant of a bias-free ReLU network by
    search: the exact ||J(x)||_2 (:func:`lipattn.compositions.relu_mlp_jacobian_norms`)
    maximised over directions x by an evolutionary hill climb.

    Each restart keeps the best 8 of ``pool`` random directions, and for ``gens``
    generations perturbs each 32 times (Gaussian steps shrinking from 0.5 by 3 %
    a generation), keeping the best 8. ||J|| is piecewise constant, so there is
    no gradient to follow. The result is a value attained at a point (a proven
    lower bound on Lip(f)), not a certified maximum.

    Parameters
    ----------
    weights : list of ndarray, see :func:`lipattn.compositions.product_bound`
    restarts, gens, pool : int
    seed : int

    Returns
    -------
    best : float
        The largest ||J(x)||_2 found.
    x : ndarray, shape (d_0,)
        A unit direction attaining it.
    """
    restarts = as_count(restarts, "restarts", maximum=1000)
    gens = as_int_at_least(gens, "gens", 0, 10**5)
    pool = as_int_at_least(pool, "pool", 8, 10**6)
    seed = as_seed(seed)
    product_bound(weights)                      # validates the list of weights
    d = np.shape(weights[0])[0]
    best, best_x = -1.0, None
    for r in range(restarts):
        rng = np.random.default_rng([seed, r])
        X = rng.standard_normal((pool, d))
        val = relu_mlp_jacobian_norms(weights, X)
        keep = np.argsort(val)[-8:]
        X, val = X[keep] / np.linalg.norm(X[keep], axis=1, keepdims=True), val[keep]
        step = 0.5
        for _ in range(gens):
            C = (X[:, None, :] + step * rng.standard_normal((8, 32, d))).reshape(-1, d)
            C /= np.linalg.norm(C, axis=1, keepdims=True)
            allX, allv = np.vstack([X, C]), np.r_[val, relu_mlp_jacobian_norms(weights, C)]
            keep = np.argsort(allv)[-8:]
            X, val = allX[keep], allv[keep]
            step = max(0.97 * step, 1e-3)
        if val[-1] > best:
            best, best_x = float(val[-1]), X[-1]
    return best, best_x


def paired_pattern_bound(weights) -> float:
    r"""A certified upper bound on the Lipschitz constant of a bias-free ReLU
    network, between it and the product of spectral norms: split
    :math:`W_1 D_1 W_2 D_2 W_3 \cdots` into pairs :math:`W_{2i-1} D_{2i-1} W_{2i}`
    (each maximised over all its 0/1 diagonals by
    :func:`lipattn.compositions.pattern_bound`) and bound the diagonals between the
    pairs by 1. A lone last layer contributes its spectral norm.

    Parameters
    ----------
    weights : list of ndarray, see :func:`lipattn.compositions.product_bound`
        Each pair's middle width at most 16.

    Returns
    -------
    float
    """
    product_bound(weights)                      # validates the list of weights
    return safe_product(*(pattern_bound(list(weights[i:i + 2]))
                          for i in range(0, len(weights), 2)),
                        name="weights", what="a bound")


def mlp_bounds(depths=range(1, 9), width: int = 16, samples: int = 4000, seed: int = 0,
               search: bool = False) -> dict:
    """For networks of each depth (``width`` units per layer): the product of
    spectral norms and the largest ||J(x)||_2 over ``samples`` random inputs
    (a lower bound on the Lipschitz constant; the network is positively
    homogeneous, so directions suffice). With ``search``, also ``searched``:
    the larger lower bound of :func:`relu_mlp_search`."""
    depths = list(as_counts(depths, "depths", maximum=1000))
    width = as_count(width, "width", maximum=10**4)
    samples = as_count(samples, "samples", maximum=10**7 // width)
    seed, search = as_seed(seed), as_bool(search, "search")
    prod, sampled, searched = [], [], []
    x = np.random.default_rng(seed + 999).standard_normal((samples, width))
    for L in depths:
        ws = random_mlp([width] * (L + 1), seed=seed + L)
        prod.append(product_bound(ws))
        sampled.append(float(relu_mlp_jacobian_norms(ws, x).max()))
        if search:
            searched.append(max(sampled[-1], relu_mlp_search(ws, seed=seed + L)[0]))
    out = {"depth": np.array(depths), "product": np.array(prod), "sampled": np.array(sampled)}
    if search:
        out["searched"] = np.array(searched)
    return out


def fig_mlp(data: dict) -> Figure:
    """Product of spectral norms against the largest sampled (and, with
    ``data["searched"]``, found) Jacobian norm; ``data["upper"]``, optional, maps
    depths to certified upper bounds (:func:`paired_pattern_bound`)."""
    data = as_result(data, "data", ("depth", "product", "sampled"), producer="mlp_bounds")
    best = data.get("searched", data["sampled"])
    what = "largest found" if "searched" in data else "largest sampled"
    fig, (ax, ax2) = plotting.figure(2, width=8.4, height=3.2)
    d = data["depth"]
    ax.semilogy(d, data["product"], "o-", color="C1", label=r"$\prod_l \|W_l\|_2$")
    if "searched" in data:
        ax.semilogy(d, data["sampled"], ":", color="C0", lw=1,
                    label=r"largest sampled $\|J(x)\|_2$")
    ax.semilogy(d, best, "s-", color="C0", label=rf"{what} $\|J(x)\|_2$")
    upper = data.get("upper", {})
    if upper:
        du = np.array(sorted(upper))
        uv = np.array([upper[k] for k in du])
        ax.semilogy(du, uv, "v", color="k", ms=7, label="certified upper bound")
        prod_u = data["product"][np.searchsorted(d, du)]
        ax2.semilogy(du, prod_u / uv, "v", color="C3", ms=7,
                     label="product / certified upper bound")
    ax.set_xlabel("depth (layers)")
    ax.set_ylabel("norm (log)")
    ax.legend(loc="upper left", fontsize=8.5)
    ax.set_title("the bound and a lower bound on the truth", fontsize=10)
    ax2.semilogy(d, data["product"] / best, "o-", color="k",
                 label=f"product / {what}")
    ax2.set_xlabel("depth (layers)")
    ax2.set_ylabel("looseness of the product (log)")
    ax2.set_title("at most (dots) and at least (triangle) this loose", fontsize=10)
    ax2.legend(loc="upper left", fontsize=8)
    return fig


# --------------------------------------------------------------------------
# Training: persistent against fresh u
# --------------------------------------------------------------------------
_TRACK_SHAPE = 48
_TRACK_STEPS = 200
_DRIFTS = (0.001, 0.003, 0.01, 0.03, 0.1)


@lru_cache(maxsize=2, typed=True)
def tracking_weight(seed: int = 3) -> np.ndarray:
    """The starting weight of the tracking experiments: 48 x 48, sigma_1 = 1,
    sigma_2 = 0.8, the rest evenly in [0.05, 0.7]."""
    s = np.r_[1.0, 0.8, np.linspace(0.7, 0.05, _TRACK_SHAPE - 2)]
    W = matrix_with_spectrum(s, seed=seed)
    W.setflags(write=False)
    return W


@lru_cache(maxsize=4, typed=True)
def _tracks(seed: int = 1) -> dict:
    W = tracking_weight()
    out = {}
    for drift in _DRIFTS:
        for mode, (pers, it) in {"persistent": (True, 1), "fresh": (False, 1),
                                 "fresh15": (False, 15)}.items():
            out[drift, mode] = track_drift(W, _TRACK_STEPS, drift, persistent=pers, iters=it,
                                           seed=seed)
    return out


def tracking_summary(seed: int = 1) -> dict:
    """Median relative underestimate over steps 20..199 for each drift rate:
    persistent u with one step, fresh u with one step, fresh u with 15 steps."""
    tr = _tracks(as_seed(seed))
    modes = ("persistent", "fresh", "fresh15")
    return {"drift": np.array(_DRIFTS),
            **{m: np.array([np.median(tr[d, m].underestimate[20:]) for d in _DRIFTS])
               for m in modes}}


def fig_tracking(summary: dict) -> Figure:
    """Median underestimate against the drift rate, per way of keeping u."""
    summary = as_result(summary, "summary", ("drift", "persistent", "fresh", "fresh15"),
                        producer="tracking_summary")
    fig, ax = plotting.figure(width=8.4, height=3.2)
    d = summary["drift"]
    ax.loglog(d, summary["persistent"], "o-", color="C0", label="persistent $u$, 1 step")
    ax.loglog(d, summary["fresh"], "s-", color="C1", label="fresh $u$, 1 step")
    ax.loglog(d, summary["fresh15"], "^-", color="C3", label="fresh $u$, 15 steps")
    ax.set_xlabel(r"drift per step $\eta$ (log)")
    ax.set_ylabel(r"median $1 - \hat\sigma_t/\sigma_1(W_t)$ (log)")
    ax.set_title("how far spectral normalisation undershoots while W moves", fontsize=10)
    ax.legend(loc="lower right", fontsize=8.5)
    return fig


def pytorch_eval_sigma(W, u, v) -> float:
    r"""The estimate PyTorch's spectral normalisation uses in eval mode:
    :math:`\hat\sigma = u^\top W v` with the stored u and v and no power step
    (``torch.nn.utils.parametrizations.spectral_norm`` and the legacy
    ``torch.nn.utils.spectral_norm`` alike). For unit u, v,
    :math:`|u^\top W v| \le \sigma_1(W)`; it can be far below, even negative.

    Parameters
    ----------
    W : array_like, shape (m, n)
    u : array_like, shape (m,), unit
    v : array_like, shape (n,), unit

    Returns
    -------
    float
    """
    W = as_real_array(W, "W", ndim=2)
    u = as_real_array(u, "u", ndim=1)
    v = as_real_array(v, "v", ndim=1)
    if u.shape != (W.shape[0],) or v.shape != (W.shape[1],):
        raise ValueError(f"u and v must have shapes ({W.shape[0]},) and ({W.shape[1]},) to "
                         f"match W; got {u.shape} and {v.shape}")
    return float(u @ W @ v)


def sn_weight_vjp(W, u, v, G) -> np.ndarray:
    r"""The gradient that spectral normalisation passes to W, with u and v held
    constant (Miyato et al.'s treatment; PyTorch computes u, v under no_grad):

    .. math:: \frac{\partial L}{\partial W}
       = \frac{G - \langle G, W_{SN}\rangle\, u v^\top}{\hat\sigma},
       \qquad W_{SN} = W/\hat\sigma,\ \hat\sigma = u^\top W v,

    where :math:`G = \partial L/\partial W_{SN}`. Exact for this map.

    Parameters
    ----------
    W : array_like, shape (m, n)
    u : array_like, shape (m,)
    v : array_like, shape (n,)
    G : array_like, shape (m, n)

    Returns
    -------
    ndarray, shape (m, n)
    """
    sigma = pytorch_eval_sigma(W, u, v)
    G = as_real_array(G, "G", ndim=2)
    W = np.asarray(W, float)
    if G.shape != W.shape:
        raise ValueError(f"G must have the shape of W, {W.shape}; got {G.shape}")
    if sigma == 0.0:
        raise ValueError("W, u, v must have u^T W v != 0; got 0")
    with np.errstate(over="ignore"):
        out = (G - np.sum(G * W / sigma) * np.outer(u, v)) / sigma
    if not np.all(np.isfinite(out)):
        raise OverflowError(f"W, u, v, G give a gradient beyond the float64 range "
                            f"(u^T W v = {sigma:.3g}); it overflows")
    return out


# --------------------------------------------------------------------------
# The entropy floor
# --------------------------------------------------------------------------
def random_logit_entropies(T: int, s: np.ndarray, samples: int = 400, seed: int = 0) -> np.ndarray:
    """Entropies of softmax(a) for random Gaussian directions a rescaled to centred
    norm s; shape (len(s), samples)."""
    T = as_int_at_least(T, "T", 2, 10**5)
    s = as_reals(s, "s")
    if np.any(s < 0) or np.any(s > 1e100):
        raise ValueError(f"s must hold centred norms in [0, 1e100]; got {s.min()!r} to {s.max()!r}")
    samples = as_count(samples, "samples", maximum=max(1, 5 * 10**7 // (T * s.size)))  # memory
    g = np.random.default_rng(as_seed(seed)).standard_normal((samples, T))
    g -= g.mean(axis=1, keepdims=True)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    a = s[:, None, None] * g[None]
    a = a - a.max(axis=-1, keepdims=True)
    w = np.exp(a)
    z = w.sum(axis=-1)
    return np.log(z) - (w * a).sum(axis=-1) / z


def fig_entropy_floor(Ts=(2, 16, 256), samples: int = 400) -> Figure:
    """Entropies of random directions against the centred norm, with the floor, per T."""
    Ts = as_counts(Ts, "Ts", minimum=2, maximum=10**4)
    if len(Ts) > 6:
        raise ValueError(f"Ts must have at most 6 entries (one colour each); got {len(Ts)}")
    samples = as_count(samples, "samples", maximum=10**5)
    s = np.geomspace(0.1, 60, 120)
    fig, ax = plotting.figure(width=8.4, height=3.3)
    for i, T in enumerate(Ts):
        c = f"C{i}"
        ax.loglog(s, entropy_floor(T, s), color=c, label=f"floor, $T = {T}$")
        if T > 2:
            h = random_logit_entropies(T, s, samples, seed=T)
            lo, med = np.quantile(h, [0.01, 0.5], axis=1)
            ax.fill_between(s, lo, med, color=c, alpha=0.18, lw=0)
            ax.loglog(s, med, ":", color=c, lw=1.2, label=f"random logits, median, $T = {T}$")
    ax.set_ylim(1e-6, 8)
    ax.set_xlabel(r"centred logit norm $s = \|a - \bar a\mathbf{1}\|_2$ (log)")
    ax.set_ylabel("entropy, nats (log)")
    ax.set_title("the floor (one spike) and random logits (median, band down to 1 %)",
                 fontsize=10)
    ax.legend(loc="lower left", fontsize=8, ncol=2)
    return fig


# --------------------------------------------------------------------------
# Explorer 2: tracking a drifting weight
# --------------------------------------------------------------------------
class TrackingExplorer(
        Explorer, name="spectral-tracking", size=(8.4, 3.2),
        title="Spectral normalisation while W drifts (48 × 48, σ₂/σ₁ = 0.8 at the start)"):
    """Spectral normalisation of a drifting W: persistent or fresh u."""

    drift = Slider(_DRIFTS, label="drift per step η", default=0.01)
    persistent = Slider((True, False), label="power-iteration vector u",
                        fmt=lambda p: "kept between steps" if p else "fresh each step")
    presets = {"kept, η = 0.001": {"persistent": True, "drift": 0.001},
               "kept, η = 0.1": {"persistent": True, "drift": 0.1},
               "fresh, η = 0.1": {"persistent": False, "drift": 0.1}}

    def setup(self, fig: Figure):
        self._tr = _tracks()
        ax, ax2 = fig.subplots(1, 2)
        t = np.arange(_TRACK_STEPS)
        self._lines = {}
        for key, color, label in (("persistent", "C0", "persistent $u$"),
                                  ("fresh", "C1", "fresh $u$ each step")):
            (self._lines[key],) = ax.semilogy(t, np.ones_like(t, float), color=color,
                                              lw=1.4, label=label)
        ax.set_ylim(1e-12, 1.5)
        ax.set_xlim(0, _TRACK_STEPS)
        ax.set_xlabel("training step $t$")
        ax.set_ylabel(r"$1 - \hat\sigma_t/\sigma_1(W_t)$ (log)")
        ax.legend(loc="lower right", fontsize=8)
        self._title = ax.set_title("", fontsize=9.5)
        (self._norm,) = ax2.plot(t, np.ones_like(t, float), color="C4", lw=1.2,
                                 label=r"$\|W_t/\hat\sigma_t\|_2$")
        ax2.axhline(1.0, color="k", ls="--", lw=1, label="target 1")
        ax2.set_ylim(0.95, 2.6)
        ax2.set_xlim(0, _TRACK_STEPS)
        ax2.set_xlabel("training step $t$")
        ax2.set_ylabel("normalised spectral norm")
        ax2.legend(loc="upper right", fontsize=8)
        ax2.set_title("the chosen mode", fontsize=9.5)
        return [*self._lines.values(), self._title, self._norm]

    def update(self, drift: float, persistent: bool) -> None:
        chosen = "persistent" if persistent else "fresh"
        for key, line in self._lines.items():
            line.set_ydata(np.maximum(self._tr[drift, key].underestimate, 1e-16))
            line.set_alpha(1.0 if key == chosen else 0.3)
            line.set_linewidth(1.6 if key == chosen else 1.0)
        mine = self._tr[drift, chosen]
        med = float(np.median(mine.underestimate[20:]))
        ratio = mine.sigma / mine.sigma_hat
        self._norm.set_ydata(ratio)
        self._title.set_text(f"{chosen}: median {med:.1e}, max ‖W/σ̂‖₂ {ratio[20:].max():.4f}"
                             " (t ≥ 20)")
