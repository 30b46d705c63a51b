"""Tests of the attention core of :mod:`lipattn.layers.attention` on batched heads.

:func:`attention_core` against a loop over heads and query rows written here;
its jvp against central differences of the core in Q, K and V jointly; its vjp
as the adjoint of the jvp; grouped queries (M != N) with a broadcast mask;
``copy_transposes`` changes no value beyond rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn.layers import attention_core, attention_core_jvp, attention_core_vjp

RNG = np.random.default_rng(7)


def loop_reference(Q, K, V, mask):
    """softmax(Q K^T / sqrt(d_h)) V one head and one query row at a time."""
    out = np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for idx in np.ndindex(Q.shape[:-2]):
        for i in range(Q.shape[-2]):
            s = [float(Q[idx][i] @ K[idx][j]) / math.sqrt(Q.shape[-1])
                 for j in range(K.shape[-2])]
            allowed = [j for j in range(len(s)) if mask is None or mask[i, j]]
            top = max(s[j] for j in allowed)
            w = {j: math.exp(s[j] - top) for j in allowed}
            z = sum(w.values())
            out[idx][i] = sum(w[j] / z * V[idx][j] for j in allowed)
    return out


def problem(batch=(2, 3), M=6, N=3, dh=4, dv=5, masked=True):
    Q = RNG.standard_normal((*batch, M, dh))
    K = RNG.standard_normal((*batch, N, dh))
    V = RNG.standard_normal((*batch, N, dv))
    mask = None
    if masked:   # M = 2 N: two query heads of N rows sharing a key head, causal each
        mask = np.tile(np.tri(N, dtype=bool), (M // N, 1))
    return Q, K, V, mask


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("copy", [False, True])
def test_forward_matches_the_loop_reference(masked, copy):
    Q, K, V, mask = problem(masked=masked)
    out, st = attention_core(Q, K, V, mask=mask, copy_transposes=copy)
    np.testing.assert_allclose(out, loop_reference(Q, K, V, mask), rtol=1e-12, atol=1e-13)
    if masked:
        assert np.all(st.P[..., ~mask] == 0.0)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("copy", [False, True])
def test_jvp_matches_central_differences_and_vjp_is_its_adjoint(masked, copy):
    Q, K, V, mask = problem(masked=masked)
    _, st = attention_core(Q, K, V, mask=mask, copy_transposes=copy)
    dQ, dK, dV = (RNG.standard_normal(a.shape) for a in (Q, K, V))
    h = 1e-6
    plus = attention_core(Q + h * dQ, K + h * dK, V + h * dV, mask=mask)[0]
    minus = attention_core(Q - h * dQ, K - h * dK, V - h * dV, mask=mask)[0]
    dO = attention_core_jvp(st, dQ, dK, dV)
    np.testing.assert_allclose(dO, (plus - minus) / (2 * h), atol=1e-8)
    G = RNG.standard_normal(dO.shape)
    gQ, gK, gV = attention_core_vjp(st, G)
    assert (gQ.shape, gK.shape, gV.shape) == (Q.shape, K.shape, V.shape)
    lhs = np.sum(dO * G)
    rhs = np.sum(gQ * dQ) + np.sum(gK * dK) + np.sum(gV * dV)
    assert lhs == pytest.approx(rhs, rel=1e-12)


def test_each_derivative_alone_matches_finite_differences():
    """Directions in Q, K or V alone: no term of the product rule is lost or doubled."""
    Q, K, V, mask = problem()
    _, st = attention_core(Q, K, V, mask=mask)
    h = 1e-6
    for which in range(3):
        D = [np.zeros_like(a) for a in (Q, K, V)]
        D[which] = RNG.standard_normal(D[which].shape)
        up = attention_core(*(a + h * e for a, e in zip((Q, K, V), D, strict=True)), mask=mask)
        dn = attention_core(*(a - h * e for a, e in zip((Q, K, V), D, strict=True)), mask=mask)
        np.testing.assert_allclose(attention_core_jvp(st, *D), (up[0] - dn[0]) / (2 * h),
                                   atol=1e-8)


def test_copy_transposes_changes_no_value():
    Q, K, V, mask = problem()
    a, sa = attention_core(Q, K, V, mask=mask)
    b, sb = attention_core(Q, K, V, mask=mask, copy_transposes=True)
    np.testing.assert_allclose(a, b, rtol=1e-14)
    G = RNG.standard_normal(a.shape)
    for x, y in zip(attention_core_vjp(sa, G), attention_core_vjp(sb, G), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-14)


def test_scale_and_overflow_message():
    Q, K, V, _ = problem(masked=False)
    out = attention_core(Q, K, V, scale=2.0 / math.sqrt(Q.shape[-1]))[0]
    np.testing.assert_allclose(out, loop_reference(2 * Q, K, V, None), rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="^my message$"):
        attention_core(Q * 1e200, K * 1e200, V, overflow="my message")
