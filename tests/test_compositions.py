"""Tests of :mod:`lipattn.compositions`: the Jacobian norms of a ReLU network against
finite differences, and the order sampled <= pattern bound <= product of spectral norms."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn import compositions


def test_relu_jacobian_norm_matches_finite_differences():
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((3, 5)), rng.standard_normal((5, 4)), rng.standard_normal((4, 2))]
    f = lambda x: np.maximum(np.maximum(x @ ws[0], 0) @ ws[1], 0) @ ws[2]  # noqa: E731
    X = rng.standard_normal((5, 3))
    got = compositions.relu_mlp_jacobian_norms(ws, X)
    for x, g in zip(X, got, strict=True):
        J = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
        assert np.linalg.norm(J, 2) == pytest.approx(g, rel=1e-6)


def test_bounds_are_ordered():
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((3, 6)), rng.standard_normal((6, 6)), rng.standard_normal((6, 3))]
    sampled = compositions.relu_mlp_jacobian_norms(ws, rng.standard_normal((5000, 3))).max()
    assert sampled <= compositions.pattern_bound(ws) * (1 + 1e-12)
    assert compositions.pattern_bound(ws) <= compositions.product_bound(ws) * (1 + 1e-12)
    # one layer: the bound is exact
    assert compositions.product_bound(ws[:1]) == pytest.approx(np.linalg.norm(ws[0], 2))
