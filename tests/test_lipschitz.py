"""Tests of :mod:`lipattn.lipschitz`: the attention Jacobian against central finite
differences, jvp/vjp adjointness, exact local constants (dense vs Lanczos vs power
iteration), the t^2 and sqrt(N) growth on the adversarial inputs, the constants of
a model's attention sublayers, masks, and bad input. The bounds are tested in
test_bounds.py, L2 attention in test_l2attention.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import central_differences

from lipattn import attention
from lipattn.adversarial import sink_tokens, two_sided_tokens
from lipattn.attention import self_attention
from lipattn.bounds import ball_lipschitz_bound, card_bound, kim_l2_bound, local_lipschitz_bound
from lipattn.l2attention import (
    l2_attention_jvp,
    l2_local_lipschitz,
    l2_self_attention,
)
from lipattn.lipschitz import (
    attention_jacobian,
    attention_jvp,
    attention_operator,
    attention_vjp,
    golub_kahan_norm,
    local_lipschitz,
    local_lipschitz_info,
)
from lipattn.models.encoder import attention_inputs, init_params
from lipattn.models.encoder_sublayers import sublayer_constants
from lipattn.spectral import power_iteration, spectral_norm

I2 = np.eye(2)
SHAPES = [(1, 1, 1, 1), (3, 2, 2, 2), (5, 4, 3, 2), (7, 3, 5, 6)]


def problem(N, d, dk, dv, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal((N, d)), rng.standard_normal((d, dk)),
            rng.standard_normal((d, dk)), rng.standard_normal((d, dv)))


@pytest.mark.parametrize("N,d,dk,dv", SHAPES)
def test_dense_jacobian_matches_central_differences(N, d, dk, dv):
    X, Wq, Wk, Wv = problem(N, d, dk, dv, seed=N)
    J = attention_jacobian(X, Wq, Wk, Wv)
    assert J.shape == (N * dv, N * d)
    fd = central_differences(lambda Z: self_attention(Z, Wq, Wk, Wv), X)
    np.testing.assert_allclose(J, fd, atol=1e-7 * max(1.0, np.abs(J).max()))


@pytest.mark.parametrize("N,d,dk,dv", SHAPES)
def test_jvp_and_vjp_match_the_dense_jacobian_and_are_adjoint(N, d, dk, dv):
    X, Wq, Wk, Wv = problem(N, d, dk, dv, seed=10 + N)
    rng = np.random.default_rng(N)
    E, G = rng.standard_normal((N, d)), rng.standard_normal((N, dv))
    J = attention_jacobian(X, Wq, Wk, Wv)
    jv = attention_jvp(X, E, Wq, Wk, Wv)
    vj = attention_vjp(X, G, Wq, Wk, Wv)
    assert jv.shape == (N, dv) and vj.shape == (N, d)
    np.testing.assert_allclose(jv.reshape(-1), J @ E.reshape(-1), atol=1e-12 * np.abs(J).sum())
    np.testing.assert_allclose(vj.reshape(-1), J.T @ G.reshape(-1), atol=1e-12 * np.abs(J).sum())
    lhs, rhs = np.sum(jv * G), np.sum(E * vj)
    assert abs(lhs - rhs) <= 1e-12 * (np.abs(jv).sum() * np.abs(G).max() + 1)


def test_jvp_is_the_directional_derivative_at_saturated_inputs():
    X, Wq, Wk, Wv = problem(6, 3, 3, 3, seed=3, scale=4.0)
    E = np.random.default_rng(4).standard_normal(X.shape)
    h = 1e-7
    fd = (self_attention(X + h * E, Wq, Wk, Wv) - self_attention(X - h * E, Wq, Wk, Wv)) / (2 * h)
    jv = attention_jvp(X, E, Wq, Wk, Wv)
    np.testing.assert_allclose(jv, fd, atol=1e-5 * max(1.0, np.abs(jv).max()))


def test_only_centred_tokens_enter_the_softmax_term():
    """J_i 1 = 0: translating every token by c leaves J_i X W_V unchanged, so the
    dense Jacobian's softmax blocks T_ij depend on X - 1 c^T only."""
    X, Wq, Wk, Wv = problem(5, 3, 3, 2, seed=8)
    P = attention.attention_matrix(X, Wq, Wk)
    c = np.array([3.0, -2.0, 7.0])
    for i in range(5):
        Ji = np.diag(P[i]) - np.outer(P[i], P[i])
        np.testing.assert_allclose(Ji @ X, Ji @ (X - c), atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_dense_and_lanczos_agree(seed):
    X, Wq, Wk, Wv = problem(12, 5, 4, 3, seed=seed, scale=1.5)
    dense = local_lipschitz(X, Wq, Wk, Wv, method="dense")
    lanczos = local_lipschitz_info(X, Wq, Wk, Wv, method="lanczos")
    assert lanczos.method == "lanczos" and lanczos.products > 0
    assert abs(dense - lanczos.value) <= 1e-8 * dense
    auto = local_lipschitz(X, Wq, Wk, Wv)
    assert abs(auto - dense) <= 1e-8 * dense


def test_lanczos_agrees_with_converged_power_iteration():
    X, Wq, Wk, Wv = problem(40, 6, 6, 6, seed=5)
    exact = local_lipschitz(X, Wq, Wk, Wv, method="lanczos")
    run = power_iteration(attention_operator(X, Wq, Wk, Wv), 3000)
    assert run.sigma[-1] <= exact * (1 + 1e-12)
    assert abs(run.sigma[-1] - exact) <= 1e-8 * exact


@pytest.mark.parametrize("shape", [(30, 4, 4, 2), (20, 3, 2, 5)])
def test_golub_kahan_agrees_with_svds_and_never_overshoots(shape):
    X, Wq, Wk, Wv = problem(*shape, seed=7)
    op = attention_operator(X, Wq, Wk, Wv)
    sigma, products = golub_kahan_norm(op, tol=1e-10)
    assert products == op.products
    ref = spectral_norm(op, tol=1e-12)
    assert abs(sigma - ref) <= 1e-9 * ref and sigma <= ref * (1 + 1e-12)
    # a one-dimensional input space: one step is exact
    one = attention_operator(np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 3)))
    assert golub_kahan_norm(one)[0] == pytest.approx(math.sqrt(3), rel=1e-14)
    with pytest.raises(ValueError, match="tol"):
        golub_kahan_norm(op, tol=-1.0)
    with pytest.raises(ValueError, match="max_steps"):
        golub_kahan_norm(op, max_steps=0)


def test_single_token_is_linear():
    X, Wq, Wk, Wv = problem(1, 3, 2, 4, seed=1)
    assert local_lipschitz(X, Wq, Wk, Wv) == pytest.approx(np.linalg.norm(Wv, 2), rel=1e-12)


def test_t_squared_growth_and_its_limit():
    """Two-sided family, identity weights, d = 2: L(t)/t^2 -> sqrt(2)/3."""
    ts = np.array([8.0, 16.0, 32.0, 64.0])
    L = np.array([local_lipschitz(two_sided_tokens(t), I2, I2, I2) for t in ts])
    slope = np.polyfit(np.log(ts), np.log(L), 1)[0]
    assert abs(slope - 2) < 0.01
    limit = math.sqrt(2) / 3
    # |L - limit t^2| stays bounded (the O(1) part), so the ratio converges
    assert np.all(np.abs(L - limit * ts**2) < 2.0)
    assert abs(L[-1] / ts[-1] ** 2 - limit) < 1e-3


def test_sqrt_n_growth_at_fixed_radius_and_its_end():
    u = np.array([1.0, 0.0])
    Ns = [2, 8, 32, 128, 512]
    big = [local_lipschitz(sink_tokens(8.0, n, u), I2, I2, I2) / math.sqrt(n) for n in Ns]
    assert all(0.95 < r < 1.2 for r in big)
    # at a small radius the sink no longer saturates: L / sqrt(N) collapses
    small = [local_lipschitz(sink_tokens(2.0, n, u), I2, I2, I2) / math.sqrt(n) for n in Ns]
    assert small[-1] < 0.1 * small[0]


def _adversarial(kind, N, d, scale, seed):
    rng = np.random.default_rng(seed)
    if kind == "random":
        return scale * rng.standard_normal((N, d))
    if kind == "two-sided":
        return two_sided_tokens(scale, max(N, 2), d)
    if kind == "sink":
        return sink_tokens(scale, N, rng.standard_normal(d))
    X = scale * rng.standard_normal((N, d))   # near-duplicates
    X[1:] = X[0] + 1e-3 * rng.standard_normal((N - 1, d))
    return X


# -- the attention sublayers of a Transformer ----------------------------------
def _tiny_model(seed=0, layers=2, d=4):
    params = init_params(layers, d, d_ff=6, seed=seed)
    rng = np.random.default_rng(seed + 1)
    for p in params:   # larger weights, so that the softmax term matters
        for k in ("W_Q", "W_K"):
            p[k] = 3 * p[k]
        p["ln1_g"] = 1 + 0.3 * rng.standard_normal(d)
        p["b_O"] = rng.standard_normal(d)
    return params


@pytest.mark.parametrize("variant,scale", [("post", 1.0), ("pre", 1.0), ("pre", 2.5)])
def test_sublayer_constants_match_the_svd_of_finite_differences(variant, scale):
    """The exact constant of each layer's sublayer H -> A(H), from central
    differences of the model's own attention computation, and the formulas."""
    from lipattn.models.encoder import _attn_fwd

    params = _tiny_model()
    X = 2 * np.random.default_rng(3).standard_normal((3, 5, 4))
    c = sublayer_constants(params, X, variant=variant, input_scale=scale, tol=1e-10)
    assert c.exact.shape == c.bound.shape == c.card.shape == (2, 3)
    inputs = attention_inputs(params, X, variant=variant)
    for l_, (p, H) in enumerate(zip(params, inputs, strict=True)):
        Wv = p["W_V"] @ p["W_O"]
        assert c.value_norm[l_] == pytest.approx(np.linalg.norm(Wv, 2))
        for b, h in enumerate(scale * H):
            J = central_differences(lambda Z, p=p: _attn_fwd(Z, p)[0], h)
            assert c.exact[l_, b] == pytest.approx(np.linalg.norm(J, 2), rel=1e-6)
            assert c.bound[l_, b] >= c.exact[l_, b] * (1 - 1e-12)
            nq, nk = np.linalg.norm(p["W_Q"], 2), np.linalg.norm(p["W_K"], 2)
            card = np.linalg.norm(Wv, 2) * (1 + nq * nk * np.linalg.norm(h, 2))
            assert c.card[l_, b] == pytest.approx(card)    # 2/sqrt(d_k) = 1
            assert c.radius[l_, b] == pytest.approx(np.linalg.norm(h, axis=1).max())
    assert np.all((c.top_weight >= 1 / 5) & (c.top_weight <= 1))


def test_sublayer_constants_of_a_permutation_attention_is_the_value_norm():
    """Saturated attention on distinct keys: P is a permutation, J_i = 0, so the
    constant is ||W_V W_O||_2 (the trained first layer of the chapter)."""
    d = 4
    p = _tiny_model(layers=1, d=d)[0]
    p["W_Q"], p["W_K"] = 40 * np.eye(d), np.eye(d)   # logits 20 x_i.x_j
    X = np.eye(d)[None] * 2                          # post-LN: H = X
    c = sublayer_constants([p], X, variant="post")
    assert c.top_weight[0, 0] == pytest.approx(1.0)
    assert c.exact[0, 0] == pytest.approx(c.value_norm[0], rel=1e-8)


def test_sublayer_constants_bad_input():
    params = _tiny_model()
    X = np.zeros((2, 3, 4))
    stacked = [{k: v if k == "heads" else np.stack([v, v]) for k, v in p.items()}
               for p in params]
    with pytest.raises(ValueError, match="2-D"):
        sublayer_constants(stacked, X, variant="pre")
    with pytest.raises(ValueError, match="X"):
        sublayer_constants(params, np.zeros((2, 2, 3, 4)), variant="pre")
    with pytest.raises(ValueError, match="X"):
        sublayer_constants(params, np.full((3, 4), np.inf), variant="pre")
    with pytest.raises(ValueError, match="variant"):
        sublayer_constants(params, X, variant="mid")
    with pytest.raises(ValueError, match="tol"):
        sublayer_constants(params, X, variant="pre", tol=-1.0)
    with pytest.raises(ValueError, match="input_scale"):
        sublayer_constants(params, X, variant="pre", input_scale=0.0)
    with pytest.raises(TypeError, match="params"):
        sublayer_constants("params", X, variant="pre")


# -- bad input -----------------------------------------------------------------
@pytest.mark.parametrize("func", [attention_jacobian, local_lipschitz, local_lipschitz_bound,
                                  card_bound])
def test_bad_input_dot_product(func):
    X, Wq, Wk, Wv = problem(3, 2, 2, 2)
    with pytest.raises(ValueError, match="W_Q"):
        func(X, Wq[:1], Wk, Wv)
    with pytest.raises(ValueError, match="W_K"):
        func(X, Wq, Wk[:, :1], Wv)
    with pytest.raises(ValueError, match="W_V"):
        func(X, Wq, Wk, Wv[:1])
    with pytest.raises(ValueError, match="X"):
        func(np.zeros((0, 2)), Wq, Wk, Wv)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="X"):
        func(bad, Wq, Wk, Wv)
    with pytest.raises(ValueError, match="X"):
        func(np.stack([X, X]), Wq, Wk, Wv)
    with pytest.raises(TypeError, match="X"):
        func("X", Wq, Wk, Wv)
    if func is not card_bound:   # the formula needs no logits
        with pytest.raises(ValueError, match="logits"):
            func(1e200 * X, Wq, Wk, Wv)


def test_bad_input_jvp_vjp_and_options():
    X, Wq, Wk, Wv = problem(3, 2, 2, 4)
    with pytest.raises(ValueError, match="E"):
        attention_jvp(X, np.zeros((3, 3)), Wq, Wk, Wv)
    with pytest.raises(ValueError, match="G"):
        attention_vjp(X, np.zeros((3, 2)), Wq, Wk, Wv)
    with pytest.raises(ValueError, match="E"):
        attention_jvp(X, np.full((3, 2), np.inf), Wq, Wk, Wv)
    with pytest.raises(ValueError, match="method"):
        local_lipschitz(X, Wq, Wk, Wv, method="svd")
    with pytest.raises(ValueError, match="tol"):
        local_lipschitz(X, Wq, Wk, Wv, tol=0.0)
    with pytest.raises(ValueError, match="C"):
        card_bound(X, Wq, Wk, Wv, C=-1.0)
    with pytest.raises(ValueError, match="R"):
        ball_lipschitz_bound(0.0, 3, Wq, Wk, Wv)
    with pytest.raises(ValueError, match="N"):
        ball_lipschitz_bound(1.0, 0, Wq, Wk, Wv)


def test_bad_input_l2_and_families():
    X = np.ones((3, 2))
    with pytest.raises(ValueError, match="W_Q"):
        l2_self_attention(X, np.ones((3, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="W_V"):
        l2_local_lipschitz(X, np.ones((2, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="X"):
        l2_local_lipschitz(np.zeros((0, 2)), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="E"):
        l2_attention_jvp(X, np.ones((2, 2)), np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="N"):
        kim_l2_bound(0, np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="W_V"):
        kim_l2_bound(3, np.eye(2), np.eye(3))
    with pytest.raises(ValueError, match="t"):
        two_sided_tokens(-1.0)
    with pytest.raises(ValueError, match="N"):
        two_sided_tokens(1.0, N=1)
    with pytest.raises(ValueError, match="u"):
        sink_tokens(1.0, 3, np.zeros(2))
    with pytest.raises(ValueError, match="R"):
        sink_tokens(np.nan, 3, np.ones(2))


def test_extreme_valid_inputs_stay_finite():
    X, Wq, Wk, Wv = problem(4, 2, 2, 2, seed=9)
    for s in (1e-150, 1e-8, 30.0):
        for value in (local_lipschitz(s * X, Wq, Wk, Wv), local_lipschitz_bound(s * X, Wq, Wk, Wv),
                      l2_local_lipschitz(s * X, Wq, Wv)):
            assert np.isfinite(value)


# -- masks ---------------------------------------------------------------------
def _custom_mask(N, seed):
    rng = np.random.default_rng(seed)
    m = rng.uniform(size=(N, N)) < 0.5
    m[np.arange(N), rng.integers(0, N, N)] = True
    return m


@pytest.mark.parametrize("mask_kind", ["causal", "custom"])
@pytest.mark.parametrize("N,d,dk,dv", [(4, 3, 2, 2), (6, 2, 3, 4)])
def test_masked_jacobian_jvp_vjp_against_finite_differences(mask_kind, N, d, dk, dv):
    X, Wq, Wk, Wv = problem(N, d, dk, dv, seed=20 + N, scale=1.3)
    mask = "causal" if mask_kind == "causal" else _custom_mask(N, N)
    J = attention_jacobian(X, Wq, Wk, Wv, mask=mask)
    fd = central_differences(lambda Z: self_attention(Z, Wq, Wk, Wv, mask=mask), X)
    np.testing.assert_allclose(J, fd, atol=1e-7 * max(1.0, np.abs(J).max()))
    rng = np.random.default_rng(N)
    E, G = rng.standard_normal((N, d)), rng.standard_normal((N, dv))
    np.testing.assert_allclose(attention_jvp(X, E, Wq, Wk, Wv, mask=mask).reshape(-1),
                               J @ E.reshape(-1), atol=1e-12 * np.abs(J).sum())
    np.testing.assert_allclose(attention_vjp(X, G, Wq, Wk, Wv, mask=mask).reshape(-1),
                               J.T @ G.reshape(-1), atol=1e-12 * np.abs(J).sum())
    dense = local_lipschitz(X, Wq, Wk, Wv, method="dense", mask=mask)
    assert dense == pytest.approx(np.linalg.norm(fd, 2), rel=1e-6)
    assert local_lipschitz(X, Wq, Wk, Wv, method="lanczos", mask=mask) == pytest.approx(
        dense, rel=1e-9)
    op = attention_operator(X, Wq, Wk, Wv, mask=mask)
    np.testing.assert_allclose(op.matmat(np.eye(N * d)), J, atol=1e-12 * np.abs(J).sum())


def test_causal_jacobian_blocks_are_the_unmasked_prefix_jacobians():
    """Causal: output i depends on inputs j <= i only, and the first k outputs are
    causal attention on the first k tokens; the first token's row is x_0 W_V alone."""
    N, d, dv = 6, 3, 2
    X, Wq, Wk, Wv = problem(N, d, 2, dv, seed=31, scale=1.5)
    J = attention_jacobian(X, Wq, Wk, Wv, mask="causal").reshape(N, dv, N, d)
    for i in range(N):
        assert np.all(J[i, :, i + 1:, :] == 0.0)
    for k in (1, 2, 4):
        Jk = attention_jacobian(X[:k], Wq, Wk, Wv, mask="causal").reshape(k, dv, k, d)
        np.testing.assert_allclose(J[:k, :, :k, :], Jk, atol=1e-13)
    # first token: d f_0 / d x_j = delta_0j W_V^T, so its row block is [W_V^T, 0, ...]
    np.testing.assert_allclose(J[0, :, 0, :], Wv.T, atol=1e-15)
    assert np.all(J[0, :, 1:, :] == 0.0)
    # and with only the first token, the constant is ||W_V||_2
    assert local_lipschitz(X[:1], Wq, Wk, Wv, mask="causal") == pytest.approx(
        np.linalg.norm(Wv, 2), rel=1e-12)


def test_a_mask_allowing_a_block_gives_the_block_diagonal_jacobian():
    """Two groups of tokens that only see their own group: the Jacobian is block-
    diagonal, each block the unmasked attention Jacobian of that group."""
    X, Wq, Wk, Wv = problem(5, 3, 3, 3, seed=40)
    g = np.array([0, 0, 1, 1, 1])
    mask = g[:, None] == g[None, :]
    J = attention_jacobian(X, Wq, Wk, Wv, mask=mask).reshape(5, 3, 5, 3)
    for grp in (0, 1):
        idx = np.flatnonzero(g == grp)
        Jg = attention_jacobian(X[idx], Wq, Wk, Wv).reshape(len(idx), 3, len(idx), 3)
        np.testing.assert_allclose(J[np.ix_(idx, range(3), idx, range(3))], Jg, atol=1e-13)
    L = local_lipschitz(X, Wq, Wk, Wv, mask=mask)
    assert L == pytest.approx(max(local_lipschitz(X[g == k], Wq, Wk, Wv) for k in (0, 1)),
                              rel=1e-10)


@pytest.mark.parametrize("c", [1e-200, 1e-3, 7.0, 1e200])
def test_constants_of_c_times_w_v_are_c_times_the_constants(c):
    X, Wq, Wk, Wv = problem(20, 4, 3, 2, seed=41)
    for mask in (None, "causal"):
        base = local_lipschitz(X, Wq, Wk, Wv, method="dense", mask=mask)
        for method in ("dense", "lanczos"):
            assert local_lipschitz(X, Wq, Wk, c * Wv, method=method, mask=mask) / c == \
                pytest.approx(base, rel=1e-9)


def test_bad_masks_in_the_lipschitz_functions():
    X, Wq, Wk, Wv = problem(3, 2, 2, 2)
    bad = np.zeros((3, 3), dtype=bool)
    for f in (lambda m: attention_jacobian(X, Wq, Wk, Wv, mask=m),
              lambda m: attention_operator(X, Wq, Wk, Wv, mask=m),
              lambda m: local_lipschitz(X, Wq, Wk, Wv, mask=m),
              lambda m: attention_jvp(X, X, Wq, Wk, Wv, mask=m),
              lambda m: attention_vjp(X, X, Wq, Wk, Wv, mask=m)):
        with pytest.raises(ValueError, match="mask"):
            f(bad)
        with pytest.raises(ValueError, match="mask"):
            f(np.ones((2, 2), dtype=bool))
        with pytest.raises(TypeError, match="mask"):
            f(np.ones((3, 3), dtype=int))


def test_sublayer_constants_of_multi_head_layers():
    """Several heads: the exact constant of the whole sublayer against the SVD of
    central differences of the encoder's own multi-head attention; the summed
    per-head bound stays above it."""
    from lipattn.models.encoder import _attn_fwd

    params = init_params(2, 6, heads=3, d_ff=5, seed=4)
    rng = np.random.default_rng(5)
    for p in params:
        p["W_Q"], p["b_O"] = 3 * p["W_Q"], rng.standard_normal(6)
    X = 1.5 * rng.standard_normal((2, 4, 6))
    c = sublayer_constants(params, X, variant="pre", tol=1e-10)
    for l_, (p, H) in enumerate(zip(params, attention_inputs(params, X, variant="pre"),
                                    strict=True)):
        for b, h in enumerate(H):
            J = central_differences(lambda Z, p=p: _attn_fwd(Z, p)[0], h)
            assert c.exact[l_, b] == pytest.approx(np.linalg.norm(J, 2), rel=1e-6)
            assert c.bound[l_, b] >= c.exact[l_, b]
    assert np.all((c.top_weight > 1 / 4) & (c.top_weight <= 1))


def test_sublayer_constants_names_input_scale():
    from lipattn.models.encoder import init_params
    p = init_params(1, 4, seed=0)
    X = np.random.default_rng(1).standard_normal((2, 4))
    with pytest.raises(ValueError, match="^input_scale must keep the attention logits"):
        sublayer_constants(p, X, variant="post", input_scale=1e200)
    with pytest.raises(ValueError, match="^tol must"):
        sublayer_constants(p, X, variant="pre", tol=1e300)
