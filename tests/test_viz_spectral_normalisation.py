"""Spectral normalisation: the composition bound, training and the entropy floor
(lipattn/book/viz/spectral_normalisation.py)."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from lipattn import compositions, min_entropy
from lipattn.book.viz import spectral_normalisation as viz


def test_mlp_bounds_ordered():
    data = viz.mlp_bounds(depths=(1, 3), width=6, samples=500, search=True)
    assert np.all(data["sampled"] <= data["searched"])
    assert np.all(data["searched"] <= data["product"] * (1 + 1e-12))
    assert data["sampled"][0] == pytest.approx(data["product"][0])  # one layer: exact


def _relu_net(ws, x):
    h = x
    for w in ws[:-1]:
        h = np.maximum(h @ w, 0.0)
    return h @ ws[-1]


def test_relu_mlp_search_value_is_attained():
    ws = viz.random_mlp([4, 5, 5, 5, 3], seed=4)
    best, x = viz.relu_mlp_search(ws, restarts=1, gens=20, pool=200, seed=1)
    # central differences of the network itself at the returned point
    J = np.array([(_relu_net(ws, x + 1e-7 * e) - _relu_net(ws, x - 1e-7 * e)) / 2e-7
                  for e in np.eye(4)])
    assert np.linalg.norm(J, 2) == pytest.approx(best, rel=1e-6)
    # a lower bound on the constant: never above the exhaustive pattern bound
    assert best <= compositions.pattern_bound(ws) * (1 + 1e-12)


def test_paired_pattern_bound_is_between_the_patterns_and_the_product():
    ws = viz.random_mlp([4, 4, 4, 4, 3], seed=2)
    full = compositions.pattern_bound(ws)
    paired = viz.paired_pattern_bound(ws)
    assert full <= paired * (1 + 1e-12) and paired <= compositions.product_bound(ws) * (1 + 1e-12)
    assert viz.paired_pattern_bound(ws[:2]) == pytest.approx(compositions.pattern_bound(ws[:2]))
    lone = viz.paired_pattern_bound(ws[:3])          # a pair and a lone layer
    assert lone == pytest.approx(compositions.pattern_bound(ws[:2]) * np.linalg.norm(ws[2], 2))


def test_sn_weight_vjp_matches_finite_differences():
    rng = np.random.default_rng(0)
    W, C = rng.standard_normal((2, 5, 3))
    u, v = rng.standard_normal(5), rng.standard_normal(3)
    u, v = u / np.linalg.norm(u), v / np.linalg.norm(v)

    def loss(M):
        Y = M / (u @ M @ v)
        return float(np.sum(np.tanh(Y) * C))

    G = C / np.cosh(W / (u @ W @ v)) ** 2
    grad = viz.sn_weight_vjp(W, u, v, G)
    fd = np.zeros_like(W)
    for i in range(5):
        for j in range(3):
            E = np.zeros_like(W)
            E[i, j] = 1e-6
            fd[i, j] = (loss(W + E) - loss(W - E)) / 2e-6
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_pytorch_eval_sigma_is_a_bilinear_lower_bound():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((6, 4))
    for _ in range(20):
        u, v = rng.standard_normal(6), rng.standard_normal(4)
        u, v = u / np.linalg.norm(u), v / np.linalg.norm(v)
        s = viz.pytorch_eval_sigma(W, u, v)
        assert s == pytest.approx(float(np.einsum("i,ij,j->", u, W, v)))
        assert abs(s) <= np.linalg.svd(W, compute_uv=False)[0] + 1e-12
    with pytest.raises(ValueError, match="u and v"):
        viz.pytorch_eval_sigma(W, np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match="G must"):
        viz.sn_weight_vjp(W, np.ones(6) / 6**0.5, np.ones(4) / 2, np.ones((4, 6)))


def test_tracking_summary_orders():
    data = viz.tracking_summary()
    assert np.all(data["persistent"] < data["fresh"])
    assert np.all(np.diff(data["persistent"]) > 0)               # faster drift, worse


def test_random_logit_entropies_above_the_floor():
    s = np.array([0.5, 3.0, 20.0])
    h = viz.random_logit_entropies(16, s, samples=300)
    assert np.all(h >= min_entropy.entropy_floor(16, s)[:, None] - 1e-12)


@pytest.mark.parametrize("make", [
    lambda: viz.fig_mlp(viz.mlp_bounds(depths=(1, 2), width=4, samples=100)),
    lambda: viz.fig_mlp(viz.mlp_bounds(depths=(1, 2), width=4, samples=100, search=True)
                        | {"upper": {2: 10.0}}),
    lambda: viz.fig_tracking(viz.tracking_summary()),
    lambda: viz.fig_entropy_floor(Ts=(2, 8), samples=50),
])
def test_figures_build(make):
    assert isinstance(make(), Figure)


def test_bad_input():
    with pytest.raises(TypeError, match="weights"):
        viz.relu_mlp_search(np.ones((3, 3)))
    with pytest.raises(ValueError, match="restarts"):
        viz.relu_mlp_search([np.ones((3, 3))], restarts=0)
    with pytest.raises(ValueError, match="T must"):
        viz.random_logit_entropies(1, np.ones(2))
