"""Softmax saturation without sampling: exact quadrature for two keys, and asymptotes.

Setting as in :mod:`lipattn.scaling` (Chapter 2): logits i.i.d. ``N(0, sigma^2)``,
or the logits of a query and keys i.i.d. ``N(0, I_d)`` with or without the
1/sqrt(d) scaling. The expectations that :func:`lipattn.scaling.saturation_stats`
estimates by Monte Carlo are computed here without sampling:

- :func:`two_token_expectations` is exact (composite Gauss-Legendre quadrature,
  correct to a few units of rounding) for ``N = 2`` logits i.i.d.
  ``N(0, sigma^2)`` at a *fixed* sigma;
- :func:`two_token_expectations_d` averages it over ``||q||^2 ~ chi^2_d``: the
  exact statistics of two keys at head dimension d;
- :func:`two_token_asymptotes` gives the large-sigma expansion of
  :func:`two_token_expectations` (one or two terms);
- :func:`rem_entropy_approx` is the random-energy-model approximation of the
  entropy of N logits, to leading order in ``ln N`` and nothing more.

Every result is a :class:`lipattn.scaling.SaturationStats` with zero standard
errors and ``n_samples=None``.
"""

from __future__ import annotations

import math

import numpy as np

from ._validate import as_bool, as_count, as_positive_float, finite_result
from .scaling import SaturationStats

__all__ = [
    "two_token_expectations",
    "two_token_expectations_d",
    "two_token_asymptotes",
    "rem_entropy_approx",
]



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
