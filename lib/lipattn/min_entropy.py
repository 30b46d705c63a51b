r"""The entropy floor: the least softmax entropy at a given centred logit norm.

Spectral normalisation bounds the norm of the attention logits, and so bounds
their entropy from below (the entropy collapse of Zhai et al. 2023 needs large
logits). For T keys and centred logit norm at most s,

- :func:`entropy_floor` is the exact floor :math:`H_{\min}(T, s)`, the entropy of
  the one-spike vector, in closed form and without overflow for any finite s;
- :func:`min_entropy_three_levels` is an independent numerical search over the
  logit vectors with at most three distinct values, a superset of the
  minimisers, which the tests and Chapter 5 compare with the closed form.

Entropies are in nats.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import (
    as_count,
    as_int_at_least,
    as_positive_float,
    as_real_array,
)

__all__ = ["entropy_floor", "min_entropy_three_levels"]


def entropy_floor(T: int, s: Any) -> np.ndarray:
    r"""The smallest entropy of :math:`\mathrm{softmax}(a)` over logit vectors
    :math:`a \in \mathbb R^T` with centred norm :math:`\|a - \bar a\mathbf 1\|_2 \le s`.

    It is the entropy of the one-spike vector
    :math:`a = \alpha(e_1 - \mathbf 1/T)`, :math:`\alpha = s\sqrt{T/(T-1)}`:

    .. math:: H_{\min}(T, s) = \log(1 + (T-1)\beta)
       + \frac{s\sqrt{T(T-1)}\,\beta}{1 + (T-1)\beta},
       \qquad \beta = e^{-\alpha}.

    That the one-spike vector is the minimiser is proved in the chapter: the
    Lagrange conditions leave two distinct values in a minimiser, and the
    second-order conditions leave a single entry at the upper one. Computed
    without overflow for any finite ``s``; for huge ``s`` the floor underflows
    to 0.

    Parameters
    ----------
    T : int
        Number of keys, at least 2.
    s : float or array_like
        Centred-norm budgets, finite and non-negative.

    Returns
    -------
    ndarray, shape of ``s`` (0-d for a scalar), in nats
    """
    T = as_int_at_least(T, "T", 2)
    s_arr = as_real_array(s, "s", min_ndim=0, last_axis_min=0)
    if np.any(s_arr < 0):
        raise ValueError(f"s must be finite and non-negative; got {s!r}")
    alpha = s_arr * np.sqrt(T / (T - 1))
    beta = np.exp(-alpha)
    q = (T - 1) * beta
    return np.log1p(q) + alpha * q / (1 + q)


def min_entropy_three_levels(T: int, s: float, grid: int = 721) -> float:
    r"""The least softmax entropy over centred logit vectors of norm ``s`` whose
    entries take **at most three distinct values** (a numerical search).

    Every minimiser of the entropy on the sphere has this form (indeed it has
    two values; see the chapter), so this search is an independent numerical
    check of :func:`entropy_floor` over a superset of the candidates. For each
    count triple :math:`(n_1, n_2, n_3)`, :math:`n_1 + n_2 + n_3 = T`, the levels
    lie on a circle (two linear-quadratic constraints on three numbers); the
    circle is scanned at ``grid`` angles and the best angle refined by
    golden-section search. Two-level vectors are the
    points of those circles where two levels coincide.

    Parameters
    ----------
    T : int
        At least 2 (at most 200: the search visits about T^2/2 triples).
    s : float
        Centred norm, finite and non-negative.
    grid : int
        Angles per circle, in [16, 10000], with (T-1)(T-2)/2 * grid <= 2e7.

    Returns
    -------
    float
        The smallest entropy found (nats); never below the true minimum over
        three-level vectors by more than rounding.
    """
    T = as_int_at_least(T, "T", 2)
    if T > 200:
        raise ValueError(f"T must be at most 200 for the search; got {T}")
    s = as_positive_float(s, "s", allow_zero=True)
    grid = as_count(grid, "grid", 16, 10**4)
    triples = (T - 1) * (T - 2) // 2
    if triples * grid > 2 * 10**7:
        raise ValueError(f"T and grid must have (T-1)(T-2)/2 * grid <= 2e7 (memory of the "
                         f"scan); got T = {T}, grid = {grid}")
    if T == 2:
        return float(entropy_floor(2, s))
    n = np.array([(a, b, T - a - b) for a in range(1, T - 1) for b in range(1, T - a)],
                 float)                                      # (K, 3) count triples
    w = np.sqrt(n)
    basis = np.linalg.svd(w[:, None, :])[2][:, 1:, :]       # (K, 2, 3), orthogonal to sqrt(n)
    e1, e2 = basis[:, 0] / w, basis[:, 1] / w               # n-orthonormal, n-centred levels

    def ent(ph: np.ndarray) -> np.ndarray:
        """Entropy at angles ph, shape (K, G) -> (K, G)."""
        lev = s * (np.cos(ph)[..., None] * e1[:, None, :] + np.sin(ph)[..., None] * e2[:, None, :])
        lev = lev - lev.max(axis=-1, keepdims=True)
        wts = n[:, None, :] * np.exp(lev)
        z = wts.sum(axis=-1)
        return np.log(z) - (wts * lev).sum(axis=-1) / z

    phi = np.broadcast_to(np.linspace(0, 2 * np.pi, grid, endpoint=False), (n.shape[0], grid))
    vals = ent(phi)
    i = np.argmin(vals, axis=1)
    lo = phi[0, i] - 2 * np.pi / grid
    hi = phi[0, i] + 2 * np.pi / grid
    g = (np.sqrt(5) - 1) / 2
    for _ in range(40):  # golden-section refinement, all triples at once
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        left = ent(a[:, None])[:, 0] < ent(b[:, None])[:, 0]
        hi = np.where(left, b, hi)
        lo = np.where(left, lo, a)
    refined = ent((0.5 * (lo + hi))[:, None])[:, 0]
    return float(min(vals.min(), refined.min()))
