"""Tests of :mod:`lipattn.attention`: against a loop implementation with an
independent softmax, batching, extreme logits and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn.attention import attention_logits, attention_matrix, self_attention


def loop_attention(X, W_Q, W_K, W_V):
    """Reference: one query at a time, plain Python sums."""
    N, _ = X.shape
    dk = W_Q.shape[1]
    out = np.zeros((N, W_V.shape[1]))
    for i in range(N):
        q = X[i] @ W_Q
        s = [float(q @ (X[j] @ W_K)) / math.sqrt(dk) for j in range(N)]
        m = max(s)
        w = [math.exp(x - m) for x in s]
        tot = sum(w)
        for j in range(N):
            out[i] += (w[j] / tot) * (X[j] @ W_V)
    return out


def weights(rng, d, dk, dv, scale=1.0):
    return (scale * rng.standard_normal((d, dk)), scale * rng.standard_normal((d, dk)),
            rng.standard_normal((d, dv)))


@pytest.mark.parametrize("N,d,dk,dv", [(1, 1, 1, 1), (3, 2, 2, 2), (7, 5, 3, 4), (16, 8, 8, 2)])
def test_matches_loop_implementation(N, d, dk, dv):
    rng = np.random.default_rng(N * 100 + d)
    X = rng.standard_normal((N, d))
    W_Q, W_K, W_V = weights(rng, d, dk, dv)
    np.testing.assert_allclose(self_attention(X, W_Q, W_K, W_V),
                               loop_attention(X, W_Q, W_K, W_V), rtol=1e-12, atol=1e-12)


def test_broadcasts_over_leading_axes():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2, 3, 5, 4))
    W_Q, W_K, W_V = weights(rng, 4, 3, 6)
    Y = self_attention(X, W_Q, W_K, W_V)
    assert Y.shape == (2, 3, 5, 6)
    for a in range(2):
        for b in range(3):
            np.testing.assert_allclose(Y[a, b], loop_attention(X[a, b], W_Q, W_K, W_V),
                                       rtol=1e-12, atol=1e-12)
    assert attention_logits(X, W_Q, W_K).shape == (2, 3, 5, 5)


def test_rows_are_stochastic_and_output_is_a_convex_combination():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((9, 4))
    W_Q, W_K, _ = weights(rng, 4, 4, 4, scale=3.0)
    P = attention_matrix(X, W_Q, W_K)
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=0, atol=1e-14)
    Y = self_attention(X, W_Q, W_K, np.eye(4))
    assert np.all(Y <= X.max(0) + 1e-12) and np.all(Y >= X.min(0) - 1e-12)


def test_extreme_logits_stay_finite_without_warnings():
    X = np.array([[1e100, 0.0], [-1e100, 0.0], [0.0, 1.0]])
    I2 = np.eye(2)
    Y = self_attention(X, I2, I2, I2)  # logits of 1e200: hard attention
    assert np.all(np.isfinite(Y))
    P = attention_matrix(X, I2, I2)
    np.testing.assert_array_equal(P[0], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(P[1], [0.0, 1.0, 0.0])


def test_logits_beyond_float64_give_the_exact_hard_attention():
    # logits 2**1200 / sqrt(2) * X X^T: the softmax is uniform over each row's maxima
    X = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    W = np.eye(2) * 2.0**600
    P = attention_matrix(X, W, W)
    np.testing.assert_array_equal(P, [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5]])
    np.testing.assert_array_equal(attention_matrix(np.array([[1e200, 0.0], [1.0, 0.0]]),
                                                   np.eye(2), np.eye(2)), [[1, 0], [1, 0]])
    with pytest.raises(OverflowError, match="X, W_Q and W_K"):
        attention_logits(X, W, W)
    Y = self_attention(X * 1e160, np.eye(2), np.eye(2), np.eye(2))  # the 1e160
    np.testing.assert_allclose(Y, [[1e160, 0.5e160], [1e160, 1e160], [0.5e160, 1e160]],
                               rtol=1e-15)
    with pytest.raises(OverflowError, match="X and W_V"):
        self_attention(X * 1e160, np.eye(2), np.eye(2), np.eye(2) * 1e160)


@pytest.mark.parametrize("args,match", [
    ((np.ones(3), np.eye(3), np.eye(3), np.eye(3)), "X must"),
    ((np.ones((2, 3)), np.eye(2), np.eye(2), np.eye(2)), "W_Q must have shape"),
    ((np.ones((2, 3)), np.eye(3), np.ones((3, 2)), np.eye(3)), "W_K must have the shape"),
    ((np.ones((2, 3)), np.eye(3), np.eye(3), np.eye(2)), "W_V must have shape"),
    ((np.array([[np.nan, 1.0]]), np.eye(2), np.eye(2), np.eye(2)), "X must be a finite"),
    ((np.ones((2, 2)), np.eye(2), np.eye(2), np.array([[1.0, np.inf], [0, 1]])), "W_V must"),
    ((np.ones((0, 2)), np.eye(2), np.eye(2), np.eye(2)), "X must"),
])
def test_bad_input_names_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        self_attention(*args)


def test_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="X must"):
        self_attention("tokens", np.eye(2), np.eye(2), np.eye(2))


# -- masks -------------------------------------------------------------------
def loop_masked_attention(X, W_Q, W_K, W_V, allowed):
    """Reference: query i attends to the keys j with allowed[i][j], by the loop above
    on the sub-sequence of those keys (its own query row appended)."""
    out = np.zeros((X.shape[0], W_V.shape[1]))
    for i in range(X.shape[0]):
        keys = [j for j in range(X.shape[0]) if allowed[i][j]]
        q = X[i] @ W_Q
        s = [float(q @ (X[j] @ W_K)) / math.sqrt(W_Q.shape[1]) for j in keys]
        m = max(s)
        w = [math.exp(x - m) for x in s]
        out[i] = sum((wj / sum(w)) * (X[j] @ W_V) for wj, j in zip(w, keys, strict=True))
    return out


def test_causal_and_custom_masks_match_the_loop_on_the_allowed_keys():
    rng = np.random.default_rng(5)
    N, d = 7, 4
    X = rng.standard_normal((N, d))
    W_Q, W_K, W_V = weights(rng, d, 3, 2, scale=1.5)
    causal = [[j <= i for j in range(N)] for i in range(N)]
    np.testing.assert_allclose(self_attention(X, W_Q, W_K, W_V, mask="causal"),
                               loop_masked_attention(X, W_Q, W_K, W_V, causal), atol=1e-12)
    custom = rng.uniform(size=(N, N)) < 0.4
    custom[np.arange(N), rng.integers(0, N, N)] = True      # every row allows a key
    np.testing.assert_allclose(self_attention(X, W_Q, W_K, W_V, mask=custom),
                               loop_masked_attention(X, W_Q, W_K, W_V, custom), atol=1e-12)
    P = attention_matrix(X, W_Q, W_K, mask=custom)
    assert np.all(P[~custom] == 0.0)
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-14)
    # an all-True mask is no mask; the causal prefix of length k is attention on X[:k]
    full = np.ones((N, N), dtype=bool)
    np.testing.assert_allclose(self_attention(X, W_Q, W_K, W_V, mask=full),
                               self_attention(X, W_Q, W_K, W_V), atol=1e-15)
    for k in (1, 3):
        np.testing.assert_allclose(self_attention(X, W_Q, W_K, W_V, mask="causal")[:k],
                                   self_attention(X[:k], W_Q, W_K, W_V, mask="causal"),
                                   atol=1e-14)


def test_masks_broadcast_over_leading_axes():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((2, 5, 3))
    W_Q, W_K, W_V = weights(rng, 3, 3, 3)
    Y = self_attention(X, W_Q, W_K, W_V, mask="causal")
    for b in range(2):
        np.testing.assert_allclose(Y[b], self_attention(X[b], W_Q, W_K, W_V, mask="causal"))


@pytest.mark.parametrize("mask,err,match", [
    ("anticausal", ValueError, "mask must be None, 'causal'"),
    (np.ones((3, 3)), TypeError, "boolean"),
    (np.ones((2, 2), dtype=bool), ValueError, r"shape \(N, N\) = \(3, 3\)"),
    (np.array([[True, False, False], [False, False, False], [True, True, True]]),
     ValueError, r"rows \[1\]"),
])
def test_bad_masks_name_the_argument(mask, err, match):
    X = np.ones((3, 2))
    with pytest.raises(err, match=match):
        self_attention(X, np.eye(2), np.eye(2), np.eye(2), mask=mask)
    with pytest.raises(err, match=match):
        attention_matrix(X, np.eye(2), np.eye(2), mask=mask)
