"""lipattn.stabilisers against dense finite-difference Jacobians and plain loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lipattn.layers import MultiHeadAttention
from lipattn.stabilisers import StabilisedAttention, sigma_reparam, stabilised_lipschitz


def weights(d=6, h=2, dh=3, dv=2, d_out=5, seed=0, w=0.7):
    rng = np.random.default_rng(seed)
    return (w * rng.standard_normal((d, h * dh)), w * rng.standard_normal((d, h * dh)),
            w * rng.standard_normal((d, h * dv)), w * rng.standard_normal((h * dv, d_out)))


def loop_reference(X, W_Q, W_K, W_V, W_O, h, qk_norm, over, eps, scale, cap, causal):
    """Token-by-token, head-by-head: the published formulas written out."""
    N = X.shape[0]
    dh, dv = W_Q.shape[1] // h, W_V.shape[1] // h

    def norm(z):
        if qk_norm is None:
            return z
        if qk_norm == "layer":
            z = z - z.mean()
        return z / math.sqrt(np.mean(z ** 2) + eps)

    Q, K = X @ W_Q, X @ W_K
    if over == "all":
        Q, K = np.array([norm(q) for q in Q]), np.array([norm(k) for k in K])
    heads = []
    for i in range(h):
        q, k = Q[:, i * dh:(i + 1) * dh], K[:, i * dh:(i + 1) * dh]
        if over == "head":
            q, k = np.array([norm(r) for r in q]), np.array([norm(r) for r in k])
        v = (X @ W_V)[:, i * dv:(i + 1) * dv]
        out = np.zeros((N, dv))
        for a in range(N):
            s = []
            for b in range(N):
                z = float(q[a] @ k[b]) / (math.sqrt(dh) if scale == "sqrt" else dh)
                z = cap * math.tanh(z / cap) if cap else z
                s.append(z if (b <= a or not causal) else -math.inf)
            m = max(s)
            e = np.array([math.exp(z - m) for z in s])
            out[a] = (e / e.sum()) @ v
        heads.append(out)
    return np.hstack(heads) @ W_O


def dense(layer, X, h=1e-6):
    Y, st = layer.forward(X)
    n_in, n_out = X.size, Y.size
    fd = np.zeros((n_out, n_in))
    for k in range(n_in):
        e = np.zeros(n_in)
        e[k] = h
        E = e.reshape(X.shape)
        fd[:, k] = (layer.forward(X + E)[0] - layer.forward(X - E)[0]).ravel() / (2 * h)
    jv = np.column_stack([layer.jvp(st, e.reshape(X.shape)).ravel() for e in np.eye(n_in)])
    vj = np.vstack([layer.vjp(st, g.reshape(Y.shape)).ravel() for g in np.eye(n_out)])
    return fd, jv, vj


# qk_norm=None ignores qk_norm_over, so it is listed once
CASES = [c for c in itertools.product([None, "rms", "layer"], ["head", "all"], ["sqrt", "linear"],
                                      [None, 2.0], [False, True])
         if not (c[0] is None and c[1] == "all")]


@pytest.mark.parametrize("qk_norm,over,scale,cap,causal", CASES)
def test_forward_matches_loop_and_products_match_finite_differences(qk_norm, over, scale, cap,
                                                                     causal):
    W = weights()
    X = np.random.default_rng(1).standard_normal((5, 6))
    layer = StabilisedAttention(*W, n_head=2, mask="causal" if causal else None,
                                qk_norm=qk_norm, qk_norm_over=over, qk_norm_eps=1e-3,
                                scale=scale, softcap=cap)
    ref = loop_reference(X, *W, 2, qk_norm, over, 1e-3, scale, cap, causal)
    np.testing.assert_allclose(layer.forward(X)[0], ref, rtol=1e-12, atol=1e-12)
    fd, jv, vj = dense(layer, X)
    scale_ = np.abs(jv).max()
    assert np.abs(fd - jv).max() < 1e-7 * scale_
    np.testing.assert_allclose(vj, jv, rtol=1e-12, atol=1e-12 * scale_)
    sv = np.linalg.norm(jv, 2)
    assert abs(stabilised_lipschitz(layer, X).value - sv) < 1e-9 * sv


def test_without_options_it_is_the_library_attention():
    W = weights(seed=3)
    X = np.random.default_rng(4).standard_normal((7, 6))
    for mask in (None, "causal"):
        a = StabilisedAttention(*W, n_head=2, mask=mask)
        b = MultiHeadAttention(*W, n_head=2, mask=mask)
        np.testing.assert_allclose(a.forward(X)[0], b.forward(X)[0], rtol=1e-13, atol=1e-14)
        E = np.random.default_rng(5).standard_normal(X.shape)
        np.testing.assert_allclose(a.jvp(a.forward(X)[1], E), b.jvp(b.forward(X)[1], E),
                                   rtol=1e-12, atol=1e-13)


def test_qk_norm_logits_are_bounded_and_scale_free():
    """|q.k| <= ||q|| ||k|| = d_h for unit-gain RMSNorm without eps effects."""
    W = weights(seed=6)
    X = np.random.default_rng(7).standard_normal((6, 6))
    layer = StabilisedAttention(*W, n_head=2, qk_norm="rms", qk_norm_eps=1e-12)
    for t in (1.0, 10.0, 1e3):
        T = layer.logits(t * X)
        assert np.abs(T).max() <= math.sqrt(3) * (1 + 1e-9)
        np.testing.assert_allclose(T, layer.logits(X), rtol=1e-6, atol=1e-9)


def test_softcap_bounds_the_logits():
    W = weights(seed=8)
    X = 30 * np.random.default_rng(9).standard_normal((6, 6))
    layer = StabilisedAttention(*W, n_head=2, softcap=5.0)
    assert np.abs(layer.logits(X)).max() <= 5.0
    assert np.abs(StabilisedAttention(*W, n_head=2).logits(X)).max() > 50


def test_sigma_reparam():
    W = np.random.default_rng(0).standard_normal((5, 3))
    assert abs(np.linalg.svd(sigma_reparam(W, 2.5), compute_uv=False)[0] - 2.5) < 1e-12
    with pytest.raises(ValueError, match="non-zero"):
        sigma_reparam(np.zeros((2, 2)))


@pytest.mark.parametrize("kwargs,match", [
    ({"qk_norm": "l2"}, "qk_norm"), ({"qk_norm_over": "x"}, "qk_norm_over"),
    ({"scale": "cube"}, "scale"), ({"softcap": -1.0}, "softcap"),
    ({"qk_norm_eps": 0.0}, "qk_norm_eps"), ({"n_head": 4}, "n_head")])
def test_bad_options_are_named(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        StabilisedAttention(*weights(), **({"n_head": 2} | kwargs))


def test_bad_inputs_are_named():
    layer = StabilisedAttention(*weights(), n_head=2)
    with pytest.raises(ValueError, match="X"):
        layer.forward(np.ones((3, 4)))
    with pytest.raises(ValueError, match="X"):
        layer.forward(np.full((3, 6), np.nan))
    with pytest.raises(TypeError, match="layer"):
        stabilised_lipschitz(object(), np.ones((3, 6)))


def test_qk_norm_bounds_hold_on_random_and_adversarial_inputs():
    from lipattn.stabilisers import qk_norm_ball_bound, qk_norm_two_sided_lower

    rng = np.random.default_rng(11)
    for _ in range(25):
        n, R, eps = int(rng.integers(2, 8)), 10 ** rng.uniform(-2, 2), 10 ** rng.uniform(-6, -1)
        W = [rng.standard_normal((4, 4)) / 2 for _ in range(3)]
        X = rng.standard_normal((n, 4))
        X *= R / np.linalg.norm(X, axis=1).max()
        layer = StabilisedAttention(*W, qk_norm="rms", qk_norm_eps=eps)
        assert stabilised_lipschitz(layer, X).value <= qk_norm_ball_bound(R, n, *W, eps)
    I2 = np.eye(2)
    for t, eps in ((0.5, 1e-2), (8.0, 1e-6), (50.0, 1e-4)):
        X = t * np.array([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
        layer = StabilisedAttention(I2, I2, I2, qk_norm="rms", qk_norm_eps=eps)
        # the bound is row 1 of the Jacobian for a perturbation of token 1 along e_1
        Y, st = layer.forward(X)
        E = np.zeros_like(X)
        E[0, 0] = 1.0
        row1 = np.linalg.norm(layer.jvp(st, E)[0])
        assert abs(row1 - qk_norm_two_sided_lower(t, eps)) < 1e-9 * row1
        assert stabilised_lipschitz(layer, X).value >= row1 * (1 - 1e-9)
