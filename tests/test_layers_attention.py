r"""Tests of the attention core of :mod:`lipattn.layers.attention` on batched heads.

:func:`attention_core` against a loop over heads and query rows written here;
its jvp against central differences of the core in Q, K and V jointly; its vjp
as the adjoint of the jvp; grouped queries (M != N) with a broadcast mask;
``copy_transposes`` changes no value beyond rounding. Each with and without the
logit soft-cap :math:`T = \kappa \tanh(S/\kappa)`, at a cap small enough to bend
the logits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn.layers import (
    attention_core,
    attention_core_jvp,
    attention_core_vjp,
    attention_logits,
)

RNG = np.random.default_rng(7)
CAPS = [None, 0.8]          # 0.8: about half the logits of problem() exceed the cap


def loop_logit(q, k, cap):
    """One logit q.k / sqrt(d_h), soft-capped to cap tanh(s / cap) if cap."""
    s = float(q @ k) / math.sqrt(len(q))
    return s if cap is None else cap * math.tanh(s / cap)


def loop_logits(Q, K, cap):
    """Every logit of Q, K (..., heads, M, d_h), (..., heads, N, d_h) by loop_logit."""
    return np.array([[loop_logit(q, k, cap) for k in K[idx]] for idx in np.ndindex(Q.shape[:-2])
                     for q in Q[idx]]).reshape(Q.shape[:-1] + K.shape[-2:-1])


def loop_reference(Q, K, V, mask, cap=None):
    """softmax(capped Q K^T / sqrt(d_h)) V one head and one query row at a time."""
    out = np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for idx in np.ndindex(Q.shape[:-2]):
        for i in range(Q.shape[-2]):
            s = [loop_logit(Q[idx][i], K[idx][j], cap) for j in range(K.shape[-2])]
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


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("copy", [False, True])
def test_forward_matches_the_loop_reference(masked, copy, cap):
    Q, K, V, mask = problem(masked=masked)
    out, st = attention_core(Q, K, V, mask=mask, softcap=cap, copy_transposes=copy)
    np.testing.assert_allclose(out, loop_reference(Q, K, V, mask, cap), rtol=1e-12, atol=1e-13)
    if masked:
        assert np.all(st.P[..., ~mask] == 0.0)
    if cap is None:
        assert st.cap_factor is None
    else:                     # tanh'(s / cap) = 1 - tanh(s / cap)^2 at every logit
        T = loop_logits(Q, K, cap)
        np.testing.assert_allclose(st.cap_factor, 1 - (T / cap) ** 2, rtol=1e-12, atol=1e-15)


def test_the_soft_cap_bends_the_logits():
    """attention_logits against the loop; the cap binds, so the capped output differs."""
    Q, K, V, mask = problem()
    T = attention_logits(Q, K, softcap=0.8)
    np.testing.assert_allclose(T, loop_logits(Q, K, 0.8), rtol=1e-12, atol=1e-15)
    S = attention_logits(Q, K)
    assert np.abs(T).max() < 0.8 < np.abs(S).max()
    assert np.mean(np.abs(S) > 0.8) > 0.3
    gap = attention_core(Q, K, V, mask=mask, softcap=0.8)[0] - attention_core(Q, K, V,
                                                                               mask=mask)[0]
    assert np.abs(gap).max() > 0.05


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("copy", [False, True])
def test_jvp_matches_central_differences_and_vjp_is_its_adjoint(masked, copy, cap):
    Q, K, V, mask = problem(masked=masked)
    _, st = attention_core(Q, K, V, mask=mask, softcap=cap, copy_transposes=copy)
    dQ, dK, dV = (RNG.standard_normal(a.shape) for a in (Q, K, V))
    h = 1e-6
    plus = attention_core(Q + h * dQ, K + h * dK, V + h * dV, mask=mask, softcap=cap)[0]
    minus = attention_core(Q - h * dQ, K - h * dK, V - h * dV, mask=mask, softcap=cap)[0]
    dO = attention_core_jvp(st, dQ, dK, dV)
    np.testing.assert_allclose(dO, (plus - minus) / (2 * h), atol=1e-8)
    G = RNG.standard_normal(dO.shape)
    gQ, gK, gV = attention_core_vjp(st, G)
    assert (gQ.shape, gK.shape, gV.shape) == (Q.shape, K.shape, V.shape)
    lhs = np.sum(dO * G)
    rhs = np.sum(gQ * dQ) + np.sum(gK * dK) + np.sum(gV * dV)
    assert lhs == pytest.approx(rhs, rel=1e-12)


@pytest.mark.parametrize("cap", CAPS)
def test_each_derivative_alone_matches_finite_differences(cap):
    """Directions in Q, K or V alone: no term of the product rule is lost or doubled."""
    Q, K, V, mask = problem()
    _, st = attention_core(Q, K, V, mask=mask, softcap=cap)
    h = 1e-6
    for which in range(3):
        D = [np.zeros_like(a) for a in (Q, K, V)]
        D[which] = RNG.standard_normal(D[which].shape)
        up = attention_core(*(a + h * e for a, e in zip((Q, K, V), D, strict=True)), mask=mask,
                            softcap=cap)
        dn = attention_core(*(a - h * e for a, e in zip((Q, K, V), D, strict=True)), mask=mask,
                            softcap=cap)
        np.testing.assert_allclose(attention_core_jvp(st, *D), (up[0] - dn[0]) / (2 * h),
                                   atol=1e-8)


@pytest.mark.parametrize("cap", CAPS)
def test_copy_transposes_changes_no_value(cap):
    Q, K, V, mask = problem()
    a, sa = attention_core(Q, K, V, mask=mask, softcap=cap)
    b, sb = attention_core(Q, K, V, mask=mask, softcap=cap, copy_transposes=True)
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


@pytest.mark.parametrize("bad,error", [(0.0, ValueError), (-1.0, ValueError),
                                       (math.inf, ValueError), (math.nan, ValueError),
                                       ("50", TypeError), (True, TypeError)])
def test_a_bad_softcap_is_refused_by_name(bad, error):
    Q, K, V, _ = problem(masked=False)
    for call in (lambda: attention_core(Q, K, V, softcap=bad),
                 lambda: attention_logits(Q, K, softcap=bad)):
        with pytest.raises(error, match="^softcap must be a finite positive real number"):
            call()


def test_keep_float32_is_float32_rounding_of_the_same_attention():
    """The float32 softmax of float32 heads agrees with the default (float64 softmax,
    rounded) to single precision, and float64 heads are unchanged bit for bit."""
    Q, K, V, mask = problem()
    out64 = attention_core(Q, K, V, mask=mask)[0]
    assert np.array_equal(attention_core(Q, K, V, mask=mask, keep_float32=True)[0], out64)
    f = [a.astype(np.float32) for a in (Q, K, V)]
    fast, st = attention_core(*f, mask=mask, keep_float32=True)
    slow = attention_core(*f, mask=mask)[0]
    assert fast.dtype == st.P.dtype == np.float32
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast, loop_reference(Q, K, V, mask), rtol=1e-4, atol=1e-5)
