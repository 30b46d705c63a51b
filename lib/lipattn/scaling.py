"""The 1/sqrt(d) scaling of attention logits and softmax saturation.

Setting (Chapter 2). A query ``q`` and keys ``k_1, ..., k_N`` are i.i.d.
``N(0, I_d)``. The logits are ``s_j = q . k_j / sqrt(d)`` with scaling and
``s_j = q . k_j`` without. Given ``q`` the logits are i.i.d.
``N(0, sigma^2)`` with ``sigma = ||q|| / sqrt(d)`` (scaled) or ``||q||``
(unscaled), and ``||q||^2 ~ chi^2_d``. So the logits of one query can be drawn
*exactly* in ``O(N)`` time whatever ``d`` is: draw ``r^2 ~ chi^2_d``, then
``s = r g`` (divided by ``sqrt(d)`` if scaled) with ``g ~ N(0, I_N)``.

What is exact and what is estimated:

- :func:`two_token_expectations` is exact (quadrature, correct to a few
  units of rounding) for ``N = 2`` logits i.i.d. ``N(0, sigma^2)`` at a *fixed* sigma;
  :func:`two_token_asymptotes` gives its large-sigma expansion.
- :func:`saturation_stats`, :func:`saturation_stats_from_logits` and
  :func:`gradient_norms` are Monte-Carlo means with standard errors
  ``std / sqrt(samples)``; the per-sample quantities (entropy, max
  probability, spectral norm of the softmax Jacobian, gradients) are exact
  up to rounding.

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
    as_positive_float,
    as_real_array,
    as_rng,
    finite_result,
)
from .softmax import softmax, softmax_jacobian_norm

__all__ = [
    "SaturationStats",
    "GradientNorms",
    "sample_logits",
    "sample_logits_direct",
    "saturation_stats",
    "saturation_stats_from_logits",
    "saturation_per_row",
    "two_token_expectations",
    "two_token_asymptotes",
    "gradient_norms",
    "gradient_norms_fast",
    "gradient_samples",
    "QUANTILES",
    "rem_entropy_approx",
    "two_token_expectations_d",
]

# Elements per chunk of the batched computations (bounds peak memory).
_CHUNK_ELEMENTS = 1 << 21

#: Quantile levels reported by :class:`GradientNorms` (10 %, median, 90 %).
QUANTILES: tuple[float, float, float] = (0.1, 0.5, 0.9)


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


@dataclass(frozen=True)
class GradientNorms:
    """Mean and quantiles of the gradient norms of one attention read-out.

    The norms are heavy-tailed without scaling: most queries get a vanishing
    query gradient while a few near-tie queries get a large one, so the mean
    alone is misleading. Each ``*_q`` field holds the 10 %, 50 % and 90 %
    quantiles (:data:`QUANTILES`) of the per-sample norms.

    Attributes
    ----------
    logits : float
        ``E ||dL/ds||``, shape of the gradient (N,).
    query : float
        ``E ||dL/dq||``, shape (d,). The gradient for a query projection
        ``q = W_Q x`` is ``(dL/dq) x^T`` with norm ``||dL/dq|| ||x||``, so it
        is proportional to this one.
    keys : float
        ``E ||dL/dK||``, shape (N, d); equals ``c ||dL/ds|| ||q||`` per sample.
    values : float
        ``E ||dL/dV||``, shape (N, d); equals ``||p|| ||g|| = ||p||``.
    logits_se, query_se, keys_se, values_se : float
        Standard errors ``std / sqrt(n_samples)`` of the means.
    logits_q, query_q, keys_q, values_q : tuple of 3 floats
        Sample quantiles at :data:`QUANTILES` (the middle one is the median).
    n_samples : int
        Number of independent (q, K, V, g) draws.
    """

    logits: float
    query: float
    keys: float
    values: float
    logits_se: float
    query_se: float
    keys_se: float
    values_se: float
    logits_q: tuple[float, float, float]
    query_q: tuple[float, float, float]
    keys_q: tuple[float, float, float]
    values_q: tuple[float, float, float]
    n_samples: int


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


# ---------------------------------------------------------------------------
# two tokens: exact quadrature and asymptotes
# ---------------------------------------------------------------------------

# Composite Gauss-Legendre rule in u = Delta / (sqrt(2) sigma) on [0, U]:
# _PANELS equal panels of _NODES points each.
_PANELS = 64
_NODES = 20
_GL_X, _GL_W = np.polynomial.legendre.leggauss(_NODES)
# The composite rule on [0, 1]: nodes and weights, shape (P * n,).
_FRAC_X = ((np.arange(_PANELS)[:, None] + 0.5 * (_GL_X + 1.0)) / _PANELS).ravel()
_FRAC_W = np.tile(_GL_W / (2.0 * _PANELS), _PANELS)
# Cut-offs: the Gaussian factor is below exp(-72) beyond u = 12 and the
# integrands are below 80 exp(-80) beyond Delta = 80.
_U_MAX = 12.0
_DELTA_MAX = 80.0


def _two_token_means(sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``E[H]``, ``E[1 - max p]`` and ``E||J||_2`` for two logits i.i.d. N(0, sigma^2).

    ``sigma`` is a positive finite array of any shape; the results have its
    shape. With ``Delta = s_1 - s_2 ~ N(0, 2 sigma^2)``, ``x = |Delta|`` and
    ``e = exp(-x)``, the integrands are even in ``Delta``:

    - ``H = log1p(e) + x e / (1 + e)``;
    - ``1 - max p = e / (1 + e)``;
    - ``||J||_2 = 2 p (1 - p) = 2 e / (1 + e)^2 = 1 / (1 + cosh Delta)``.

    Each mean is ``2 int_0^inf phi(u) f(sqrt(2) sigma u) du`` (``phi`` the
    standard normal density), integrated over ``u in [0, min(12, 80 /
    (sqrt(2) sigma))]`` with 64 equal Gauss-Legendre panels of 20 nodes.
    The panels are at most ``12 / 64`` wide in ``u`` (the Gaussian's scale)
    and at most ``80 / 64`` wide in ``Delta`` (the integrands' scale: they
    are analytic in a strip of half-width pi), so both the small-sigma end
    (narrow Gaussian) and the large-sigma end (integrand concentrated near
    ``Delta = 0`` on the Gaussian's scale) are resolved; no ``1 / sigma``
    is formed, so tiny and huge sigma neither overflow nor underflow.
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    cut = _DELTA_MAX / math.sqrt(2.0)
    upper = (cut / np.maximum(sigma, cut / _U_MAX))[..., None]  # min(12, cut / sigma)
    # the interval length and the density's constant are applied last, so the
    # summands stay normal floats even when `upper` is tiny (huge sigma)
    scale = upper[..., 0] * (2.0 / math.sqrt(2.0 * math.pi))
    with np.errstate(under="ignore"):  # harmless: u^2 for huge sigma, x for tiny sigma
        u = upper * _FRAC_X  # shape sigma.shape + (P * n,)
        x = sigma[..., None] * (math.sqrt(2.0) * u)  # |Delta| <= 80; no overflow for huge sigma
        e = np.exp(-x)
        one_e = 1.0 + e
        weight = _FRAC_W * np.exp(-0.5 * u * u)
        entropy = scale * np.sum(weight * (np.log1p(e) + x * e / one_e), axis=-1)
        comp = scale * np.sum(weight * (e / one_e), axis=-1)
        jac = scale * np.sum(weight * (2.0 * e / (one_e * one_e)), axis=-1)
    return entropy, comp, jac


def two_token_expectations(sigma: float) -> SaturationStats:
    """Exact saturation statistics for two logits i.i.d. ``N(0, sigma^2)``.

    With ``Delta = s_1 - s_2 ~ N(0, 2 sigma^2)`` and ``p = sigmoid(Delta)``
    the three expectations are one-dimensional integrals:
    ``E[H(p)]``, ``E[max p] = E[sigmoid(|Delta|)]`` and
    ``E||J||_2 = E[1 / (1 + cosh Delta)]``. They are computed by composite
    Gauss-Legendre quadrature (numpy only) that resolves both the Gaussian's
    scale ``sigma`` and the integrands' scale 1. The tests find relative
    errors of order 1e-16 against 50-digit mpmath quadrature for sigma from
    1e-3 to 1e4, and agreement with the limits below out to sigma = 1e-300
    and 1e300 (beyond about 1e300 the values become subnormal floats).
    ``E[max p]`` is formed as ``1 - E[1 - max p]``, and the complement is as
    accurate as the other two.

    Limits: as ``sigma -> 0`` the values tend to ``(ln 2, 1/2, 1/2)``; as
    ``sigma -> inf`` see :func:`two_token_asymptotes`.

    Parameters
    ----------
    sigma : float
        Standard deviation of each logit, positive and finite. Scalar only:
        for a curve call it in a loop (each call costs 1280 evaluations).

    Returns
    -------
    SaturationStats
        The exact expectations, with zero standard errors and
        ``n_samples=None``.
    """
    sigma = as_positive_float(sigma, "sigma")
    entropy, comp, jac = _two_token_means(np.array(sigma))
    return SaturationStats(float(entropy), float(1.0 - comp), float(jac))


# Relative second-order corrections: E f = (int f / (2 sqrt(pi) sigma))
# (1 - (int x^2 f / int f) / (4 sigma^2) + O(sigma^-4)).
_ZETA3 = 1.2020569031595942
_CORR_JAC = math.pi**2 / 12.0  # int x^2 f / int f = pi^2 / 3
_CORR_ENTROPY = 7.0 * math.pi**2 / 60.0  # = (7 pi^4 / 45) / (pi^2 / 3) / 4
_CORR_MAXP = 3.0 * _ZETA3 / (8.0 * math.log(2.0))  # = (3 zeta(3)) / (2 ln 2) / 4


def two_token_expectations_d(d: int, scaled: bool = True, points: int = 801) -> SaturationStats:
    """Exact saturation statistics of two keys at head dimension ``d``.

    The expectations that :func:`saturation_stats` estimates for ``n_keys=2``:
    ``q, k_1, k_2`` i.i.d. ``N(0, I_d)``. Given ``q`` the two logits are
    i.i.d. ``N(0, sigma^2)`` with ``sigma = c ||q||`` (``c = 1/sqrt(d)`` or
    1), so each mean is :func:`two_token_expectations` averaged over
    ``||q||^2 ~ chi^2_d``. The outer integral is taken in ``t = ln ||q||^2``,
    whose density ``exp(d t / 2 - e^t / 2) / (2^(d/2) Gamma(d/2))`` is smooth
    and decays at least exponentially on both sides, with the trapezoidal
    rule on ``points`` nodes (exponentially convergent for such integrands);
    the interval covers the density down to below ``1e-30`` of its peak.

    Parameters
    ----------
    d : int
        Head dimension, ``>= 1``.
    scaled : bool
        Divide the logits by ``sqrt(d)``.
    points : int
        Trapezoidal nodes in ``t`` (101 to 20000: each carries a quadrature of
        about 10**3 nodes); the default is accurate to about 1e-12.

    Returns
    -------
    SaturationStats
        ``E[H]``, ``E[max p]``, ``E||J||_2`` (zero standard errors,
        ``n_samples=None``).
    """
    d = as_count(d, "d", 1)
    scaled = as_bool(scaled, "scaled")
    points = as_count(points, "points", 101, 20_000)  # ~4 s at the top (1e3 nodes each)
    centre, width = math.log(d), math.sqrt(2.0 / d)
    # left tail ~ exp(d t / 2), right tail ~ exp(-d (e^x - 1 - x) / 2) at t = ln d + x
    t = np.linspace(centre - 10.0 * width - 140.0 / d, centre + 10.0 * width + 10.0 / d, points)
    log_dens = 0.5 * d * t - 0.5 * np.exp(t) - 0.5 * d * math.log(2.0) - math.lgamma(0.5 * d)
    w = np.exp(log_dens)
    w /= w.sum()  # trapezoid weights (end points carry < 1e-30 of the mass)
    sigma = np.exp(0.5 * t) / (math.sqrt(d) if scaled else 1.0)
    # in blocks: each sigma carries a quadrature of ~1e3 nodes
    parts = [_two_token_means(sigma[i:i + 4096]) for i in range(0, sigma.size, 4096)]
    entropy, comp, jac = (np.concatenate(c) for c in zip(*parts, strict=True))
    return SaturationStats(float(w @ entropy), float(1.0 - w @ comp), float(w @ jac))


def two_token_asymptotes(sigma: float, *, terms: int = 1) -> SaturationStats:
    """Large-sigma expansion of :func:`two_token_expectations`.

    With the Gaussian density of ``Delta`` expanded about 0,
    ``E f(Delta) = (1 / (2 sqrt(pi) sigma)) (int f - int Delta^2 f / (4
    sigma^2) + O(sigma^-4))`` for each integrable even ``f``. With
    ``int 1/(1 + cosh) = 2``, ``int H(sigmoid) = pi^2 / 3`` and
    ``int sigmoid(-|x|) = 2 ln 2``:

    - ``E||J||_2 = 1 / (sqrt(pi) sigma) (1 - pi^2 / (12 sigma^2) + ...)``;
    - ``E[H] = pi^(3/2) / (6 sigma) (1 - 7 pi^2 / (60 sigma^2) + ...)``;
    - ``E[max p] = 1 - ln 2 / (sqrt(pi) sigma) (1 - 3 zeta(3) / (8 ln 2
      sigma^2) + ...)``.

    So saturation is polynomial, not exponential: every statistic reaches its
    one-hot limit like ``1 / sigma``, with relative corrections
    ``O(1 / sigma^2)``.

    Parameters
    ----------
    sigma : float
        Standard deviation of each logit, positive and finite.
    terms : int
        1 for the leading terms, 2 to include the ``1 / sigma^2`` corrections.

    Returns
    -------
    SaturationStats
        The asymptotic values (zero standard errors, ``n_samples=None``).
        They are meaningless for ``sigma`` of order 1 or less (``max_p`` can
        even be negative).
    """
    sigma = as_positive_float(sigma, "sigma")
    terms = as_count(terms, "terms", 1)
    if terms > 2:
        raise ValueError(f"terms must be 1 or 2; got {terms}")
    inv2 = 1.0 / sigma / sigma if terms == 2 else 0.0  # inf, not an exception, if tiny
    lead = 1.0 / (math.sqrt(math.pi) * sigma)  # inf only for a subnormal sigma
    values = (math.pi**2 / 6.0 * lead * (1.0 - _CORR_ENTROPY * inv2),
              1.0 - math.log(2.0) * lead * (1.0 - _CORR_MAXP * inv2),
              lead * (1.0 - _CORR_JAC * inv2))
    with np.errstate(invalid="ignore"):
        finite_result(np.array(values), "sigma", "asymptotes (which grow like 1 / sigma)")
    return SaturationStats(entropy=values[0], max_p=values[1], jac_norm=values[2])


def rem_entropy_approx(sigma: float, n_keys: int) -> float:
    """Random-energy-model approximation of ``E[H]`` for N i.i.d. ``N(0, sigma^2)`` logits.

    The leading-order term in ``ln N`` as ``N -> inf`` at fixed ``sigma /
    sqrt(ln N)``, and nothing more: ``ln N - sigma^2 / 2`` for ``sigma <=
    sqrt(2 ln N)`` (the annealed, high-temperature phase) and ``0`` beyond.
    In that frozen phase the true entropy is not 0: it stays of order 1 as
    ``N`` grows, i.e. it is ``o(ln N)``, so its leading ``ln N`` term is 0 and
    the ``O(1)`` remainder is not modelled here. For moderate N the
    corrections are large in both phases; compare with
    :func:`saturation_stats_from_logits` before quoting numbers.

    Parameters
    ----------
    sigma : float
        Logit standard deviation, positive and finite.
    n_keys : int
        Number of logits N, ``>= 1``.

    Returns
    -------
    float
        ``max(0, ln N - sigma^2 / 2)``, the leading-order approximation of
        the expected entropy in nats.
    """
    sigma = as_positive_float(sigma, "sigma")
    n_keys = as_count(n_keys, "n_keys", 1)
    log_n = math.log(n_keys)
    if sigma >= math.sqrt(2.0 * log_n):  # the frozen phase; sigma**2 could overflow
        return 0.0
    return max(0.0, log_n - 0.5 * sigma**2)


# ---------------------------------------------------------------------------
# gradients of one attention read-out at initialisation
# ---------------------------------------------------------------------------


def _attention_loss(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, scaled: bool
) -> np.ndarray:
    """``L = g . o``, ``o = softmax(c K q)^T V``, shape (B,); q, g (B, d), K, V (B, N, d)."""
    c = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
    p = softmax(np.einsum("bnd,bd->bn", k, q) * c, axis=-1)
    return np.einsum("bn,bnd,bd->b", p, v, g)


def _attention_gradients(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, scaled: bool
) -> dict[str, np.ndarray]:
    """Exact gradients of ``L = g . o`` for a batch of single-query read-outs.

    Shapes: ``q`` (B, d), ``k`` and ``v`` (B, N, d), ``g`` (B, d). With
    ``c = 1/sqrt(d)`` or 1, ``s = c K q``, ``p = softmax(s)``, ``u = V g``:

    - ``dL/ds = J u = p * (u - p . u)``, shape (B, N);
    - ``dL/dq = c K^T dL/ds``, shape (B, d);
    - ``dL/dK = c (dL/ds) q^T``, shape (B, N, d);
    - ``dL/dV = p g^T``, shape (B, N, d).

    Also returns ``s`` and ``p``.
    """
    c = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
    s = np.einsum("bnd,bd->bn", k, q) * c
    p = softmax(s, axis=-1)
    u = np.einsum("bnd,bd->bn", v, g)
    ds = p * (u - np.sum(p * u, axis=-1, keepdims=True))
    return {
        "s": s,
        "p": p,
        "logits": ds,
        "query": c * np.einsum("bnd,bn->bd", k, ds),
        "keys": c * ds[:, :, None] * q[:, None, :],
        "values": p[:, :, None] * g[:, None, :],
    }


def _gradient_summary(parts: dict[str, list[np.ndarray]], samples: int) -> GradientNorms:
    """Means, standard errors and quantiles of per-sample norms, chunk lists by field."""
    names = ("logits", "query", "keys", "values")
    x = {name: np.concatenate(parts[name]) for name in names}
    stats = {name: _mean_se(x[name]) for name in names}
    quant = {f"{name}_q": tuple(float(v) for v in np.quantile(x[name], QUANTILES))
             for name in names}
    return GradientNorms(**{name: m for name, (m, _) in stats.items()},
                         **{f"{name}_se": se for name, (_, se) in stats.items()},
                         **quant, n_samples=samples)


def gradient_norms(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 2_000,
    seed: int | np.random.Generator = 0,
) -> GradientNorms:
    """Mean gradient norms of one attention read-out at initialisation.

    Each sample draws ``q ~ N(0, I_d)``, keys and values ``K, V`` with i.i.d.
    ``N(0, 1)`` entries, shape (n_keys, d), and an upstream gradient
    ``g = dL/do`` uniform on the unit sphere of ``R^d``; the loss is
    ``L = g . o`` with ``o = softmax(s)^T V`` and ``s = K q / sqrt(d)``
    (``scaled``) or ``K q``. ``K`` and ``V`` are drawn explicitly, so the cost
    is ``O(samples * n_keys * d)`` (batched, chunked to bound memory).

    Why a unit ``g``: the gradients are linear in ``g`` and, for
    ``g ~ N(0, I_d)``, ``||g||`` is independent of ``g / ||g||``; so a
    Gaussian ``g`` would multiply every mean norm by exactly
    ``E||g|| ~ sqrt(d)`` and hide the ``d``-dependence that comes from the
    softmax.

    What is certain (used in the tests): ``u = V g ~ N(0, I_N)`` independent of
    ``s``, so ``E||dL/ds||^2 = E||J(s)||_F^2``; ``||dL/dV|| = ||p||``; and,
    splitting each key into its part along ``q`` and the rest,
    ``E[||dL/dq||^2 | s, u, q] = c^2 (d - 1) ||dL/ds||^2 + (s . dL/ds)^2 /
    ||q||^2``. So in mean square the query gradient is at least ``(d - 1)``
    times the logit gradient without scaling and ``(d - 1) / d`` times it
    with scaling (the second term is the part along ``q``).

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    GradientNorms
        Monte-Carlo means of ``||dL/ds||``, ``||dL/dq||``, ``||dL/dK||_F``
        and ``||dL/dV||_F`` with standard errors ``std / sqrt(samples)``.
    """
    d, n_keys, scaled, samples = _check_sampling_args(d, n_keys, scaled, samples, explicit_d=True)
    rng = _as_rng(seed)
    chunk = _chunk_size(4 * n_keys * d)
    norms: dict[str, list[np.ndarray]] = {"logits": [], "query": [], "keys": [], "values": []}
    for start in range(0, samples, chunk):
        b = min(chunk, samples - start)
        q = rng.standard_normal((b, d))
        k = rng.standard_normal((b, n_keys, d))
        v = rng.standard_normal((b, n_keys, d))
        g = rng.standard_normal((b, d))
        g /= np.linalg.norm(g, axis=-1, keepdims=True)
        grads = _attention_gradients(q, k, v, g, scaled)
        for name, parts in norms.items():
            parts.append(np.sqrt(np.sum(grads[name].reshape(b, -1) ** 2, axis=-1)))
    return _gradient_summary(norms, samples)


def _logit_gradient(p: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``J u = p * (u - p . u)`` per row, shape (B, N), accurate for one-hot ``p``.

    For the top entry ``t``, ``u_t - p . u = sum_{j != t} p_j (u_t - u_j)`` is
    formed without the cancellation of ``u_t - p . u`` when ``p_t ~ 1``, so
    tiny gradients keep their relative accuracy.
    """
    top = np.argmax(p, axis=-1)[:, None]
    u_top = np.take_along_axis(u, top, axis=-1)
    rest = p.copy()
    np.put_along_axis(rest, top, 0.0, axis=-1)
    centred_top = np.sum(rest * (u_top - u), axis=-1, keepdims=True)  # u_t - p . u
    centred = (u - u_top) + centred_top  # u_i - p . u
    np.put_along_axis(centred, top, centred_top, axis=-1)
    return p * centred


def gradient_samples(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 20_000,
    seed: int | np.random.Generator = 0,
) -> dict[str, np.ndarray]:
    """Per-query gradient norms of one attention read-out, sampled exactly in ``O(N)``.

    Same setting and same distribution as :func:`gradient_norms`, without
    forming ``q``, ``K`` or ``V``. Write ``q = r qhat`` with ``r^2 ~ chi^2_d``
    and split each key into ``a_j = k_j . qhat`` and the rest, orthogonal to
    ``q``. Then ``a ~ N(0, I_N)``, the logits are ``s = c r a``, the
    orthogonal parts are i.i.d. ``N(0, I - qhat qhat^T)`` independent of
    ``a``, and ``u = V g ~ N(0, I_N)`` is independent of both (``g`` is a
    unit vector independent of ``V``). So with ``ds = p * (u - p . u)``:

    - ``||dL/dq||^2 = c^2 ((a . ds)^2 + ||ds||^2 w)``, ``w ~ chi^2_{d-1}``
      (``w = 0`` for ``d = 1``), because the orthogonal part of
      ``K^T ds`` is ``N(0, ||ds||^2 (I - qhat qhat^T))`` given ``ds``;
    - ``||dL/dK|| = c ||ds|| r`` and ``||dL/dV|| = ||p||``.

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    dict of ndarray, each of shape (samples,)
        ``"logits"``, ``"query"``, ``"keys"``, ``"values"``: the four norms
        per query. And where the gradients go: ``"logit_sum"``, the sum
        ``1^T dL/ds`` (0 up to rounding, since ``J 1 = 0``);
        ``"logit_top2"``, the share of ``||dL/ds||^2`` on the two keys with the
        largest weights; ``"logit_top2_sum"``, ``|ds_(1) + ds_(2)| / (|ds_(1)|
        + |ds_(2)|)`` on those two keys (near 0 when they carry opposite
        signs); ``"value_top"``, the share ``max_j p_j^2 / ||p||^2`` of
        ``||dL/dV||_F^2`` on the key with the largest weight. The shares are
        ``nan``-free: a row with ``dL/ds = 0`` exactly counts as share 1 and
        sum 0.
    """
    d, n_keys, scaled, samples = _check_sampling_args(d, n_keys, scaled, samples)
    rng = _as_rng(seed)
    c = 1.0 / math.sqrt(d) if scaled else 1.0
    r = np.sqrt(rng.chisquare(d, size=samples))
    w = rng.chisquare(d - 1, size=samples) if d > 1 else np.zeros(samples)
    names = ("logits", "query", "keys", "values", "logit_sum", "logit_top2",
             "logit_top2_sum", "value_top")
    out: dict[str, list[np.ndarray]] = {name: [] for name in names}
    chunk = _chunk_size(3 * n_keys)
    for start in range(0, samples, chunk):
        stop = min(samples, start + chunk)
        a = rng.standard_normal((stop - start, n_keys))
        u = rng.standard_normal((stop - start, n_keys))
        p = softmax((c * r[start:stop, None]) * a, axis=-1)
        ds = _logit_gradient(p, u)
        ds2 = np.sum(ds * ds, axis=-1)
        ds_norm = np.sqrt(ds2)
        out["logits"].append(ds_norm)
        out["query"].append(c * np.sqrt(np.sum(a * ds, axis=-1) ** 2
                                        + ds2 * w[start:stop]))
        out["keys"].append(c * ds_norm * r[start:stop])
        p2 = np.sum(p * p, axis=-1)
        out["values"].append(np.sqrt(p2))
        out["logit_sum"].append(np.sum(ds, axis=-1))
        order = np.argsort(-p, axis=-1)[:, :2] if n_keys > 1 else np.zeros((stop - start, 1),
                                                                              dtype=int)
        top = np.take_along_axis(ds, order, axis=-1)
        safe = np.where(ds2 > 0.0, ds2, 1.0)
        out["logit_top2"].append(np.where(ds2 > 0.0, np.sum(top * top, axis=-1) / safe, 1.0))
        den = np.sum(np.abs(top), axis=-1)
        out["logit_top2_sum"].append(
            np.abs(np.sum(top, axis=-1)) / np.where(den > 0.0, den, 1.0))
        out["value_top"].append(np.max(p, axis=-1) ** 2 / p2)
    return {name: np.concatenate(parts) for name, parts in out.items()}


def gradient_norms_fast(
    d: int,
    n_keys: int,
    scaled: bool = True,
    samples: int = 20_000,
    seed: int | np.random.Generator = 0,
) -> GradientNorms:
    """The statistics of :func:`gradient_norms`, sampled exactly in ``O(N)`` per draw.

    The means, standard errors and quantiles of the per-query norms of
    :func:`gradient_samples` (see there for the exact sampler).

    Parameters
    ----------
    d, n_keys, scaled, samples, seed
        As in :func:`sample_logits`.

    Returns
    -------
    GradientNorms
        Monte-Carlo means with standard errors ``std / sqrt(samples)``, and
        quantiles.
    """
    x = gradient_samples(d, n_keys, scaled, samples, seed)
    return _gradient_summary({name: [x[name]] for name in
                              ("logits", "query", "keys", "values")}, samples)
