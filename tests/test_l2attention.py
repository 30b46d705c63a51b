"""Tests of :mod:`lipattn.l2attention`: L2 self-attention against a loop, its Jacobian
against central finite differences (and the jvp/vjp adjoint identity), and its exact
local constant below Kim et al.'s bound (:mod:`lipattn.bounds`) on random and
adversarial inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lipschitz import I2, _adversarial, central_differences

from lipattn.adversarial import two_sided_tokens
from lipattn.bounds import kim_l2_bound
from lipattn.l2attention import (
    l2_attention_jacobian,
    l2_attention_jvp,
    l2_attention_vjp,
    l2_local_lipschitz,
    l2_self_attention,
)


def test_l2_attention_matches_a_loop():
    rng = np.random.default_rng(0)
    X, Wq = rng.standard_normal((5, 3)), rng.standard_normal((3, 2))
    Wv = rng.standard_normal((3, 4))
    out = np.zeros((5, 4))
    M = Wq @ Wq.T @ Wv / math.sqrt(2)
    for i in range(5):
        s = np.array([-np.sum((X[i] @ Wq - X[j] @ Wq) ** 2) / math.sqrt(2) for j in range(5)])
        w = np.exp(s - s.max())
        out[i] = (w / w.sum()) @ X @ M
    np.testing.assert_allclose(l2_self_attention(X, Wq, Wv), out, atol=1e-12)


def test_l2_jacobian_matches_central_differences_and_is_adjoint():
    rng = np.random.default_rng(1)
    X, Wq = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    Wv = rng.standard_normal((3, 2))
    J = l2_attention_jacobian(X, Wq, Wv)
    fd = central_differences(lambda Z: l2_self_attention(Z, Wq, Wv), X)
    np.testing.assert_allclose(J, fd, atol=1e-7 * np.abs(J).max())
    E, G = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    lhs = np.sum(l2_attention_jvp(X, E, Wq, Wv) * G)
    assert lhs == pytest.approx(np.sum(E * l2_attention_vjp(X, G, Wq, Wv)), rel=1e-12, abs=1e-12)


def test_l2_constants_stay_bounded_and_below_the_kim_bound():
    ts = [1.0, 4.0, 16.0, 64.0]
    L = [l2_local_lipschitz(two_sided_tokens(t), I2, I2) for t in ts]
    assert max(L) < kim_l2_bound(3, I2, I2)
    assert L[-1] == pytest.approx(L[-2], rel=1e-6)   # the constant settles


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["random", "two-sided", "sink", "clustered"]),
       N=st.integers(1, 8), d=st.integers(1, 3), dk=st.integers(1, 3),
       log_scale=st.floats(-2, 1.5), seed=st.integers(0, 10**6))
def test_l2_local_constant_below_kim_bound(kind, N, d, dk, log_scale, seed):
    rng = np.random.default_rng(seed)
    X = _adversarial(kind, N, d, 10**log_scale, seed)
    Wq, Wv = rng.standard_normal((d, dk)), rng.standard_normal((d, 2))
    # at N = 1 the exact-inverse bound is attained (phi^-1(0) = 0), so allow rounding
    assert l2_local_lipschitz(X, Wq, Wv) <= kim_l2_bound(X.shape[0], Wq, Wv) * (1 + 1e-12)
