r"""Rank collapse: how a stack of self-attention layers pulls tokens together.

Tokens are rows: :math:`X \in \mathbb R^{N \times d}`. The *residual* of
:math:`X` is its deviation from the mean token,

.. math::

    \operatorname{res}(X) = X - \mathbf 1 \bar x^\top = C X, \qquad
    \bar x = \tfrac1N X^\top \mathbf 1, \quad C = I - \tfrac1N \mathbf 1 \mathbf 1^\top,

and the *relative residual* is :math:`r(X) = \|\operatorname{res}(X)\|_F / \|X\|_F`
(defined as 0 for :math:`X = 0`). A layer is single-head self-attention
:math:`f(X) = P X W_V` from :mod:`lipattn.attention`, optionally with a skip
connection and a ReLU MLP (see :func:`trajectory`).

What is exact
-------------
Everything is deterministic. :func:`trajectory` runs in float64 or, with
``dps=k``, entirely in ``mpmath`` with ``k`` significant digits (weights and
tokens are converted exactly from float64). In float64 the relative residual
cannot fall much below the rounding level (about ``1e-16``); in mpmath it
falls to about ``10**-dps``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import mpmath as mp
import numpy as np

from ._validate import (
    ResultOverflowError,
    as_bool,
    as_count,
    as_positive_float,
    as_real_array,
    as_seed,
    safe_product,
    scale_of,
)
from .attention import attention_matrix, check_attention_args

__all__ = [
    "residual",
    "relative_residual",
    "diameter",
    "dobrushin",
    "cubic_constant",
    "cubic_leading_term",
    "random_weights",
    "stack_states",
    "trajectory",
    "query_gradient",
    "spectral_2norm",
]


def spectral_2norm(A: Any) -> np.ndarray:
    """Largest singular value of each matrix in ``A``, exact up to rounding.

    From the largest eigenvalue of the smaller Gram matrix (fast, and accurate for
    the top singular value), computed on each matrix divided by its largest
    entry, so that no finite input overflows or underflows:
    ``spectral_2norm(c * A) == c * spectral_2norm(A)`` up to rounding.

    Parameters
    ----------
    A : array_like, shape (..., m, k)
        Finite.

    Returns
    -------
    ndarray, shape (...)
        0-d for a single matrix.
    """
    A = as_real_array(A, "A", min_ndim=2)
    return _top_singular_value(A)


def _top_singular_value(A: np.ndarray) -> np.ndarray:
    """:func:`spectral_2norm` without validation; raises if the result overflows."""
    c = scale_of(A, axis=(-2, -1), keepdims=True)
    A = A / c
    G = A @ np.swapaxes(A, -1, -2) if A.shape[-2] <= A.shape[-1] else np.swapaxes(A, -1, -2) @ A
    s = np.sqrt(np.maximum(np.linalg.eigvalsh(G)[..., -1], 0.0))
    with np.errstate(over="ignore"):
        out = s * c[..., 0, 0]
    if not np.all(np.isfinite(out)):
        raise ResultOverflowError("A must have a spectral norm representable in float64; "
                                  "it overflows")
    return out


# --------------------------------------------------------------------------
# Residuals and contraction coefficients
# --------------------------------------------------------------------------
def residual(X: Any) -> np.ndarray:
    r"""The residual :math:`X - \mathbf 1 \bar x^\top` (each token minus the mean token).

    Parameters
    ----------
    X : array_like, shape (..., N, d)
        Tokens as rows, finite.

    Returns
    -------
    R : ndarray, shape (..., N, d)
        Its columns sum to 0. Of all rank-one matrices :math:`\mathbf 1 x^\top`,
        :math:`\mathbf 1\bar x^\top` is the closest to ``X`` in the Frobenius norm.
    """
    X = as_real_array(X, "X", min_ndim=2)
    return X - X.mean(axis=-2, keepdims=True)


def relative_residual(X: Any) -> np.ndarray:
    r""":math:`r(X) = \|\operatorname{res}(X)\|_F / \|X\|_F`, in :math:`[0, 1]`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)

    Returns
    -------
    r : ndarray, shape (...)
        0-d for a single ``X``. Defined as 0 where ``X = 0``. The norms are
        computed after scaling by the largest entry, so no input overflows.
    """
    X = as_real_array(X, "X", min_ndim=2)
    scale = np.max(np.abs(X), axis=(-2, -1), keepdims=True)
    Xs = X / np.where(scale > 0, scale, 1.0)
    R = Xs - Xs.mean(axis=-2, keepdims=True)
    num = np.sqrt(np.sum(R * R, axis=(-2, -1)))
    den = np.sqrt(np.sum(Xs * Xs, axis=(-2, -1)))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def diameter(X: Any) -> np.ndarray:
    r"""The largest distance between two tokens, :math:`\max_{i,i'} \|x_i - x_{i'}\|_2`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)

    Returns
    -------
    ndarray, shape (...)
    """
    X = as_real_array(X, "X", min_ndim=2)
    # Divided by the largest entry, so that the squared distances cannot overflow.
    c = scale_of(X, axis=(-2, -1), keepdims=True)
    R = X / c
    R = R - R.mean(axis=-2, keepdims=True)
    diff = R[..., :, None, :] - R[..., None, :, :]
    with np.errstate(over="ignore"):
        out = c[..., 0, 0] * np.sqrt(np.max(np.sum(diff * diff, axis=-1), axis=(-2, -1)))
    if not np.all(np.isfinite(out)):
        raise ResultOverflowError("X must have a diameter representable in float64; "
                                  "it overflows")
    return out


def dobrushin(P: Any) -> np.ndarray:
    r"""Dobrushin's coefficient :math:`\tau(P) = \tfrac12 \max_{i,i'} \|P_{i:} - P_{i':}\|_1`.

    For a row-stochastic ``P`` it lies in [0, 1], it is 0 exactly when all rows
    are equal, and ``diameter(P @ X) <= dobrushin(P) * diameter(X)``.

    Parameters
    ----------
    P : array_like, shape (..., N, N)
        Row-stochastic: non-negative entries, each row summing to 1 within 1e-6.

    Returns
    -------
    ndarray, shape (...)
    """
    P = as_real_array(P, "P", min_ndim=2)
    if P.shape[-1] != P.shape[-2]:
        raise ValueError(f"P must have shape (..., N, N); got shape {P.shape}")
    sums = P.sum(axis=-1)
    if np.any(P < 0) or np.any(np.abs(sums - 1.0) > 1e-6):
        raise ValueError("P must be row-stochastic (non-negative rows summing to 1 within "
                         f"1e-6); got row sums in [{sums.min():.6g}, {sums.max():.6g}] and "
                         f"smallest entry {P.min():.6g}")
    diff = np.abs(P[..., :, None, :] - P[..., None, :, :]).sum(axis=-1)
    return 0.5 * diff.max(axis=(-2, -1))


def cubic_constant(W_Q: Any, W_K: Any, W_V: Any) -> float:
    r"""The constant :math:`c = \|W_Q W_K^\top\|_2 \|W_V\|_2 / (2\sqrt{d_k})`.

    With it, :math:`\|\operatorname{res} f(X)\|_F \le c \|\operatorname{res} X\|_F^3`
    for every ``X`` (the chapter's cubic theorem).

    Parameters
    ----------
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)

    Returns
    -------
    float
    """
    W_Q = as_real_array(W_Q, "W_Q", ndim=2)
    _, W_Q, W_K, W_V = check_attention_args(np.zeros((1, W_Q.shape[0])), W_Q, W_K, W_V)
    # ||W_Q W_K^T|| and ||W_V|| from the weights divided by their largest entries,
    # so that the product W_Q W_K^T neither overflows nor underflows.
    q, k = scale_of(W_Q), scale_of(W_K)
    a = float(_top_singular_value((W_Q / q) @ (W_K / k).T))
    v = float(_top_singular_value(W_V))
    return safe_product(q, k, a, v, 1.0 / (2.0 * math.sqrt(W_Q.shape[1])),
                        name="W_Q, W_K, W_V", what="a cubic constant")


def cubic_leading_term(R: Any, W_Q: Any, W_K: Any, W_V: Any) -> np.ndarray:
    r"""The leading term :math:`\tfrac1N R A R^\top R W_V`, :math:`A = W_Q W_K^\top/\sqrt{d_k}`.

    For :math:`X = \mathbf 1 \bar x^\top + \varepsilon R` with :math:`R` centred,
    :math:`\operatorname{res} f(X) = \varepsilon^3 \cdot` this :math:`+\, O(\varepsilon^4)`.

    Parameters
    ----------
    R : array_like, shape (..., N, d)
        Centred (columns summing to 0) up to rounding; it is centred again here.
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)

    Returns
    -------
    ndarray, shape (..., N, d_v)
    """
    R, W_Q, W_K, W_V = check_attention_args(R, W_Q, W_K, W_V, x_name="R")
    # Cubic in R: computed from R, W_Q, W_K, W_V divided by their largest entries,
    # with the scale put back once, so that no intermediate product overflows.
    r, q, k, v = (scale_of(M) for M in (R, W_Q, W_K, W_V))
    R = R / r
    R = R - R.mean(axis=-2, keepdims=True)
    A = (W_Q / q) @ (W_K / k).T / math.sqrt(W_Q.shape[1])
    core = (R @ A @ np.swapaxes(R, -1, -2) @ R @ (W_V / v)) / R.shape[-2]
    scale = safe_product(r, r, r, q, k, v, name="R, W_Q, W_K, W_V",
                         what="a leading term")
    with np.errstate(over="ignore"):
        out = core * scale
    if not np.all(np.isfinite(out)):
        raise ResultOverflowError("R, W_Q, W_K, W_V must give a leading term representable "
                                  "in float64; it overflows")
    return out


def random_weights(d: int, scale: float, layers: int, seed: int = 0,
                   d_k: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""I.i.d. Gaussian weights with entries :math:`N(0, \mathrm{scale}^2/d)`, one set per layer.

    Parameters
    ----------
    d : int
        Model dimension (>= 1); ``W_V`` is square so layers can be stacked.
    scale : float
        ``s`` in the standard deviation ``s / sqrt(d)`` (> 0).
    layers : int
        Number of layers (>= 1).
    seed : int
        Seed of ``np.random.default_rng``.
    d_k : int, optional
        Head dimension (defaults to ``d``).

    Returns
    -------
    W_Q, W_K : ndarray, shape (layers, d, d_k)
    W_V : ndarray, shape (layers, d, d)
    """
    d = as_count(d, "d", 1, 10**4)
    s = as_positive_float(scale, "scale")
    layers = as_count(layers, "layers", 1, 10**6)
    d_k = d if d_k is None else as_count(d_k, "d_k", 1, 10**4)
    if layers * d * max(d, d_k) > 10**8:
        raise ValueError(f"layers * d * max(d, d_k) must be at most 1e8 (memory); got "
                         f"layers = {layers}, d = {d}, d_k = {d_k}")
    rng = np.random.default_rng(as_seed(seed))
    sd = s / math.sqrt(d)
    W_Q = sd * rng.standard_normal((layers, d, d_k))
    W_K = sd * rng.standard_normal((layers, d, d_k))
    W_V = sd * rng.standard_normal((layers, d, d))
    return W_Q, W_K, W_V


# --------------------------------------------------------------------------
# Stacks
# --------------------------------------------------------------------------
def _per_layer(W: Any, name: str, layers: int, d: int) -> list[np.ndarray]:
    """One (d, k) array per layer from a shared (d, k) array or a sequence of them."""
    if isinstance(W, Sequence) and not isinstance(W, (str, bytes)) and len(W) > 0 and \
            np.ndim(W[0]) == 2:
        arr = as_real_array(np.asarray(W), name, ndim=3)
    else:
        arr = as_real_array(W, name, min_ndim=2)
    if arr.ndim == 2:
        mats = [arr] * max(layers, 1)
    elif arr.ndim == 3:
        if layers and arr.shape[0] != layers:
            raise ValueError(f"{name} must be one (d, k) array or {layers} of them "
                             f"(one per layer); got shape {arr.shape}")
        mats = list(arr)
    else:
        raise ValueError(f"{name} must have shape (d, k) or (layers, d, k); got {arr.shape}")
    if arr.shape[-2] != d:
        raise ValueError(f"{name} must have {d} rows to match X; got shape {arr.shape}")
    return mats


def _check_stack(X, W_Q, W_K, W_V, layers, skip, alpha, mlp):
    X = as_real_array(X, "X", min_ndim=2, ndim=2)
    layers = as_count(layers, "layers", 0, 10**4)  # a Python loop over layers: time
    skip = as_bool(skip, "skip")
    alpha = as_positive_float(alpha, "alpha", allow_zero=True)
    n, d = X.shape
    L = layers
    qs = _per_layer(W_Q, "W_Q", L, d)
    ks = _per_layer(W_K, "W_K", L, d)
    vs = _per_layer(W_V, "W_V", L, d)
    for q, k, v in zip(qs, ks, vs, strict=True):
        check_attention_args(X, q, k, v)
        if v.shape != (d, d):
            raise ValueError(f"W_V must have shape (d, d) = ({d}, {d}) so that layers stack; "
                             f"got shape {v.shape}")
    m1 = m2 = None
    if mlp is not None:
        if not (isinstance(mlp, (tuple, list)) and len(mlp) == 2):
            raise TypeError("mlp must be None or a pair (W_1, W_2) of arrays")
        m1 = _per_layer(mlp[0], "mlp[0]", L, d)
        h = m1[0].shape[-1]
        m2 = _per_layer(mlp[1], "mlp[1]", L, h)
        if m2[0].shape[-1] != d:
            raise ValueError(f"mlp[1] must have shape ({h}, {d}); got {m2[0].shape}")
    return X, qs, ks, vs, m1, m2, layers, skip, alpha


def stack_states(X: Any, W_Q: Any, W_K: Any, W_V: Any, layers: int, *, skip: bool = False,
                 alpha: float = 1.0, mlp: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Every layer's tokens and attention matrix of a float64 stack (see :func:`trajectory`).

    Returns
    -------
    Xs : ndarray, shape (layers + 1, N, d)
        ``Xs[0]`` is ``X``; ``Xs[l]`` the tokens after ``l`` layers.
    Ps : ndarray, shape (layers, N, N)
        ``Ps[l]`` is the attention matrix applied to ``Xs[l]``.
    """
    X, qs, ks, vs, m1, m2, layers, skip, alpha = _check_stack(
        X, W_Q, W_K, W_V, layers, skip, alpha, mlp)
    Xs, Ps = [X], []
    for ell in range(layers):
        P = attention_matrix(X, qs[ell], ks[ell])  # exact for logits of any size
        with np.errstate(over="ignore", invalid="ignore"):  # checked below
            F = P @ (X @ vs[ell])
            Y = X + alpha * F if skip else F
            if m1 is not None:
                G = np.maximum(Y @ m1[ell], 0.0) @ m2[ell]
                Y = Y + alpha * G if skip else G
        if not np.all(np.isfinite(Y)):
            raise ResultOverflowError(f"X and W_V (and mlp) must keep the tokens representable "
                                      f"in float64; they overflow at layer {ell + 1}")
        X = Y
        Xs.append(X)
        Ps.append(P)
    n = X.shape[0]
    return np.array(Xs), (np.array(Ps) if Ps else np.zeros((0, n, n)))


# -- mpmath ----------------------------------------------------------------
_to_mpf = np.frompyfunc(mp.mpf, 1, 1)
_mp_exp = np.frompyfunc(mp.exp, 1, 1)


def _mp_relu(a: np.ndarray) -> np.ndarray:
    return np.frompyfunc(lambda t: t if t > 0 else mp.mpf(0), 1, 1)(a)


def _mp_attention(X: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray,
                  W_V: np.ndarray) -> np.ndarray:
    """``softmax(X W_Q (X W_K)^T / sqrt(d_k)) X W_V`` on object arrays of mpf."""
    S = (X @ W_Q) @ (X @ W_K).T / mp.sqrt(W_Q.shape[1])
    E = _mp_exp(S - np.array([max(row) for row in S], dtype=object)[:, None])
    P = E / np.array([mp.fsum(row) for row in E], dtype=object)[:, None]
    return P @ (X @ W_V)


def _mp_norms(X: np.ndarray) -> tuple[Any, Any]:
    """||res(X)||_F and ||X||_F in mpmath."""
    n = X.shape[0]
    mean = np.array([mp.fsum(col) / n for col in X.T], dtype=object)
    R = X - mean[None, :]
    return mp.sqrt(mp.fsum(R.ravel() ** 2)), mp.sqrt(mp.fsum(X.ravel() ** 2))


def trajectory(X: Any, W_Q: Any, W_K: Any, W_V: Any, layers: int, *, skip: bool = False,
               alpha: float = 1.0, mlp: Any = None, dps: int | None = None,
               absolute: bool = False, log10: bool = False) -> np.ndarray:
    r"""Relative residuals :math:`r_0, \dots, r_L` of a stack of attention layers.

    Layer :math:`\ell` maps :math:`X \mapsto Y`:

    - attention: :math:`F = f_\ell(X) = P_\ell X W_V^{(\ell)}`;
    - ``skip=False``: :math:`Y = F`; ``skip=True``: :math:`Y = X + \alpha F`;
    - with ``mlp = (W_1, W_2)``, a ReLU MLP :math:`g(Y) = \max(Y W_1, 0) W_2`
      (row-wise, Lipschitz constant at most :math:`\|W_1\|_2 \|W_2\|_2`) follows:
      :math:`Y \leftarrow g(Y)` without skips, :math:`Y \leftarrow Y + \alpha g(Y)` with.

    Parameters
    ----------
    X : array_like, shape (N, d)
        Input tokens, finite.
    W_Q, W_K : array_like, shape (d, d_k) or (layers, d, d_k)
        One array shared by every layer, or one per layer (an array with a
        leading axis of length ``layers``, or a sequence of ``layers`` arrays).
    W_V : array_like, shape (d, d) or (layers, d, d)
    layers : int
        Number of layers L, from 0 to 10**4 (a Python loop over layers).
    skip : bool
        Residual (skip) connections.
    alpha : float
        Branch scale of the skip connections (>= 0; ignored without skips).
    mlp : pair of array_like, optional
        ``(W_1, W_2)`` with shapes (d, h) and (h, d), each shared or per layer.
    dps : int, optional
        Run everything in mpmath with ``dps`` >= 15 significant digits.
    absolute : bool
        Return :math:`\|\operatorname{res}(X_\ell)\|_F` instead of :math:`r_\ell`.
    log10 : bool
        Return :math:`\log_{10}` of the values (``-inf`` for an exact 0).

    Returns
    -------
    ndarray of float, shape (layers + 1,)
        Entry 0 is for ``X`` itself. With ``dps``, the mpmath values are
        rounded to float64 at the end: values below about ``1e-308`` become
        subnormal (fewer correct digits) and below about ``5e-324`` they
        become 0.0; pass ``log10=True`` to keep them (as logarithms), which is
        exact to float64 precision for any value mpmath can represent. In
        mpmath the relative residual bottoms out near ``10**-dps`` (rounding).

    Raises
    ------
    ValueError
        Mismatched shapes, non-finite inputs, ``layers`` outside [0, 10**4] or
        ``dps < 15``.
    OverflowError
        (:class:`~lipattn._validate.ResultOverflowError`, also a ``ValueError``)
        if the tokens overflow float64 (float64 path). Attention logits beyond
        float64 are not an error: P is exact for logits of any size.
    """
    absolute = as_bool(absolute, "absolute")
    log10 = as_bool(log10, "log10")
    if dps is not None:
        dps = as_count(dps, "dps", 15, 10**4)
    X, qs, ks, vs, m1, m2, layers, skip, alpha = _check_stack(
        X, W_Q, W_K, W_V, layers, skip, alpha, mlp)
    if dps is None:
        Xs, _ = stack_states(X, qs, ks, vs, layers, skip=skip, alpha=alpha,
                             mlp=None if m1 is None else (m1, m2))
        if absolute:
            vals = np.sqrt(np.sum(residual(Xs) ** 2, axis=(-2, -1)))
        else:
            vals = relative_residual(Xs)
        if log10:
            with np.errstate(divide="ignore"):
                return np.log10(vals)
        return vals
    out = []
    with mp.workdps(dps):
        Y = _to_mpf(X)
        Q = [_to_mpf(q) for q in qs]
        K = [_to_mpf(k) for k in ks]
        V = [_to_mpf(v) for v in vs]
        M1 = None if m1 is None else [_to_mpf(a) for a in m1]
        M2 = None if m2 is None else [_to_mpf(a) for a in m2]
        a = mp.mpf(alpha)
        for ell in range(layers + 1):
            res, tot = _mp_norms(Y)
            val = res if absolute else (res / tot if tot > 0 else mp.mpf(0))
            if log10:
                out.append(float(mp.log10(val)) if val > 0 else -math.inf)
            else:
                out.append(float(val))
            if ell == layers:
                break
            F = _mp_attention(Y, Q[ell], K[ell], V[ell])
            Y = Y + a * F if skip else F
            if M1 is not None:
                G = _mp_relu(Y @ M1[ell]) @ M2[ell]
                Y = Y + a * G if skip else G
    return np.array(out, dtype=float)


def query_gradient(X: Any, W_Q: Any, W_K: Any, W_V: Any, G: Any) -> np.ndarray:
    r"""Gradient of :math:`L = \langle G, f(X) \rangle_F` with respect to :math:`W_Q`.

    With :math:`V = X W_V`, :math:`M = G V^\top` and, row by row,
    :math:`\partial L/\partial S_{i:} = J(P_{i:}) M_{i:}^\top` with
    :math:`J(p) = \operatorname{diag} p - p p^\top`,
    :math:`\partial L/\partial W_Q = X^\top (\partial L/\partial S)\, X W_K / \sqrt{d_k}`.

    Parameters
    ----------
    X : array_like, shape (N, d)
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    G : array_like, shape (N, d_v)
        The upstream gradient :math:`\partial L / \partial f(X)`.

    Returns
    -------
    ndarray, shape (d, d_k)
    """
    X, W_Q, W_K, W_V = check_attention_args(X, W_Q, W_K, W_V)
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, d); got shape {X.shape}")
    G = as_real_array(G, "G", ndim=2)
    if G.shape != (X.shape[0], W_V.shape[1]):
        raise ValueError(f"G must have shape (N, d_v) = {(X.shape[0], W_V.shape[1])}; "
                         f"got shape {G.shape}")
    P = attention_matrix(X, W_Q, W_K)
    M = G @ (X @ W_V).T
    dS = P * (M - np.sum(P * M, axis=1, keepdims=True))
    return X.T @ dS @ (X @ W_K) / math.sqrt(W_Q.shape[1])
