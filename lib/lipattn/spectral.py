r"""Spectral norms: power iteration as spectral normalisation runs it, and exact values.

- :func:`power_iteration` runs exactly the update of spectral normalisation
  (Miyato et al. 2018, Algorithm 1) on a dense matrix or a
  :class:`scipy.sparse.linalg.LinearOperator`:
  :math:`v \leftarrow A^\top u / \|A^\top u\|`, :math:`u \leftarrow Av/\|Av\|`,
  :math:`\hat\sigma = u^\top A v`, and records :math:`\hat\sigma` after every step.
- :func:`spectral_norm` is the exact :math:`\sigma_1(A)`, dense SVD for small
  arrays and Lanczos (``scipy.sparse.linalg.svds``) for operators and large arrays.
- :func:`spectral_normalize` is one training-time step with a persistent ``u``.
- :func:`predicted_error` is the closed-form error of power iteration on a
  rank-2 matrix (the rate :math:`(\sigma_2/\sigma_1)^{4k}`);
  :func:`lanczos_cost` counts the products that Lanczos (``svds``) needs.
- :func:`track_drift` follows a persistent ``u`` while the matrix drifts.

The product of spectral norms against the Jacobian norms of a ReLU network is in
:mod:`lipattn.compositions`; the entropy floor of spectral normalisation in
:mod:`lipattn.min_entropy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator, aslinearoperator, svds

from ._validate import (
    ResultOverflowError,
    as_bool,
    as_count,
    as_counts,
    as_positive_float,
    as_real_array,
    as_seed,
    as_tol,
    safe_norm,
    scale_of,
)

__all__ = [
    "PowerIteration", "power_iteration", "spectral_norm", "spectral_normalize", "as_operator",
    "predicted_error", "steps_to_tolerance", "matrix_with_spectrum", "CountingOperator",
    "lanczos_cost", "Tracking", "track_drift",
]

#: Arrays with at most this many entries get a dense SVD in :func:`spectral_norm`.
DENSE_MAX_ENTRIES = 250_000

#: Largest number of power-iteration steps in one call (and of steps * iters in
#: :func:`track_drift`): each step is a Python-level loop iteration.
MAX_ITERS = 10_000


@dataclass(frozen=True)
class PowerIteration:
    """The record of a power iteration.

    Attributes
    ----------
    sigma : ndarray, shape (iters,)
        :math:`\\hat\\sigma_k = u_k^\\top A v_k` after each step k = 1 … iters.
    u : ndarray, shape (m,)
        The last left vector (unit norm).
    v : ndarray, shape (n,)
        The last right vector (unit norm).
    matvecs : int
        Products with A or A^T used: 2 per step.
    """

    sigma: np.ndarray
    u: np.ndarray
    v: np.ndarray
    matvecs: int


def _as_operator(A: Any, name: str = "A") -> tuple[LinearOperator, np.ndarray | None]:
    """``A`` as a LinearOperator, plus the validated dense array when there is one."""
    if isinstance(A, LinearOperator):
        if len(A.shape) != 2 or min(A.shape) < 1:
            raise ValueError(f"{name} must be an operator of shape (m, n) with m, n >= 1; "
                             f"got shape {A.shape}")
        return A, None
    arr = as_real_array(A, name, ndim=2)
    return aslinearoperator(arr), arr


def _unit(x: np.ndarray, name: str) -> tuple[np.ndarray, float]:
    """``(x / ||x||, ||x||)`` without overflow or underflow; ``(x, 0)`` for x = 0."""
    with np.errstate(over="ignore"):  # huge entries take the scaled path below
        nrm = float(np.linalg.norm(x))
    if 1e-150 < nrm < 1e150:  # the fast path of every ordinary step: no square is lost
        return x / nrm, nrm
    if not np.all(np.isfinite(x)):
        raise ValueError(f"A must be a finite operator; {name} had non-finite entries")
    nrm = float(safe_norm(x))
    if nrm == 0.0:
        return x, 0.0
    if not np.isfinite(nrm):
        raise ResultOverflowError(f"A must have a representable norm; ||{name}|| overflows "
                                  "float64")
    m = scale_of(x)
    return (x / m) / (nrm / m), nrm  # exact scaling first, so no subnormal loss


def power_iteration(A: Any, iters: int, u0: Any = None, seed: int = 0, *,
                    _u0_name: str = "u0") -> PowerIteration:
    r"""Power iteration for :math:`\sigma_1(A)`, as in spectral normalisation.

    Each step is :math:`v \leftarrow A^\top u/\|A^\top u\|`,
    :math:`u \leftarrow Av/\|Av\|`, :math:`\hat\sigma = u^\top A v = \|Av\|`.
    The estimate never exceeds :math:`\sigma_1` (it is a Rayleigh quotient).

    Parameters
    ----------
    A : array_like, shape (m, n), or scipy.sparse.linalg.LinearOperator
        Finite.
    iters : int
        Number of steps, from 1 to :data:`MAX_ITERS` (a Python loop: beyond it a
        call would run for minutes).
    u0 : array_like, shape (m,), optional
        Starting left vector (any non-zero finite vector; it is normalised).
        Default: a standard normal vector from ``numpy.random.default_rng(seed)``.
    seed : int, default 0
        Seed of the default starting vector (an int >= 0).

    Returns
    -------
    PowerIteration
        ``sigma`` (shape (iters,)), the last ``u`` and ``v``, and ``matvecs``.
        If :math:`A^\top u_0 = 0` (``u0`` orthogonal to the range of A), every
        estimate is 0 and ``v`` is the zero vector.

    Notes
    -----
    Scale-invariant: the vectors are normalised by norms computed without
    overflow or underflow, so ``power_iteration(c * A)`` gives ``c`` times the
    estimates of ``power_iteration(A)`` (up to rounding) for every finite
    ``c * A`` whose products with unit vectors are finite (e.g. c from 1e-200 to
    1e200 for entries of order 1).
    """
    op, _ = _as_operator(A)
    iters = as_count(iters, "iters", 1, MAX_ITERS)
    seed = as_seed(seed)
    m, n = op.shape
    if u0 is None:
        u = np.random.default_rng(seed).standard_normal(m)
    else:
        u = as_real_array(u0, _u0_name, ndim=1)
        if u.shape != (m,):
            raise ValueError(f"{_u0_name} must have shape ({m},) to match A of shape "
                             f"{op.shape}; got shape {u.shape}")
        if not np.any(u):
            raise ValueError(f"{_u0_name} must be a non-zero vector; got all zeros")
    u = _unit(u, _u0_name)[0]
    v = np.zeros(n)
    sigma = np.empty(iters)
    for k in range(iters):
        v = _unit(np.asarray(op.rmatvec(u), dtype=float).reshape(n), "A^T u")[0]
        Av, s = _unit(np.asarray(op.matvec(v), dtype=float).reshape(m), "A v")
        if s > 0:
            u = Av
        sigma[k] = s
    return PowerIteration(sigma=sigma, u=u, v=v, matvecs=2 * iters)


def spectral_norm(A: Any, tol: float = 1e-10) -> float:
    r"""The exact largest singular value :math:`\sigma_1(A)`.

    Method: ``numpy.linalg.norm(A, 2)`` (a dense SVD) when ``A`` is an array
    with at most :data:`DENSE_MAX_ENTRIES` entries or with a side of length 1;
    otherwise ``scipy.sparse.linalg.svds`` on the array or LinearOperator, whose
    ARPACK solver runs implicitly restarted Lanczos on the Gram operator
    :math:`A^\top A` (ARPACK tolerance ``tol**2`` on its eigenvalues).

    Parameters
    ----------
    A : array_like, shape (m, n), or scipy.sparse.linalg.LinearOperator
    tol : float, default 1e-10
        Relative tolerance of the Lanczos path, in [1e-15, 0.5].

    Returns
    -------
    float
        Scale-invariant: ``spectral_norm(c * A) == c * spectral_norm(A)`` up to
        rounding for every c > 0 with finite ``c * A``. For a LinearOperator
        that maps a fixed generic vector to 0 the result is 0 (with probability
        one the operator is zero; ARPACK could not start from such a vector).
    """
    op, arr, c = _unit_scaled(A)
    tol = as_tol(tol)
    if c == 0.0:
        return 0.0
    if arr is not None and (arr.size <= DENSE_MAX_ENTRIES or min(arr.shape) == 1):
        return _rescaled(float(np.linalg.norm(arr, 2)), c)
    if min(op.shape) == 1:
        # svds needs k < min(m, n); a single row or column is a vector norm.
        col = op.rmatvec(np.ones(1)) if op.shape[0] == 1 else op.matvec(np.ones(1))
        return _rescaled(_unit(np.asarray(col, dtype=float).ravel(), "A e_1")[1], c)
    v0 = np.random.default_rng(0).standard_normal(min(op.shape))
    s = svds(op, k=1, tol=tol, return_singular_vectors=False, v0=v0)
    return _rescaled(float(s[0]), c)


def _unit_scaled(A: Any, name: str = "A") -> tuple[LinearOperator, np.ndarray | None, float]:
    """``(A / c, dense A / c or None, c)`` with ``A / c`` of order 1, validated.

    An array is divided by the power of two at or above its largest entry. An
    operator's scale is the power of two at or above ``||A v|| / ||v||`` for one
    fixed random vector v (about sigma_1 or less), so that Lanczos on the Gram
    operator neither overflows nor underflows. Powers of two scale exactly, so
    ordinary inputs give bit for bit the unscaled results. ``c = 0`` for an
    array of zeros, or an operator that maps the (generic) probe vector to 0,
    which with probability one means the zero operator (its null space would
    have to contain that fixed random vector); then the operator is returned
    unscaled and its norm is 0.
    """
    op, arr = _as_operator(A, name)
    if arr is not None:
        if not np.any(arr):
            return op, arr, 0.0
        c = scale_of(arr)  # a power of two: ordinary inputs give bit-identical results
        arr = arr / c
        return aslinearoperator(arr), arr, c
    v = np.random.default_rng(12345).standard_normal(min(op.shape))
    probe = op.rmatvec(v) if op.shape[0] < op.shape[1] else op.matvec(v)
    c = _unit(np.asarray(probe, dtype=float).ravel(), f"{name} v")[1] / float(safe_norm(v))
    if c == 0.0:
        return op, None, 0.0
    c = scale_of(c)
    return (op * (1.0 / c), None, c) if c != 1.0 else (op, None, c)


def _rescaled(s: float, c: float) -> float:
    """``s * c``, or a clear error where that overflows float64."""
    out = s * c
    if not np.isfinite(out):
        raise ResultOverflowError("A must have a spectral norm representable in float64; "
                                  f"got sigma_1 = {s!r} * {c!r}, which overflows")
    return out


def spectral_normalize(
    W: Any, u: Any, iters: int = 1
) -> tuple[np.ndarray, np.ndarray, float]:
    r"""One spectral-normalisation step with a persistent left vector ``u``.

    Parameters
    ----------
    W : array_like, shape (m, n)
    u : array_like, shape (m,)
        The left vector kept from the previous step (non-zero).
    iters : int, default 1
        Power-iteration steps this call.

    Returns
    -------
    W_sn : ndarray, shape (m, n)
        :math:`W/\hat\sigma`. Since :math:`\hat\sigma \le \sigma_1(W)`, its
        spectral norm is **at least** 1 (equal only once the estimate has
        converged).
    u_new : ndarray, shape (m,)
        The updated left vector, to keep for the next step.
    sigma_hat : float
        The estimate :math:`\hat\sigma`.
    """
    W = as_real_array(W, "W", ndim=2)
    if u is None:
        raise TypeError("u must be the left vector of shape (m,) kept from the previous "
                        "step; got None")
    run = power_iteration(W, iters, u0=u, _u0_name="u")
    s = float(run.sigma[-1])
    if s == 0.0:
        raise ValueError("W must have W^T u != 0 for spectral normalisation; got sigma_hat = 0")
    return W / s, run.u, s


def as_operator(A: Any) -> LinearOperator:
    """``A`` (array or LinearOperator) as a LinearOperator, validated."""
    return _as_operator(A)[0]


# --------------------------------------------------------------------------
# The convergence rate of power iteration
# --------------------------------------------------------------------------
def predicted_error(
    sigma_1: float, sigma_2: float, tan_theta: float, k: Any
) -> np.ndarray:
    r"""The relative error :math:`1 - \hat\sigma_k^2/\sigma_1^2` of power iteration
    on a matrix with two non-zero singular values, in closed form.

    With :math:`\rho = \sigma_2/\sigma_1` and :math:`t = \tan\theta_0`, where
    :math:`\theta_0` is the angle between the start :math:`u_0` and the top left
    singular vector (within the span of the two left singular vectors),

    .. math:: 1 - \frac{\hat\sigma_k^2}{\sigma_1^2}
       = (1 - \rho^2)\,\frac{t^2 \rho^{4k-2}}{1 + t^2\rho^{4k-2}} .

    For a matrix of any rank this is the leading term, and
    :math:`t^2 \rho^{4k-2}` (with :math:`t` the tangent of the angle to the top
    singular vector) is an upper bound (see the chapter).

    Parameters
    ----------
    sigma_1, sigma_2 : float
        :math:`\sigma_1 > 0` and :math:`0 \le \sigma_2 \le \sigma_1`.
    tan_theta : float
        :math:`\tan\theta_0 \ge 0` (finite: the start is not orthogonal to the
        top singular vector).
    k : int or array_like of int
        Steps, each at least 1.

    Returns
    -------
    ndarray, shape of ``k``
    """
    s1 = as_positive_float(sigma_1, "sigma_1")
    s2 = as_positive_float(sigma_2, "sigma_2", allow_zero=True)
    if s2 > s1:
        raise ValueError(f"sigma_2 must be at most sigma_1 = {s1!r}; got {sigma_2!r}")
    t = as_positive_float(tan_theta, "tan_theta", allow_zero=True)
    if isinstance(k, np.ndarray) and k.ndim > 1:
        if k.dtype == bool or not np.issubdtype(k.dtype, np.integer) or np.any(k < 1):
            raise ValueError(f"k must be integers >= 1; got {k!r}")
    else:
        scalar = not isinstance(k, (list, tuple, np.ndarray))
        k = np.asarray(as_counts(k, "k", 1, None, allow_scalar=True))
        k = k[0] if scalar else k
    rho = s2 / s1
    # t^2 rho^(4k-2) in logs, so that huge t and tiny rho stay finite
    with np.errstate(divide="ignore"):
        log_x = 2 * np.log(t) + (4 * k - 2) * np.log(rho)
    x = np.exp(np.minimum(log_x, 700.0))
    return (1 - rho**2) * x / (1 + x)


def steps_to_tolerance(sigma: Any, exact: float, rtol: float) -> int | None:
    """First step k (1-based) with ``1 - sigma[k-1]/exact <= rtol``, or None.

    Parameters
    ----------
    sigma : array_like, shape (iters,)
        Estimates, e.g. ``power_iteration(...).sigma``.
    exact : float
        The exact :math:`\\sigma_1 > 0`.
    rtol : float
        Relative tolerance, positive.
    """
    sig = as_real_array(sigma, "sigma", ndim=1)
    exact = as_positive_float(exact, "exact")
    rtol = as_positive_float(rtol, "rtol")
    with np.errstate(over="ignore"):  # 1 - s / e <= rtol, without dividing by a tiny e
        hit = np.nonzero(sig >= exact * (1.0 - rtol))[0]
    return int(hit[0]) + 1 if hit.size else None


def matrix_with_spectrum(
    singular_values: Any, shape: tuple[int, int] | None = None, seed: int = 0
) -> np.ndarray:
    r"""A random matrix :math:`U \operatorname{diag}(s) V^\top` with prescribed
    singular values and Haar-random orthonormal :math:`U, V`.

    Parameters
    ----------
    singular_values : array_like, shape (r,)
        Non-negative, in any order.
    shape : (m, n), optional
        With m, n >= r. Default (r, r).
    seed : int

    Returns
    -------
    ndarray, shape (m, n)
    """
    s = as_real_array(singular_values, "singular_values", ndim=1)
    if np.any(s < 0):
        raise ValueError("singular_values must be non-negative; got a negative entry")
    r = s.size
    if shape is not None and (not isinstance(shape, (tuple, list)) or len(shape) != 2):
        raise TypeError(f"shape must be None or a pair (m, n) of ints; got {shape!r}")
    m, n = (r, r) if shape is None else shape
    m = as_count(m, "shape[0]", r)
    n = as_count(n, "shape[1]", r)
    if m * n > 10**8:
        raise ValueError(f"shape must have at most 1e8 entries; got {m} x {n}")
    rng = np.random.default_rng(as_seed(seed))
    U = np.linalg.qr(rng.standard_normal((m, r)))[0]
    V = np.linalg.qr(rng.standard_normal((n, r)))[0]
    return (U * s) @ V.T


class CountingOperator(LinearOperator):
    """A LinearOperator that counts its products with A and with A^T.

    Parameters
    ----------
    A : array_like, shape (m, n), or LinearOperator
    """

    def __init__(self, A: Any) -> None:
        self._op = as_operator(A)
        super().__init__(dtype=np.float64, shape=self._op.shape)
        self.count = 0

    def _matvec(self, x):
        self.count += 1
        return self._op.matvec(x)

    def _rmatvec(self, x):
        self.count += 1
        return self._op.rmatvec(x)

    def _matmat(self, X):
        self.count += X.shape[1]
        return self._op.matmat(X)

    def _rmatmat(self, X):
        self.count += X.shape[1]
        return self._op.rmatmat(X)


def lanczos_cost(A: Any, tol: float, seed: int = 0) -> tuple[int, float]:
    r"""Products with A or A^T that ``scipy.sparse.linalg.svds`` (ARPACK,
    implicitly restarted Lanczos on :math:`A^\top A`) uses for :math:`\sigma_1` at
    tolerance ``tol``. Every product with the Gram operator counts as two.

    Parameters
    ----------
    A : array_like, shape (m, n), or LinearOperator, with min(m, n) >= 2
    tol : float
        ARPACK's relative tolerance, in [1e-15, 0.5].
    seed : int
        Seed of the starting vector (>= 0). An array is divided by its largest
        entry first (no products counted), so the result is scale-invariant.

    Returns
    -------
    matvecs : int
    sigma : float
        The estimate.
    """
    op, _, c = _unit_scaled(A)  # no products with A counted when A is an array
    counter = CountingOperator(op)
    tol = as_tol(tol)
    seed = as_seed(seed)
    if min(counter.shape) < 2:
        raise ValueError(f"A must have min(m, n) >= 2 for svds; got shape {counter.shape}")
    if c == 0.0:
        return 0, 0.0
    v0 = np.random.default_rng(seed).standard_normal(min(counter.shape))
    s = svds(counter, k=1, tol=tol, return_singular_vectors=False, v0=v0)
    return counter.count, _rescaled(float(s[0]), c)


@dataclass(frozen=True)
class Tracking:
    """The record of spectral normalisation on a drifting weight.

    Attributes
    ----------
    sigma_hat : ndarray, shape (steps,)
        The estimate used at each step.
    sigma : ndarray, shape (steps,)
        The exact :math:`\\sigma_1(W_t)`.
    """

    sigma_hat: np.ndarray
    sigma: np.ndarray

    @property
    def underestimate(self) -> np.ndarray:
        """Relative underestimate :math:`1 - \\hat\\sigma_t/\\sigma_1(W_t)`, shape (steps,)."""
        return 1 - self.sigma_hat / self.sigma


def track_drift(
    W0: Any, steps: int, drift: float, persistent: bool = True, iters: int = 1,
    seed: int = 0,
) -> Tracking:
    r"""Spectral normalisation of a weight that drifts as a random walk.

    :math:`W_t = W_{t-1} + \eta\,\|W_0\|_F\, G_t/\sqrt{mn}`, with :math:`G_t`
    i.i.d. standard normal (m, n) matrices, so each step moves :math:`W` by
    about :math:`\eta\|W_0\|_F` in Frobenius norm. At every step the estimate is
    ``iters`` power steps from the previous ``u`` (``persistent``, as in
    training) or from a fresh random ``u``.

    Parameters
    ----------
    W0 : array_like, shape (m, n)
        Finite and not all zero.
    steps : int
        At least 1; ``steps * iters`` at most :data:`MAX_ITERS`.
    drift : float
        :math:`\eta \ge 0`.
    persistent : bool
    iters : int
        Power steps per update, at least 1.
    seed : int
        Seeds the walk and the fresh starts (the walk is the same for both modes).

    Returns
    -------
    Tracking
    """
    W = as_real_array(W0, "W0", ndim=2).copy()
    if not np.any(W):
        raise ValueError("W0 must be a non-zero matrix: the walk's steps are proportional to "
                         "||W0||_F, so W0 = 0 stays 0 and its relative underestimate "
                         "1 - sigma_hat / sigma is undefined (0 / 0)")
    steps = as_count(steps, "steps", 1, MAX_ITERS // 10)
    drift = as_positive_float(drift, "drift", allow_zero=True)
    persistent = as_bool(persistent, "persistent")
    iters = as_count(iters, "iters", 1, MAX_ITERS // 10)
    if steps * iters > MAX_ITERS:
        raise ValueError(f"steps * iters must be at most {MAX_ITERS} (a Python loop: time); "
                         f"got steps = {steps}, iters = {iters}")
    seed = as_seed(seed)
    m, n = W.shape
    walk = np.random.default_rng(seed)
    starts = np.random.default_rng([seed, 1])
    scale = drift * float(safe_norm(W)) / np.sqrt(m * n)
    u = starts.standard_normal(m)
    est, exact = np.empty(steps), np.empty(steps)
    for t in range(steps):
        if t:
            W += scale * walk.standard_normal((m, n))
        u0 = u if persistent else starts.standard_normal(m)
        run = power_iteration(W, iters, u0=u0)
        u = run.u
        est[t] = run.sigma[-1]
        exact[t] = spectral_norm(W)
    return Tracking(sigma_hat=est, sigma=exact)
