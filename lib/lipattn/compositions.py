r"""Compositions: the product of spectral norms against the Lipschitz constant of a network.

For a bias-free ReLU network :math:`x \mapsto W_L\,\mathrm{relu}(\cdots
\mathrm{relu}(W_1 x))` (weights :math:`W_l` of shape ``(d_l, d_{l-1})``), the
Jacobian at x is :math:`W_L D_{L-1} \cdots D_1 W_1` with :math:`D_l` the 0/1
diagonal of the active units, so

- :func:`relu_mlp_jacobian_norms` gives the exact :math:`\|J(x)\|_2` at each input
  (dense SVDs of the Jacobians, batched);
- :func:`pattern_bound` maximises it over every activation pattern (exhaustive, so
  for small widths only): the Lipschitz constant of the network, no bound involved;
- :func:`product_bound` is :math:`\prod_l \|W_l\|_2`, the bound that spectral
  normalisation controls, and never below the other two.

Every norm is computed from weights rescaled to order one (the scales multiplied
back exactly), so large or small weights neither overflow nor underflow; a value
beyond float64 raises :class:`~lipattn._validate.ResultOverflowError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import (
    ResultOverflowError,
    as_real_array,
    safe_product,
    scale_of,
)

__all__ = ["product_bound", "relu_mlp_jacobian_norms", "pattern_bound"]


def _check_weights(weights: Any) -> list[np.ndarray]:
    if isinstance(weights, np.ndarray) or not isinstance(weights, (list, tuple)):
        raise TypeError("weights must be a list of 2-D arrays [W_1, ..., W_L]; "
                        f"got {type(weights).__name__}")
    if len(weights) < 1:
        raise ValueError("weights must contain at least one matrix; got an empty list")
    ws = [as_real_array(w, f"weights[{i}]", ndim=2) for i, w in enumerate(weights)]
    for i in range(1, len(ws)):
        if ws[i].shape[0] != ws[i - 1].shape[1]:
            raise ValueError(f"weights[{i}] must have {ws[i - 1].shape[1]} rows to follow "
                             f"weights[{i - 1}] of shape {ws[i - 1].shape}; got {ws[i].shape}")
    return ws


def _scaled_weights(ws: list[np.ndarray]) -> tuple[list[np.ndarray], list[float]]:
    """Each weight divided by a power of two near its largest entry, and those powers.

    The bias-free ReLU network is positively homogeneous in each weight, so its
    activation pattern is unchanged and its Jacobian is the product of the
    powers times the Jacobian of the scaled network (no overflow in between).
    """
    scale = [scale_of(w) for w in ws]
    return [w / c for w, c in zip(ws, scale, strict=True)], scale


def _times(values: Any, scale: list[float]) -> Any:
    """``values * prod(scale)``, or a clear error where that overflows float64."""
    f = safe_product(*scale, name="weights", what="Jacobian norms")
    out = np.asarray(values) * f if f else np.zeros_like(values)
    if not np.all(np.isfinite(out)):
        raise ResultOverflowError("weights must give Jacobian norms representable in "
                                  "float64; they overflow")
    return out


def product_bound(weights: Any) -> float:
    r"""The composition bound :math:`\prod_l \|W_l\|_2` for the bias-free ReLU
    network :math:`x \mapsto \mathrm{relu}(\cdots\mathrm{relu}(x W_1)\cdots) W_L`
    (rows are inputs, as in the book).

    Parameters
    ----------
    weights : list of ndarray, shapes (d_0, d_1), (d_1, d_2), ..., (d_{L-1}, d_L)

    Returns
    -------
    float
    """
    norms = [float(np.linalg.norm(w, 2)) for w in _check_weights(weights)]
    return safe_product(*norms, name="weights", what="a product of norms")


def relu_mlp_jacobian_norms(weights: Any, X: Any) -> np.ndarray:
    r"""Exact :math:`\|J(x)\|_2` of the bias-free ReLU network at each row x of X.

    :math:`J(x) = W_1 D_1(x) W_2 \cdots D_{L-1}(x) W_L` (row-vector convention),
    with :math:`D_l(x)` the 0/1 diagonal of active units. The network is
    positively homogeneous, so :math:`J(tx) = J(x)` for :math:`t > 0`.

    Parameters
    ----------
    weights : list of ndarray, see :func:`product_bound`
    X : array_like, shape (M, d_0)

    Returns
    -------
    ndarray, shape (M,)
    """
    ws, scale = _scaled_weights(_check_weights(weights))
    X = as_real_array(X, "X", ndim=2)
    if X.shape[1] != ws[0].shape[0]:
        raise ValueError(f"X must have {ws[0].shape[0]} columns; got shape {X.shape}")
    X = X / scale_of(X)  # the activation pattern is invariant under positive scaling
    h = X @ ws[0]
    J = np.broadcast_to(ws[0], (X.shape[0], *ws[0].shape))
    for w in ws[1:]:
        J = (J * (h > 0)[:, None, :]) @ w
        h = np.maximum(h, 0.0) @ w
    return _times(np.linalg.norm(J, 2, axis=(1, 2)), scale)


def pattern_bound(weights: Any) -> float:
    r"""The largest :math:`\|W_1 D_1 W_2 \cdots D_{L-1} W_L\|_2` over **all** 0/1
    diagonals :math:`D_l`, realisable by an input or not: an upper bound on the
    Lipschitz constant of the bias-free ReLU network, at most
    :func:`product_bound`. Exhaustive: the hidden widths must total at most 16.

    Parameters
    ----------
    weights : list of ndarray, see :func:`product_bound`

    Returns
    -------
    float
    """
    ws, scale = _scaled_weights(_check_weights(weights))
    widths = [w.shape[1] for w in ws[:-1]]
    if sum(widths) > 16:
        raise ValueError(f"weights must have hidden widths totalling at most 16 for the "
                         f"exhaustive search; got {widths}")
    n = sum(widths)
    bits = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(float)
    J = np.broadcast_to(ws[0], (bits.shape[0], *ws[0].shape))
    start = 0
    for w, width in zip(ws[1:], widths, strict=True):
        J = (J * bits[:, None, start:start + width]) @ w
        start += width
    return float(_times(np.max(np.linalg.norm(J, 2, axis=(1, 2))), scale))
