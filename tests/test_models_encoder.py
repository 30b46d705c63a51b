"""lipattn.models.encoder: backward against central finite differences, the forward
pass against lipattn.attention, broadcasting over runs, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn.attention import self_attention
from lipattn.layernorm import layer_norm
from lipattn.models import encoder as T


def _generic_params(heads=1, seed=1, layers=2, d=4, d_ff=6):
    """Tiny model with non-trivial biases and gains, so every term of the backward matters."""
    params = T.init_params(layers, d, heads=heads, d_ff=d_ff, seed=seed)
    rng = np.random.default_rng(seed + 10)
    for p in params:
        for k in T.PARAM_NAMES:
            if not k.startswith("W_"):
                p[k] = p[k] + 0.3 * rng.standard_normal(p[k].shape)
    return params


def _loss(params, X, G, variant):
    return float(np.sum(T.forward(params, X, variant=variant) * G))


@pytest.mark.parametrize("variant", ["post", "pre"])
@pytest.mark.parametrize("heads", [1, 2])
def test_backward_matches_central_differences_every_parameter(variant, heads):
    params = _generic_params(heads)
    rng = np.random.default_rng(3)
    X, G = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    grads, gX = T.backward(params, X, G, variant=variant)
    h = 1e-6
    for layer, (p, g) in enumerate(zip(params, grads, strict=True)):
        assert set(g) == set(T.PARAM_NAMES) | {"heads"}
        for k in T.PARAM_NAMES:
            fd = np.zeros_like(p[k])
            for idx in np.ndindex(p[k].shape):
                old = p[k][idx]
                p[k][idx] = old + h
                up = _loss(params, X, G, variant)
                p[k][idx] = old - h
                down = _loss(params, X, G, variant)
                p[k][idx] = old
                fd[idx] = (up - down) / (2 * h)
            assert g[k].shape == p[k].shape
            np.testing.assert_allclose(g[k], fd, atol=2e-7 * (1 + np.abs(fd).max()),
                                       err_msg=f"layer {layer} {k}")
    fdX = np.zeros_like(X)
    for idx in np.ndindex(X.shape):
        E = np.zeros_like(X)
        E[idx] = h
        fdX[idx] = (_loss(params, X + E, G, variant) - _loss(params, X - E, G, variant)) / (2 * h)
    np.testing.assert_allclose(gX, fdX, atol=2e-7 * (1 + np.abs(fdX).max()))


def test_forward_one_layer_matches_lipattn_attention_and_layernorm():
    p = T.init_params(1, 6, seed=4)
    X = np.random.default_rng(5).standard_normal((7, 6))
    att = self_attention(X, p[0]["W_Q"], p[0]["W_K"], p[0]["W_V"]) @ p[0]["W_O"]
    X1 = layer_norm(X + att)
    ffn = np.maximum(X1 @ p[0]["W_1"], 0) @ p[0]["W_2"]
    np.testing.assert_allclose(T.forward(p, X, variant="post"), layer_norm(X1 + ffn),
                               atol=1e-12)
    H = layer_norm(X)
    X1 = X + self_attention(H, p[0]["W_Q"], p[0]["W_K"], p[0]["W_V"]) @ p[0]["W_O"]
    X2 = X1 + np.maximum(layer_norm(X1) @ p[0]["W_1"], 0) @ p[0]["W_2"]
    np.testing.assert_allclose(T.forward(p, X, variant="pre"), layer_norm(X2), atol=1e-12)


def test_two_heads_are_two_column_blocks():
    p = T.init_params(1, 4, heads=2, seed=2)[0]
    X = np.random.default_rng(0).standard_normal((3, 4))
    H = layer_norm(X)
    heads = [self_attention(H, p["W_Q"][:, s], p["W_K"][:, s], p["W_V"][:, s])
             for s in (slice(0, 2), slice(2, 4))]
    X1 = X + np.concatenate(heads, axis=-1) @ p["W_O"]
    X2 = X1 + np.maximum(layer_norm(X1) @ p["W_1"], 0) @ p["W_2"]
    np.testing.assert_allclose(T.forward([p], X, variant="pre"), layer_norm(X2), atol=1e-12)


def test_init_shapes_and_xavier_variance():
    params = T.init_params(3, 32, heads=4, seed=0)
    assert len(params) == 3 and all(p["heads"] == 4 for p in params)
    p = params[0]
    assert p["W_1"].shape == (32, 128) and p["W_2"].shape == (128, 32)
    assert p["b_1"].shape == (128,) and np.all(p["ln1_g"] == 1) and np.all(p["b_O"] == 0)
    # Xavier uniform: variance 2 / (fan_in + fan_out)
    W = np.concatenate([q["W_1"].ravel() for q in T.init_params(20, 32, seed=1)])
    assert W.var() == pytest.approx(2 / 160, rel=0.02)
    assert np.abs(W).max() <= np.sqrt(6 / 160)


@pytest.mark.parametrize("variant", ["post", "pre"])
def test_stacked_runs_equal_separate_runs(variant):
    models = [_generic_params(seed=s) for s in (1, 2, 3)]
    stacked = T.stack_params(models, batch_axes=1)
    rng = np.random.default_rng(9)
    X = rng.standard_normal((3, 2, 5, 4))  # (runs, batch, N, d)
    G = rng.standard_normal((3, 2, 5, 4))
    Y = T.forward(stacked, X, variant=variant)
    grads, gX = T.backward(stacked, X, G, variant=variant)
    for r, m in enumerate(models):
        np.testing.assert_allclose(Y[r], T.forward(m, X[r], variant=variant), atol=1e-12)
        g_r, gX_r = T.backward(m, X[r], G[r], variant=variant)
        np.testing.assert_allclose(gX[r], gX_r, atol=1e-12)
        for layer in range(2):
            for k in T.PARAM_NAMES:
                np.testing.assert_allclose(grads[layer][k][r].reshape(m[layer][k].shape),
                                           g_r[layer][k], atol=1e-11)


def test_float32_is_kept():
    p = [{k: v if k == "heads" else v.astype(np.float32) for k, v in q.items()}
         for q in T.init_params(2, 8, seed=0)]
    X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    for v in ("pre", "post"):
        assert T.forward(p, X, variant=v).dtype == np.float32
        grads, gX = T.backward(p, X, X, variant=v)
        assert gX.dtype == np.float32 and grads[0]["W_Q"].dtype == np.float32


def test_residual_stream_and_token_diversity():
    p = T.init_params(3, 8, seed=0)
    X = np.random.default_rng(0).standard_normal((6, 8))
    s = T.residual_stream(p, X, variant="pre")
    assert len(s) == 4 and np.array_equal(s[0], X)
    np.testing.assert_allclose(layer_norm(s[-1]), T.forward(p, X, variant="pre"), atol=1e-12)
    assert T.token_diversity(np.ones((4, 3))) == 0.0
    assert T.token_diversity(np.zeros((4, 3))) == 0.0
    Z = np.random.default_rng(1).standard_normal((4, 3))
    assert T.token_diversity(Z - Z.mean(0)) == pytest.approx(1.0)


@pytest.mark.parametrize("variant", ["post", "pre"])
def test_attention_inputs_rebuild_every_layer_with_self_attention(variant):
    """Each layer, rebuilt from its extracted attention input with lipattn.attention
    (value matrix W_V W_O) and lipattn.layernorm, gives the next residual stream."""
    params = _generic_params(layers=3, d=4, d_ff=6)
    X = np.random.default_rng(4).standard_normal((2, 5, 4))
    inputs = T.attention_inputs(params, X, variant=variant)
    stream = T.residual_stream(params, X, variant=variant)
    assert len(inputs) == 3

    def ln(Z, g, b):
        return g * layer_norm(Z) + b

    for p, H, Xl, Xn in zip(params, inputs, stream[:-1], stream[1:], strict=True):
        a = self_attention(H, p["W_Q"], p["W_K"], p["W_V"] @ p["W_O"]) + p["b_O"]
        if variant == "pre":
            np.testing.assert_allclose(H, ln(Xl, p["ln1_g"], p["ln1_b"]), atol=1e-12)
            X1 = Xl + a
            H2 = ln(X1, p["ln2_g"], p["ln2_b"])
            want = X1 + np.maximum(H2 @ p["W_1"] + p["b_1"], 0) @ p["W_2"] + p["b_2"]
        else:
            np.testing.assert_array_equal(H, Xl)
            X1 = ln(Xl + a, p["ln1_g"], p["ln1_b"])
            F = np.maximum(X1 @ p["W_1"] + p["b_1"], 0) @ p["W_2"] + p["b_2"]
            want = ln(X1 + F, p["ln2_g"], p["ln2_b"])
        np.testing.assert_allclose(Xn, want, atol=1e-12)


def test_attention_inputs_bad_input():
    p = T.init_params(2, 4, seed=0)
    with pytest.raises(ValueError, match="X"):
        T.attention_inputs(p, np.zeros((3, 5)), variant="pre")
    with pytest.raises(ValueError, match="variant"):
        T.attention_inputs(p, np.zeros((3, 4)), variant="mid")
    with pytest.raises(ValueError, match="X"):
        T.attention_inputs(p, np.full((3, 4), np.nan), variant="post")


def test_extreme_inputs_stay_finite():
    p = T.init_params(2, 4, seed=0)
    for scale in (1e-150, 1e6):
        X = scale * np.random.default_rng(0).standard_normal((3, 4))
        for v in ("post", "pre"):
            Y = T.forward(p, X, variant=v)
            grads, gX = T.backward(p, X, np.ones_like(X), variant=v)
            assert np.all(np.isfinite(Y)) and np.all(np.isfinite(gX))


def test_bad_inputs():
    p = T.init_params(2, 4, seed=0)
    X = np.zeros((3, 4))
    with pytest.raises(ValueError, match="variant"):
        T.forward(p, X, variant="middle")
    with pytest.raises(ValueError, match="X must"):
        T.forward(p, np.zeros((3, 5)), variant="pre")
    with pytest.raises(ValueError, match="X must"):
        T.forward(p, np.array([[np.nan, 0, 0, 0]]), variant="pre")
    with pytest.raises(ValueError, match="X must"):
        T.forward(p, np.zeros(4), variant="pre")
    with pytest.raises(ValueError, match="grad_out"):
        T.backward(p, X, np.zeros((2, 4)), variant="post")
    with pytest.raises(ValueError, match="grad_out"):
        T.backward(p, X, np.full((3, 4), np.inf), variant="post")
    bad = [dict(q) for q in p]
    bad[1]["W_2"] = np.zeros((3, 3))
    with pytest.raises(ValueError, match=r"params\[1\]\['W_2'\]"):
        T.forward(bad, X, variant="post")
    with pytest.raises(TypeError, match="params"):
        T.forward([], X, variant="post")
    with pytest.raises(ValueError, match="heads"):
        T.init_params(2, 6, heads=4)
    with pytest.raises(ValueError, match="layers"):
        T.init_params(0, 4)
    with pytest.raises(TypeError, match="models"):
        T.stack_params([])
    with pytest.raises(ValueError, match="X must"):
        T.residual_stream(p, np.zeros((3, 2)), variant="pre")
    with pytest.raises(ValueError, match="X must"):
        T.token_diversity(np.zeros(3))


@pytest.mark.parametrize("variant", ["post", "pre"])
def test_overflow_is_a_clear_error_not_a_warning(variant):
    """Near the float64 limit Post-LN's logits overflow, and a huge FFN bias
    overflows Pre-LN's stream: each is a ValueError naming params and X."""
    p = T.init_params(2, 4, seed=1)
    X = np.random.default_rng(0).standard_normal((3, 4))
    if variant == "post":
        X = X / np.abs(X).max() * 1.79e308
    else:
        p[0]["b_1"] = p[0]["b_1"] + 1e308
        p[0]["W_2"] = p[0]["W_2"] * 1e10
    for fn in (T.forward, T.residual_stream):
        with pytest.raises(ValueError, match="^params and X must keep the"):
            fn(p, X, variant=variant)


@pytest.mark.parametrize("variant", ["post", "pre"])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_as_layers_forward_equals_forward_and_its_backward_equals_backward(variant, heads,
                                                                           qk_norm):
    """The encoder is the stack of layers: the same values, up to the copies of the
    transposes that as_layers keeps for many products (rounding only)."""
    params = _generic_params(heads, layers=3)
    for p in params:
        p["qk_norm"] = qk_norm
    rng = np.random.default_rng(4)
    X, G = 2 * rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    stack = T.as_layers(params, variant)
    Y, state = stack.forward(X)
    np.testing.assert_allclose(Y, T.forward(params, X, variant=variant), rtol=1e-12,
                               atol=1e-13)
    grads, gX = T.backward(params, X, G, variant=variant)
    np.testing.assert_allclose(stack.vjp(state, G), gX, rtol=1e-11, atol=1e-12)
    dX, named = stack.backward(state, G)
    np.testing.assert_allclose(dX, gX, rtol=1e-11, atol=1e-12)
    assert len(named) == 13 * len(params)          # the QK-norms have no parameters
    for key, g in named.items():
        layer, name = int(key.split(".")[0]), T._param_name(key)
        np.testing.assert_allclose(g, grads[layer][name], rtol=1e-11, atol=1e-12, err_msg=key)
        assert stack.params[key] is params[layer][name]
    no_final = T.as_layers(params, variant, final_norm=False)
    assert len(no_final.layers) == 3 and len(stack.layers) == 3 + (variant == "pre")
    np.testing.assert_allclose(no_final.forward(X)[0],
                               T.residual_stream(params, X, variant=variant)[-1], rtol=1e-12,
                               atol=1e-13)


def test_as_layers_float32_and_bad_input():
    params = T.init_params(2, 4, heads=2, seed=0)
    p32 = [{k: v if k == "heads" else v.astype(np.float32) for k, v in p.items()} for p in params]
    X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    Y = T.as_layers(p32, "pre").forward(X)[0]
    assert Y.dtype == np.float32
    np.testing.assert_allclose(Y, T.forward(p32, X, variant="pre"), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="variant must be"):
        T.as_layers(params, "mid")
    with pytest.raises(TypeError, match="final_norm"):
        T.as_layers(params, "pre", final_norm=1)
    with pytest.raises(ValueError, match=r"params\[0\]\['W_Q'\] must have no leading run axes"):
        T.as_layers(T.stack_params([params, params]), "post")
    with pytest.raises(ValueError, match="missing"):
        T.as_layers([{k: v for k, v in params[0].items() if k != "W_1"}], "post")


# ---------------------------------------------------------------------------
# QK-norm
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["post", "pre"])
@pytest.mark.parametrize("heads", [1, 2])
def test_qk_norm_backward_matches_central_differences(variant, heads):
    params = _generic_params(heads, d=6)
    for p in params:
        p["qk_norm"] = True
    X = np.random.default_rng(4).standard_normal((2, 5, 6))
    assert T.gradient_check(params, X, variant=variant) < 1e-7
    grads, _ = T.backward(params, X, np.ones_like(X), variant=variant)
    assert all(g["qk_norm"] is True for g in grads)


def test_qk_norm_forward_matches_stabilised_attention_and_bounds_the_logits():
    from lipattn.stabilisers import StabilisedAttention

    params = _generic_params(2, d=6)
    for p in params:
        p["qk_norm"] = True
    X = 30 * np.random.default_rng(5).standard_normal((5, 6))
    H = T.attention_inputs(params, X, variant="post")
    for p, h in zip(params, H, strict=True):
        ref = StabilisedAttention(p["W_Q"], p["W_K"], p["W_V"], p["W_O"], n_head=2,
                                  qk_norm="layer", qk_norm_eps=T.EPS)
        out, cache = T._attn_fwd(h, p)
        np.testing.assert_allclose(out, ref.forward(h)[0] + p["b_O"], atol=1e-12)
        S = T._attn_logits(cache)
        np.testing.assert_allclose(S, ref.logits(h), atol=1e-12)
        assert np.abs(S).max() <= np.sqrt(3)         # |LN(q)| <= sqrt(d_h), d_h = 3


def test_qk_norm_off_is_the_plain_layer_and_bad_flags_raise():
    params = _generic_params(2, d=6)
    X = np.random.default_rng(6).standard_normal((5, 6))
    off = T.forward(params, X, variant="pre")
    for p in params:
        p["qk_norm"] = False
    assert np.array_equal(T.forward(params, X, variant="pre"), off)
    params[1]["qk_norm"] = "yes"
    with pytest.raises(TypeError, match=r"params\[1\]\['qk_norm'\]"):
        T.forward(params, X, variant="pre")
    with pytest.raises(TypeError, match="qk_norm"):
        T.init_params(1, 4, qk_norm=1)
    a, b = T.init_params(1, 4, qk_norm=True), T.init_params(1, 4)
    assert a[0]["qk_norm"] is True and "qk_norm" not in b[0]
    with pytest.raises(ValueError, match="same qk_norm"):
        T.stack_params([a, b])
    assert T.stack_params([a, a])[0]["qk_norm"] is True
    attn = T.as_layers(a, "pre").layers[0].layers[0].branch.layers[1]
    assert attn.q_norm is not None and attn.k_norm is not None and attn.q_norm.params == {}


@pytest.mark.parametrize("qk_norm", [False, True])
def test_pre_ln_is_scale_invariant_at_huge_inputs(qk_norm):
    """Issue 24: at |X| ~ 1e200 the Pre-LN encoder's output is LN(X) without eps (the
    sublayers' O(1) outputs vanish beside the stream), to rounding, in every layer path."""
    params = _generic_params(2, d=6)
    for p in params:
        p["qk_norm"] = qk_norm
    X = np.random.default_rng(9).standard_normal((2, 5, 6))
    c = X - X.mean(-1, keepdims=True)
    limit = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True))
    for s in (1e30, 1e100, 1e154, 1e160, 1e200, 1e300):
        Y = T.forward(params, s * X, variant="pre")
        np.testing.assert_allclose(Y, limit, rtol=0, atol=1e-14, err_msg=f"scale {s}")
        np.testing.assert_array_equal(T.as_layers(params, "pre").forward(s * X[0])[0], Y[0])
