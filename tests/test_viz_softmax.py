"""Experiments of the softmax chapter (lipattn/book/viz/softmax.py), against
references that do not go through lipattn's secular solver."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn.book.viz import softmax as viz


def _dense_norm(p: np.ndarray) -> np.ndarray:
    """||diag(p) - p p^T||_2 by a dense eigensolver, from p directly."""
    jac = p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]
    return np.linalg.eigvalsh(jac)[..., -1]


def test_norm_search_never_beats_one_half_but_gets_close():
    res = viz.norm_search(n=5, trials=3000, steps=300, seed=1, box=8.0)
    assert res.random.shape == (3000,) and res.adversarial.shape == (300,)
    assert res.random.max() < 0.5 and res.adversarial.max() < 0.5
    assert np.all(np.diff(res.adversarial) >= 0)          # best-so-far
    # adversarial: it must beat random sampling by far, not merely match it
    assert 0.5 - res.adversarial[-1] < 1e-3 * (0.5 - res.random.max())
    # it reaches the box optimum, whose gap is checked by a dense eigensolver
    # at the corner (8, 8, -8, -8, -8) and by the formula 1 / (2 + 3 e^-16)
    corner = np.array([8.0, 8.0, -8.0, -8.0, -8.0])
    p = np.exp(corner - 8.0)
    dense = _dense_norm(p / p.sum())
    assert np.isclose(dense, 1 / (2 + 3 * np.exp(-16.0)), rtol=0, atol=1e-15)
    assert res.box_gap > 0 and np.isclose(0.5 - dense, res.box_gap, rtol=1e-6)
    assert np.isclose(0.5 - res.adversarial[-1], res.box_gap, rtol=1e-6)
    # it ends where the proof says: two logits tied at the top, the rest at -box
    z = np.sort(res.best_logits)
    assert np.allclose(z[-2:], 8.0, atol=1e-6) and np.allclose(z[:-2], -8.0)
    p = np.exp(res.best_logits - res.best_logits.max())
    assert np.isclose(_dense_norm(p / p.sum()), res.adversarial[-1], atol=1e-12)


def test_simplex_grid_against_dense_eigensolver_and_known_points():
    p, norms = viz.simplex_grid(resolution=30)
    assert np.allclose(p.sum(axis=1), 1.0) and p.min() > 0
    assert np.allclose(norms, _dense_norm(p), atol=1e-12)
    assert norms.max() < 0.5
    # the largest value sits next to an edge midpoint: two coordinates ~1/2
    top = np.sort(p[norms.argmax()])
    assert top[-1] < 0.55 and top[-2] > 0.45
    centre = np.array([[1 / 3, 1 / 3, 1 / 3]])
    assert np.isclose(_dense_norm(centre)[0], 1 / 3)


def test_lipschitz_ratios_reach_but_do_not_exceed_one_half():
    r = viz.lipschitz_ratios(ns=(2, 8, 64), pairs=500, seed=3)
    for key in ("l2", "linf"):
        assert np.all(r[key] <= 0.5 + 1e-9)
        assert np.all(r[key] > 0.49)


@pytest.mark.parametrize("kwargs, match", [({"n": 2}, "n must"), ({"trials": 0}, "trials"),
                                           ({"steps": 1.5}, "steps"),
                                           ({"box": 0.0}, "box"), ({"box": 16.0}, "box")])
def test_bad_search_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        viz.norm_search(**kwargs)


def test_bad_resolution():
    with pytest.raises(ValueError, match="resolution"):
        viz.simplex_grid(resolution=2)


def test_attention_diagram_and_explorer_logits():
    from matplotlib.figure import Figure

    assert isinstance(viz.fig_attention_diagram(), Figure)
    z = viz.explorer_logits(0.75)
    assert z.shape == (5,) and z[0] == 0.75 and np.all(z[1:] == [1.0, 0.5, 0.0, -1.0])


def test_simplex_grid_resolution_is_bounded():
    """10**9 points per edge was a hang (5 * 10**17 grid points); the bound is named."""
    for bad, exc in ((10**9, ValueError), (3, ValueError), (120.0, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="resolution"):
            viz.simplex_grid(bad)
    p, _ = viz.simplex_grid(1000)
    assert p.shape == (999 * 998 // 2, 3)
