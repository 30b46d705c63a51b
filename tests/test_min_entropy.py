"""Tests of :mod:`lipattn.min_entropy`: the entropy floor against minimisation with
restarts, its closed form and limits, random logits (hypothesis), the three-level
search, and the one-spike minimiser."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import minimize
from test_spectral import SETTINGS

from lipattn import min_entropy


def _entropy(a):
    p = np.exp(a - a.max())
    p /= p.sum()
    return float(-np.sum(p * np.log(np.where(p > 0, p, 1.0))))


@pytest.mark.parametrize("T", [2, 3, 5, 8])
@pytest.mark.parametrize("s", [0.3, 1.0, 3.0, 7.0])
def test_entropy_floor_against_minimisation_with_restarts(T, s):
    rng = np.random.default_rng(T * 100 + int(10 * s))

    def on_sphere(x):
        c = x - x.mean()
        return c / np.linalg.norm(c) * s

    best = min(minimize(lambda x: _entropy(on_sphere(x)), rng.standard_normal(T),
                        method="BFGS").fun for _ in range(25))
    floor = float(min_entropy.entropy_floor(T, s))
    assert floor <= best + 1e-9
    assert best - floor < 1e-6


def test_entropy_floor_closed_form_and_limits():
    # T = 2: the only centred vectors are +-(s/sqrt 2)(1, -1)
    s = np.array([0.0, 0.5, 2.0])
    a = s / np.sqrt(2)
    p = 1 / (1 + np.exp(-2 * a))
    h = -(p * np.log(p) + (1 - p) * np.log1p(-p))
    np.testing.assert_allclose(min_entropy.entropy_floor(2, s), h, rtol=1e-12)
    assert float(min_entropy.entropy_floor(7, 0.0)) == pytest.approx(np.log(7))
    assert np.all(np.diff(min_entropy.entropy_floor(16, np.linspace(0, 50, 200))) <= 0)
    assert float(min_entropy.entropy_floor(16, 1e300)) == 0.0
    assert min_entropy.entropy_floor(3, [[1.0, 2.0]]).shape == (1, 2)


@SETTINGS
@given(st.integers(2, 12), st.floats(0.0, 30.0), st.integers(0, 10_000))
def test_random_logits_never_beat_the_floor(T, s, seed):
    a = np.random.default_rng(seed).standard_normal(T)
    c = a - a.mean()
    nrm = np.linalg.norm(c)
    if nrm < 1e-9:
        return
    assert _entropy(c / nrm * s) >= float(min_entropy.entropy_floor(T, s)) - 1e-12


@pytest.mark.parametrize("T", [3, 5, 12])
def test_three_level_search_finds_nothing_below_the_floor(T):
    for s in (0.2, 1.5, 6.0):
        found = min_entropy.min_entropy_three_levels(T, s)
        floor = float(min_entropy.entropy_floor(T, s))
        assert floor - 1e-12 <= found <= floor + 1e-9
    assert min_entropy.min_entropy_three_levels(2, 1.0) == float(min_entropy.entropy_floor(2, 1.0))


def test_minimiser_has_one_spike():
    # a BFGS minimiser on the sphere has one entry above the mean, the rest equal
    T, s = 6, 2.5
    rng = np.random.default_rng(0)

    def on_sphere(x):
        c = x - x.mean()
        return c / np.linalg.norm(c) * s

    res = min((minimize(lambda x: _entropy(on_sphere(x)), rng.standard_normal(T),
                        method="BFGS", options={"gtol": 1e-10}) for _ in range(10)),
              key=lambda r: r.fun)
    a = np.sort(on_sphere(res.x))
    assert np.sum(a > 0) == 1 and np.ptp(a[:-1]) < 1e-3


@pytest.mark.parametrize("call,match", [
    (lambda: min_entropy.min_entropy_three_levels(201, 1.0), "T must"),
    (lambda: min_entropy.min_entropy_three_levels(4, -1.0), "s must"),
    (lambda: min_entropy.min_entropy_three_levels(4, 1.0, grid=8), "grid"),
])
def test_three_level_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
