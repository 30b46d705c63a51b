"""Power iteration, the first half of the spectral-normalisation chapter: its picture,
its rate, its cost against Lanczos, and its explorer.

The mathematics is in :mod:`lipattn.spectral`; this module arranges it into
figures. The second half (the composition bound, spectral normalisation in
training, the entropy floor) is :mod:`lipattn.book.viz.spectral_normalisation`.
Randomness comes from ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure
from scipy.sparse.linalg import aslinearoperator

from ..._validate import (
    as_count,
    as_float_in,
    as_int_at_least,
    as_positive_float,
    as_real_array,
    as_real_float,
    as_seed,
)
from ...lipschitz import golub_kahan_norm
from ...spectral import (
    lanczos_cost,
    matrix_with_spectrum,
    power_iteration,
    predicted_error,
    steps_to_tolerance,
)
from .. import plotting
from .._check import as_reals, as_result
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
    "PowerExplorer",
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
