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

from ._validate import as_real_array
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
        raise ValueError("X, W_Q and W_K give logits that overflow float64; "
                         "expected logits of finite size")
    return S


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
        Row-stochastic: non-negative rows summing to 1 up to rounding. Finite
        for logits of any finite size.
    """
    X, W_Q, W_K, _ = check_attention_args(X, W_Q, W_K)
    mask = as_mask(mask, X.shape[-2])
    return softmax(_masked(_finite_logits(X, W_Q, W_K), mask), axis=-1)


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
        Row i is the convex combination :math:`\sum_j P_{ij} x_j W_V`.
    """
    X, W_Q, W_K, W_V = check_attention_args(X, W_Q, W_K, W_V)
    P = attention_matrix(X, W_Q, W_K, mask=mask)
    return P @ (X @ W_V)

