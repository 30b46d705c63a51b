r"""Tests of :meth:`MultiHeadAttention.expand_kv` and :meth:`MultiHeadAttention.kv_group`
(grouped-query attention, Chapter 7's GQA theorem).

References written here: a loop over query heads that uses key/value head
``i // (h / h_kv)`` for head i (Hugging Face's ``repeat_kv``), central
differences of the grouped layer's forward pass for the dense Jacobian, and the
closed form :math:`\|\bar P\|_2\|M\|_2` of the Jacobian's norm at a constant
sequence without RoPE.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn.layers import MultiHeadAttention, RMSNorm, layer_jacobian, layer_lipschitz
from lipattn.softmax import softmax

D, DH, H, HKV, N = 8, 4, 4, 2, 5


def _layer(seed=0, **kw):
    r = np.random.default_rng(seed)
    w = lambda *s: r.standard_normal(s) / math.sqrt(s[0])  # noqa: E731
    return MultiHeadAttention(w(D, H * DH), w(D, HKV * DH), w(D, HKV * DH), w(H * DH, D),
                              n_head=H, n_kv_head=HKV, b_Q=w(H * DH), b_K=w(HKV * DH),
                              b_V=w(HKV * DH), b_O=w(D), **kw)


def _loop_forward(a, X):
    """Plain attention with head i on key/value head i // (h / h_kv), causal or none."""
    rep, out = a.n_head // a.n_kv_head, np.zeros((X.shape[0], a.W_O.shape[1]))
    for i in range(a.n_head):
        j, q, k = i // rep, slice(i * DH, (i + 1) * DH), slice((i // rep) * DH, (i // rep + 1) * DH)
        Q, K = X @ a.W_Q[:, q] + a.b_Q[q], X @ a.W_K[:, k] + a.b_K[k]
        V = X @ a.W_V[:, k] + a.b_V[k]
        S = Q @ K.T / math.sqrt(DH)
        if a.mask == "causal":
            S = np.where(np.tril(np.ones_like(S, dtype=bool)), S, -np.inf)
        out += softmax(S) @ V @ a.W_O[i * DH:(i + 1) * DH]
        assert j < a.n_kv_head
    return out + a.b_O


def _dense(a, X, fd=False):
    """The dense Jacobian: layer_jacobian, or central differences of the forward pass."""
    if not fd:
        return layer_jacobian(a, X)
    h, cols = 1e-6, []
    for E in np.eye(X.size):
        E = E.reshape(X.shape)
        cols.append(((a.forward(X + h * E)[0] - a.forward(X - h * E)[0]) / (2 * h)).ravel())
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("mask", [None, "causal"])
def test_expand_kv_is_the_same_map_and_the_loop_reference(mask):
    a = _layer(mask=mask)
    e = a.expand_kv()
    X = np.random.default_rng(1).standard_normal((N, D))
    assert e.n_kv_head == e.n_head == H and a.n_kv_head == HKV
    assert np.allclose(a.forward(X)[0], _loop_forward(a, X), atol=1e-12)
    assert np.allclose(e.forward(X)[0], a.forward(X)[0], atol=1e-12)
    J = _dense(a, X, fd=True)                          # central differences of a
    assert np.allclose(_dense(e, X), J, atol=1e-7)
    assert np.allclose(_dense(a, X), J, atol=1e-7)


def test_expand_kv_keeps_rope_and_qk_norms():
    qn, kn = RMSNorm(np.full(DH, 1.3), 1e-6), RMSNorm(np.full(DH, 0.7), 1e-6)
    a = _layer(mask="causal", rope_theta=1e4, q_norm=qn, k_norm=kn)
    X = np.random.default_rng(2).standard_normal((N, D))
    e = a.expand_kv()
    assert np.allclose(e.forward(X)[0], a.forward(X)[0], atol=1e-12)
    E = np.random.default_rng(3).standard_normal((N, D))
    assert np.allclose(e.jvp(e.forward(X)[1], E), a.jvp(a.forward(X)[1], E), atol=1e-12)


def test_kv_groups_sum_to_the_layer():
    a = _layer(mask="causal", rope_theta=1e4)
    X = np.random.default_rng(4).standard_normal((N, D))
    groups = [a.kv_group(j) for j in range(HKV)]
    assert all(g.n_head == H // HKV and g.n_kv_head == 1 for g in groups)
    assert np.allclose(sum(g.forward(X)[0] for g in groups) + a.b_O, a.forward(X)[0],
                       atol=1e-12)
    heads = sum(a.head(i).forward(X)[0] for i in range(H))
    assert np.allclose(heads + a.b_O, a.forward(X)[0], atol=1e-12)


@pytest.mark.parametrize("mask", [None, "causal"])
def test_constant_sequence_closed_form(mask):
    a = _layer(seed=5, mask=mask)
    X = np.tile(np.random.default_rng(6).standard_normal(D), (N, 1))
    rep = H // HKV
    M = sum(a.W_V[:, (i // rep) * DH:(i // rep + 1) * DH] @ a.W_O[i * DH:(i + 1) * DH]
            for i in range(H))
    P = np.full((N, N), 1 / N) if mask is None else \
        np.tril(np.ones((N, N))) / np.arange(1, N + 1)[:, None]
    want = np.linalg.norm(P, 2) * np.linalg.norm(M, 2)
    assert abs(np.linalg.norm(_dense(a, X), 2) - want) < 1e-10 * want


def test_kv_group_refuses_a_bad_index_by_name():
    a = _layer()
    with pytest.raises(ValueError, match="j must be a key/value head"):
        a.kv_group(HKV)
    with pytest.raises((TypeError, ValueError), match="j"):
        a.kv_group(-1)


def test_layer_jacobian_norm_is_the_exact_constant_and_refuses_by_name():
    a = _layer(seed=8, mask="causal", rope_theta=1e4)
    X = np.random.default_rng(9).standard_normal((N, D))
    J = layer_jacobian(a, X)
    assert J.shape == (N * D, N * D)
    assert abs(np.linalg.norm(J, 2) - layer_lipschitz(a, X).value) < 1e-9
    with pytest.raises(ValueError, match="max_entries"):
        layer_jacobian(a, X, max_entries=10)
    with pytest.raises(TypeError, match="layer must have forward, jvp and vjp"):
        layer_jacobian(object(), X)
