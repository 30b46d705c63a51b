"""Figures and experiment helpers of Chapter 3 (lipattn/book/viz/collapse.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from lipattn import collapse
from lipattn.book.viz import collapse as viz


def test_mlp_weights_have_the_requested_lipschitz_bound():
    W1, W2 = viz.mlp_weights(8, 3.0, 2, seed=1)
    assert W1.shape == (2, 8, 32) and W2.shape == (2, 32, 8)
    for k in range(2):
        assert np.linalg.norm(W1[k], 2) == pytest.approx(1.0, rel=1e-10)
        assert np.linalg.norm(W2[k], 2) == pytest.approx(3.0, rel=1e-10)
    with pytest.raises(ValueError, match="lip"):
        viz.mlp_weights(8, 0.0, 1)


def test_spectral_2norm_matches_svd():
    A = np.random.default_rng(0).standard_normal((3, 5, 7))
    np.testing.assert_allclose(collapse.spectral_2norm(A),
                               [np.linalg.svd(a, compute_uv=False)[0] for a in A], rtol=1e-12)


def test_leading_table_converges():
    t = viz.leading_coefficient_table(eps=np.array([1e-1, 1e-2, 1e-3]))
    err = np.abs(t["ratio"] / t["lead"] - 1)
    assert err[2] < err[1] < err[0] and err[2] < 1e-2
    assert np.all(t["ratio"] <= t["c"])


def test_signature_run_is_consistent():
    run = viz.signature_run(n=6, d=6, layers=6, dps=200)
    keep = run.log_f64 > -12
    np.testing.assert_allclose(run.log_f64[keep], run.log_mp[keep], atol=1e-8)
    b = ~np.isnan(run.log_bound)
    # the unrolled bound holds where mpmath is above its own rounding floor
    ok = b & (run.log_mp > -190)
    assert np.all(run.log_mp[ok] <= run.log_bound[ok] + 1e-9)
    assert run.log_mp.min() < -100


def test_skip_curves_agree_with_trajectory():
    cur = viz.skip_curves(n=6, d=8, layers=4, seeds=2)
    X = viz.tokens(6, 8, 1)
    W = collapse.random_weights(8, 1.0, 4, 1)
    np.testing.assert_array_equal(cur["alpha"]["rel"][1],
                                  collapse.trajectory(X, *W, 4, skip=True, alpha=0.5))
    assert np.all(cur["skip"]["abs"][:, 0] == 1.0)


def test_mlp_relative_residual_after_one_layer_is_homogeneous():
    cur = viz.mlp_curves(lips=(0.5, 50.0), n=6, d=8, layers=2, seeds=2)
    np.testing.assert_allclose(cur[0.5][:, 1], cur[50.0][:, 1], rtol=1e-10)


def test_mlp_baseline_is_paired_attention_only():
    cur = viz.mlp_curves(lips=(2.0,), n=6, d=8, layers=3, seeds=2)
    # independent plain-numpy stack with the same draws, no MLP
    X = viz.tokens(6, 8, 1)
    Wq, Wk, Wv = collapse.random_weights(8, 1.0, 3, 1)
    r = [np.linalg.norm(X - X.mean(0)) / np.linalg.norm(X)]
    for q, k, v in zip(Wq, Wk, Wv, strict=True):
        S = (X @ q) @ (X @ k).T / math.sqrt(8)
        P = np.exp(S - S.max(1, keepdims=True))
        X = (P / P.sum(1, keepdims=True)) @ X @ v
        r.append(np.linalg.norm(X - X.mean(0)) / np.linalg.norm(X))
    np.testing.assert_allclose(cur[None][1], r, rtol=1e-9)
    assert cur[2.0].shape == cur[None].shape == (2, 4)


def test_regime_grid_matches_trajectory():
    g = viz.regime_grid(scales=np.array([0.5, 4.0]), layers=3, n=6, d=8, seeds=2)
    X = viz.tokens(6, 8, 1)
    W = [4.0 * w for w in collapse.random_weights(8, 1.0, 3, 1)]
    np.testing.assert_allclose(g["log_r"][1, 1], collapse.trajectory(X, *W, 3, log10=True))


def test_gradient_table_is_quadratic_in_the_residual():
    t = viz.gradient_table(n=6, d=6, eps=np.geomspace(1e-2, 1e-5, 6))
    slope = np.polyfit(np.log(t["r"]), np.log(t["grad"]), 1)[0]
    assert slope == pytest.approx(2.0, abs=0.02)


def test_init_sharpness_is_not_uniform():
    sharp = viz.init_sharpness(ds=(16, 256), n=16, seeds=2)
    assert all(v > 2 / 16 for v in sharp.values())


def test_figures_build():
    figs = [
        viz.fig_intro(n=8, layers=2),
        viz.fig_leading(viz.leading_coefficient_table(eps=np.geomspace(1, 1e-3, 5))),
        viz.fig_signature(viz.signature_run(n=6, d=6, layers=6, dps=200)),
        viz.fig_skips(viz.skip_curves(n=6, d=8, layers=4, seeds=2)),
        viz.fig_mlp(viz.mlp_curves(lips=(1.0,), n=6, d=8, layers=3, seeds=2)),
        viz.fig_regime(viz.regime_grid(scales=np.array([0.5, 2.0]), layers=3, n=6, d=8,
                                       seeds=2)),
        viz.fig_gradient(viz.gradient_table(n=6, d=6, eps=np.geomspace(1, 1e-3, 4))),
    ]
    assert all(isinstance(f, Figure) for f in figs)


@pytest.mark.parametrize("mean, exc", [(np.nan, ValueError), (np.inf, ValueError),
                                       (True, TypeError), (1j, TypeError), ("1", TypeError)])
def test_tokens_refuse_a_mean_that_is_not_a_finite_real(mean, exc):
    with pytest.raises(exc, match="mean"):
        viz.tokens(4, 3, mean=mean)
    assert np.array_equal(viz.tokens(4, 3, mean=2.5), viz.tokens(4, 3) + 2.5)
