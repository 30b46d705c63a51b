"""lipattn.layernorm against sympy, finite differences and dense SVDs."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lipattn.layernorm import (
    layer_norm,
    layer_norm_jacobian,
    layer_norm_jacobian_norm,
    layer_norm_lipschitz,
)

FUNCS = (layer_norm, layer_norm_jacobian, layer_norm_jacobian_norm)


def _fd_jacobian(x, eps, h=1e-6):
    d = x.size
    J = np.zeros((d, d))
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        J[:, j] = (layer_norm(x + e, eps) - layer_norm(x - e, eps)) / (2 * h)
    return J


@pytest.mark.parametrize("d", [2, 3, 5, 16])
def test_jacobian_matches_finite_differences(d):
    rng = np.random.default_rng(d)
    for eps in (1e-5, 0.3):
        x = rng.standard_normal(d) * 2 + 1
        np.testing.assert_allclose(layer_norm_jacobian(x, eps), _fd_jacobian(x, eps),
                                   atol=1e-7)


def test_jacobian_matches_sympy_d3():
    xs = sp.symbols("x1:4", real=True)
    eps = sp.Rational(1, 10)
    mean = sum(xs) / 3
    var = sum((x - mean) ** 2 for x in xs) / 3
    y = [(x - mean) / sp.sqrt(var + eps) for x in xs]
    J = sp.Matrix(y).jacobian(xs)
    point = {xs[0]: 0.3, xs[1]: -1.2, xs[2]: 2.0}
    ref = np.array(J.subs(point).evalf(), dtype=float)
    np.testing.assert_allclose(layer_norm_jacobian([0.3, -1.2, 2.0], 0.1), ref, atol=1e-12)


@pytest.mark.parametrize("d", [2, 3, 4, 9, 64])
def test_eigenvalues_and_norm_against_dense(d):
    rng = np.random.default_rng(100 + d)
    eps = 0.05
    X = np.vstack([rng.standard_normal((5, d)) * rng.uniform(0.01, 3, (5, 1)),
                   np.full((1, d), 4.2),                      # constant row
                   4.2 + 1e-7 * rng.standard_normal((1, d))])  # near-constant
    J = layer_norm_jacobian(X, eps)
    dense = np.linalg.norm(J, 2, axis=(-2, -1))
    np.testing.assert_allclose(layer_norm_jacobian_norm(X, eps), dense, rtol=1e-9)
    for x, Jx in zip(X, J, strict=True):
        s = np.sqrt(x.var() + eps)
        ev = np.sort(np.linalg.eigvalsh(Jx))
        c = x - x.mean()
        if np.linalg.norm(c) > 0:
            want = np.sort([0.0, eps / s**3] + [1 / s] * (d - 2))
        else:
            want = np.sort([0.0] + [1 / s] * (d - 1))
        np.testing.assert_allclose(ev, want, atol=1e-9 / s)


def test_d2_norm_is_eps_over_s_cubed_not_one_over_s():
    x = np.array([1.0, -1.0])  # var 1
    eps = 1e-2
    s = np.sqrt(1 + eps)
    assert layer_norm_jacobian_norm(x, eps) == pytest.approx(eps / s**3, rel=1e-12)
    assert np.linalg.norm(layer_norm_jacobian(x, eps), 2) == pytest.approx(eps / s**3, rel=1e-9)
    assert layer_norm_jacobian_norm(x, eps) < 0.02 / s


def test_global_constant_attained_at_constant_rows_and_is_the_supremum():
    eps = 1e-5
    L = layer_norm_lipschitz(eps)
    assert L == pytest.approx(316.227766, rel=1e-6)
    for d in (2, 3, 10):
        assert layer_norm_jacobian_norm(np.full(d, -7.0), eps) == pytest.approx(L, rel=1e-12)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 6)) * np.geomspace(1e-6, 10, 2000)[:, None]
    assert np.all(layer_norm_jacobian_norm(X, eps) <= L * (1 + 1e-12))
    # a secant slope close to 1/sqrt(eps): two nearby points around a constant row
    x0 = np.zeros(6)
    e = np.array([1, -1, 0, 0, 0, 0.0]) * 1e-6
    diff = layer_norm(x0 + e, eps) - layer_norm(x0 - e, eps)
    slope = np.linalg.norm(diff) / np.linalg.norm(2 * e)
    assert slope == pytest.approx(L, rel=1e-3)


def test_without_eps_not_lipschitz_secant_slopes_blow_up():
    # with eps -> 0 the best constant 1/sqrt(eps) diverges
    assert layer_norm_lipschitz(1e-12) > 1e5
    slopes = []
    for eps in (1e-2, 1e-6, 1e-10):
        e = np.array([1.0, -1.0, 0.0]) * 1e-9
        diff = layer_norm(e, eps) - layer_norm(-e, eps)
        slopes.append(np.linalg.norm(diff) / np.linalg.norm(2 * e))
    assert slopes[0] < slopes[1] < slopes[2]


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(2, 8)),
              elements=st.floats(-1e300, 1e300, allow_nan=False)))
def test_extreme_inputs_stay_finite_and_bounded(x):
    y = layer_norm(x)
    n = layer_norm_jacobian_norm(x)
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(n))
    assert np.all(np.sum(y**2, axis=-1) <= x.shape[-1] * (1 + 1e-9))
    assert np.all(n <= layer_norm_lipschitz(1e-5) * (1 + 1e-12))
    np.testing.assert_allclose(y.mean(axis=-1), 0, atol=1e-9)


def test_batched_shapes():
    X = np.random.default_rng(1).standard_normal((2, 3, 5))
    assert layer_norm(X).shape == (2, 3, 5)
    assert layer_norm_jacobian(X).shape == (2, 3, 5, 5)
    assert layer_norm_jacobian_norm(X).shape == (2, 3)


@pytest.mark.parametrize("f", FUNCS)
def test_bad_inputs(f):
    with pytest.raises(ValueError, match="x must be"):
        f([1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="x must be"):
        f([1.0])
    with pytest.raises(ValueError, match="eps must be"):
        f([1.0, 2.0], eps=0.0)
    with pytest.raises(ValueError, match="eps must be"):
        f([1.0, 2.0], eps=-1e-5)
    with pytest.raises(TypeError, match="x must be"):
        f("abc")
    with pytest.raises(ValueError, match="eps must be"):
        layer_norm_lipschitz(0.0)


def test_transformer_shortcut_is_the_plain_formula_bit_for_bit():
    """The shortcut's overflow fallback must not touch ordinary rows: training
    results depend on these bits (float32 and float64)."""
    from lipattn.layernorm import _ln
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        x = (rng.standard_normal((4, 5, 8)) * 3).astype(dtype)
        c = x - x.mean(axis=-1, keepdims=True)
        inv_s = 1.0 / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + 1e-5)
        y, got = _ln(x, 1e-5)
        assert y.dtype == dtype and got.dtype == dtype
        assert np.array_equal(got, inv_s) and np.array_equal(y, c * inv_s)


def test_transformer_shortcut_survives_overflowing_squares():
    from lipattn.layernorm import _ln
    x = np.array([[1e200, -1e200, 3e199], [1.0, 2.0, 4.0]])
    y, inv_s = _ln(x, 1e-5)
    np.testing.assert_allclose(y, layer_norm(x), rtol=1e-13)
    x32 = np.array([[3e19, -1e19, 0.0]], dtype=np.float32)
    y32, _ = _ln(x32, 1e-5)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, layer_norm(x32.astype(float)), rtol=1e-6)
    with pytest.raises(ValueError, match="^params and X must keep the hidden states finite"):
        _ln(np.array([[np.inf, 1.0]]), 1e-5)
