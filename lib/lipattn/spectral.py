r"""Spectral norms: power iteration as spectral normalisation runs it, and exact values.

- :func:`power_iteration` runs exactly the update of spectral normalisation
  (Miyato et al. 2018, Algorithm 1) on a dense matrix or a
  :class:`scipy.sparse.linalg.LinearOperator`:
  :math:`v \leftarrow A^\top u / \|A^\top u\|`, :math:`u \leftarrow Av/\|Av\|`,
  :math:`\hat\sigma = u^\top A v`, and records :math:`\hat\sigma` after every step.
- :func:`spectral_norm` is the exact :math:`\sigma_1(A)`, dense SVD for small
  arrays and Lanczos (``scipy.sparse.linalg.svds``) for operators and large arrays.
- :func:`spectral_normalize` is one training-time step with a persistent ``u``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator, aslinearoperator, svds

from ._validate import as_int_at_least, as_positive_float, as_real_array

__all__ = ["PowerIteration", "power_iteration", "spectral_norm", "spectral_normalize"]

#: Arrays with at most this many entries get a dense SVD in :func:`spectral_norm`.
DENSE_MAX_ENTRIES = 250_000


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


def _unit(x: np.ndarray, name: str) -> np.ndarray:
    nrm = float(np.linalg.norm(x))
    if not np.isfinite(nrm):
        raise ValueError(f"{name} became non-finite; expected a finite operator")
    if nrm == 0.0:
        return x
    return x / nrm


def power_iteration(A: Any, iters: int, u0: Any = None, seed: int = 0) -> PowerIteration:
    r"""Power iteration for :math:`\sigma_1(A)`, as in spectral normalisation.

    Each step is :math:`v \leftarrow A^\top u/\|A^\top u\|`,
    :math:`u \leftarrow Av/\|Av\|`, :math:`\hat\sigma = u^\top A v = \|Av\|`.
    The estimate never exceeds :math:`\sigma_1` (it is a Rayleigh quotient).

    Parameters
    ----------
    A : array_like, shape (m, n), or scipy.sparse.linalg.LinearOperator
        Finite.
    iters : int
        Number of steps, at least 1.
    u0 : array_like, shape (m,), optional
        Starting left vector (any non-zero finite vector; it is normalised).
        Default: a standard normal vector from ``numpy.random.default_rng(seed)``.
    seed : int, default 0
        Seed of the default starting vector.

    Returns
    -------
    PowerIteration
        ``sigma`` (shape (iters,)), the last ``u`` and ``v``, and ``matvecs``.
        If :math:`A^\top u_0 = 0` (``u0`` orthogonal to the range of A), every
        estimate is 0 and ``v`` is the zero vector.
    """
    op, _ = _as_operator(A)
    iters = as_int_at_least(iters, "iters", 1)
    m, n = op.shape
    if u0 is None:
        u = np.random.default_rng(seed).standard_normal(m)
    else:
        u = as_real_array(u0, "u0", ndim=1)
        if u.shape != (m,):
            raise ValueError(f"u0 must have shape ({m},) to match A of shape {op.shape}; "
                             f"got shape {u.shape}")
        if not np.any(u):
            raise ValueError("u0 must be a non-zero vector; got all zeros")
    u = u / np.linalg.norm(u)
    v = np.zeros(n)
    sigma = np.empty(iters)
    for k in range(iters):
        v = _unit(np.asarray(op.rmatvec(u), dtype=float).reshape(n), "A^T u")
        Av = np.asarray(op.matvec(v), dtype=float).reshape(m)
        s = float(np.linalg.norm(Av))
        if s > 0:
            u = Av / s
        sigma[k] = s
    return PowerIteration(sigma=sigma, u=u, v=v, matvecs=2 * iters)


def spectral_norm(A: Any, tol: float = 1e-10) -> float:
    r"""The exact largest singular value :math:`\sigma_1(A)`.

    Method: ``numpy.linalg.norm(A, 2)`` (a dense SVD) when ``A`` is an array
    with at most :data:`DENSE_MAX_ENTRIES` entries or with a side of length 1;
    otherwise Lanczos bidiagonalisation through ``scipy.sparse.linalg.svds``
    (ARPACK, relative tolerance ``tol``) on the array or LinearOperator.

    Parameters
    ----------
    A : array_like, shape (m, n), or scipy.sparse.linalg.LinearOperator
    tol : float, default 1e-10
        Relative tolerance of the Lanczos path (positive).

    Returns
    -------
    float
    """
    op, arr = _as_operator(A)
    tol = as_positive_float(tol, "tol")
    if arr is not None and (arr.size <= DENSE_MAX_ENTRIES or min(arr.shape) == 1):
        return float(np.linalg.norm(arr, 2))
    if min(op.shape) == 1:
        # svds needs k < min(m, n); a single row or column is a vector norm.
        if op.shape[0] == 1:
            return float(np.linalg.norm(op.rmatvec(np.ones(1))))
        return float(np.linalg.norm(op.matvec(np.ones(1))))
    v0 = np.random.default_rng(0).standard_normal(min(op.shape))
    s = svds(op, k=1, tol=tol, return_singular_vectors=False, v0=v0)
    return float(s[0])


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
    run = power_iteration(W, iters, u0=u)
    s = float(run.sigma[-1])
    if s == 0.0:
        raise ValueError("W must have W^T u != 0 for spectral normalisation; got sigma_hat = 0")
    return W / s, run.u, s


def as_operator(A: Any) -> LinearOperator:
    """``A`` (array or LinearOperator) as a LinearOperator, validated."""
    return _as_operator(A)[0]
