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


# ---------------------------------------------------------------------------
# the convergence rate
# ---------------------------------------------------------------------------

from lipattn import compositions, min_entropy, spectral  # noqa: E402


def exact_sigma_sq(A, u0, iters):
    """sigma_hat_k^2 in exact rationals: no square roots are needed, since
    sigma_hat^2 = |A v|^2/|v|^2 for the unnormalised v = (A^T A)^(k-1) A^T u0."""
    A, v = sp.Matrix(A), sp.Matrix(A).T * sp.Matrix(u0)
    out = []
    for _ in range(iters):
        Av = A * v
        out.append((Av.T * Av)[0] / (v.T * v)[0])
        v = A.T * Av
    return out


def test_rank_two_closed_form_is_exact_in_rationals():
    # W = U diag(s1, s2) V^T with Pythagorean rotations: every iterate rational
    s1, s2 = sp.Integer(3), sp.Rational(3, 2)
    U = sp.Matrix([[3, -4], [4, 3]]) / 5
    V = sp.Matrix([[5, -12], [12, 5]]) / 13
    W = U * sp.diag(s1, s2) * V.T
    b = sp.Matrix([2, 1])  # coordinates of u0 in the basis U
    exact = exact_sigma_sq(W, U * b, 8)
    t2, rho = (b[1] / b[0]) ** 2, s2 / s1
    for k, sk in enumerate(exact, start=1):
        assert sk.is_rational
        closed = s1**2 * (1 - (1 - rho**2) * t2 * rho ** (4 * k - 2)
                          / (1 + t2 * rho ** (4 * k - 2)))
        assert sp.simplify(sk - closed) == 0
        got = spectral.predicted_error(3.0, 1.5, 0.5, k)
        assert float(1 - sk / s1**2) == pytest.approx(float(got), rel=1e-13)
    np.testing.assert_allclose(
        power_iteration(np.array(W, float), 8,
                        u0=np.array(U * b, float).ravel()).sigma,
        [float(sp.sqrt(s)) for s in exact], rtol=1e-14)


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_measured_rate_matches_rho_to_the_fourth(rho):
    # a 40 x 30 matrix: sigma_1 = 1, sigma_2 = rho, the rest at most rho/2
    s = np.r_[1.0, rho, np.linspace(rho / 2, 0.01, 28)]
    A = spectral.matrix_with_spectrum(s, (40, 30), seed=1)
    sig = power_iteration(A, 400, seed=2).sigma
    err = 1 - sig**2
    ks = np.nonzero((err > 1e-13) & (err < 1e-3))[0]
    assert ks.size >= 4
    slope = np.polyfit(ks, np.log(err[ks]), 1)[0]
    assert slope == pytest.approx(4 * np.log(rho), rel=0.02)


@SETTINGS
@given(st.integers(2, 6), st.integers(0, 10_000), st.integers(1, 20))
def test_error_bound_t2_rho_4k_minus_2(r, seed, k):
    rng = np.random.default_rng(seed)
    s = np.sort(rng.uniform(0.1, 1.0, r))[::-1]
    A = spectral.matrix_with_spectrum(s, (r + 1, r), seed=seed)
    u0 = rng.standard_normal(r + 1)
    U = np.linalg.svd(A)[0][:, :r]
    b = U.T @ u0
    tan2 = np.sum(b[1:] ** 2) / b[0] ** 2
    est = power_iteration(A, k, u0=u0).sigma[-1]
    bound = tan2 * (s[1] / s[0]) ** (4 * k - 2)
    assert 1 - est**2 / s[0] ** 2 <= bound * (1 + 1e-9) + 1e-13


def test_tied_top_singular_values_still_give_sigma_1():
    A = spectral.matrix_with_spectrum([2.0, 2.0, 1.0], seed=4)
    sig = power_iteration(A, 12, seed=5).sigma
    assert sig[-1] == pytest.approx(2.0, rel=1e-12)


def test_orthogonal_start_converges_to_sigma_2_in_exact_arithmetic():
    A = np.diag([1.0, 0.5, 0.25])
    sig = power_iteration(A, 50, u0=[0.0, 1.0, 1.0]).sigma
    assert sig[-1] == pytest.approx(0.5, rel=1e-12)


def test_steps_to_tolerance_and_lanczos_cost():
    assert spectral.steps_to_tolerance([0.5, 0.9, 0.999], 1.0, 1e-2) == 3
    assert spectral.steps_to_tolerance([0.5], 1.0, 1e-2) is None
    A = spectral.matrix_with_spectrum(np.r_[1.0, 0.99, np.linspace(0.9, 0.0, 98)], seed=0)
    n, s = spectral.lanczos_cost(A, 1e-12)
    assert s == pytest.approx(1.0, rel=1e-9)
    k = spectral.steps_to_tolerance(power_iteration(A, 5000).sigma, 1.0, 1e-9)
    assert n < 2 * k  # a tight gap: Lanczos needs far fewer products


def test_counting_operator_counts():
    op = spectral.CountingOperator(np.eye(3))
    op.matvec(np.ones(3))
    op.rmatvec(np.ones(3))
    op.matmat(np.ones((3, 2)))
    assert op.count == 4


def test_track_drift_persistent_beats_fresh_and_never_overestimates():
    W = spectral.matrix_with_spectrum(np.r_[1.0, 0.8, np.linspace(0.7, 0.1, 22)], seed=3)
    per = spectral.track_drift(W, 60, 0.01, persistent=True, seed=1)
    fresh = spectral.track_drift(W, 60, 0.01, persistent=False, seed=1)
    np.testing.assert_array_equal(per.sigma, fresh.sigma)  # the same walk
    assert np.all(per.underestimate >= -1e-12) and np.all(fresh.underestimate >= -1e-12)
    assert np.median(per.underestimate[20:]) < 1e-3 < np.median(fresh.underestimate[20:])
    still = spectral.track_drift(W, 5, 0.0, seed=1)
    assert np.all(np.diff(still.sigma_hat) >= -1e-15)  # a fixed W: plain power iteration


@pytest.mark.parametrize("call,exc,match", [
    (lambda: min_entropy.entropy_floor(1, 1.0), ValueError, "T must"),
    (lambda: min_entropy.entropy_floor(3, -1.0), ValueError, "s must"),
    (lambda: min_entropy.entropy_floor(3, np.nan), ValueError, "s must"),
    (lambda: min_entropy.entropy_floor(3, "a"), TypeError, "s must"),
    (lambda: spectral.predicted_error(1.0, 2.0, 1.0, 1), ValueError, "sigma_2"),
    (lambda: spectral.predicted_error(1.0, 0.5, -1.0, 1), ValueError, "tan_theta"),
    (lambda: spectral.predicted_error(1.0, 0.5, 1.0, 0), ValueError, "k must"),
    (lambda: spectral.steps_to_tolerance([1.0], 1.0, 0.0), ValueError, "rtol"),
    (lambda: spectral.matrix_with_spectrum([1.0, -1.0]), ValueError, "singular_values"),
    (lambda: spectral.matrix_with_spectrum([1.0, 1.0], (1, 2)), ValueError, "shape"),
    (lambda: spectral.lanczos_cost(np.ones((1, 3)), 1e-6), ValueError, "A must"),
    (lambda: spectral.lanczos_cost(np.ones((3, 3)), 0.0), ValueError, "tol"),
    (lambda: spectral.track_drift(np.ones((2, 2)), 0, 0.1), ValueError, "steps"),
    (lambda: spectral.track_drift(np.ones((2, 2)), 3, -0.1), ValueError, "drift"),
    (lambda: spectral.track_drift(np.ones((2, 2)), 3, 0.1, persistent=1), TypeError,
     "persistent"),
    (lambda: compositions.product_bound([]), ValueError, "weights"),
    (lambda: compositions.product_bound(np.ones((2, 2))), TypeError, "weights"),
    (lambda: compositions.product_bound([np.ones((2, 3)), np.ones((2, 2))]), ValueError,
     r"weights\[1\]"),
    (lambda: compositions.relu_mlp_jacobian_norms([np.ones((2, 3))], np.ones((4, 3))),
     ValueError, "X must"),
    (lambda: compositions.pattern_bound([np.ones((2, 9)), np.ones((9, 9)), np.ones((9, 2))]),
     ValueError, "at most 16"),
    (lambda: spectral.spectral_normalize(np.array([[1.0, 0.0]]), [0.0]), ValueError, "^u must"),
    (lambda: power_iteration(aslinearoperator(np.ones((2, 2))), 1, u0=np.ones(3)),
     ValueError, "u0"),
])
def test_bad_input_new(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 10_000), st.integers(1, 8))
def test_pytorch_order_estimate_interleaves(m, n, seed, k):
    # PyTorch reports ||A^T u_k|| (u first, then v): between our k-th and (k+1)-th
    A = np.random.default_rng(seed).standard_normal((m, n))
    run = power_iteration(A, k + 1, seed=seed)
    u_k = power_iteration(A, k, seed=seed).u
    torch_sigma = np.linalg.norm(A.T @ u_k)
    tol = 1e-12 * np.linalg.norm(A, 2)
    assert run.sigma[k - 1] - tol <= torch_sigma <= run.sigma[k] + tol


def test_track_drift_refuses_a_zero_start():
    with pytest.raises(ValueError, match="W0 must be a non-zero"):
        spectral.track_drift(np.zeros((3, 3)), 3, 0.1)
