"""lipattn.book.viz.lmprobe: the figures draw what they are given."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn.book.viz import lmprobe as viz


def test_fig_growth_draws_the_medians():
    rng = np.random.default_rng(0)
    ks = np.array([2, 4, 8])
    A = np.exp(rng.standard_normal((5, 2, 3)))
    fig = viz.fig_growth({"lengths": ks, "attn": A},
                         {"lengths": ks, "attn": A[None] * 0.1})
    ax = fig.axes[0]
    y = ax.lines[0].get_ydata()
    assert np.allclose(y, np.median(A[:, 0], axis=0))
    assert np.allclose(fig.axes[1].lines[1].get_ydata(), np.median(0.1 * A[:, 1], axis=0))
    with pytest.raises(ValueError, match="growth"):
        viz.fig_growth({}, {"lengths": ks, "attn": A})


def test_fig_interventions_draws_median_ratios():
    base = np.array([2.0, 4.0])
    res = {"base": base, "top": np.array([[1.0, 3.0], [4.0, 4.0]]),
           "random": np.array([[2.0, 2.0], [2.0, 6.0]]), "first": np.ones((2, 2))}
    fig = viz.fig_interventions(res)
    x, y = fig.axes[0].lines[0].get_data()
    assert np.allclose(x, [1.0, 1.0]) and np.allclose(y, [1.0, 1.0])
    with pytest.raises(ValueError, match="res"):
        viz.fig_interventions({"base": base})
