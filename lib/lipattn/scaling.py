"""The 1/sqrt(d) scaling of attention logits and softmax saturation, by Monte Carlo.

Setting (Chapter 2). A query ``q`` and keys ``k_1, ..., k_N`` are i.i.d.
``N(0, I_d)``. The logits are ``s_j = q . k_j / sqrt(d)`` with scaling and
``s_j = q . k_j`` without. Given ``q`` the logits are i.i.d.
``N(0, sigma^2)`` with ``sigma = ||q|| / sqrt(d)`` (scaled) or ``||q||``
(unscaled), and ``||q||^2 ~ chi^2_d``. So the logits of one query can be drawn
*exactly* in ``O(N)`` time whatever ``d`` is: draw ``r^2 ~ chi^2_d``, then
``s = r g`` (divided by ``sqrt(d)`` if scaled) with ``g ~ N(0, I_N)``.

What is exact and what is estimated:

- :func:`sample_logits` and :func:`sample_logits_direct` draw the logits exactly
  (the first in ``O(N)`` per query, the second from explicit q and K).
- :func:`saturation_stats` and :func:`saturation_stats_from_logits` are
  Monte-Carlo means with standard errors ``std / sqrt(samples)``; the per-sample
  quantities (entropy, max probability, spectral norm of the softmax Jacobian,
  :func:`saturation_per_row`) are exact up to rounding.

The same expectations without sampling (exact quadrature for two keys, asymptotes)
are in :mod:`lipattn.quadrature`; the gradients of one attention read-out at
initialisation in :mod:`lipattn.init_gradients`.

Conventions: softmax acts on the last axis; batched arrays have the sample
axis first. Randomness comes only from ``np.random.default_rng(seed)``, where
``seed`` may be an ``int`` or an existing ``np.random.Generator``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ._validate import (
    as_bool,
    as_count,
    as_real_array,
    as_rng,
)
from .softmax import softmax_jacobian_norm

__all__ = [
    "SaturationStats",
    "sample_logits",
    "sample_logits_direct",
    "saturation_stats",
    "saturation_stats_from_logits",
    "saturation_per_row",
]

# Elements per chunk of the batched computations (bounds peak memory).
_CHUNK_ELEMENTS = 1 << 21



@dataclass(frozen=True)
class SaturationStats:
    """Expected saturation statistics of the softmax of random logits.

    Attributes
    ----------
    entropy : float
        ``E[H(p)]`` with the natural logarithm, ``p = softmax(s)``.
    max_p : float
        ``E[max_j p_j]``.
    jac_norm : float
        ``E[||J(s)||_2]``, the spectral norm of the softmax Jacobian
        ``J = diag(p) - p p^T``.
    entropy_se, max_p_se, jac_norm_se : float
        Standard errors of the three means (``std / sqrt(n_samples)``, with
        ``ddof=1``); ``0.0`` for exact or asymptotic values.
    n_samples : int or None
        Number of Monte-Carlo samples, ``None`` for exact or asymptotic values.
    """

    entropy: float
    max_p: float
    jac_norm: float
    entropy_se: float = 0.0
    max_p_se: float = 0.0
    jac_norm_se: float = 0.0
    n_samples: int | None = None




# ---------------------------------------------------------------------------
# validation helpers local to this module
# ---------------------------------------------------------------------------


def _as_rng(seed: object) -> np.random.Generator:
    """Return a Generator from an int seed >= 0 or an existing Generator."""
    return as_rng(seed, "seed")


#: Limits of the samplers: the work (samples x n_keys, times d where d is
#: drawn explicitly) beyond which a call would take minutes or exhaust memory.
_MAX_DIM = 10**6
_MAX_DRAWS = 10**8


def _check_sampling_args(d, n_keys, scaled, samples, *, explicit_d: bool = False
                         ) -> tuple[int, int, bool, int]:
    d = as_count(d, "d", 1, _MAX_DIM)
    n_keys = as_count(n_keys, "n_keys", 1, _MAX_DIM)
    scaled = as_bool(scaled, "scaled")
    samples = as_count(samples, "samples", 2, _MAX_DRAWS)
    work = samples * n_keys * (d if explicit_d else 1)
    if work > _MAX_DRAWS:
        what = "samples * n_keys * d" if explicit_d else "samples * n_keys"
        raise ValueError(f"samples, n_keys{', d' if explicit_d else ''} must have {what} <= "
                         f"{_MAX_DRAWS:.0e} (time and memory); got samples = {samples}, "
                         f"n_keys = {n_keys}, d = {d}")
    return d, n_keys, scaled, samples


def _chunk_size(per_sample: int) -> int:
    return max(1, _CHUNK_ELEMENTS // max(1, per_sample))


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(np.mean(x)), float(np.std(x, ddof=1) / math.sqrt(x.shape[0]))


# ---------------------------------------------------------------------------
# samplers
# ---------------------------------------------------------------------------


def _logit_chunks(
    d: int, n_keys: int, scaled: bool, samples: int, rng: np.random.Generator, chunk: int
) -> Iterator[np.ndarray]:
    """Yield the logits of :func:`sample_logits` in row blocks of ``chunk``.

    All radii are drawn first and the Gaussian directions block by block;
    since the Generator fills arrays in C order, the concatenated blocks are
    the same numbers as one call with ``chunk >= samples``.
    """
    r = np.sqrt(rng.chisquare(d, size=samples))
    if scaled:
        r /= math.sqrt(d)
    for start in range(0, samples, chunk):
        stop = min(samples, start + chunk)
        yield r[start:stop, None] * rng.standard_normal((stop - start, n_keys))


def sample_logits(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 10_000,
    seed: int | np.random.Generator = 0,
) -> np.ndarray:
    """Draw the attention logits of independent random queries, exactly and fast.

    For each of ``samples`` queries, ``q ~ N(0, I_d)`` and ``n_keys`` keys
    ``k_j ~ N(0, I_d)``, all independent, return ``s_j = q . k_j / sqrt(d)``
    (``scaled=True``) or ``q . k_j``. Instead of forming ``q`` and ``K`` it
    uses that, given ``q``, the logits are i.i.d. ``N(0, ||q||^2 c^2)``
    (``c = 1/sqrt(d)`` or 1) and ``||q||^2 ~ chi^2_d``: the result has
    exactly the distribution of :func:`sample_logits_direct` at cost
    ``O(samples * n_keys)``, independent of ``d``.

    Parameters
    ----------
    d : int
        Head dimension, ``>= 1``.
    n_keys : int
        Number of keys N, ``>= 1``.
    scaled : bool
        Divide the logits by ``sqrt(d)``.
    samples : int
        Number of independent queries, ``>= 2``.
    seed : int or numpy.random.Generator
        Seed of ``np.random.default_rng`` or a Generator to draw from.

    Returns
    -------
    s : ndarray, shape (samples, n_keys)
        Row ``i`` holds the logits of query ``i``; rows are independent.
    """
    d, n_keys, scaled, samples = _check_sampling_args(d, n_keys, scaled, samples)
    rng = _as_rng(seed)
    return next(_logit_chunks(d, n_keys, scaled, samples, rng, samples))


def sample_logits_direct(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 10_000,
    seed: int | np.random.Generator = 0,
) -> np.ndarray:
    """Draw the same logits as :func:`sample_logits` by forming q and K.

    A slow reference for tests: it draws ``q``, shape (samples, d), and
    ``K``, shape (samples, n_keys, d), explicitly, so time and memory are
    ``O(samples * n_keys * d)``.

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    s : ndarray, shape (samples, n_keys)
        Same distribution as :func:`sample_logits` (not the same numbers).
    """
    d, n_keys, scaled, samples = _check_sampling_args(d, n_keys, scaled, samples, explicit_d=True)
    rng = _as_rng(seed)
    q = rng.standard_normal((samples, d))
    k = rng.standard_normal((samples, n_keys, d))
    s = np.einsum("snd,sd->sn", k, q)
    return s / math.sqrt(d) if scaled else s


# ---------------------------------------------------------------------------
# Monte-Carlo saturation statistics
# ---------------------------------------------------------------------------


def _row_stats(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entropy, max probability and ``||J||_2`` of ``softmax`` of each row of ``s``.

    ``s`` has shape (M, N). With ``m = max_j s_j`` and ``t = sum over the
    non-maximal entries of exp(s_j - m)``: ``max p = 1 / (1 + t)`` and
    ``H = log1p(t) + sum_j p_j (m - s_j)``, a sum of non-negative terms, so
    both stay accurate to full relative precision deep into saturation.
    """
    n = s.shape[-1]
    top = np.argmax(s, axis=-1)
    m = np.take_along_axis(s, top[:, None], axis=-1)
    # m - s, halved first (it could overflow for logits near 1e308) and capped
    # at 800, beyond which exp(-gap) is 0.0 anyway
    gap = 2.0 * np.minimum(0.5 * m - 0.5 * s, 400.0)
    with np.errstate(under="ignore"):  # exp underflowing to 0 is the intended rounding
        e = np.exp(-gap)
        np.put_along_axis(e, top[:, None], 0.0, axis=-1)
        t = e.sum(axis=-1)
        max_p = 1.0 / (1.0 + t)
        entropy = np.log1p(t) + max_p * np.sum(e * gap, axis=-1)
    if n == 1:
        jac = np.zeros(s.shape[0])
    else:
        jac = np.asarray(softmax_jacobian_norm(s, ord=2), dtype=np.float64)
    return entropy, max_p, jac


def _summarise(entropy, max_p, jac) -> SaturationStats:
    h, h_se = _mean_se(entropy)
    mp, mp_se = _mean_se(max_p)
    j, j_se = _mean_se(jac)
    return SaturationStats(h, mp, j, h_se, mp_se, j_se, int(entropy.shape[0]))


def saturation_stats_from_logits(s: object) -> SaturationStats:
    """Monte-Carlo saturation statistics of given logit vectors.

    Parameters
    ----------
    s : array_like, shape (..., N)
        Finite logits; every vector along the last axis is one sample, and
        there must be at least two of them.

    Returns
    -------
    SaturationStats
        Means over the samples of ``H(p)``, ``max_j p_j`` and ``||J||_2``
        (each exact per sample), with standard errors ``std / sqrt(M)``,
        ``M`` the number of samples.
    """
    s = as_real_array(s, "s", min_ndim=2)
    s = s.reshape(-1, s.shape[-1])
    if s.shape[0] < 2:
        raise ValueError(f"s must hold at least 2 logit vectors; got shape {s.shape}")
    return _summarise(*_row_stats(s))


def saturation_per_row(s: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entropy, max probability and ``||J||_2`` of the softmax of each logit vector.

    The per-sample values behind :func:`saturation_stats_from_logits`, exact
    up to rounding (accurate deep into saturation).

    Parameters
    ----------
    s : array_like, shape (M, N)
        Finite logits, one vector per row.

    Returns
    -------
    entropy, max_p, jac_norm : ndarray, shape (M,)
        ``H(p)`` in nats, ``max_j p_j`` and ``||diag(p) - p p^T||_2`` per row.
    """
    s = as_real_array(s, "s", ndim=2)
    return _row_stats(s)


def saturation_stats(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 10_000,
    seed: int | np.random.Generator = 0,
) -> SaturationStats:
    """Expected entropy, max probability and Jacobian norm at initialisation.

    Monte-Carlo over ``samples`` independent queries, each with its own
    ``n_keys`` keys, all ``N(0, I_d)``; the logits come from
    :func:`sample_logits` (exact in distribution). Time is
    ``O(samples * n_keys)`` whatever ``d`` is, memory is bounded by
    chunking, and the result equals
    ``saturation_stats_from_logits(sample_logits(...))`` for the same seed.

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    SaturationStats
        Monte-Carlo means with standard errors ``std / sqrt(samples)``.

    Notes
    -----
    With scaling the logit standard deviation is ``||q|| / sqrt(d)``, which
    is random (``chi^2_d / d``) and tends to 1 only as ``d -> inf``, so the
    statistics depend on ``d`` for small ``d`` and converge to those of
    i.i.d. ``N(0, 1)`` logits. Without scaling the standard deviation is
    ``||q|| ~ sqrt(d)`` and the softmax saturates as ``d`` grows.
    """
    d, n_keys, scaled, samples = _check_sampling_args(d, n_keys, scaled, samples)
    rng = _as_rng(seed)
    parts = [
        _row_stats(block)
        for block in _logit_chunks(d, n_keys, scaled, samples, rng, _chunk_size(n_keys))
    ]
    return _summarise(*(np.concatenate(col) for col in zip(*parts, strict=True)))
