"""Tests of :mod:`lipattn.init_gradients`: the gradients of one attention read-out
against central finite differences, the Monte-Carlo norms against the fast sampler and
exact identities, and the larger query gradient without scaling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn import init_gradients
from lipattn.init_gradients import GradientNorms, gradient_norms
from lipattn.scaling import sample_logits
from lipattn.softmax import softmax

# ---------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("scaled", [True, False])
def test_attention_gradients_match_finite_differences(scaled):
    rng = np.random.default_rng(5)
    b, n, d = 3, 5, 4
    args = {
        "q": rng.standard_normal((b, d)),
        "k": rng.standard_normal((b, n, d)),
        "v": rng.standard_normal((b, n, d)),
        "g": rng.standard_normal((b, d)),
    }
    grads = init_gradients._attention_gradients(**args, scaled=scaled)
    h = 1e-6
    for arg, key in (("q", "query"), ("k", "keys"), ("v", "values")):
        fd = np.zeros_like(args[arg])
        for idx in np.ndindex(*args[arg].shape[1:]):
            plus = {a: x.copy() for a, x in args.items()}
            minus = {a: x.copy() for a, x in args.items()}
            plus[arg][(slice(None), *idx)] += h
            minus[arg][(slice(None), *idx)] -= h
            loss = init_gradients._attention_loss
            diff = loss(**plus, scaled=scaled) - loss(**minus, scaled=scaled)
            fd[(slice(None), *idx)] = diff / (2 * h)
        np.testing.assert_allclose(grads[key], fd, rtol=1e-6, atol=1e-9)
    # dL/ds by perturbing the logits directly: L(s) = g . softmax(s)^T V
    s = grads["s"]
    fd = np.zeros_like(s)
    for j in range(n):
        e = np.zeros(n)
        e[j] = h
        lp = np.einsum("bn,bnd,bd->b", softmax(s + e), args["v"], args["g"])
        lm = np.einsum("bn,bnd,bd->b", softmax(s - e), args["v"], args["g"])
        fd[:, j] = (lp - lm) / (2 * h)
    np.testing.assert_allclose(grads["logits"], fd, rtol=1e-6, atol=1e-9)


def test_gradient_norms_against_fast_sampler_and_identities():
    d, n_keys, samples = 32, 8, 6_000
    for scaled in (True, False):
        gn = gradient_norms(d, n_keys, scaled=scaled, samples=samples, seed=1)
        assert isinstance(gn, GradientNorms) and gn.n_samples == samples
        # independent path: logits from the exact fast sampler, u = V g ~ N(0, I_N)
        s = sample_logits(d, n_keys, scaled=scaled, samples=samples, seed=2)
        p = softmax(s)
        u = np.random.default_rng(3).standard_normal(s.shape)
        ds = np.linalg.norm(p * (u - np.sum(p * u, axis=1, keepdims=True)), axis=1)
        pn = np.linalg.norm(p, axis=1)
        for mc, mc_se, ref in ((gn.logits, gn.logits_se, ds), (gn.values, gn.values_se, pn)):
            se = math.hypot(ref.std(ddof=1) / math.sqrt(samples), mc_se)
            assert abs(mc - ref.mean()) < 4 * se, (scaled, mc, ref.mean(), se)
    # conditional identity: E||dq||^2 = E[c^2 (d-1) ||ds||^2 + (s . ds)^2 / ||q||^2]
    rng = np.random.default_rng(4)
    b = 4_000
    for scaled in (True, False):
        c = 1 / math.sqrt(d) if scaled else 1.0
        q = rng.standard_normal((b, d))
        k = rng.standard_normal((b, n_keys, d))
        v = rng.standard_normal((b, n_keys, d))
        g = rng.standard_normal((b, d))
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        gr = init_gradients._attention_gradients(q, k, v, g, scaled)
        lhs = np.sum(gr["query"] ** 2, axis=1)
        rhs = (c**2 * (d - 1) * np.sum(gr["logits"] ** 2, axis=1)
               + np.sum(gr["s"] * gr["logits"], axis=1) ** 2 / np.sum(q**2, axis=1))
        diff = lhs - rhs
        assert abs(diff.mean()) < 4 * diff.std(ddof=1) / math.sqrt(b)
        np.testing.assert_allclose(
            np.linalg.norm(gr["keys"], axis=(1, 2)),
            c * np.linalg.norm(gr["logits"], axis=1) * np.linalg.norm(q, axis=1),
            rtol=1e-12,
        )
    # at d = 1 scaling divides by 1: identical draws, identical results
    assert gradient_norms(1, 4, True, 50, seed=0) == gradient_norms(1, 4, False, 50, seed=0)


def test_unscaled_query_gradient_is_larger():
    """Without scaling the query gradient is ~sqrt(d) times the logit gradient."""
    sc = gradient_norms(256, 16, scaled=True, samples=400, seed=0)
    un = gradient_norms(256, 16, scaled=False, samples=400, seed=0)
    assert un.logits < sc.logits * 1.1
    assert un.query > 3 * sc.query
    assert sc.query == pytest.approx(sc.logits, rel=0.1)
