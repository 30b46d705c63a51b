r"""Single-head dot-product self-attention, tokens as rows.

For tokens :math:`X \in \mathbb R^{N \times d}` (one token per row) and
weights :math:`W_Q, W_K \in \mathbb R^{d \times d_k}`,
:math:`W_V \in \mathbb R^{d \times d_v}`,

.. math::

    S = \frac{X W_Q (X W_K)^\top}{\sqrt{d_k}}, \qquad
    P = \operatorname{softmax}_{\text{rows}}(S), \qquad
    f(X) = P X W_V ,

with :math:`d_k` the number of columns of :math:`W_Q`.

**Masks.** Every function takes ``mask=None | "causal" | bool array (N, N)``:
``mask[i, j]`` True means query i may attend to key j (``"causal"``: j <= i).
A masked logit is :math:`-\infty`, so its probability is exactly 0; a row
with no allowed key is a ``ValueError``. Every function
broadcasts over leading axes of ``X`` (shape ``(..., N, d)``); the weights are
plain matrices. The softmax is :func:`lipattn.softmax.softmax`, so logits of
any finite size are handled without overflow.

``vec`` is row-major throughout the book: a perturbation ``E`` of shape
``(N, d)`` is flattened as ``E.reshape(-1)``.

The Jacobian, exact local Lipschitz constants, bounds and L2 attention are in
:mod:`lipattn.lipschitz`, which builds on this module (this module imports only
the softmax).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._validate import as_count, as_real_array, finite_result, scale_of
from .softmax import softmax

__all__ = ["attention_logits", "attention_matrix", "self_attention", "check_attention_args",
           "as_mask"]


def as_mask(mask: Any, N: int) -> np.ndarray | None:
    """Validate an attention mask for N tokens; return None or a bool (N, N) array.

    Parameters
    ----------
    mask : None, "causal" or array_like of bool, shape (N, N)
        True = query i may attend to key j. ``"causal"`` allows j <= i.

    Raises
    ------
    TypeError, ValueError
        For another string or type, a non-boolean array, a wrong shape, or a
        row with no allowed key (its softmax is undefined).
    """
    N = as_count(N, "N")
    if mask is None:
        return None
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be None, 'causal' or a boolean (N, N) array; got {mask!r}")
        return np.tri(N, dtype=bool)
    arr = np.asarray(mask)
    if arr.dtype != bool:
        raise TypeError("mask must be None, 'causal' or a boolean (N, N) array (True = may "
                        f"attend); got dtype {arr.dtype}")
    if arr.shape != (N, N):
        raise ValueError(f"mask must have shape (N, N) = ({N}, {N}); got shape {arr.shape}")
    empty = np.flatnonzero(~arr.any(axis=1))
    if empty.size:
        raise ValueError(f"mask must allow at least one key in every row; rows {empty.tolist()} "
                         "allow none")
    return arr


def _masked(S: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    return S if mask is None else np.where(mask, S, -np.inf)


_NOT_GIVEN: Any = object()


def check_attention_args(
    X: Any, W_Q: Any, W_K: Any, W_V: Any = _NOT_GIVEN, *, x_name: str = "X"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate the arguments of an attention function and return them as arrays.

    Parameters
    ----------
    X : array_like, shape (..., N, d)
        Tokens as rows, N >= 1, d >= 1, finite.
    W_Q, W_K : array_like, shape (d, d_k)
        Query and key weights, finite, with the same shape.
    W_V : array_like, shape (d, d_v), optional
        Value weights, finite. Omit it for functions without values; passed
        (``None`` included), it must be an array.
    x_name : str, default "X"
        The caller's name for ``X``, used in the messages (e.g. ``"R"``).

    Returns
    -------
    X, W_Q, W_K, W_V : ndarray of float64
        ``W_V`` is ``None`` when not given.

    Raises
    ------
    TypeError, ValueError
        Naming the argument and the expected shape.
    """
    X = as_real_array(X, x_name, min_ndim=2)
    d = X.shape[-1]
    W_Q = as_real_array(W_Q, "W_Q", ndim=2)
    W_K = as_real_array(W_K, "W_K", ndim=2)
    if W_Q.shape[0] != d:
        raise ValueError(f"W_Q must have shape (d, d_k) = ({d}, d_k) to match {x_name} of "
                         f"shape {X.shape}; got shape {W_Q.shape}")
    if W_K.shape != W_Q.shape:
        raise ValueError(f"W_K must have the shape of W_Q, {W_Q.shape}; got shape {W_K.shape}")
    if W_V is _NOT_GIVEN:
        return X, W_Q, W_K, None
    W_V = as_real_array(W_V, "W_V", ndim=2)
    if W_V.shape[0] != d:
        raise ValueError(f"W_V must have shape (d, d_v) = ({d}, d_v) to match {x_name} of "
                         f"shape {X.shape}; got shape {W_V.shape}")
    return X, W_Q, W_K, W_V


def _logits(X: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # checked by the callers
        Q = X @ W_Q
        K = X @ W_K
        return (Q @ np.swapaxes(K, -1, -2)) / math.sqrt(W_Q.shape[1])


def _finite_logits(X: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray) -> np.ndarray:
    S = _logits(X, W_Q, W_K)
    if not np.all(np.isfinite(S)):
        S_unit, t = _scaled_logits(X, W_Q, W_K)
        with np.errstate(over="ignore", invalid="ignore"):  # 0 * inf: t beyond float64
            S = finite_result(np.where(S_unit == 0.0, 0.0, S_unit * t), "X, W_Q and W_K",
                              "attention logits")
        # finite after all: only an intermediate product overflowed
    return S


def _exponent(c: float) -> int:
    """The exponent e with c = 2**e, for a power of two c from :func:`scale_of`."""
    return int(np.frexp(c)[1]) - 1


def _scaled_logits(X: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray) -> tuple[np.ndarray, float]:
    """``(S', t)`` with the logits ``S = t * S'`` and ``t`` a power of two.

    ``S'`` is computed from X, W_Q and W_K divided by powers of two at their largest
    entries, so it is finite (of order at most ``N d d_k``); ``t``, the product of
    those powers, is ``inf`` where it exceeds float64.
    """
    a, q, k = (scale_of(M) for M in (X, W_Q, W_K))
    S_unit = _logits(X / a, W_Q / q, W_K / k)
    with np.errstate(over="ignore", under="ignore"):
        t = float(np.ldexp(1.0, 2 * _exponent(a) + _exponent(q) + _exponent(k)))
    return S_unit, t


def _balanced(X: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    r"""``(X / a, W_Q c, W_K a^2 / c, a)``: the same logits, with ``X / a`` of order 1.

    ``a`` and ``c`` are powers of two (exact), ``a`` at the largest entry of X and ``c``
    chosen so that ``W_Q c`` and ``W_K a^2 / c`` have equal largest entries (within a
    factor 2). Self-attention :math:`f(X) = P(X) X W_V` satisfies
    :math:`f_{\text{balanced}}(X/a) = f(X)/a`, so the Jacobian at ``X / a`` of the
    balanced map *is* :math:`Df(X)`: computing it from the balanced arguments gives
    the same numbers (bit for bit, barring subnormals) without the overflow or
    underflow of :math:`W_Q W_K^\top` or :math:`X W_V` that very large or very small
    entries cause. Where balancing would itself overflow, the arguments are
    returned unchanged (with ``a = 1``).
    """
    a, q, k = (scale_of(M) for M in (X, W_Q, W_K))
    ea, eq, ek = _exponent(a), _exponent(q), _exponent(k)
    delta = (ek - eq) // 2
    with np.errstate(over="ignore", under="ignore"):
        out = (X / a, np.ldexp(W_Q, ea + delta), np.ldexp(W_K, ea - delta))
    if not all(np.all(np.isfinite(M)) for M in out) or (np.any(W_Q) and not np.any(out[1])) \
            or (np.any(W_K) and not np.any(out[2])):
        return X, W_Q, W_K, 1.0
    return (*out, a)


def _check_2d(X: Any, W_Q: Any, W_K: Any, W_V: Any, mask: Any = None):
    X, W_Q, W_K, W_V = check_attention_args(X, W_Q, W_K, W_V)
    if X.ndim != 2:
        raise ValueError("X must have shape (N, d) with N >= 1 (one sequence); "
                         f"got shape {X.shape}")
    return X, W_Q, W_K, W_V, as_mask(mask, X.shape[0])


def _check_direction(E: Any, name: str, shape: tuple[int, int]) -> np.ndarray:
    E = as_real_array(E, name, ndim=2)
    if E.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got shape {E.shape}")
    return E


def attention_logits(X: Any, W_Q: Any, W_K: Any) -> np.ndarray:
    r"""The logits :math:`S = X W_Q (X W_K)^\top / \sqrt{d_k}`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)
    W_Q, W_K : array_like, shape (d, d_k)

    Returns
    -------
    S : ndarray, shape (..., N, N)
        Row i holds the logits of query i against every key.

    Raises
    ------
    OverflowError
        (:class:`~lipattn._validate.ResultOverflowError`, also a ``ValueError``)
        if a logit exceeds the float64 range.
    """
    X, W_Q, W_K, _ = check_attention_args(X, W_Q, W_K)
    return _finite_logits(X, W_Q, W_K)


def attention_matrix(X: Any, W_Q: Any, W_K: Any, *, mask: Any = None) -> np.ndarray:
    r"""The attention matrix :math:`P = \operatorname{softmax}_{\text{rows}}(S)`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)
    W_Q, W_K : array_like, shape (d, d_k)
    mask : None, "causal" or bool array (N, N)
        True = may attend; masked entries of P are exactly 0.

    Returns
    -------
    P : ndarray, shape (..., N, N)
        Row-stochastic: non-negative rows summing to 1 up to rounding. Exact up
        to rounding for logits of any size, also beyond the float64 range
        (entries of X of 1e160 and more): then P is the softmax of the logits
        divided by a power of two, at the matching temperature.
    """
    X, W_Q, W_K, _ = check_attention_args(X, W_Q, W_K)
    mask = as_mask(mask, X.shape[-2])
    return _attention_weights(X, W_Q, W_K, mask)


def _attention_weights(X: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, mask) -> np.ndarray:
    """P for validated arguments, for logits of any size (see :func:`attention_matrix`)."""
    S = _logits(X, W_Q, W_K)
    if np.all(np.isfinite(S)):
        return softmax(_masked(S, mask), axis=-1)
    # Logits beyond float64: P = softmax(S' / tau) with S = S' / tau, tau = 1 / t a
    # power of two (exact). Below the smallest normal tau every logit gap of S'
    # larger than 2**-1022 * 800 gives a weight of exactly 0, as it does for t.
    S_unit, t = _scaled_logits(X, W_Q, W_K)
    tau = max(1.0 / t, 2.0**-1022)
    return softmax(_masked(S_unit, mask), axis=-1, temperature=tau)


def self_attention(X: Any, W_Q: Any, W_K: Any, W_V: Any, *, mask: Any = None) -> np.ndarray:
    r"""Single-head self-attention :math:`f(X) = P X W_V`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)
        Tokens as rows.
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    mask : None, "causal" or bool array (N, N)
        True = may attend (see the module docstring).

    Returns
    -------
    Y : ndarray, shape (..., N, d_v)
        Row i is the convex combination :math:`\sum_j P_{ij} x_j W_V`. Exact up
        to rounding for every finite input (``P`` as in :func:`attention_matrix`;
        ``X W_V`` from X and W_V divided by powers of two); scale-equivariant:
        ``W_V`` times c gives Y times c.

    Raises
    ------
    OverflowError
        (:class:`~lipattn._validate.ResultOverflowError`, also a ``ValueError``)
        if Y itself exceeds the float64 range.
    """
    X, W_Q, W_K, W_V = check_attention_args(X, W_Q, W_K, W_V)
    P = _attention_weights(X, W_Q, W_K, as_mask(mask, X.shape[-2]))
    a, v = scale_of(X), scale_of(W_V)
    with np.errstate(over="ignore"):
        Y = (P @ ((X / a) @ (W_V / v))) * a * v
    return finite_result(Y, "X and W_V", "an output P X W_V")

