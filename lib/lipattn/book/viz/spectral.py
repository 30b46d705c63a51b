"""Figures, experiments and explorers of the spectral-normalisation chapter.

The mathematics is in :mod:`lipattn.spectral`; this module arranges it into
figures. Randomness comes from ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure
from scipy.sparse.linalg import aslinearoperator

from ..._validate import (
    as_bool,
    as_count,
    as_float_in,
    as_int_at_least,
    as_positive_float,
    as_real_array,
    as_real_float,
    as_seed,
    safe_product,
)
from ...compositions import pattern_bound, product_bound, relu_mlp_jacobian_norms
from ...lipschitz import golub_kahan_norm
from ...min_entropy import entropy_floor
from ...spectral import (
    lanczos_cost,
    matrix_with_spectrum,
    power_iteration,
    predicted_error,
    steps_to_tolerance,
    track_drift,
)
from .. import plotting
from .._check import as_counts, as_reals, as_result
from ..widgets import Explorer, Slider

__all__ = [
    "rotation_matrix",
    "fig_intuition",
    "rate_experiment",
    "fig_rate",
    "power_to_residual",
    "kps_steps",
    "cost_experiment",
    "fig_cost",
    "random_mlp",
    "relu_mlp_search",
    "paired_pattern_bound",
    "mlp_bounds",
    "pytorch_eval_sigma",
    "sn_weight_vjp",
    "fig_mlp",
    "tracking_summary",
    "fig_tracking",
    "random_logit_entropies",
    "fig_entropy_floor",
    "PowerExplorer",
    "TrackingExplorer",
]

#: Floor of log axes for errors that are exactly 0 (converged to rounding).
_ERR_FLOOR = 1e-17
#: Rounding level of a computed 1 - sigma_hat^2 with sigma_1 = 1: a few units
#: of float64 rounding (drawn up to 1e-15, about 4.5 eps).
ROUNDING_LEVEL = 1e-15


def _rel_err(sig_sq_err: np.ndarray) -> np.ndarray:
    """1 - sqrt(1 - e), computed stably, from the squared-estimate error e."""
    e = np.asarray(sig_sq_err, float)
    return e / (1 + np.sqrt(np.clip(1 - e, 0, None)))


def rotation_matrix(angle: float) -> np.ndarray:
    """The 2 x 2 rotation by ``angle`` radians."""
    angle = as_real_float(angle, "angle")
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]])


# --------------------------------------------------------------------------
# Intuition: the unit circle, its image, the iterates
# --------------------------------------------------------------------------
_PSI = math.radians(30.0)  # the left singular vectors are rotated by 30 degrees


def _two_by_two(rho: float) -> np.ndarray:
    """W = R(30 deg) diag(1, rho): right singular vectors e_1, e_2, sigma = (1, rho)."""
    return rotation_matrix(_PSI) @ np.diag([1.0, rho])


def _start(theta_deg: float) -> np.ndarray:
    """u_0 at angle theta to the top left singular vector u_1 = (cos psi, sin psi).

    At 90 degrees u_0 = (-sin psi, cos psi) exactly, so W^T u_0 has an exactly
    zero first component in floating point (cos*(-sin) + sin*cos = 0).
    """
    if theta_deg == 90:
        return np.array([-math.sin(_PSI), math.cos(_PSI)])
    return rotation_matrix(math.radians(theta_deg)) @ np.array([math.cos(_PSI), math.sin(_PSI)])


def _iterates(W: np.ndarray, u0: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """The right vectors v_1..v_k and the estimates, by the library's power iteration."""
    vs, sig = [], []
    u = u0
    for _ in range(iters):
        run = power_iteration(W, 1, u0=u)
        vs.append(run.v)
        sig.append(run.sigma[0])
        u = run.u
    return np.array(vs), np.array(sig)


def _draw_geometry(ax, W: np.ndarray, vs: np.ndarray) -> None:
    t = np.linspace(0, 2 * np.pi, 200)
    circle = np.stack([np.cos(t), np.sin(t)])
    ax.plot(*circle, color=plotting.ONE_COLOR, lw=1, label="unit circle ($v$)")
    ax.plot(*(W @ circle), color="C0", lw=1.4, label=r"image ellipse ($Wv$)")
    for i, v in enumerate(vs):
        alpha = 0.25 + 0.75 * (i + 1) / len(vs)
        ax.annotate("", xy=W @ v, xytext=(0, 0),
                    arrowprops={"arrowstyle": "->", "color": "C1", "alpha": alpha, "lw": 1.3})
        ax.plot(*v, "o", color="k", ms=3, alpha=alpha)
    ax.set_aspect("equal")
    ax.set_xlim(-1.15, 1.15)
    ax.set_ylim(-1.15, 1.15)


def fig_intuition(rho: float = 0.6, theta_deg: float = 70.0, iters: int = 4) -> Figure:
    """The circle, its image ellipse under W, and the first power iterates;
    right: the estimates climbing to sigma_1 from below."""
    rho = as_float_in(rho, "rho", 0.0, 1.0, lo_open=True, hi_open=True)
    theta_deg = as_float_in(theta_deg, "theta_deg", 0.0, 90.0)
    iters = as_int_at_least(iters, "iters", 1, 12)
    W = _two_by_two(rho)
    vs, sig = _iterates(W, _start(theta_deg), iters)
    fig, (ax, ax2) = plotting.figure(2, width=8.4, height=4.0,
                                     gridspec_kw={"width_ratios": [1, 1.1]})
    _draw_geometry(ax, W, vs)
    ax.set_title(r"$v_k$ (dots) and $Wv_k$ (arrows)", fontsize=10)
    ax.legend(loc="lower left", fontsize=7.5)
    k = np.arange(1, iters + 1)
    ax2.plot(k, sig, "o-", color="C1", label=r"$\hat\sigma_k = \|Wv_k\|$")
    ax2.axhline(1.0, color="k", ls="--", lw=1, label=r"$\sigma_1 = 1$")
    ax2.axhline(rho, color=plotting.ONE_COLOR, ls=":", lw=1, label=rf"$\sigma_2 = {rho}$")
    ax2.set_xlabel("step $k$")
    ax2.set_ylabel("estimate")
    ax2.set_xticks(k)
    ax2.set_ylim(rho - 0.05, 1.05)
    ax2.legend(loc="lower right")
    ax2.set_title("every estimate is below $\\sigma_1$", fontsize=10)
    return fig


# --------------------------------------------------------------------------
# The rate: measured against (sigma_2/sigma_1)^(4k)
# --------------------------------------------------------------------------
def rate_experiment(rhos=(0.5, 0.8, 0.95), iters: int = 60, seed: int = 0) -> dict:
    """Power iteration on 60 x 40 matrices with sigma_1 = 1, sigma_2 = rho and the
    other singular values in [0.01, rho/2]. Returns the squared-estimate errors
    1 - sigma_hat_k^2, the fitted log-slopes per step over the range where the
    error is between 1e-13 and 1e-3, and the predicted slope 4 log(rho)."""
    rhos = as_reals(rhos, "rhos", positive=True)
    if np.any(rhos >= 1) or rhos.size > 10:
        raise ValueError(f"rhos must hold at most 10 ratios in (0, 1); got {tuple(rhos)}")
    rhos = tuple(float(r) for r in rhos)
    iters, seed = as_count(iters, "iters", maximum=10**4), as_seed(seed)
    out = {"k": np.arange(1, iters + 1), "rhos": tuple(rhos), "err": {}, "slope": {},
           "tan2": {}}
    for i, rho in enumerate(rhos):
        s = np.r_[1.0, rho, np.linspace(rho / 2, 0.01, 38)]
        A = matrix_with_spectrum(s, (60, 40), seed=seed + i)
        u0 = np.random.default_rng(seed + 100 + i).standard_normal(60)
        err = 1 - power_iteration(A, iters, u0=u0).sigma ** 2
        U = np.linalg.svd(A)[0][:, :40]
        b = U.T @ u0
        out["tan2"][rho] = float(np.sum(b[1:] ** 2) / b[0] ** 2)
        ks = np.nonzero((err > 1e-13) & (err < 1e-3))[0]
        out["slope"][rho] = float(np.polyfit(ks, np.log(err[ks]), 1)[0])
        out["err"][rho] = err
    return out


def fig_rate(data: dict) -> Figure:
    """Measured 1 - sigma_hat^2/sigma_1^2 against k (log axis), with the bound
    tan^2(theta_0) rho^(4k-2) dashed and the rounding level shaded (errors
    computed in float64 cannot fall below it, so the bound holds only above)."""
    data = as_result(data, "data", ("k", "rhos", "err", "slope", "tan2"),
                     producer="rate_experiment")
    fig, ax = plotting.figure(width=8.4, height=3.3)
    k = data["k"]
    for i, rho in enumerate(data["rhos"]):
        c = f"C{i}"
        ax.semilogy(k, np.maximum(data["err"][rho], _ERR_FLOOR), "o-", ms=3, color=c,
                    label=rf"$\rho = {rho}$: slope {data['slope'][rho] / math.log(rho):.2f}"
                          r"$\,\log\rho$")
        ax.semilogy(k, data["tan2"][rho] * rho ** (4.0 * k - 2), "--", color=c, lw=1)
    ax.axhspan(_ERR_FLOOR, ROUNDING_LEVEL, color=plotting.ONE_COLOR, alpha=0.25, lw=0,
               label="rounding level")
    ax.set_ylim(_ERR_FLOOR, 10)
    ax.set_xlim(0, k[-1] + 1)
    ax.set_xlabel("step $k$ (2 products with $A$ or $A^\\top$ each)")
    ax.set_ylabel(r"$1 - \hat\sigma_k^2/\sigma_1^2$ (log)")
    ax.set_title(r"measured error (dots) and the bound $\tan^2\theta_0\,\rho^{4k-2}$ (dashed)",
                 fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5)
    return fig


# --------------------------------------------------------------------------
# Power iteration against Lanczos
# --------------------------------------------------------------------------
def power_to_residual(A, tol: float, max_iters: int = 100_000, seed: int = 0) -> dict:
    r"""Power iteration stopped by a residual certificate, as Lanczos is.

    After step k (:math:`u_k = Av_k/\hat\sigma_k` exactly), the residual
    :math:`r_k = \|A^\top u_k - \hat\sigma_k v_k\|` certifies that some
    singular value of A lies within :math:`r_k` of :math:`\hat\sigma_k`. The run
    stops at the first k with :math:`r_k \le \text{tol}\cdot\hat\sigma_k`.

    Parameters
    ----------
    A : array_like, shape (m, n)
    tol : float
        Relative residual tolerance, positive.
    max_iters : int
        Raise if the certificate is not reached in this many steps.
    seed : int
        Seed of the random start (as in :func:`lipattn.spectral.power_iteration`).

    Returns
    -------
    dict
        ``sigma`` (the estimate), ``residual`` (:math:`r_k`), ``steps`` (k) and
        ``products``: :math:`2k + 1` products with A or :math:`A^\top` (the
        residual's :math:`A^\top u_k` is the next step's first product).
    """
    A = as_real_array(A, "A", ndim=2)
    tol = as_positive_float(tol, "tol")
    max_iters = as_count(max_iters, "max_iters", maximum=10**7)
    u = np.random.default_rng(as_seed(seed)).standard_normal(A.shape[0])
    for k in range(1, max_iters + 1):
        run = power_iteration(A, 1, u0=u)
        u, sigma = run.u, float(run.sigma[0])
        res = float(np.linalg.norm(A.T @ u - sigma * run.v))
        if res <= tol * sigma:
            return {"sigma": sigma, "residual": res, "steps": k, "products": 2 * k + 1}
    raise ValueError(f"max_iters = {max_iters} steps did not reach the residual tolerance "
                     f"tol = {tol}; raise max_iters")


def kps_steps(gamma: float, tan2: float, rtol: float) -> int:
    r"""Lanczos steps after which the Kaniel–Paige–Saad bound guarantees
    :math:`(\lambda_1 - \theta_k)/(\lambda_1 - \lambda_n) \le` ``rtol``.

    The bound (proved in the chapter) is
    :math:`\tan^2\theta_0 / T_{k-1}(1 + 2\gamma)^2`, with
    :math:`T_j(1 + 2\gamma) = \cosh(2j\,\operatorname{arsinh}\sqrt\gamma)`.

    Parameters
    ----------
    gamma : float
        :math:`(\lambda_1 - \lambda_2)/(\lambda_2 - \lambda_n) > 0`.
    tan2 : float
        :math:`\tan^2\theta_0 \ge 0` of the start.
    rtol : float
        Target, positive.

    Returns
    -------
    int
        The smallest k >= 1 at which the bound is at most ``rtol``.
    """
    gamma = as_positive_float(gamma, "gamma")
    tan2 = as_positive_float(tan2, "tan2", allow_zero=True)
    rtol = as_positive_float(rtol, "rtol")
    if tan2 <= rtol:
        return 1
    # cosh(2 j a) >= sqrt(tan2 / rtol)  <=>  j >= arcosh(sqrt(tan2/rtol)) / (2a)
    j = math.acosh(math.sqrt(tan2 / rtol)) / (2 * math.asinh(math.sqrt(gamma)))
    return 1 + math.ceil(j)


def cost_experiment(gaps=None, rtol: float = 1e-8, n: int = 400, seed: int = 0) -> dict:
    """Products with A or A^T against the gap 1 - sigma_2/sigma_1, on n x n matrices
    with sigma_1 = 1, sigma_2 = 1 - gap and the rest uniform in [0, sigma_2).

    Like with like: every method stops on the same certificate, a singular-triplet
    residual at most ``rtol`` times the estimate (some singular value lies within
    rtol * sigma of the estimate):

    * ``power``: :func:`power_to_residual`;
    * ``gkl``: the book's Golub–Kahan–Lanczos,
      :func:`lipattn.lipschitz.golub_kahan_norm` with ``tol=rtol``;
    * ``svds``: scipy's ARPACK at ``tol=sqrt(rtol)`` (scipy passes ``tol**2`` to
      ``eigsh`` on the Gram operator, whose residual is sigma times the triplet's),
      by :func:`lipattn.spectral.lanczos_cost`; its counts come in restart cycles.

    Also ``power_err``: products for power iteration to reach the true relative
    error ``rtol`` (not certifiable without knowing sigma_1), and ``kps``: twice
    the Lanczos steps after which the Kaniel–Paige–Saad bound guarantees a
    relative error ``rtol`` in sigma_1^2 from this start. ``err_*`` are the
    actual errors 1 - sigma_hat.
    """
    gaps = np.geomspace(2e-3, 0.5, 7) if gaps is None else as_reals(gaps, "gaps", positive=True)
    if np.any(gaps >= 1) or gaps.size > 100:
        raise ValueError(f"gaps must hold at most 100 gaps in (0, 1); got {tuple(gaps)}")
    rtol = as_float_in(rtol, "rtol", 1e-15, 0.5)
    n = as_int_at_least(n, "n", 4, 4000)
    seed = as_seed(seed)
    keys = ("power", "gkl", "svds", "power_err", "kps", "err_power", "err_gkl", "err_svds")
    out = {k: [] for k in keys}
    # one pair of random orthogonal factors for every gap (two QRs, not 2 per gap)
    base = matrix_with_spectrum(np.ones(n), seed=seed)       # = U V^T
    U = np.linalg.qr(np.random.default_rng(seed + 1).standard_normal((n, n)))[0]
    V = base.T @ U                                            # orthogonal too
    v0 = np.random.default_rng(seed).standard_normal(n)      # golub_kahan_norm's start
    c = V.T @ v0                                              # its components on v_i
    tan2 = float(np.sum(c[1:] ** 2) / c[0] ** 2)
    for gap in gaps:
        rho = 1 - gap
        s = np.r_[1.0, rho, np.linspace(rho, 0.0, n - 1)[1:]]
        A = (U * s) @ V.T
        pw = power_to_residual(A, rtol, seed=seed)
        sg, prod = golub_kahan_norm(aslinearoperator(A), tol=rtol, seed=seed)
        m, sv = lanczos_cost(A, math.sqrt(rtol), seed=seed)
        iters = int(min(40_000, 2 + math.log(rtol / 1e4) / (4 * math.log(rho))))
        k = steps_to_tolerance(power_iteration(A, iters, seed=seed).sigma, 1.0, rtol)
        for key, val in (("power", pw["products"]), ("gkl", prod), ("svds", m),
                         ("power_err", np.nan if k is None else 2 * k),
                         ("kps", 2 * kps_steps((1 - rho**2) / rho**2, tan2, rtol)),
                         ("err_power", 1 - pw["sigma"]), ("err_gkl", 1 - sg),
                         ("err_svds", 1 - sv)):
            out[key].append(val)
    return {"gap": gaps, "rtol": rtol, "tan2": tan2,
            **{k: np.array(v, float) for k, v in out.items()}}


def fig_cost(data: dict) -> Figure:
    """Matrix-vector products against the gap, log-log: the three methods at the
    same residual certificate, power iteration to the true error (dotted), and
    the Kaniel–Paige–Saad guarantee (dashed)."""
    data = as_result(data, "data", ("gap", "rtol", "power", "gkl", "svds", "power_err", "kps"),
                     producer="cost_experiment")
    fig, ax = plotting.figure(width=8.4, height=3.4)
    g = data["gap"]
    ax.loglog(g, data["power"], "o-", color="C1", label="power iteration")
    ax.loglog(g, data["power_err"], ":", color="C1", lw=1.2,
              label="power, true error (uncertified)")
    ax.loglog(g, data["gkl"], "s-", color="C0", label="Golub–Kahan–Lanczos (book)")
    ax.loglog(g, data["svds"], "^-", color="C2", label="scipy svds (ARPACK, restarted)")
    ax.loglog(g, data["kps"], "--", color="C0", lw=1,
              label="Lanczos: Chebyshev guarantee\nfor true error (KPS)")
    ax.set_xlabel(r"gap $1 - \sigma_2/\sigma_1$ (log)")
    ax.set_ylabel("products with $A$ or $A^\\top$ (log)")
    ax.set_title(f"products to a certified residual {data['rtol']:.0e}" r"$\cdot\hat\sigma$",
                 fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


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
# Explorer 1: power iteration in the plane
# --------------------------------------------------------------------------
_K_MAX = 8
_RHOS = (0.5, 0.9, 0.99)
_ANGLES = (10, 75, 89, 90)


@lru_cache(maxsize=1, typed=True)
def power_explorer_data() -> dict:
    """Iterates and estimates for every (rho, angle), computed once."""
    out = {}
    for rho in _RHOS:
        W = _two_by_two(rho)
        for ang in _ANGLES:
            vs, sig = _iterates(W, _start(ang), _K_MAX)
            k = np.arange(1, _K_MAX + 1)
            if ang == 90:
                pred = np.full(_K_MAX, 1 - rho)  # stays at sigma_2
            else:
                pred = _rel_err(predicted_error(1.0, rho, math.tan(math.radians(ang)), k))
            out[rho, ang] = (vs, sig, pred)
    return out


class PowerExplorer(Explorer, name="spectral-power", size=(8.4, 3.5),
                    title="Power iteration on a 2 × 2 matrix with σ₁ = 1, σ₂ = ρ"):
    """Power iteration on W = R(30 deg) diag(1, rho): the geometry and the error."""

    k = Slider(tuple(range(1, _K_MAX + 1)), label="step k", default=3)
    rho = Slider(_RHOS, label="gap ratio ρ = σ₂/σ₁", default=0.9)
    angle = Slider(_ANGLES, label="start angle to u₁", default=75, fmt=lambda a: f"{a}°")
    presets = {"ρ = 0.5, 10°, k = 1": {"rho": 0.5, "angle": 10, "k": 1},
               "ρ = 0.99, 10°": {"rho": 0.99, "angle": 10, "k": 8},
               "start at 89°": {"rho": 0.5, "angle": 89, "k": 1},
               "start at 90°": {"rho": 0.5, "angle": 90, "k": 8}}

    def setup(self, fig: Figure):
        self._data = power_explorer_data()
        ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.35]})
        t = np.linspace(0, 2 * np.pi, 200)
        self._circle = np.stack([np.cos(t), np.sin(t)])
        ax.plot(*self._circle, color=plotting.ONE_COLOR, lw=1, label="unit circle ($v$)")
        (self._ellipse,) = ax.plot([], [], color="C0", lw=1.4, label="ellipse ($Wv$)")
        (self._axis,) = ax.plot([], [], "--", color="k", lw=0.8, label=r"$\pm\sigma_1 u_1$")
        (self._trail,) = ax.plot([], [], "o", color="k", ms=3, alpha=0.35)
        (self._v,) = ax.plot([], [], color="k", lw=1.6, label="$v_k$")
        (self._wv,) = ax.plot([], [], color="C1", lw=2.2, label="$Wv_k$")
        ax.set_aspect("equal")
        ax.set_xlim(-1.15, 1.15)
        ax.set_ylim(-1.15, 1.15)
        ax.legend(loc="lower left", fontsize=7, ncol=2, handlelength=1.2)
        ax.set_title(r"$v_k$ and $Wv_k$", fontsize=9.5)
        k = np.arange(1, _K_MAX + 1)
        (self._pred,) = ax2.semilogy(k, np.ones(_K_MAX), "--", color="C3", lw=1.2,
                                     label="predicted (closed form)")
        (self._all,) = ax2.semilogy(k, np.ones(_K_MAX), "o", color="C0", ms=3, alpha=0.3)
        (self._done,) = ax2.semilogy(k[:1], [1.0], "o-", color="C0", ms=5,
                                     label=r"measured $1 - \hat\sigma_k/\sigma_1$")
        ax2.set_ylim(1e-13, 2)
        ax2.set_xlim(0.5, _K_MAX + 0.5)
        ax2.set_xticks(k)
        ax2.set_xlabel("step $k$")
        ax2.set_ylabel(r"relative error (log)")
        ax2.legend(loc="lower left", fontsize=8)
        self._text = ax2.set_title("", fontsize=9.5)
        # one changing text per frame: text layout is the costliest part of a redraw
        return [self._ellipse, self._axis, self._trail, self._v, self._wv,
                self._pred, self._all, self._done, self._text]

    def update(self, k: int, rho: float, angle: int) -> None:
        W = _two_by_two(rho)
        vs, sig, pred = self._data[rho, angle]
        self._ellipse.set_data(*(W @ self._circle))
        u1 = np.array([math.cos(_PSI), math.sin(_PSI)])
        self._axis.set_data([-u1[0], u1[0]], [-u1[1], u1[1]])
        self._trail.set_data(vs[:k, 0], vs[:k, 1])
        v = vs[k - 1]
        wv = W @ v
        self._v.set_data([0, v[0]], [0, v[1]])
        self._wv.set_data([0, wv[0]], [0, wv[1]])
        # plain text, not mathtext: parsing TeX would double the frame time
        err = np.maximum(1 - sig, _ERR_FLOOR)
        self._pred.set_ydata(np.maximum(pred, _ERR_FLOOR))
        self._all.set_ydata(err)
        self._done.set_data(np.arange(1, k + 1), err[:k])
        note = "stuck at σ₂" if angle == 90 else f"×{rho**4:.3g}/step"
        self._text.set_text(f"‖Wvₖ‖ = {sig[k - 1]:.8f}, err {1 - sig[k - 1]:.1e}, {note}")


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
