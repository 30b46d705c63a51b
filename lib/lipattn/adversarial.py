r"""The chapter's adversarial inputs: token families on which the attention constant grows.

- :func:`two_sided_tokens`: one token at the origin and the others alternating on
  a line, :math:`t\,(0, u, -u, u, \dots)`. The token at the origin attends
  uniformly whatever t is, while the others saturate, so the exact local constant
  (:func:`lipattn.lipschitz.local_lipschitz`) grows like :math:`t^2` and exceeds
  the audited formula (:func:`lipattn.bounds.card_bound`) for every C.
- :func:`sink_tokens`: a "sink" token of radius R and N - 1 tokens at half its
  radius along the same direction, a top eigenvector of the symmetric part of
  :math:`A` (Chapter 6's variant of the adversarial inputs of Castin, Ablin & Peyré 2024).

Both are deterministic, exact, and returned as ``(N, d)`` arrays, tokens as rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import as_count, as_positive_float, as_real_array, safe_norm, scale_of

__all__ = ["two_sided_tokens", "sink_tokens"]


def two_sided_tokens(t: float, N: int = 3, d: int = 2) -> np.ndarray:
    r"""Tokens :math:`t\,(0, u, -u, u, -u, \dots)` with :math:`u = e_1`: one token at
    the origin, the others alternating on a line.

    For ``N = 3, d = 2`` this is ``t * [[0, 0], [1, 0], [-1, 0]]``. The token at
    the origin has uniform attention whatever t is; the others saturate.

    Parameters
    ----------
    t : float
        Scale, >= 0.
    N : int
        Number of tokens, >= 2.
    d : int
        Token dimension, >= 1.

    Returns
    -------
    ndarray, shape (N, d)
    """
    t = as_positive_float(t, "t", allow_zero=True)
    N = as_count(N, "N", 2)
    d = as_count(d, "d", 1)
    if N * d > 10**8:
        raise ValueError(f"N * d must be at most 1e8 (memory); got N = {N}, d = {d}")
    X = np.zeros((N, d))
    X[1:, 0] = t * np.where(np.arange(1, N) % 2 == 1, 1.0, -1.0)
    return X


def sink_tokens(R: float, N: int, u: Any) -> np.ndarray:
    r"""A "sink" input: :math:`x_1 = R u` and :math:`x_j = R u/2` for j >= 2.

    With ``u`` a unit eigenvector of the symmetric part of A for a positive
    eigenvalue :math:`\lambda`, every query prefers token 1 by a logit gap of
    :math:`\lambda R^2/4` (Chapter 6's variant of the adversarial inputs of
    Castin, Ablin & Peyré 2024).

    Parameters
    ----------
    R : float
        Radius of the sink token, >= 0.
    N : int
        Number of tokens, >= 1.
    u : array_like, shape (d,)
        Direction, non-zero (it is normalised).

    Returns
    -------
    ndarray, shape (N, d)
    """
    R = as_positive_float(R, "R", allow_zero=True)
    N = as_count(N, "N", 1)
    u = as_real_array(u, "u", ndim=1)
    if N * u.size > 10**8:
        raise ValueError(f"N * len(u) must be at most 1e8 (memory); got N = {N}, "
                         f"len(u) = {u.size}")
    if not np.any(u):
        raise ValueError("u must be a non-zero vector; got all zeros")
    m = scale_of(u)
    u = (u / m) / float(safe_norm(u / m))  # scale-invariant: u and c u give one direction
    X = np.tile(0.5 * R * u, (N, 1))
    X[0] = R * u
    return X
