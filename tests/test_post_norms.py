"""Norms after the branch (OLMo 2) and sandwich norms (Gemma 2), Chapter 7's
``prop-post-norm``: every part against a plain numpy RMSNorm, dense
finite-difference Jacobians and closed forms at the origin."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import central_differences

from lipattn import adversarial
from lipattn import stabilisers as stab
from lipattn.layers import MultiHeadAttention, Residual, RMSNorm, Sequential, layer_lipschitz
from lipattn.models.blocks import build_block, parameter_shapes
from lipattn.models.families import layout_from_config
from lipattn.stabilisers import StabilisedAttention


def rms_ref(Y, gain, eps):
    """The published formula, token by token: g * y / sqrt(mean(y^2) + eps)."""
    return np.array([gain * y / math.sqrt(np.mean(y ** 2) + eps) for y in Y])


class Linear:
    """f(X) = X W, token-wise (a test layer: forward, jvp, vjp)."""

    def __init__(self, W):
        self.W = W

    params = {}

    def forward(self, X):
        return X @ self.W, None

    def jvp(self, state, E):
        return E @ self.W

    def vjp(self, state, G):
        return G @ self.W.T


def fwd(layer):
    return lambda X: layer.forward(X)[0]


def test_rmsnorm_matches_the_formula_and_its_step_is_below_g_sqrt_d():
    rng = np.random.default_rng(0)
    d, eps = 7, 1e-6
    gain = rng.uniform(-2, 2, d)
    G = np.abs(gain).max()
    norm = RMSNorm(gain, eps)
    for scale in (0.0, 1e-8, 1e-3, 1.0, 1e3, 1e8):
        Y = scale * rng.standard_normal((5, d))
        out = norm.forward(Y)[0]
        np.testing.assert_allclose(out, rms_ref(Y, gain, eps), rtol=1e-12, atol=1e-300)
        assert np.all(np.linalg.norm(out, axis=1) < G * math.sqrt(d))
    k = int(np.argmax(np.abs(gain)))                 # the supremum, approached
    big = np.zeros((1, d))
    big[0, k] = 1e6
    assert np.linalg.norm(norm.forward(big)[0]) > G * math.sqrt(d) * (1 - 1e-9)


def test_rmsnorm_jacobian_closed_form_and_its_norm():
    rng = np.random.default_rng(1)
    d, eps = 6, 1e-2
    gain = rng.uniform(-2, 2, d)
    for scale in (0.0, 0.05, 1.0, 30.0):
        y = scale * rng.standard_normal(d)
        s = np.mean(y ** 2) + eps
        inner = np.eye(d) - np.outer(y, y) / (d * s)
        J = np.diag(gain) @ inner / math.sqrt(s)
        fd = central_differences(lambda v: rms_ref(v, gain, eps), y[None, :])
        np.testing.assert_allclose(fd, J, atol=1e-7)
        ev = np.sort(np.linalg.eigvalsh(inner))
        np.testing.assert_allclose(ev[0], eps / s, rtol=1e-10)
        assert np.allclose(ev[1:], 1) and np.isclose(np.linalg.norm(inner, 2), 1)
        assert np.linalg.norm(J, 2) <= np.abs(gain).max() / math.sqrt(s) * (1 + 1e-12)


def olmo_sublayer(d=6, h=2, seed=0, eps=1e-2, w=0.5):
    rng = np.random.default_rng(seed)
    W = [w * rng.standard_normal((d, d)) for _ in range(4)]
    attn = MultiHeadAttention(*W, n_head=h, mask="causal")
    gain = rng.uniform(0.5, 1.5, d)
    return attn, gain, Residual(Sequential([attn, RMSNorm(gain, eps)]))


@pytest.mark.parametrize("scale", [1e-3, 0.1, 1.0, 10.0])
def test_local_bound_of_a_post_norm_sublayer(scale):
    eps = 1e-2
    attn, gain, sub = olmo_sublayer(eps=eps)
    X = scale * np.random.default_rng(2).standard_normal((4, 6))
    J = central_differences(fwd(sub), X, h=1e-6 * max(scale, 1e-2))
    exact = np.linalg.norm(J, 2)
    assert abs(layer_lipschitz(sub, X).value - exact) < 1e-5 * exact
    F = attn.forward(X)[0]
    Jf = np.linalg.norm(central_differences(fwd(attn), X, h=1e-6 * max(scale, 1e-2)), 2)
    ms = np.min(np.mean(F ** 2, axis=1))
    assert exact <= (1 + np.abs(gain).max() * Jf / math.sqrt(ms + eps)) * (1 + 1e-6)
    assert np.all(np.linalg.norm(sub.forward(X)[0] - X, axis=1)
                  < np.abs(gain).max() * math.sqrt(6))


def test_global_bound_is_attained_up_to_one_for_a_linear_branch():
    rng = np.random.default_rng(3)
    d, eps, G = 5, 1e-6, 1.5
    W = rng.standard_normal((d, d)) / math.sqrt(d)
    L_f = np.linalg.norm(W, 2)
    sub = Residual(Sequential([Linear(W), RMSNorm(np.full(d, G), eps)]))
    at0 = layer_lipschitz(sub, np.zeros((3, d))).value
    closed = np.linalg.norm(np.eye(d) + G * W / math.sqrt(eps), 2)
    assert abs(at0 - closed) < 1e-8 * closed
    assert G * L_f / math.sqrt(eps) - 1 <= at0 <= G * L_f / math.sqrt(eps) + 1
    # the derivative at 0 by differences of the plain formula
    fd = central_differences(lambda x: x + rms_ref(x @ W, np.full(d, G), eps),
                     np.zeros((1, d)), h=1e-9)
    np.testing.assert_allclose(fd, np.eye(d) + G * W.T / math.sqrt(eps), rtol=1e-5)
    for scale in 10.0 ** np.arange(-6, 4):
        X = scale * rng.standard_normal((3, d))
        assert layer_lipschitz(sub, X).value <= 1 + G * L_f / math.sqrt(eps)


def test_sandwich_multiplies_the_two_norms_factors():
    rng = np.random.default_rng(4)
    d, eps, G1, G2 = 4, 1e-4, 0.8, 1.3
    W = rng.standard_normal((d, d)) / math.sqrt(d)
    L_f = np.linalg.norm(W, 2)
    branch = Sequential([RMSNorm(np.full(d, G1), eps), Linear(W),
                         RMSNorm(np.full(d, G2), eps)])
    sub = Residual(branch)
    at0 = layer_lipschitz(sub, np.zeros((2, d))).value
    closed = np.linalg.norm(np.eye(d) + G1 * G2 * W / eps, 2)
    assert abs(at0 - closed) < 1e-8 * closed
    assert G1 * G2 * L_f / eps - 1 <= at0 <= G1 * G2 * L_f / eps + 1
    ref = lambda x: x + rms_ref(rms_ref(x, np.full(d, G1), eps) @ W,  # noqa: E731
                                np.full(d, G2), eps)
    fd = central_differences(ref, np.zeros((1, d)), h=1e-8)
    np.testing.assert_allclose(fd, np.eye(d) + G1 * G2 * W.T / eps, rtol=1e-5)
    for scale in 10.0 ** np.arange(-6, 3):
        X = scale * rng.standard_normal((2, d))
        assert layer_lipschitz(sub, X).value <= 1 + G1 * G2 * L_f / eps


def gemma2_block(d=16, seed=0, norm_std=0.3):
    cfg = {"model_type": "gemma2", "hidden_size": d, "intermediate_size": 2 * d,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 4, "query_pre_attn_scalar": 4, "vocab_size": 8}
    lay = layout_from_config(cfg)
    rng = np.random.default_rng(seed)
    st = {k: (norm_std if "norm" in k else 0.3) * rng.standard_normal(s)
          for k, s in parameter_shapes(lay).items()}
    return lay, st, build_block(lay, lambda n, s: st[n], 0)


def closed_form_at_origin(lay, st, N):
    """||I + (P kron M^T)/eps||_2 and ||P||_2 ||M||_2 / eps for the attention sublayer at 0."""
    d, eps, p = lay.d_model, lay.eps, "layers.0."
    g1 = 1 + st[p + "input_layernorm.weight"]           # Gemma's (1 + w) gains
    g2 = 1 + st[p + "post_attention_layernorm.weight"]
    W_V = st[p + "self_attn.v_proj.weight"].T            # (d, h_kv * d_h)
    W_O = st[p + "self_attn.o_proj.weight"].T            # (h * d_h, d)
    rep = lay.n_head // lay.n_kv_head
    W_Vx = np.concatenate([W_V[:, (i // rep) * 4:(i // rep + 1) * 4]
                           for i in range(lay.n_head)], axis=1)
    M = np.diag(g1) @ W_Vx @ W_O @ np.diag(g2)
    P = np.tril(np.ones((N, N))) / np.arange(1, N + 1)[:, None]   # causal, uniform
    J0 = np.eye(N * d) + np.kron(P, M.T) / eps                    # row-major vec
    return np.linalg.norm(J0, 2), np.linalg.norm(P, 2) * np.linalg.norm(M, 2) / eps


def test_gemma2_attention_sublayer_at_the_origin_is_the_closed_form():
    lay, st, block = gemma2_block()
    N = 5
    at0 = layer_lipschitz(block.layers[0], np.zeros((N, lay.d_model))).value
    closed, pm = closed_form_at_origin(lay, st, N)
    assert abs(at0 - closed) < 1e-8 * closed
    assert pm - 1 <= at0 <= pm + 1


@pytest.mark.parametrize("scale", [1e-4, 1e-2, 1.0, 30.0])
def test_gemma2_attention_sublayer_local_bound(scale):
    lay, st, block = gemma2_block(d=8)
    sub = block.layers[0]
    inner = Sequential([block.norm_1, block.attn])
    X = scale * np.random.default_rng(5).standard_normal((3, 8))
    h = 1e-7 * max(scale, 1e-3)
    exact = np.linalg.norm(central_differences(fwd(sub), X, h=h), 2)
    assert abs(layer_lipschitz(sub, X).value - exact) < 1e-4 * exact
    Jf = np.linalg.norm(central_differences(fwd(inner), X, h=h), 2)
    F = inner.forward(X)[0]
    G2 = np.abs(1 + st["layers.0.post_attention_layernorm.weight"]).max()
    ms = np.min(np.mean(F ** 2, axis=1))
    assert exact <= (1 + G2 * Jf / math.sqrt(ms + lay.eps)) * (1 + 1e-5)


@pytest.mark.parametrize("t", [1.0, 10.0, 100.0])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_olmo2_style_sublayer_on_the_two_sided_family(t, mask):
    eps = 1e-4                         # both norms; large enough for differences
    I2 = np.eye(2)
    attn = StabilisedAttention(I2, I2, I2, I2, qk_norm="rms", qk_norm_over="all",
                               qk_norm_eps=eps, mask=mask)
    sub = Residual(Sequential([attn, RMSNorm(np.ones(2), eps)]))
    X = adversarial.two_sided_tokens(t)
    origin = 0
    if mask == "causal":               # the origin token last: its row sees all three
        X, origin = X[[1, 2, 0]], 2
    assert np.allclose(attn.forward(X)[0][origin], 0)     # the origin's output is 0
    low = 1 + stab.qk_norm_two_sided_lower(t, eps) / math.sqrt(eps)
    fd = np.linalg.norm(central_differences(fwd(sub), X, h=1e-9), 2)
    exact = layer_lipschitz(sub, X).value
    assert abs(exact - fd) < 1e-4 * fd
    assert exact >= low * (1 - 1e-9)
    assert low >= 2 * t / (3 * eps)


def test_identity_branch_attains_the_local_bound_everywhere():
    d, eps = 5, 1e-3
    F = Residual(RMSNorm(np.ones(d), eps))
    rng = np.random.default_rng(8)
    for mu in (0.0, 1e-5, 1e-3, 1.0, 50.0):
        x = rng.standard_normal((1, d))
        x *= math.sqrt(d * mu) / np.linalg.norm(x)
        fd = central_differences(lambda v: v + rms_ref(v, np.ones(d), eps), x, h=1e-7)
        want = 1 + 1 / math.sqrt(mu + eps)
        assert abs(np.linalg.norm(fd, 2) / want - 1) < 1e-6
        assert abs(layer_lipschitz(F, x).value / want - 1) < 1e-10


def test_minus_identity_branch_attains_the_lower_end_of_part_3():
    """f(X) = -X, unit gains: the best constant is 1/sqrt(eps) - 1 exactly."""
    d, eps = 4, 1e-4
    sub = Residual(Sequential([Linear(-np.eye(d)), RMSNorm(np.ones(d), eps)]))
    want = 1 / math.sqrt(eps) - 1
    ref = lambda x: x - rms_ref(x, np.ones(d), eps)  # noqa: E731
    fd0 = np.linalg.norm(central_differences(ref, np.zeros((1, d)), h=1e-9), 2)
    assert abs(fd0 / want - 1) < 1e-6
    assert abs(layer_lipschitz(sub, np.zeros((2, d))).value / want - 1) < 1e-10
    rng = np.random.default_rng(9)
    for scale in 10.0 ** np.arange(-5, 3):
        X = scale * rng.standard_normal((2, d))
        assert layer_lipschitz(sub, X).value <= want * (1 + 1e-12)


def test_gemma2_block_at_the_origin_is_its_attention_sublayer():
    """The gated MLP's derivative vanishes at 0 (act(0) = 0 and up(0) = 0), so
    at X = 0 the block's Jacobian is the attention sublayer's closed form."""
    lay, st, block = gemma2_block()
    N = 5
    closed, _ = closed_form_at_origin(lay, st, N)
    b0 = layer_lipschitz(block, np.zeros((N, lay.d_model))).value
    assert abs(b0 / closed - 1) < 1e-8
    mlp = Sequential([block.norm_2, block.mlp])          # its branch, at 0
    E = np.random.default_rng(10).standard_normal((N, lay.d_model))
    h = 1e-8
    diff = (mlp.forward(h * E)[0] - mlp.forward(-h * E)[0]) / (2 * h)
    assert np.abs(diff).max() < 1e-3 * np.abs(mlp.forward(E)[0]).max()
