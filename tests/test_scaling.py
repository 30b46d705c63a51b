"""Tests of :mod:`lipattn.scaling` against independent references (the references of
:mod:`lipattn.quadrature` and :mod:`lipattn.init_gradients`, tested in test_quadrature.py
and test_init_gradients.py, live here too: the Monte-Carlo tests use them).

References used: mpmath quadrature and sympy Taylor series (two tokens),
closed forms (two-token Jacobian norm, asymptotes), an exact chi-mixture
quadrature written here (Monte-Carlo means at finite d), a numpy two-sample
Kolmogorov-Smirnov test (fast sampler vs explicit q and K), and central
finite differences (gradients).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn import init_gradients, quadrature, scaling
from lipattn.init_gradients import gradient_norms
from lipattn.quadrature import rem_entropy_approx, two_token_asymptotes, two_token_expectations
from lipattn.scaling import (
    SaturationStats,
    sample_logits,
    sample_logits_direct,
    saturation_stats,
    saturation_stats_from_logits,
)
from lipattn.softmax import entropy as softmax_entropy
from lipattn.softmax import softmax

FIELDS = ("entropy", "max_p", "jac_norm")


# ---------------------------------------------------------------------------
# independent references
# ---------------------------------------------------------------------------


def mpmath_two_token(sigma: float) -> tuple[float, float, float]:
    """E[H], E[max p], E||J||_2 for two N(0, sigma^2) logits, by mpmath.quad."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(50):
        tau = mp.sqrt(2) * mp.mpf(sigma)

        def dens(x):  # density of |Delta|
            return 2 * mp.exp(-(x**2) / (2 * tau**2)) / (mp.sqrt(2 * mp.pi) * tau)

        def p_of(x):
            return 1 / (1 + mp.exp(-x))

        def ent(x):  # the definition; beyond x = 100 it is below 1e-41, and 1 - p rounds to 0
            if x > 100:
                return mp.mpf(0)
            p = p_of(x)
            return -p * mp.log(p) - (1 - p) * mp.log(1 - p)

        # breakpoints on both scales: the integrands' (1) and the Gaussian's (tau)
        pts = sorted({0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0}
                     | {t * float(tau) for t in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)})
        pts = [mp.mpf(p) for p in pts if p <= 64.0 or p <= 12 * float(tau)] + [mp.inf]
        out = [
            mp.quad(lambda x: dens(x) * ent(x), pts),
            mp.quad(lambda x: dens(x) * p_of(x), pts),
            mp.quad(lambda x: dens(x) / (1 + mp.cosh(x)), pts),
        ]
    return tuple(float(v) for v in out)


def chi_mixture_two_token(d: int, scaled: bool, nodes: int = 400) -> np.ndarray:
    """Exact E[H], E[max p], E||J||_2 of ``saturation_stats(d, 2, scaled)``.

    Given q the two logits are i.i.d. N(0, sigma^2) with sigma = r / sqrt(d)
    (scaled) or r, where r = ||q|| has the chi_d density
    r^(d-1) exp(-r^2/2) / (2^(d/2-1) Gamma(d/2)); integrate
    ``two_token_expectations(sigma(r))`` against it (composite Gauss-Legendre).
    """
    x, w = np.polynomial.legendre.leggauss(10)
    upper = math.sqrt(d) + 12.0
    edges = np.linspace(0.0, upper, nodes // 10 + 1)
    a, b = edges[:-1, None], edges[1:, None]
    r = (0.5 * (b - a) * x + 0.5 * (a + b)).ravel()
    wr = (0.5 * (b - a) * w).ravel()
    log_dens = (d - 1) * np.log(r) - 0.5 * r**2 - (0.5 * d - 1) * math.log(2) - math.lgamma(d / 2)
    wr = wr * np.exp(log_dens)
    assert abs(wr.sum() - 1.0) < 1e-12
    sig = r / math.sqrt(d) if scaled else r
    vals = np.array([[getattr(two_token_expectations(s), f) for f in FIELDS] for s in sig])
    return wr @ vals


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic sup |F_a - F_b|."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / a.size
    fb = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def ks_critical(n: int, m: int, alpha: float = 1e-3) -> float:
    """Asymptotic two-sample KS critical value at level alpha."""
    return math.sqrt(-0.5 * math.log(alpha / 2)) * math.sqrt((n + m) / (n * m))


def assert_within(mc: SaturationStats, exact, k: float = 4.0) -> None:
    for f, ex in zip(FIELDS, exact, strict=True):
        got, se = getattr(mc, f), getattr(mc, f + "_se")
        assert se > 0
        assert abs(got - ex) < k * se, (f, got, ex, se)


# ---------------------------------------------------------------------------
# Monte-Carlo statistics against exact values
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.3, 3.0, 30.0])
def test_fixed_sigma_mc_matches_quadrature(sigma):
    s = sigma * np.random.default_rng(11).standard_normal((20_000, 2))
    mc = saturation_stats_from_logits(s)
    assert mc.n_samples == 20_000
    assert_within(mc, [getattr(two_token_expectations(sigma), f) for f in FIELDS])


@pytest.mark.parametrize(
    ("d", "scaled"), [(1, True), (3, True), (16, True), (1, False), (16, False)]
)
def test_saturation_stats_match_chi_mixture(d, scaled):
    """At finite d sigma is random, so the exact value is a chi_d mixture of the N = 2 values."""
    mc = saturation_stats(d, 2, scaled=scaled, samples=20_000, seed=d + 100 * scaled)
    assert_within(mc, chi_mixture_two_token(d, scaled))


def test_chi_mixture_closed_form_at_d2():
    """Scaled, d = 2: sigma^2 ~ Exp(1), so Delta is Laplace(0, 1) and |Delta| ~ Exp(1).

    Then E[max p] = ln 2, E||J||_2 = 2 ln 2 - 1 and E[H] = 2 ln 2 - pi^2 / 12.
    """
    exact = [2 * math.log(2) - math.pi**2 / 12, math.log(2), 2 * math.log(2) - 1]
    np.testing.assert_allclose(chi_mixture_two_token(2, True), exact, rtol=1e-12)
    assert_within(saturation_stats(2, 2, scaled=True, samples=20_000, seed=5), exact)


def test_standard_errors_are_calibrated():
    """Over 30 seeds the spread of the means matches the reported standard errors."""
    d, scaled, n = 4, False, 2_000
    exact = chi_mixture_two_token(d, scaled)
    runs = [saturation_stats(d, 2, scaled=scaled, samples=n, seed=seed) for seed in range(30)]
    for f, ex in zip(FIELDS, exact, strict=True):
        means = np.array([getattr(r, f) for r in runs])
        ses = np.array([getattr(r, f + "_se") for r in runs])
        ratio = means.std(ddof=1) / ses.mean()
        assert 0.6 < ratio < 1.5, (f, ratio)
        z = (means - ex) / ses
        assert abs(z.mean()) < 4 / math.sqrt(len(z)), (f, z.mean())
    # and for many keys, where no exact value exists: spread vs standard error only
    runs = [saturation_stats(64, 16, scaled=False, samples=500, seed=seed) for seed in range(30)]
    for f in FIELDS:
        means = np.array([getattr(r, f) for r in runs])
        ratio = means.std(ddof=1) / np.mean([getattr(r, f + "_se") for r in runs])
        assert 0.6 < ratio < 1.5, (f, ratio)


def test_scaled_stats_depend_on_d_only_through_chi2_fluctuations():
    """With scaling, sigma^2 ~ chi^2_d / d: d-independent only as d -> inf.

    N = 2 exactly: the gap to the sigma = 1 limit is O(1/d) (d * gap roughly
    constant) and large at d = 1. N = 64 by Monte-Carlo: d >= 64 agrees with
    i.i.d. N(0, 1) logits within 4 standard errors, d = 1 does not.
    """
    limit = np.array([getattr(two_token_expectations(1.0), f) for f in FIELDS])
    gaps = {d: chi_mixture_two_token(d, True) - limit for d in (1, 64, 256, 1024)}
    assert np.all(np.abs(gaps[1]) > 0.01 * np.abs(limit))
    for d in (64, 256, 1024):  # relative gaps at most 0.25%, 0.06%, 0.016%: about 0.16 / d
        assert np.all(np.abs(gaps[d]) < 0.2 / d * np.abs(limit))
    assert d * gaps[1024] == pytest.approx(64 * gaps[64], rel=0.05)

    ref = saturation_stats_from_logits(np.random.default_rng(7).standard_normal((10_000, 64)))
    for d in (1, 64, 4096):
        mc = saturation_stats(d, 64, scaled=True, samples=10_000, seed=d)
        z = [
            (getattr(mc, f) - getattr(ref, f))
            / math.hypot(getattr(mc, f + "_se"), getattr(ref, f + "_se"))
            for f in FIELDS
        ]
        if d == 1:
            assert max(abs(v) for v in z) > 10
        else:
            assert max(abs(v) for v in z) < 4, (d, z)


def test_unscaled_jacobian_norm_rises_then_falls():
    """N = 64 without scaling: ||J||_2 ~ 1/N at sigma -> 0, peaks at moderate d, then decays."""
    jac = {d: saturation_stats(d, 64, scaled=False, samples=4_000, seed=d).jac_norm
           for d in (1, 16, 1024)}
    assert jac[1] < jac[16] and jac[1024] < jac[16]
    tiny = saturation_stats_from_logits(1e-6 * np.random.default_rng(0).standard_normal((10, 64)))
    assert tiny.jac_norm == pytest.approx(1 / 64, rel=1e-4)


def test_rem_entropy_approx():
    rng = np.random.default_rng(3)
    for sigma in (0.1, 0.5):
        mc = saturation_stats_from_logits(sigma * rng.standard_normal((4_000, 64)))
        assert rem_entropy_approx(sigma, 64) == pytest.approx(mc.entropy, abs=0.01)
    sigma_c = math.sqrt(2 * math.log(64))
    assert rem_entropy_approx(sigma_c, 64) == pytest.approx(0.0, abs=1e-12)
    assert rem_entropy_approx(2 * sigma_c, 64) == 0.0


# ---------------------------------------------------------------------------
# per-sample quantities, sampling and chunking
# ---------------------------------------------------------------------------


def test_row_statistics_exact():
    s = np.array([[0.0, -50.0], [0.3, -0.2], [-700.0, 5.0]])
    mc = saturation_stats_from_logits(s)
    h, mp, jac = scaling._row_stats(s)
    delta = np.abs(s[:, 0] - s[:, 1])
    e = np.exp(-delta)
    np.testing.assert_allclose(mp, 1 / (1 + e), rtol=1e-15)
    np.testing.assert_allclose(h, np.log1p(e) + delta * e / (1 + e), rtol=1e-14)
    np.testing.assert_allclose(jac[:2], 1 / (1 + np.cosh(delta[:2])), rtol=1e-10)
    assert 0.0 <= jac[2] < 1e-300
    assert mc.entropy == pytest.approx(h.mean())
    # many keys, moderate logits: against the softmax module and a dense eigensolver
    s = 2.0 * np.random.default_rng(1).standard_normal((50, 7))
    h, mp, jac = scaling._row_stats(s)
    p = softmax(s)
    np.testing.assert_allclose(h, softmax_entropy(p), rtol=1e-12)
    np.testing.assert_allclose(mp, p.max(axis=-1), rtol=1e-14)
    dense = p[:, :, None] * np.eye(7) - p[:, :, None] * p[:, None, :]
    np.testing.assert_allclose(jac, np.linalg.eigvalsh(dense)[:, -1], rtol=1e-10)


def test_one_key_is_degenerate():
    st1 = saturation_stats(8, 1, samples=10)
    assert (st1.entropy, st1.max_p, st1.jac_norm) == (0.0, 1.0, 0.0)


def test_saturation_stats_equals_stats_of_sample_logits(monkeypatch):
    """Chunking does not change the random stream."""
    whole = saturation_stats(5, 6, scaled=False, samples=101, seed=4)
    monkeypatch.setattr(scaling, "_CHUNK_ELEMENTS", 30)  # 5 rows per chunk
    chunked = saturation_stats(5, 6, scaled=False, samples=101, seed=4)
    direct = saturation_stats_from_logits(sample_logits(5, 6, scaled=False, samples=101, seed=4))
    assert whole == chunked == direct


def test_seed_and_generator():
    a = sample_logits(3, 4, samples=5, seed=9)
    b = sample_logits(3, 4, samples=5, seed=np.random.default_rng(9))
    assert a.shape == (5, 4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, sample_logits(3, 4, samples=5, seed=10))


@pytest.mark.parametrize("scaled", [True, False])
def test_fast_sampler_matches_direct_in_distribution(scaled):
    d, n_keys, n = 16, 8, 4_000
    fast = sample_logits(d, n_keys, scaled=scaled, samples=n, seed=1)
    slow = sample_logits_direct(d, n_keys, scaled=scaled, samples=n, seed=2)
    assert fast.shape == slow.shape == (n, n_keys)
    crit = ks_critical(n, n)
    for stat in (lambda s: s.max(axis=1), lambda s: s.std(axis=1), lambda s: s[:, 0]):
        assert ks_statistic(stat(fast), stat(slow)) < crit


def test_ks_has_power_against_a_wrong_sampler():
    """Fixed sigma = 1 logits are what scaling gives only as d -> inf; at d = 2 KS sees it."""
    n = 4_000
    slow = sample_logits_direct(2, 8, scaled=True, samples=n, seed=2)
    wrong = np.random.default_rng(1).standard_normal((n, 8))
    assert ks_statistic(wrong.std(axis=1), slow.std(axis=1)) > 2 * ks_critical(n, n)


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "name", "exc"),
    [
        (lambda: sample_logits(0, 4), "d", ValueError),
        (lambda: sample_logits(2.5, 4), "d", TypeError),
        (lambda: sample_logits(4, 0), "n_keys", ValueError),
        (lambda: sample_logits(4, 4, samples=1), "samples", ValueError),
        (lambda: sample_logits(4, 4, scaled=1), "scaled", TypeError),
        (lambda: sample_logits(4, 4, seed=-1), "seed", ValueError),
        (lambda: sample_logits(4, 4, seed=1.5), "seed", TypeError),
        (lambda: sample_logits_direct(4, 4, scaled="yes"), "scaled", TypeError),
        (lambda: saturation_stats(0, 4), "d", ValueError),
        (lambda: saturation_stats(4, 4, samples=0), "samples", ValueError),
        (lambda: gradient_norms(4, 0), "n_keys", ValueError),
        (lambda: gradient_norms(4, 4, scaled=None), "scaled", TypeError),
        (lambda: two_token_expectations(0.0), "sigma", ValueError),
        (lambda: two_token_expectations(-1.0), "sigma", ValueError),
        (lambda: two_token_expectations(float("nan")), "sigma", ValueError),
        (lambda: two_token_expectations(float("inf")), "sigma", ValueError),
        (lambda: two_token_expectations("1"), "sigma", TypeError),
        (lambda: two_token_expectations(np.array([1.0, 2.0])), "sigma", TypeError),
        (lambda: two_token_asymptotes(0.0), "sigma", ValueError),
        (lambda: two_token_asymptotes(2.0, terms=3), "terms", ValueError),
        (lambda: rem_entropy_approx(1.0, 0), "n_keys", ValueError),
        (lambda: rem_entropy_approx(float("inf"), 4), "sigma", ValueError),
        (lambda: saturation_stats_from_logits(np.zeros((1, 4))), "s", ValueError),
        (lambda: saturation_stats_from_logits(np.zeros(4)), "s", ValueError),
        (lambda: saturation_stats_from_logits([[0.0, np.nan], [1.0, 2.0]]), "s", ValueError),
    ],
)
def test_bad_input(call, name, exc):
    with pytest.raises(exc, match=rf"\b{name}\b"):
        call()


def test_rem_frozen_phase_entropy_is_order_one_not_order_log_n():
    """Beyond sigma_c = sqrt(2 ln N) the leading ln N term is 0, as returned: the
    entropy divided by ln N falls as N grows at a fixed sigma / sigma_c."""
    rng = np.random.default_rng(4)
    ratios = []
    for n in (64, 4096):
        sigma = 1.5 * math.sqrt(2 * math.log(n))
        assert rem_entropy_approx(sigma, n) == 0.0
        mc = saturation_stats_from_logits(sigma * rng.standard_normal((300, n)))
        assert 0.3 < mc.entropy < 3.0  # of order 1
        ratios.append(mc.entropy / math.log(n))
    assert ratios[1] < 0.8 * ratios[0]


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"samples": 10**9}, "samples"), ({"n_keys": 10**9}, "n_keys"), ({"d": 10**9}, "d"),
    ({"samples": 10**6, "n_keys": 10**3}, "samples"),
])
def test_sampler_sizes_that_would_exhaust_memory_are_rejected(kwargs, name):
    kw = {"d": 4, "n_keys": 3, "samples": 10} | kwargs
    for fn in (scaling.sample_logits, scaling.saturation_stats, init_gradients.gradient_samples):
        with pytest.raises(ValueError, match=f"^{name}"):
            fn(**kw)


def test_huge_sigma_gives_the_limits_without_overflow():
    for sigma in (1e160, 1e200, 1e300):
        assert quadrature.rem_entropy_approx(sigma, 16) == 0.0
        st2 = quadrature.two_token_asymptotes(sigma, terms=2)
        assert st2.jac_norm == pytest.approx(1 / (math.sqrt(math.pi) * sigma), rel=1e-15)
        assert st2.max_p == 1.0


def test_seed_errors_name_seed():
    for bad in (-1, "0", 1.5, True):
        with pytest.raises((ValueError, TypeError), match="^seed"):
            scaling.sample_logits(4, 3, samples=10, seed=bad)
