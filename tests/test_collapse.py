"""Tests of lipattn.collapse against independent references: closed forms,
finite differences, mpmath, and the inequalities proved in Chapter 3."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lipattn import collapse as c
from lipattn.attention import attention_matrix, self_attention


def _weights(d, s=1.0, seed=0):
    return [w[0] for w in c.random_weights(d, s, 1, seed)]


# ---------------------------------------------------------------------------
# residuals
# ---------------------------------------------------------------------------
def test_residual_is_the_frobenius_optimal_rank_one_deviation():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((7, 3))
    R = c.residual(X)
    np.testing.assert_allclose(R.sum(axis=0), 0, atol=1e-14)
    for _ in range(5):
        x = rng.standard_normal(3)
        # Pythagoras: ||X - 1 x^T||^2 = ||res||^2 + N ||x - xbar||^2
        lhs = np.sum((X - x) ** 2)
        rhs = np.sum(R**2) + 7 * np.sum((x - X.mean(axis=0)) ** 2)
        assert lhs == pytest.approx(rhs, rel=1e-12)
        assert lhs >= np.sum(R**2)


def test_residual_and_relative_residual_broadcast():
    X = np.random.default_rng(1).standard_normal((2, 3, 5, 4))
    R = c.residual(X)
    r = c.relative_residual(X)
    assert R.shape == X.shape and r.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            ref = np.linalg.norm(X[i, j] - X[i, j].mean(0)) / np.linalg.norm(X[i, j])
            assert r[i, j] == pytest.approx(ref, rel=1e-13)


def test_relative_residual_limits_and_extremes():
    assert float(c.relative_residual(np.zeros((3, 2)))) == 0.0
    assert float(c.relative_residual(np.ones((3, 2)))) == 0.0
    X = np.array([[1.0, 0.0], [-1.0, 0.0]])  # mean zero: r = 1
    assert float(c.relative_residual(X)) == pytest.approx(1.0)
    big = np.random.default_rng(2).standard_normal((4, 3)) * 1e300
    small = big * 1e-300 * 1e-300
    assert 0 < float(c.relative_residual(big)) <= 1
    assert float(c.relative_residual(small)) == pytest.approx(
        float(c.relative_residual(big)), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(0, 10_000))
def test_dobrushin_contracts_the_diameter(n, d, seed):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(n, 0.3), size=n)
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 10)
    tau = float(c.dobrushin(P))
    assert 0 <= tau <= 1 + 1e-12
    assert float(c.diameter(P @ X)) <= tau * float(c.diameter(X)) * (1 + 1e-12) + 1e-12


def test_dobrushin_closed_forms():
    assert float(c.dobrushin(np.eye(3))) == 1.0
    assert float(c.dobrushin(np.full((4, 4), 0.25))) == 0.0
    P = np.array([[0.7, 0.3], [0.2, 0.8]])
    assert float(c.dobrushin(P)) == pytest.approx(0.5)
    X = np.array([[0.0, 0.0], [3.0, 4.0]])
    assert float(c.diameter(X)) == pytest.approx(5.0)


# ---------------------------------------------------------------------------
# the one-layer theorems of the chapter
# ---------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.floats(0.2, 3.0), st.integers(0, 10_000))
def test_one_layer_contraction_from_the_logit_spread(n, s, seed):
    rng = np.random.default_rng(seed)
    d = 4
    X = rng.standard_normal((n, d)) + rng.standard_normal(d)
    W_Q, W_K, W_V = _weights(d, s, seed)
    S = (X @ W_Q) @ (X @ W_K).T / math.sqrt(d)
    spread = float(np.max(S.max(axis=1) - S.min(axis=1)))
    P = attention_matrix(X, W_Q, W_K)
    assert P.min() >= math.exp(-spread) / n * (1 - 1e-12)
    assert float(c.dobrushin(P)) <= 1 - math.exp(-spread) + 1e-12
    lhs = float(c.diameter(self_attention(X, W_Q, W_K, W_V)))
    rhs = (1 - math.exp(-spread)) * np.linalg.norm(W_V, 2) * float(c.diameter(X))
    assert lhs <= rhs * (1 + 1e-12) + 1e-12


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.integers(1, 6), st.floats(0.1, 4.0), st.floats(0.0, 50.0),
       st.floats(0.01, 3.0), st.integers(0, 10_000))
def test_cubic_bound_holds_for_any_mean(n, d, s, mean_size, res_size, seed):
    rng = np.random.default_rng(seed)
    W_Q, W_K, W_V = _weights(d, s, seed)
    xbar = rng.standard_normal(d) * mean_size
    R = c.residual(rng.standard_normal((n, d)))
    R *= res_size / np.linalg.norm(R)
    X = xbar + R
    out = np.linalg.norm(c.residual(self_attention(X, W_Q, W_K, W_V)))
    bound = c.cubic_constant(W_Q, W_K, W_V) * np.linalg.norm(c.residual(X)) ** 3
    assert out <= bound * (1 + 1e-9) + 1e-13


def test_cubic_constant_closed_form():
    d = 3
    W = 2.0 * np.eye(d)
    assert c.cubic_constant(W, W, 5 * np.eye(d)) == pytest.approx(4 * 5 / (2 * math.sqrt(3)))


def test_leading_coefficient_is_exact():
    """||res f(1 xbar^T + eps R)|| / eps^3 -> ||R A R^T R W_V|| / N, error O(eps)."""
    rng = np.random.default_rng(3)
    n, d = 6, 4
    W_Q, W_K, W_V = _weights(d, 1.5, 3)
    xbar = rng.standard_normal(d)
    R = c.residual(rng.standard_normal((n, d)))
    lead = np.linalg.norm(c.cubic_leading_term(R, W_Q, W_K, W_V))
    errs = []
    for eps in (1e-1, 1e-2, 1e-3):
        X = xbar + eps * R
        out = np.linalg.norm(c.residual(self_attention(X, W_Q, W_K, W_V))) / eps**3
        errs.append(abs(out / lead - 1))
    assert errs[2] < 1e-2
    assert 5 < errs[0] / errs[1] < 20 and 5 < errs[1] / errs[2] < 20  # first order in eps


def test_cubic_constant_is_sharp_for_two_tokens():
    d = 3
    eye = np.eye(d)
    c0 = c.cubic_constant(eye, eye, eye)
    R = np.array([[1.0, 0.5, -0.2], [-1.0, -0.5, 0.2]])
    ratio = np.linalg.norm(c.cubic_leading_term(R, eye, eye, eye)) / np.linalg.norm(R) ** 3
    assert ratio == pytest.approx(c0, rel=1e-12)


def test_query_gradient_against_finite_differences_and_collapse():
    rng = np.random.default_rng(4)
    n, d = 5, 3
    W_Q, W_K, W_V = _weights(d, 1.0, 4)
    X = rng.standard_normal((n, d)) + 1.0
    G = rng.standard_normal((n, d))
    grad = c.query_gradient(X, W_Q, W_K, W_V, G)
    h = 1e-6
    for i, j in [(0, 0), (1, 2), (2, 1)]:
        E = np.zeros_like(W_Q)
        E[i, j] = h
        fd = (np.sum(G * self_attention(X, W_Q + E, W_K, W_V))
              - np.sum(G * self_attention(X, W_Q - E, W_K, W_V))) / (2 * h)
        assert grad[i, j] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    collapsed = np.ones((n, 1)) * X[0]
    assert np.abs(c.query_gradient(collapsed, W_Q, W_K, W_V, G)).max() < 1e-12


# ---------------------------------------------------------------------------
# trajectories
# ---------------------------------------------------------------------------
def _setup(n=8, d=8, s=1.0, layers=1, seed=0, mean=1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) + mean
    return X, c.random_weights(d, s, layers, seed)


def test_trajectory_matches_a_direct_loop():
    X, (Q, K, V) = _setup(layers=4)
    r = c.trajectory(X, Q, K, V, 4)
    Y, ref = X, [float(c.relative_residual(X))]
    for ell in range(4):
        Y = self_attention(Y, Q[ell], K[ell], V[ell])
        ref.append(float(c.relative_residual(Y)))
    np.testing.assert_allclose(r, ref, rtol=1e-12)
    # a list of per-layer arrays is the same as the 3-D array
    np.testing.assert_array_equal(c.trajectory(X, list(Q), list(K), list(V), 4), r)
    # shared weights are the same as repeating them
    rep = [np.repeat(w[:1], 4, axis=0) for w in (Q, K, V)]
    np.testing.assert_array_equal(c.trajectory(X, Q[0], K[0], V[0], 4),
                                  c.trajectory(X, *rep, 4))
    assert c.trajectory(X, Q[0], K[0], V[0], 0).tolist() == [float(c.relative_residual(X))]


def test_float_and_mpmath_agree_while_above_rounding():
    X, W = _setup(layers=6)
    f64 = c.trajectory(X, *W, 6)
    mpv = c.trajectory(X, *W, 6, dps=50)
    keep = f64 > 1e-12
    assert keep.sum() >= 3
    np.testing.assert_allclose(f64[keep], mpv[keep], rtol=1e-6)
    ab = c.trajectory(X, *W, 6, absolute=True)
    ab_mp = c.trajectory(X, *W, 6, absolute=True, dps=30)
    np.testing.assert_allclose(ab[:3], ab_mp[:3], rtol=1e-10)


def test_mpmath_exponent_ratios_approach_three():
    X, (Q, K, V) = _setup(layers=1)
    lr = c.trajectory(X, Q[0], K[0], V[0], 7, dps=600, log10=True)
    assert lr[6] < -150  # far below float64 rounding
    ratios = lr[1:] / lr[:-1]
    assert np.all(np.abs(ratios[4:7] - 3) < 0.03), ratios
    # the values themselves, as floats, underflow only below ~1e-308
    plain = c.trajectory(X, Q[0], K[0], V[0], 6, dps=300)
    np.testing.assert_allclose(np.log10(plain[:7]), lr[:7], rtol=1e-10)


def test_skips_keep_the_absolute_residual_and_alpha_keeps_the_relative():
    X, W = _setup(n=16, d=64, s=1.0, layers=20, seed=5, mean=0.0)
    pure = c.trajectory(X, *W, 20)
    assert pure[-1] < 1e-12  # the pure stack collapses
    ab = c.trajectory(X, *W, 20, skip=True, absolute=True)
    assert np.all(ab >= 0.9 * ab[0])
    rel1 = c.trajectory(X, *W, 20, skip=True)
    assert rel1[-1] < 0.2 * rel1[0]  # but the relative residual falls
    rel_a = c.trajectory(X, *W, 20, skip=True, alpha=1 / math.sqrt(20))
    assert np.all(rel_a >= 0.5 * rel_a[0])


def test_mlp_is_applied_and_lipschitz():
    X, (Q, K, V) = _setup(layers=1)
    d = X.shape[1]
    rng = np.random.default_rng(9)
    W1, W2 = rng.standard_normal((d, 16)) / 4, rng.standard_normal((16, d)) / 4
    Xs, _ = c.stack_states(X, Q, K, V, 1, mlp=(W1, W2))
    F = self_attention(X, Q[0], K[0], V[0])
    np.testing.assert_allclose(Xs[1], np.maximum(F @ W1, 0) @ W2, rtol=1e-12)
    lip = np.linalg.norm(W1, 2) * np.linalg.norm(W2, 2)
    assert float(c.diameter(Xs[1])) <= lip * float(c.diameter(F)) * (1 + 1e-12)
    Xs2, _ = c.stack_states(X, Q, K, V, 1, skip=True, alpha=0.5, mlp=(W1, W2))
    Y = X + 0.5 * F
    np.testing.assert_allclose(Xs2[1], Y + 0.5 * np.maximum(Y @ W1, 0) @ W2, rtol=1e-12)
    mp_r = c.trajectory(X, Q, K, V, 1, mlp=(W1, W2), dps=30)
    np.testing.assert_allclose(mp_r, c.relative_residual(Xs), rtol=1e-10)


def test_stack_states_shapes_and_rows():
    X, W = _setup(layers=3)
    Xs, Ps = c.stack_states(X, *W, 3)
    assert Xs.shape == (4, 8, 8) and Ps.shape == (3, 8, 8)
    np.testing.assert_allclose(Ps.sum(-1), 1, rtol=1e-12)
    assert c.stack_states(X, *W, 0)[1].shape == (0, 8, 8)


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------
def test_bad_inputs():
    X, (Q, K, V) = _setup(layers=2)
    with pytest.raises(ValueError, match="layers"):
        c.trajectory(X, Q, K, V, -1)
    with pytest.raises(ValueError, match="W_Q"):
        c.trajectory(X, Q, K, V, 3)  # 2 per-layer arrays for 3 layers
    with pytest.raises(ValueError, match="dps"):
        c.trajectory(X, Q, K, V, 2, dps=10)
    with pytest.raises(ValueError, match="X"):
        c.trajectory(np.full((8, 8), np.nan), Q, K, V, 2)
    bad = Q.copy()
    bad[0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="W_Q"):
        c.trajectory(X, bad, K, V, 2)
    with pytest.raises(ValueError, match="W_K"):
        c.trajectory(X, Q, K[:, :, :3], V, 2)
    with pytest.raises(ValueError, match="W_V"):
        c.trajectory(X, Q, K, V[:, :, :3], 2)
    with pytest.raises(ValueError, match="W_Q"):
        c.trajectory(X[:, :5], Q, K, V, 2)
    with pytest.raises(TypeError, match="skip"):
        c.trajectory(X, Q, K, V, 2, skip="yes")
    with pytest.raises(ValueError, match="alpha"):
        c.trajectory(X, Q, K, V, 2, skip=True, alpha=-1.0)
    with pytest.raises(TypeError, match="mlp"):
        c.trajectory(X, Q, K, V, 2, mlp=np.eye(8))
    with pytest.raises(ValueError, match="mlp"):
        c.trajectory(X, Q, K, V, 2, mlp=(np.eye(8), np.eye(5)))
    with pytest.raises(ValueError, match="overflow"):
        c.trajectory(X, Q, K, 1e200 * V, 2, skip=True)
    with pytest.raises(ValueError, match="X"):
        c.residual(np.zeros(3))
    with pytest.raises(ValueError, match="X"):
        c.relative_residual([[np.inf]])
    with pytest.raises(TypeError, match="X"):
        c.diameter("abc")
    with pytest.raises(ValueError, match="P"):
        c.dobrushin(np.ones((2, 3)))
    with pytest.raises(ValueError, match="W_K"):
        c.cubic_constant(np.eye(3), np.eye(2), np.eye(3))
    with pytest.raises(ValueError, match="W_V"):
        c.cubic_leading_term(np.ones((2, 3)), np.eye(3), np.eye(3), np.eye(2))
    with pytest.raises(ValueError, match="scale"):
        c.random_weights(4, 0.0, 1)
    with pytest.raises(ValueError, match="layers"):
        c.random_weights(4, 1.0, 0)
    with pytest.raises(ValueError, match="G"):
        c.query_gradient(X, Q[0], K[0], V[0], np.ones((3, 3)))


def test_errors_name_the_callers_arguments():
    W = np.eye(2)
    with pytest.raises(ValueError, match="match R of shape"):
        c.cubic_leading_term(np.zeros((3, 4)), W, W, W)
    with pytest.raises(TypeError, match="^W_V must"):
        c.cubic_constant(W, W, None)
    with pytest.raises(TypeError, match="^W_Q must"):
        c.cubic_constant(None, W, W)
    with pytest.raises(TypeError, match="^A must"):
        c.spectral_2norm("abc")


def test_diameter_and_leading_term_are_scale_invariant_or_raise():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 3))
    Q, K, V = rng.standard_normal((3, 3, 3))
    ref = max(np.linalg.norm(a - b) for a in X for b in X)
    for s in (1e-200, 1e200):
        assert c.diameter(s * X) == pytest.approx(s * ref, rel=1e-13)
        np.testing.assert_allclose(c.cubic_leading_term(X, Q, K, s * V),
                                   s * c.cubic_leading_term(X, Q, K, V), rtol=1e-12)
    with pytest.raises(ValueError, match="R, W_Q, W_K, W_V must give a leading term"):
        c.cubic_leading_term(1e200 * X, Q, K, V)
