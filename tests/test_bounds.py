"""Tests of :mod:`lipattn.bounds`: the chapter's local bound (hypothesis, random and
adversarial inputs; its terms by hand), the ball bound, the audited formula (it fails
on explicit inputs for every constant) and Kim et al.'s L2 bounds.

References are independent: dense Jacobians and SVDs, the key piece of the
Jacobian rebuilt entry by entry from its definition, mpmath's Lambert function,
and multi-head L2 attention assembled from single heads by hand.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lipschitz import I2, _adversarial, problem

from lipattn import adversarial, attention, bounds, l2attention
from lipattn import lipschitz as lip
from lipattn.adversarial import two_sided_tokens
from lipattn.bounds import ball_lipschitz_bound, card_bound, local_lipschitz_bound
from lipattn.lipschitz import local_lipschitz
from lipattn.softmax import softmax


def _weights(rng, d, dk, dv, scale):
    return (scale * rng.standard_normal((d, dk)), scale * rng.standard_normal((d, dk)),
            scale * rng.standard_normal((d, dv)))


def _inputs(kind, N, d, R, rng, Wq, Wk):
    """Tokens of norm <= R: random, a sink along A's top symmetric eigenvector, two-sided."""
    if kind == "random":
        X = rng.standard_normal((N, d))
        return R * rng.uniform(0.2, 1, (N, 1)) * X / np.linalg.norm(X, axis=1, keepdims=True)
    A = Wq @ Wk.T / math.sqrt(Wq.shape[1])
    w, V = np.linalg.eigh(A + A.T)
    u = V[:, -1]
    if kind == "sink":
        return adversarial.sink_tokens(R, N, u)
    X = np.zeros((N, d))  # two-sided: 0, +R u, -R u, +R u, ...
    X[1::2] = R * u
    X[2::2] = -R * u
    return X


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["random", "sink", "two-sided"]), N=st.integers(2, 40),
       d=st.integers(1, 4), log_R=st.floats(-1.5, 1.0), w_scale=st.floats(0.05, 2.0),
       seed=st.integers(0, 10**6))
def test_ball_bound_is_never_below_the_exact_constant(kind, N, d, log_R, w_scale, seed):
    rng = np.random.default_rng(seed)
    Wq, Wk, Wv = _weights(rng, d, d, 2, w_scale)
    X = _inputs(kind, N, d, 10**log_R, rng, Wq, Wk)
    R = float(np.linalg.norm(X, axis=1).max())
    if R == 0.0:
        return
    exact = np.linalg.norm(lip.attention_jacobian(X, Wq, Wk, Wv), 2)
    assert exact <= bounds.ball_lipschitz_bound(R, N, Wq, Wk, Wv) * (1 + 1e-12)


def _key_piece(X, Wq, Wk, Wv):
    """Dense matrix of E -> rows x_i^T A E^T J_i X W_V, built from the definition."""
    N, d = X.shape
    A = Wq @ Wk.T / math.sqrt(Wq.shape[1])
    P = softmax(X @ A @ X.T, axis=-1)
    cols = []
    for k in range(N * d):
        E = np.zeros(N * d)
        E[k] = 1.0
        E = E.reshape(N, d)
        rows = [X[i] @ A @ E.T @ (np.diag(P[i]) - np.outer(P[i], P[i])) @ X @ Wv
                for i in range(N)]
        cols.append(np.concatenate(rows))
    return np.array(cols).T, A, P


@settings(max_examples=40, deadline=None)
@given(N=st.integers(2, 24), d=st.integers(1, 3), log_scale=st.floats(-1, 1),
       seed=st.integers(0, 10**6))
def test_key_piece_cauchy_schwarz_step(N, d, log_scale, seed):
    """||key piece|| <= ||W_V|| max_i ||A^T x_i|| sqrt(max_i v_i) sqrt(||P||_1): the step
    that makes the ball bound stop growing with N."""
    rng = np.random.default_rng(seed)
    Wq, Wk, Wv = _weights(rng, d, d, 2, 1.0)
    X = 10**log_scale * rng.standard_normal((N, d))
    K, A, P = _key_piece(X, Wq, Wk, Wv)
    m = P @ X
    v = np.einsum("ij,ijk->i", P, (X[None] - m[:, None]) ** 2)
    rhs = (np.linalg.norm(Wv, 2) * np.linalg.norm(X @ A, axis=1).max()
           * math.sqrt(v.max()) * math.sqrt(P.sum(axis=0).max()))
    assert np.linalg.norm(K, 2) <= rhs * (1 + 1e-10) + 1e-300


def test_ball_bound_stops_growing_with_N():
    """At a fixed radius the bound is the same for every N > 2 exp(2 a R^2)."""
    I2 = np.eye(2)
    R = 1.0                                   # a = 1/sqrt(2), so e^{aR^2} ~ 2.03
    vals = [bounds.ball_lipschitz_bound(R, N, I2, I2, I2) for N in (16, 64, 1024, 10**6)]
    assert np.allclose(vals, vals[0], rtol=1e-14)
    a = 1 / math.sqrt(2)
    old = math.exp(a) + a * (1 + math.sqrt(10**6 / 2))  # the key term without the min
    assert vals[3] < old / 100


def test_ball_bound_extreme_radii():
    Wq, Wk, Wv = np.eye(2), np.zeros((2, 2)), 3.0 * np.eye(2)
    assert bounds.ball_lipschitz_bound(1e200, 7, Wq, Wk, Wv) == pytest.approx(3.0)  # a = 0
    tiny = 1e-250 * np.eye(2)                 # a R^2 = 1e-250 * 1e200 / sqrt(2), tiny
    val = bounds.ball_lipschitz_bound(1e100, 7, tiny, np.eye(2), np.eye(2))
    assert math.isfinite(val) and val == pytest.approx(1.0, rel=1e-12)
    with pytest.raises(ValueError, match="R"):
        bounds.ball_lipschitz_bound(1e200, 7, np.eye(2), np.eye(2), np.eye(2))
    assert math.isfinite(bounds.ball_lipschitz_bound(20.0, 10**9, np.eye(2), np.eye(2),
                                                     np.eye(2)))


# --------------------------------------------------------------------------
# Kim et al.
# --------------------------------------------------------------------------
@pytest.mark.parametrize("N", [1, 2, 3, 5, 16, 256, 10**6])
def test_phi_inverse_inverts_phi(N):
    x = bounds.kim_phi_inverse(N - 1)
    assert x * math.exp(x + 1) == pytest.approx(N - 1, rel=1e-12, abs=1e-15)
    assert x == pytest.approx(float(mpmath.lambertw((N - 1) / mpmath.e)), rel=1e-12,
                              abs=1e-15)


def test_printed_form_is_phi_inverse_of_N_not_N_minus_1():
    for N in (2, 3, 16, 256):
        w_printed = float(mpmath.lambertw(N / mpmath.e))
        assert w_printed * math.exp(w_printed + 1) == pytest.approx(N, rel=1e-12)
        I2 = np.eye(2)
        ratio = bounds.kim_l2_bound(N, I2, I2, form="printed") / bounds.kim_l2_bound(N, I2, I2)
        assert ratio == pytest.approx((4 * w_printed + 1)
                                      / (4 * bounds.kim_phi_inverse(N - 1) + 1), rel=1e-12)
        assert ratio > 1


def _l2_mha(X, Wq, Wv, Wo):
    return np.concatenate([l2attention.l2_self_attention(X, q, v) for q, v in zip(Wq, Wv,
                                                                                  strict=True)],
                          axis=-1) @ Wo


def _l2_mha_jacobian(X, Wq, Wv, Wo):
    N, d = X.shape
    Js = [l2attention.l2_attention_jacobian(X, q, v).reshape(N, v.shape[1], N * d)
          for q, v in zip(Wq, Wv, strict=True)]
    JY = np.concatenate(Js, axis=1)           # (N, H d_v, N d)
    return np.einsum("nhk,ho->nok", JY, Wo).reshape(N * Wo.shape[1], N * d)


def test_mha_jacobian_reference_against_finite_differences():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4, 3))
    Wq, Wv, Wo = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2)), \
        rng.standard_normal((4, 3))
    J = _l2_mha_jacobian(X, Wq, Wv, Wo)
    h, fd = 1e-6, np.zeros_like(J)
    for k in range(X.size):
        e = np.zeros(X.size)
        e[k] = h
        e = e.reshape(X.shape)
        fd[:, k] = ((_l2_mha(X + e, Wq, Wv, Wo) - _l2_mha(X - e, Wq, Wv, Wo)) / (2 * h)).ravel()
    assert np.abs(fd - J).max() < 1e-7 * np.abs(J).max()


@settings(max_examples=40, deadline=None)
@given(N=st.integers(1, 8), d=st.integers(1, 3), H=st.integers(1, 3),
       log_scale=st.floats(-2, 1), w_scale=st.floats(0.2, 3), seed=st.integers(0, 10**6))
def test_kim_bounds_hold(N, d, H, log_scale, w_scale, seed):
    rng = np.random.default_rng(seed)
    Wq = w_scale * rng.standard_normal((H, d, d))
    Wv = rng.standard_normal((H, d, 2))
    Wo = rng.standard_normal((2 * H, 3))
    X = 10**log_scale / w_scale * rng.standard_normal((N, d))
    exact = np.linalg.norm(_l2_mha_jacobian(X, Wq, Wv, Wo), 2)
    bound = bounds.kim_l2_mha_bound(N, Wq, Wv, Wo)
    assert exact <= bound * (1 + 1e-12)
    assert bound <= bounds.kim_l2_mha_bound(N, Wq, Wv, Wo, form="printed")
    single = np.linalg.norm(l2attention.l2_attention_jacobian(X, Wq[0], Wv[0]), 2)
    assert single <= bounds.kim_l2_bound(N, Wq[0], Wv[0]) * (1 + 1e-12)


def test_head_sum_with_squared_query_norms_fails():
    """A head sum with ||W_Q||^2 ||W_V||^2 (linear in ||W_Q||) is violated once W_Q is
    large: the L2 constant scales like ||W_Q||^2."""
    rng = np.random.default_rng(0)
    c, I2, N = 3.0, np.eye(2), 3
    best = max(l2attention.l2_local_lipschitz(
        rng.standard_normal((N, 2)) * 10**rng.uniform(-2, 1) / c, c * I2, I2)
        for _ in range(2000))
    linear = math.sqrt(N / 2) * (4 * bounds.kim_phi_inverse(N - 1) + 1) * c
    assert best > linear
    assert best <= bounds.kim_l2_bound(N, c * I2, I2)


def test_kim_bad_input():
    with pytest.raises(ValueError, match="form"):
        bounds.kim_l2_bound(3, np.eye(2), np.eye(2), form="paper")
    with pytest.raises(ValueError, match="W_O"):
        bounds.kim_l2_mha_bound(3, np.ones((2, 2, 2)), np.ones((2, 2, 2)), np.eye(3))
    with pytest.raises(ValueError, match="y"):
        bounds.kim_phi_inverse(-1.0)


@pytest.mark.parametrize(("cq", "cv"), [(1e-200, 1e150), (1e-100, 1e-100), (1e100, 1e-150)])
def test_kim_bound_at_extreme_weights_matches_mpmath(cq, cv):
    rng = np.random.default_rng(3)
    W_Q, W_V = rng.standard_normal((4, 2)) * cq, rng.standard_normal((4, 4)) * cv
    N = 5
    nq, nv = (mpmath.mpf(float(np.linalg.norm(W, 2))) for W in (W_Q, W_V))
    ref = mpmath.sqrt(mpmath.mpf(N) / 2) * (4 * mpmath.lambertw((N - 1) / mpmath.e).real + 1) \
        * nq**2 * nv
    assert bounds.kim_l2_bound(N, W_Q, W_V) == pytest.approx(float(ref), rel=1e-12)


def test_kim_bound_beyond_float64_raises_overflow_error():
    with pytest.raises(OverflowError, match="W_Q"):
        bounds.kim_l2_bound(3, np.full((2, 2), 1e300), np.full((2, 2), 1e300))


# -- the chapter's local bound and the audited formula, against the exact constant
def test_card_formula_fails_on_an_explicit_input():
    X = two_sided_tokens(8.0)
    exact = local_lipschitz(X, I2, I2, I2)
    card = card_bound(X, I2, I2, I2)
    assert card == pytest.approx(1 + 2 * 8.0)   # ||X||_2 = 8 sqrt 2, 2/sqrt 2 = sqrt 2
    assert exact > 1.7 * card


@pytest.mark.parametrize("C", [1.0, 10.0, 1000.0])
def test_card_formula_fails_for_every_constant(C):
    # L >= (sqrt2/3) t^2 - 2 and card = C (1 + 2t): t = 3 sqrt2 (C + 1) + 3 suffices
    t = 3 * math.sqrt(2) * (C + 1) + 3
    X = two_sided_tokens(t)
    assert local_lipschitz(X, I2, I2, I2, method="dense") > card_bound(X, I2, I2, I2, C=C)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["random", "two-sided", "sink", "clustered"]),
       N=st.integers(1, 9), d=st.integers(1, 4), dk=st.integers(1, 4), dv=st.integers(1, 3),
       log_scale=st.floats(-3, 1.3), w_scale=st.floats(0.1, 3), seed=st.integers(0, 10**6))
def test_bound_never_below_the_exact_constant(kind, N, d, dk, dv, log_scale, w_scale, seed):
    rng = np.random.default_rng(seed + 1)
    X = _adversarial(kind, N, d, 10**log_scale, seed)
    Wq, Wk, Wv = (w_scale * rng.standard_normal(s) for s in ((d, dk), (d, dk), (d, dv)))
    exact = local_lipschitz(X, Wq, Wk, Wv, method="dense")
    assert exact <= local_lipschitz_bound(X, Wq, Wk, Wv) * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(N=st.integers(1, 8), d=st.integers(1, 3), R=st.floats(0.05, 3), seed=st.integers(0, 10**6))
def test_ball_bound_holds_inside_the_ball(N, d, R, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, d))
    X *= R * rng.uniform(0, 1, (N, 1)) / np.linalg.norm(X, axis=1, keepdims=True).clip(1e-300)
    Wq, Wk, Wv = (rng.standard_normal((d, d)) for _ in range(3))
    assert local_lipschitz(X, Wq, Wk, Wv) <= ball_lipschitz_bound(R, N, Wq, Wk, Wv) * (1 + 1e-12)
    assert local_lipschitz_bound(X, Wq, Wk, Wv) <= ball_lipschitz_bound(R, N, Wq, Wk, Wv) * (
        1 + 1e-12)


def test_bound_terms_by_hand():
    """The three terms of the bound, recomputed from their definitions."""
    X, Wq, Wk, Wv = problem(5, 3, 2, 4, seed=12)
    terms = bounds.local_lipschitz_bound_terms(X, Wq, Wk, Wv)
    A = Wq @ Wk.T / math.sqrt(2)
    P = attention.attention_matrix(X, Wq, Wk)
    nv = np.linalg.norm(Wv, 2)
    v, keys = [], 0.0
    for i in range(5):
        m = P[i] @ X
        v.append(sum(P[i, j] * np.sum((X[j] - m) ** 2) for j in range(5)))
        Ji = np.diag(P[i]) - np.outer(P[i], P[i])
        keys += np.sum((A.T @ X[i]) ** 2) * np.linalg.eigvalsh(Ji)[-1] * v[-1]
    assert terms.values == pytest.approx(nv * math.sqrt(P.sum(axis=0).max()), rel=1e-12)
    assert terms.queries == pytest.approx(nv * np.linalg.norm(A, 2) * max(v), rel=1e-10)
    assert terms.keys == pytest.approx(nv * math.sqrt(keys), rel=1e-10)
    assert terms.total == pytest.approx(terms.values + terms.queries + terms.keys)


def test_bound_is_quadratic_and_asymptotically_tight_on_the_two_sided_family():
    for t in (16.0, 64.0):
        X = two_sided_tokens(t)
        exact, bound = local_lipschitz(X, I2, I2, I2), local_lipschitz_bound(X, I2, I2, I2)
        assert abs(bound - math.sqrt(2) / 3 * t**2) < 3.0
        assert 0 < bound - exact < 2.0


def test_bounds_that_overflow_raise_naming_the_arguments():
    rng = np.random.default_rng(0)
    X, Q, K, V = rng.standard_normal((4, 3, 3))
    with pytest.raises(ValueError, match="^X, W_Q, W_K, W_V and C must give a card formula"):
        bounds.card_bound(1e200 * X, 1e200 * Q, K, V)
    # intermediate products overflow, the value does not
    big = bounds.card_bound(X, 1e200 * Q, 1e-200 * K, V)
    assert big == pytest.approx(bounds.card_bound(X, Q, K, V), rel=1e-13)
