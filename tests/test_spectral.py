"""Tests of :mod:`lipattn.spectral`: exact rational iterates from sympy, the
Rayleigh-quotient bound, the exact norm on arrays and operators, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import aslinearoperator

from lipattn.spectral import power_iteration, spectral_norm, spectral_normalize

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None)


def sympy_iterates(A, u0, iters):
    """Exact power-iteration estimates (sqrt of rationals), in sympy."""
    A = sp.Matrix(A)
    u = sp.Matrix(u0)
    u = u / sp.sqrt((u.T * u)[0])
    out = []
    for _ in range(iters):
        v = A.T * u
        v = v / sp.sqrt((v.T * v)[0])
        Av = A * v
        s = sp.sqrt((Av.T * Av)[0])
        u = Av / s
        out.append(sp.nsimplify(s))
    return out


@pytest.mark.parametrize("A,u0", [
    ([[3, 1], [0, 2]], [1, 0]),
    ([[2, 1, 0], [1, 3, 1]], [1, -2]),
])
def test_matches_exact_sympy_iterates(A, u0):
    exact = sympy_iterates(A, u0, 6)
    got = power_iteration(np.array(A, float), 6, u0=np.array(u0, float)).sigma
    np.testing.assert_allclose(got, [float(s) for s in exact], rtol=1e-13)


@SETTINGS
@given(st.integers(1, 7), st.integers(1, 7), st.integers(0, 10_000), st.integers(1, 12))
def test_estimate_never_exceeds_sigma_1(m, n, seed, iters):
    A = np.random.default_rng(seed).standard_normal((m, n))
    sig = power_iteration(A, iters, seed=seed).sigma
    assert np.all(sig <= np.linalg.norm(A, 2) * (1 + 1e-12))
    # monotone non-decreasing (Rayleigh quotients of A^T A along the Krylov powers)
    assert np.all(np.diff(sig) >= -1e-12 * sig[-1])


def test_spectral_norm_dense_and_operator_agree_with_numpy():
    rng = np.random.default_rng(3)
    for shape in [(1, 5), (5, 1), (30, 20), (600, 500)]:
        A = rng.standard_normal(shape)
        ref = np.linalg.norm(A, 2)
        assert abs(spectral_norm(A) - ref) <= 1e-9 * ref
        assert abs(spectral_norm(aslinearoperator(A)) - ref) <= 1e-9 * ref


def test_spectral_normalize_is_at_least_one_before_convergence():
    rng = np.random.default_rng(4)
    W = rng.standard_normal((8, 6))
    Wn, u, s = spectral_normalize(W, rng.standard_normal(8), iters=1)
    assert np.linalg.norm(Wn, 2) >= 1 - 1e-12 and s <= np.linalg.norm(W, 2)
    assert u.shape == (8,) and abs(np.linalg.norm(u) - 1) < 1e-12


def test_orthogonal_start_gives_zero_estimate():
    A = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert np.all(power_iteration(A, 3, u0=[0.0, 1.0]).sigma == 0.0)


@pytest.mark.parametrize("call,match", [
    (lambda: power_iteration(np.ones((2, 2)), 0), "iters"),
    (lambda: power_iteration(np.array([[np.inf, 1.0]]), 1), "A must"),
    (lambda: power_iteration(np.ones((2, 2)), 1, u0=np.zeros(2)), "u0"),
    (lambda: power_iteration(np.ones((2, 3)), 1, u0=np.ones(3)), "u0"),
    (lambda: spectral_norm(np.ones((2, 2)), tol=0.0), "tol"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
