"""Tests of :mod:`lipattn.quadrature`: the exact two-key expectations against mpmath
quadrature and sympy Taylor series, their limits and monotonicity, and the asymptotes'
leading terms and next-order constants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_scaling import FIELDS, mpmath_two_token

from lipattn.quadrature import two_token_asymptotes, two_token_expectations

ZETA3 = 1.2020569031595942

# ---------------------------------------------------------------------------
# two tokens: quadrature
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [1e-3, 0.1, 0.7, 1.0, 3.0, 30.0, 1e3, 1e4])
def test_two_token_matches_mpmath(sigma):
    got = two_token_expectations(sigma)
    ref = mpmath_two_token(sigma)
    for f, r in zip(FIELDS, ref, strict=True):
        assert getattr(got, f) == pytest.approx(r, rel=1e-11, abs=0.0), f
    # the small complement 1 - max p is accurate too, not just max p
    assert 1.0 - got.max_p == pytest.approx(1.0 - ref[1], rel=1e-9)
    assert got.entropy_se == got.max_p_se == got.jac_norm_se == 0.0
    assert got.n_samples is None


def test_two_token_small_sigma_taylor():
    """Against Taylor series in sigma from sympy (odd powers for max p: the kink of |x|)."""
    sp = pytest.importorskip("sympy")
    x = sp.symbols("x", real=True)
    p = 1 / (1 + sp.exp(-x))
    order = 12
    series = {
        "entropy": sp.series(-p * sp.log(p) - (1 - p) * sp.log(1 - p), x, 0, order).removeO(),
        "max_p": sp.series(p, x, 0, order).removeO(),  # applied at |Delta|
        "jac_norm": sp.series(1 / (1 + sp.cosh(x)), x, 0, order).removeO(),
    }
    for sigma in (1e-3, 1e-2, 0.05):
        tau = math.sqrt(2.0) * sigma  # Delta ~ N(0, tau^2)
        got = two_token_expectations(sigma)
        for f, poly in series.items():
            poly = sp.Poly(poly, x)
            # E|Delta|^k = tau^k 2^(k/2) Gamma((k+1)/2) / sqrt(pi)
            val = sum(
                float(c) * tau**k * 2 ** (k / 2) * math.gamma((k + 1) / 2) / math.sqrt(math.pi)
                for (k,), c in poly.terms()
            )
            assert getattr(got, f) == pytest.approx(val, rel=1e-13), (f, sigma)


def test_two_token_limits_and_extremes():
    tiny = two_token_expectations(1e-300)
    assert tiny.entropy == pytest.approx(math.log(2.0), rel=1e-14)
    assert tiny.max_p == pytest.approx(0.5, rel=1e-14)
    assert tiny.jac_norm == pytest.approx(0.5, rel=1e-14)
    for sigma in (1e8, 1e100, 1e300):  # corrections O(sigma^-2) are invisible here
        got, asym = two_token_expectations(sigma), two_token_asymptotes(sigma)
        for f in ("entropy", "jac_norm"):
            assert getattr(got, f) == pytest.approx(getattr(asym, f), rel=1e-12), (f, sigma)
        assert 1 - got.max_p == pytest.approx(1 - asym.max_p, rel=1e-7)


@settings(max_examples=60, deadline=None)
@given(
    st.floats(1e-4, 1e5),
    st.floats(1.001, 10.0),
)
def test_two_token_bounds_and_monotonicity(sigma, factor):
    """Each integrand is monotone in |Delta|, so each mean is monotone in sigma."""
    a, b = two_token_expectations(sigma), two_token_expectations(sigma * factor)
    assert 0.0 < b.entropy < a.entropy <= math.log(2.0)
    assert 0.5 <= a.max_p < b.max_p < 1.0
    assert 0.0 < b.jac_norm < a.jac_norm <= 0.5


# ---------------------------------------------------------------------------
# two tokens: asymptotes
# ---------------------------------------------------------------------------


def _rel_errors(sigma, terms=1):
    ex, asym = two_token_expectations(sigma), two_token_asymptotes(sigma, terms=terms)
    return np.array([
        asym.jac_norm / ex.jac_norm - 1.0,
        asym.entropy / ex.entropy - 1.0,
        (1.0 - asym.max_p) / (1.0 - ex.max_p) - 1.0,  # relative error of the complement
    ])


def test_asymptote_leading_terms():
    at2 = two_token_asymptotes(2.0)
    assert at2.jac_norm == pytest.approx(1 / (2 * math.sqrt(math.pi)))
    assert at2.entropy == pytest.approx(math.pi**1.5 / 12)
    assert at2.max_p == pytest.approx(1 - math.log(2) / (2 * math.sqrt(math.pi)))
    sigmas = [3.0, 10.0, 30.0, 100.0, 1e3, 1e4]
    errs = np.abs([_rel_errors(s) for s in sigmas])
    assert np.all(np.diff(errs, axis=0) < 0)  # decreasing in sigma
    assert np.all(np.abs(_rel_errors(11.0)) < 0.01)  # < 1% from sigma ~ 11 on
    assert np.all(np.abs(_rel_errors(1e3)) < 2e-6)


def test_asymptote_next_order_constants():
    """sigma^2 * relative error -> int x^2 f / (4 int f): pi^2/12, 7 pi^2/60, 3 zeta(3)/(8 ln 2).

    The constants are the closed forms of int x^2 f / int f (pi^2/3 for the
    Jacobian, 7 pi^2/15 for the entropy, 3 zeta(3) / (2 ln 2) for 1 - max p);
    the quadrature they are compared with is checked against mpmath above.
    """
    expected = np.array([math.pi**2 / 12, 7 * math.pi**2 / 60, 3 * ZETA3 / (8 * math.log(2))])
    for sigma in (100.0, 300.0):
        measured = sigma**2 * _rel_errors(sigma) / (1 + _rel_errors(sigma))
        assert measured == pytest.approx(expected, rel=5e-3)
    # with the corrections the error is O(sigma^-4)
    assert np.all(np.abs(_rel_errors(100.0, terms=2)) < 1e-6)
    assert np.all(np.abs(_rel_errors(100.0, terms=2)) < np.abs(_rel_errors(100.0)) / 100)
