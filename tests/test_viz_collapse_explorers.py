"""The explorers of the rank-collapse chapter (lipattn/book/viz/collapse_explorers.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn.book.explorers import get_explorer
from lipattn.book.viz import collapse_explorers as viz


# ---------------------------------------------------------------------------
# the explorer
# ---------------------------------------------------------------------------
def test_explorer_data_invariants():
    data = viz.stack_explorer_data()
    for (_scale, block), d in data.items():
        assert d["pts"].shape == (viz._L + 1, viz._N, 2)
        assert d["P"].shape[1:] == (viz._N, viz._N)
        np.testing.assert_allclose(d["P"].sum(-1), 1.0, rtol=1e-12)
        assert np.all((d["r"] > 0) & (d["r"] <= 1 + 1e-12))
        if block in ("pure", "mlp"):
            # the one-step cubic bound holds wherever it is below 1
            b = d["bound"][1:]
            ok = b < 1
            assert np.all(d["r"][1:][ok] <= b[ok] * (1 + 1e-9) + 1e-15)  # + rounding
        else:
            assert np.all(np.isnan(d["bound"]))
    # pure attention at scale 1 collapses; alpha-scaled skips keep r of order 1
    assert data[(1.0, "pure")]["r"][-1] < 1e-14
    assert data[(1.0, "alpha")]["r"].min() > 0.5


@pytest.mark.parametrize("name", ["collapse-stack", "collapse-skip"])
def test_explorer_every_frame_differs_along_each_slider(name):
    ex = get_explorer(name)
    base = ex.rgba().copy()
    for name, values in ex.sliders.items():
        frames = []
        for v in values[:3]:
            ex.draw(**{name: v})
            frames.append(ex.rgba().copy())
        assert any(not np.array_equal(frames[0], f) for f in frames[1:]), name
    assert base.shape[2] == 4


def test_skip_data_invariants():
    data = viz.skip_data()
    for (scale, alpha), d in data.items():
        assert np.all((d["rel"] > 0) & (d["rel"] <= 1 + 1e-12))
        if alpha > 0:  # skips keep the absolute residual (medians over seeds)
            assert d["abs"].min() >= 0.9 * d["abs"][0], (scale, alpha)
        else:
            assert d["rel"][-1] < 1e-14
    # smaller branches keep more relative residual, at every scale
    for scale in viz._SKIP_SCALES:
        finals = [data[(scale, a)]["rel"][-1] for a in (0.125, 0.5, 1.0)]
        assert finals[0] > finals[1] > finals[2]


def test_explorer_rejects_bad_values():
    ex = get_explorer("collapse-stack")
    with pytest.raises(ValueError, match="layer"):
        ex.render(layer=7)
    with pytest.raises(TypeError):
        ex.render(depth=1)
    assert math.isclose(viz._SCALES[1], 1.0)
