"""The explorers of the scaling-and-saturation chapter
(lipattn/book/viz/scaling_explorers.py): their precomputed data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn import scaling
from lipattn.book.explorers import get_explorer
from lipattn.book.viz import scaling as viz
from lipattn.book.viz import scaling_explorers as vex
from lipattn.softmax import softmax


# ---------------------------------------------------------------------------
# the d-explorer's data
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("n_keys", [2, 64, 1024])
def test_d_explorer_data_invariants(n_keys):
    sc, un = vex.d_explorer_data(n_keys, True), vex.d_explorer_data(n_keys, False)
    m = vex._queries_for(n_keys)
    for data in (sc, un):
        assert data.jac.shape == (13, m)
        np.testing.assert_allclose(data.jac_share.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(data.logit_share.sum(axis=1), 1.0, rtol=1e-12)
        assert np.all(np.diff(data.top_row, axis=1) <= 0)
        assert np.all(data.top_row.sum(axis=1) <= 1 + 1e-12)
        for k, d in enumerate(viz.D_GRID):
            p0 = np.sort(softmax(viz.nested_logits(d, n_keys, data is sc, 2)[0]))[::-1]
            np.testing.assert_allclose(data.top_row[k, : min(16, n_keys)], p0[:16], rtol=1e-12)
    # at d = 1 scaling divides by 1: identical statistics
    for f in ("jac", "entropy", "max_p", "sigma", "logit_share", "jac_share", "top_row"):
        np.testing.assert_array_equal(getattr(sc, f)[0], getattr(un, f)[0])
    # unscaled sigma is ||q||: mean of sigma^2 near d
    assert np.mean(un.sigma[-1] ** 2) == pytest.approx(4096, rel=0.02)


@pytest.mark.parametrize("n_keys,d,scaled", [(64, 16, False), (64, 1024, False), (64, 256, True),
                                             (2, 64, False), (1024, 4096, False)])
def test_d_explorer_means_agree_with_saturation_stats(n_keys, d, scaled):
    data = vex.d_explorer_data(n_keys, scaled)
    k = viz.D_GRID.index(d)
    ref = scaling.saturation_stats(d, n_keys, scaled, samples=4000, seed=11)
    for f, arr in (("jac_norm", data.jac), ("entropy", data.entropy), ("max_p", data.max_p)):
        mean, se = arr[k].mean(), arr[k].std(ddof=1) / math.sqrt(arr.shape[1])
        assert abs(mean - getattr(ref, f)) < 4.5 * math.hypot(se, getattr(ref, f + "_se")), f


def test_unscaled_rise_then_fall_in_the_explorer_data():
    j = vex.d_explorer_data(64, False).jac.mean(axis=1)
    peak = int(np.argmax(j))
    assert 2 <= viz.D_GRID[peak] <= 64
    assert j[0] < j[peak] / 2 and j[-1] < j[peak] / 4


def test_sigma_explorer_rows_and_bounds():
    rows, gaps = vex.sigma_rows()
    assert rows.shape == (3, 16) and np.all(np.diff(gaps) > 0)
    ex = get_explorer("scaling-sigma")
    for gap, curve in zip(gaps, ex._row_curves, strict=True):
        e = np.exp(-vex._CURVE_SIGMAS * gap)
        assert np.all(e / 16 <= curve * (1 + 1e-12) + 1e-300)
        assert np.all(curve <= 2 * 15 * e * (1 + 1e-12))
