r"""The largest singular value of a matrix-free linear map: Golub–Kahan–Lanczos.

:func:`golub_kahan_norm` runs Golub–Kahan–Lanczos bidiagonalisation (with
full reorthogonalisation) on a :class:`scipy.sparse.linalg.LinearOperator` or
an array; :func:`jacobian_norm` is the same algorithm for a map given by its
Jacobian-vector product and its adjoint (vector-Jacobian) product on arrays of
any shape, and returns a :class:`LipschitzEstimate`. Every exact local
Lipschitz constant of the library (:func:`lipattn.lipschitz.local_lipschitz`,
:mod:`lipattn.models`) is computed by it.

How convergence is certified
----------------------------
After k steps, :math:`A V_k = U_k B_k` and
:math:`A^\top U_k = V_k B_k^\top + \beta_{k+1} v_{k+1} e_k^\top` with
orthonormal :math:`U_k, V_k` and an upper bidiagonal :math:`B_k`. For the top
singular triplet :math:`B_k y = \sigma x` of :math:`B_k`, the pair
:math:`u = U_k x`, :math:`v = V_k y` satisfies :math:`Av = \sigma u` exactly
and :math:`\|A^\top u - \sigma v\| = \beta_{k+1} |x_k|`. The iteration stops
when this residual is at most :math:`\text{tol}\cdot\sigma`; then *some*
singular value of A lies within :math:`\text{tol}\cdot\sigma` of
:math:`\sigma`, and :math:`\sigma \le \sigma_1(A)` always (interlacing).

That the singular value found is :math:`\sigma_1` is *not* certified: it rests
on the random starting vector having a non-negligible component along the top
right singular vector, which holds with probability 1 (and in practice
whenever :math:`\sigma_1` is not much smaller than the value found a few steps
earlier). Different seeds give the same value to within tol.

The iteration starts on the smaller side of A (it runs on :math:`A^\top` when
A has fewer rows than columns), so after :math:`\min(m, n)` steps the bases
span that side and the value is exact up to rounding: the step cap
``min(m, n)`` is never reached unconverged. A smaller ``max_steps`` reached
without convergence raises :class:`ConvergenceError`; nothing unconverged is
returned.

Scale invariance: every product is divided by a running scale (the norm of
the first product) and all norms are computed from scaled vectors, so the
result for :math:`cA` is :math:`c` times the result for A for any c whose
products are representable (tested for :math:`10^{-200} \le c \le 10^{200}`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator

from ._validate import MAX_COUNT, as_counts, as_float_in, as_int_at_least, as_real_array

__all__ = ["LipschitzEstimate", "ConvergenceError", "golub_kahan_norm", "jacobian_norm",
           "JacobianOperator", "MAX_STEPS", "MIN_TOL"]

#: Default cap on the number of steps (each is one product with A and one with A^T).
MAX_STEPS = 500
#: Smallest accepted relative tolerance: the residual of a float64 run stalls
#: near machine precision times a small factor.
MIN_TOL = 1e-14


@dataclass(frozen=True)
class LipschitzEstimate:
    """An exact local Lipschitz constant (spectral norm) and how it was computed.

    Attributes
    ----------
    value : float
        :math:`\\|Df(X)\\|_2` (Frobenius norms on inputs and outputs).
    method : str
        ``"dense"`` (an SVD of the dense Jacobian) or ``"lanczos"``
        (:func:`golub_kahan_norm`).
    products : int
        Jacobian-vector plus vector-Jacobian products used (0 for dense).
    residual : float
        The certified relative residual of the Lanczos path: a singular value
        lies within ``residual * value`` of ``value`` (at most the requested
        tol). 0 for dense, and when the Lanczos bases span the smaller side of
        the operator or an invariant subspace (exact up to rounding).
    input_direction, output_direction : ndarray or None
        The top right and left singular vectors v and u found with ``value``
        (sigma), unit norm, in the shapes of the map's input and output
        (:func:`jacobian_norm`; flat vectors from ``golub_kahan``'s core):
        ``A v = sigma u`` up to rounding and ``|A^T u - sigma v| <= residual *
        sigma``; when A has fewer rows than columns the iteration runs on
        A^T and the two relations swap (``A^T u = sigma v`` up to rounding,
        ``|A v - sigma u| <= residual * sigma``). None where not computed
        (``method="dense"``). Their common sign is arbitrary. Not compared by
        ``==``.
    """

    value: float
    method: str
    products: int
    residual: float = 0.0
    input_direction: np.ndarray | None = field(default=None, compare=False, repr=False)
    output_direction: np.ndarray | None = field(default=None, compare=False, repr=False)


class ConvergenceError(RuntimeError):
    """Golub–Kahan–Lanczos reached its step cap without meeting the tolerance.

    Attributes
    ----------
    value : float
        The last Ritz value, a lower bound on the spectral norm (not converged).
    products : int
        Products used.
    residual : float
        The relative residual reached (larger than the requested tol).
    """

    def __init__(self, message: str, value: float, products: int, residual: float) -> None:
        super().__init__(message)
        self.value, self.products, self.residual = value, products, residual


def _norm(x: np.ndarray) -> float:
    """Euclidean norm without overflow or underflow (scaled by the largest entry)."""
    big = float(np.max(np.abs(x))) if x.size else 0.0
    if big == 0.0 or not np.isfinite(big):
        return big
    y = x / big
    return big * float(np.sqrt(np.dot(y, y)))


def _check_tol(tol: Any) -> float:
    # the shared validator, with the floor below which the residual test cannot be met
    return as_float_in(tol, "tol", MIN_TOL, 0.5)


def _check_seed(seed: Any) -> int:
    return as_int_at_least(seed, "seed", 0)


def _as_operator(op: Any) -> LinearOperator:
    if isinstance(op, LinearOperator):
        if len(op.shape) != 2 or min(op.shape) < 1:
            raise ValueError(f"op must be an operator of shape (m, n) with m, n >= 1; "
                             f"got shape {op.shape}")
        if op.dtype is not None and np.issubdtype(op.dtype, np.complexfloating):
            raise TypeError(f"op must be a real operator; got dtype {op.dtype}")
        return op
    if isinstance(op, (str, bytes)) or op is None or callable(op):
        raise TypeError("op must be a scipy.sparse.linalg.LinearOperator or a 2-D real array; "
                        f"got {type(op).__name__}")
    from scipy.sparse.linalg import aslinearoperator

    return aslinearoperator(as_real_array(op, "op", ndim=2))


def _product(f: Callable, x: np.ndarray, size: int, which: str) -> np.ndarray:
    y = np.asarray(f(x), dtype=np.float64).reshape(-1)
    if y.size != size:
        raise ValueError(f"op's {which} returned {y.size} entries; expected {size}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"op's {which} returned non-finite entries; expected a finite "
                         "operator (products must be representable in float64)")
    return y


def _orthogonalise(x: np.ndarray, Q: np.ndarray) -> None:
    """x -= Q^T (Q x), twice (classical Gram–Schmidt with reorthogonalisation)."""
    if Q.shape[0]:
        for _ in range(2):
            x -= Q.T @ (Q @ x)


#: Relative tolerance of the adjointness check on the first step (loose enough
#: for float32 products).
ADJOINT_RTOL = 1e-4


def _check_adjoint(vw: float, alpha: float, w_norm: float, names) -> None:
    """<v_1, A^T u_1> must equal <A v_1, u_1> = alpha_1: a free check of the adjoint."""
    if abs(vw - alpha) > ADJOINT_RTOL * max(alpha, w_norm):
        raise ValueError(f"op's {names[1]} is not the adjoint of its {names[0]}: "
                         f"<v, A^T u> = {vw:.6g} but <A v, u> = {alpha:.6g} (relative to the "
                         "product norms); expected a linear map and its transpose")


def golub_kahan_norm(op: Any, tol: float = 1e-10, seed: int = 0,
                     max_steps: int | None = None) -> tuple[float, int]:
    r"""Largest singular value of a linear operator by Golub–Kahan–Lanczos bidiagonalisation.

    Builds orthonormal bases with :math:`A V_k = U_k B_k` and
    :math:`A^\top U_k = V_k B_k^\top + \beta_{k+1} v_{k+1} e_k^\top` (full
    reorthogonalisation, starting on the smaller side of A) and stops when the
    top Ritz triplet :math:`(\sigma, u, v)` of the bidiagonal :math:`B_k` has
    residual :math:`\|A^\top u - \sigma v\| = \beta_{k+1}|x_k| \le
    \text{tol}\cdot\sigma`: then a singular value of A lies within
    tol·σ of σ, and σ never exceeds :math:`\sigma_1(A)`. That this singular
    value is :math:`\sigma_1` rests on the random start (probability 1); see
    the module docstring. Scale-invariant: ``golub_kahan_norm(c * A)`` is
    ``c`` times ``golub_kahan_norm(A)`` whenever the products are
    representable.

    Parameters
    ----------
    op : LinearOperator or array_like, shape (m, n)
        ``matvec`` and ``rmatvec`` must return finite float64 vectors.
    tol : float, default 1e-10
        Relative residual tolerance, in ``[1e-14, 1)``.
    seed : int, default 0
        Seed (>= 0) of the random starting vector.
    max_steps : int, optional
        At most this many steps (each one product with A and one with
        :math:`A^\top`); default ``min(m, n, MAX_STEPS)``. Storage is
        ``max_steps * (m + n)`` doubles.

    Returns
    -------
    sigma : float
        Exact up to tol (relative) as above; exact up to rounding when the
        bases span the smaller side.
    products : int
        Products with A and A^T (two per step).

    Raises
    ------
    ConvergenceError
        If ``max_steps`` steps do not reach tol (its ``value`` is the
        unconverged lower bound).
    TypeError, ValueError
        For a bad argument, or an operator returning non-finite products.
    """
    est = _golub_kahan(_as_operator(op), _check_tol(tol), _check_seed(seed), max_steps)
    return est.value, est.products


def _golub_kahan(op: LinearOperator, tol: float, seed: int, max_steps: Any) -> LipschitzEstimate:
    m, n = op.shape
    mv, rmv, names = op.matvec, op.rmatvec, ("matvec", "rmatvec")
    swapped = n > m
    if swapped:  # start on the smaller side: run on A^T
        mv, rmv, names, m, n = rmv, mv, names[::-1], n, m
    cap = min(m, n)
    if max_steps is not None:
        cap = min(as_int_at_least(max_steps, "max_steps", 1), cap)
    else:
        cap = min(cap, MAX_STEPS)
    full = cap == n  # after n steps the right basis spans R^n: exact
    V = np.empty((cap + 1, n))
    U = np.empty((cap, m))
    alphas, betas = np.zeros(cap), np.zeros(cap)
    v = np.random.default_rng(seed).standard_normal(n)
    V[0] = v / _norm(v)
    scale = 0.0
    products, sigma, res = 0, 0.0, np.inf

    def done(B: np.ndarray, k_u: int, k_v: int, residual: float) -> LipschitzEstimate:
        # the top singular triplet B y = s x of the small bidiagonal gives
        # v = V y, u = U x with A v = s u (see the module docstring)
        X_, s_, Yt = np.linalg.svd(B)
        right, left = V[:k_v].T @ Yt[0], U[:k_u].T @ X_[:, 0]
        right /= _norm(right)
        left /= _norm(left)
        if swapped:
            right, left = left, right
        return LipschitzEstimate(float(s_[0]) * scale, "lanczos", products, residual,
                                 right, left)

    for k in range(cap):
        u = _product(mv, V[k], m, names[0])
        products += 1
        if scale == 0.0:
            scale = _norm(u)
            if scale == 0.0:   # A v = 0 for a random v: A = 0 with probability 1
                left = np.zeros(m)
                left[0] = 1.0   # any unit vector: A v = 0 u
                right = V[0].copy()
                if swapped:
                    right, left = left, right
                return LipschitzEstimate(0.0, "lanczos", products, 0.0, right, left)
        u /= scale
        if k:
            u -= betas[k - 1] * U[k - 1]
        _orthogonalise(u, U[:k])
        alpha = _norm(u)
        if k and alpha <= 1e-14 * max(alphas[:k].max(), betas[:k].max()):
            # invariant subspace: U_k^T A = [B_{k-1}, beta_k e_{k-1}] V_k^T exactly
            B = np.diag(alphas[:k]) + np.diag(betas[:k - 1], 1)
            B = np.column_stack([B, np.eye(k)[:, -1] * betas[k - 1]])
            return done(B, k, k + 1, 0.0)
        U[k] = u / alpha
        alphas[k] = alpha
        w = _product(rmv, U[k], n, names[1]) / scale
        products += 1
        if k == 0:
            _check_adjoint(float(V[0] @ w), alpha, _norm(w), names)
        w -= alpha * V[k]
        _orthogonalise(w, V[:k + 1])
        beta = _norm(w)
        B = np.diag(alphas[:k + 1]) + np.diag(betas[:k], 1)
        X_, s_, _ = np.linalg.svd(B)
        sigma = float(s_[0])
        res = beta * abs(float(X_[-1, 0])) / sigma
        if res <= tol:
            return done(B, k + 1, k + 1, float(res))
        if full and k == cap - 1:   # V spans the smaller side: exact up to rounding
            return done(B, k + 1, k + 1, 0.0)
        if beta == 0.0:
            # invariant Krylov subspace: the Ritz values are exact singular values
            return done(B, k + 1, k + 1, 0.0)
        betas[k] = beta
        V[k + 1] = w / beta
    raise ConvergenceError(
        f"Golub-Kahan-Lanczos did not converge in max_steps = {cap} steps: relative "
        f"residual {res:.2e} > tol = {tol:.2e} (last value {sigma * scale:.17g}, a lower "
        "bound); raise max_steps or tol", sigma * scale, products, float(res))


class JacobianOperator(LinearOperator):
    """A LinearOperator from a jvp and a vjp on arrays of given shapes; counts its products.

    Parameters
    ----------
    jvp : callable, array of shape ``in_shape`` -> array of shape ``out_shape``
    vjp : callable, array of shape ``out_shape`` -> array of shape ``in_shape``
    in_shape, out_shape : tuple of int

    ``matvec`` and ``rmatvec`` act on row-major ``vec``'s; the attribute
    ``products`` counts the jvp's and vjp's applied.
    """

    def __init__(self, jvp: Callable, vjp: Callable, in_shape: tuple[int, ...],
                 out_shape: tuple[int, ...]) -> None:
        for f, name in ((jvp, "jvp"), (vjp, "vjp")):
            if not callable(f):
                raise TypeError(f"{name} must be a callable (an array -> an array); "
                                f"got {type(f).__name__}")
        self._in = _check_shape(in_shape, "in_shape")
        self._out = _check_shape(out_shape, "out_shape")
        super().__init__(dtype=np.float64,
                         shape=(int(np.prod(self._out)), int(np.prod(self._in))))
        self._jvp, self._vjp = jvp, vjp
        self.products = 0

    def _call(self, f, x, shape_in, shape_out, name):
        self.products += 1
        try:
            y = np.asarray(f(np.asarray(x, dtype=np.float64).reshape(shape_in)))
        except ArithmeticError:
            raise  # an OverflowError names its arguments already
        except Exception as exc:  # the caller's map: say which one failed, and on what
            raise ValueError(f"{name} failed on an array of shape {shape_in}: "
                             f"{type(exc).__name__}: {exc}") from exc
        if y.shape != shape_out:
            raise ValueError(f"{name} must return an array of shape {shape_out}; "
                             f"got shape {y.shape}")
        if not (np.issubdtype(y.dtype, np.floating) or np.issubdtype(y.dtype, np.integer)):
            raise TypeError(f"{name} must return a real array; got dtype {y.dtype}")
        if not np.all(np.isfinite(y)):
            raise ValueError(f"{name} returned non-finite entries; expected a finite linear map")
        return y.reshape(-1)

    def _matvec(self, v):
        return self._call(self._jvp, v, self._in, self._out, "jvp")

    def _rmatvec(self, u):
        return self._call(self._vjp, u, self._out, self._in, "vjp")


def _check_shape(shape: Any, name: str) -> tuple[int, ...]:
    """A shape: an int or a non-empty tuple of ints >= 1, with at most MAX_COUNT entries."""
    out = tuple(as_counts(shape, name, 1, allow_scalar=True))
    if math.prod(out) > MAX_COUNT:
        raise ValueError(f"{name} must have at most {MAX_COUNT:.0e} entries (memory); "
                         f"got shape {out}")
    return out


def jacobian_norm(jvp: Callable, vjp: Callable, shape: Any, *, out_shape: Any = None,
                  tol: float = 1e-10, seed: int = 0) -> LipschitzEstimate:
    r"""The spectral norm of a linear map given by its product and its adjoint product.

    For a differentiable f, ``jvp(E) = Df(X)[E]`` and ``vjp(G) = Df(X)^T[G]``
    give :math:`\|Df(X)\|_2`, the exact local Lipschitz constant at X
    (Frobenius norms on inputs and outputs). Computed by
    :func:`golub_kahan_norm` (with its convergence certificate and scale
    invariance) on row-major ``vec``'s.

    Parameters
    ----------
    jvp : callable
        Maps an array of shape ``shape`` to one of shape ``out_shape``; linear.
    vjp : callable
        The adjoint: ``out_shape`` -> ``shape``, with
        :math:`\langle \mathrm{jvp}(E), G\rangle = \langle E, \mathrm{vjp}(G)\rangle`
        (checked on the first step, at no extra cost, to a relative 1e-4; a
        ``ValueError`` otherwise).
    shape : tuple of int
        The input shape, e.g. ``(N, d)``.
    out_shape : tuple of int, optional
        The output shape; default ``shape``.
    tol : float, default 1e-10
        Relative residual tolerance, in ``[1e-14, 1)``.
    seed : int, default 0
        Seed of the random start.

    Returns
    -------
    LipschitzEstimate
        ``value`` (exact up to tol), ``method="lanczos"``, ``products``, the
        certified ``residual``, and the singular vectors ``input_direction``
        (shape ``shape``) and ``output_direction`` (shape ``out_shape``), unit
        norm: ``jvp(input_direction) = value * output_direction`` to within
        ``residual * value`` (exactly, up to rounding, unless ``out_shape`` has
        fewer entries than ``shape``; then the adjoint relation is the exact one).

    Raises
    ------
    ConvergenceError
        If :data:`MAX_STEPS` steps do not reach tol.
    """
    if not callable(jvp):
        raise TypeError(f"jvp must be callable; got {type(jvp).__name__}")
    if not callable(vjp):
        raise TypeError(f"vjp must be callable; got {type(vjp).__name__}")
    shape = _check_shape(shape, "shape")
    out_shape = shape if out_shape is None else _check_shape(out_shape, "out_shape")
    op = JacobianOperator(jvp, vjp, shape, out_shape)
    est = _golub_kahan(op, _check_tol(tol), _check_seed(seed), None)
    return replace(est, input_direction=est.input_direction.reshape(shape),
                   output_direction=est.output_direction.reshape(out_shape))
