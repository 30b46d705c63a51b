"""Experiments, figures and explorers of the spectral-normalisation chapter
(lipattn/viz/spectral.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from lipattn import spectral
from lipattn.viz import spectral as viz
from lipattn.widgets import get_explorer

NAMES = ["spectral-power", "spectral-tracking"]


def test_power_explorer_data_matches_the_closed_form():
    data = viz.power_explorer_data()
    for (rho, angle), (vs, sig, pred) in data.items():
        assert np.allclose(np.linalg.norm(vs, axis=1), 1.0)
        assert np.all(sig <= 1 + 1e-15)
        if angle == 90:
            # exactly orthogonal start: the estimate is sigma_2 at every step
            assert np.allclose(sig, rho, rtol=1e-15)
        else:
            # the measured error equals the rank-2 closed form (up to rounding)
            np.testing.assert_allclose(1 - sig, pred, rtol=1e-6, atol=1e-15)


def test_start_angle_is_the_angle_to_u1():
    W = viz._two_by_two(0.7)
    u1 = np.linalg.svd(W)[0][:, 0]
    for ang in (10, 75, 89, 90):
        cos = abs(float(u1 @ viz._start(ang)))
        assert math.degrees(math.acos(min(cos, 1.0))) == pytest.approx(ang, abs=1e-6)


def test_rate_experiment_slopes():
    data = viz.rate_experiment()
    for rho in data["rhos"]:
        assert data["slope"][rho] == pytest.approx(4 * math.log(rho), rel=0.02)
        k = data["k"]
        assert np.all(data["err"][rho] <= data["tan2"][rho] * rho ** (4.0 * k - 2) * (1 + 1e-9)
                      + 1e-14)


def test_cost_experiment_orders():
    data = viz.cost_experiment(gaps=[0.005, 0.3], n=120)
    assert data["power"][0] > 3 * data["lanczos"][0]      # tight gap: Lanczos wins
    assert data["power"][0] > data["power"][1]
    assert np.all(np.abs(data["lanczos_err"]) < 1e-8)


def test_mlp_bounds_ordered():
    data = viz.mlp_bounds(depths=(1, 3), width=6, samples=500)
    assert np.all(data["sampled"] <= data["product"] * (1 + 1e-12))
    assert data["sampled"][0] == pytest.approx(data["product"][0])  # one layer: exact


def test_tracking_summary_orders():
    data = viz.tracking_summary()
    assert np.all(data["persistent"] < data["fresh"])
    assert np.all(np.diff(data["persistent"]) > 0)               # faster drift, worse


def test_random_logit_entropies_above_the_floor():
    s = np.array([0.5, 3.0, 20.0])
    h = viz.random_logit_entropies(16, s, samples=300)
    assert np.all(h >= spectral.entropy_floor(16, s)[:, None] - 1e-12)


@pytest.mark.parametrize("make", [
    lambda: viz.fig_intuition(),
    lambda: viz.fig_rate(viz.rate_experiment(iters=30)),
    lambda: viz.fig_cost(viz.cost_experiment(gaps=[0.05, 0.5], n=60)),
    lambda: viz.fig_mlp(viz.mlp_bounds(depths=(1, 2), width=4, samples=100)),
    lambda: viz.fig_tracking(viz.tracking_summary()),
    lambda: viz.fig_entropy_floor(Ts=(2, 8), samples=50),
])
def test_figures_build(make):
    fig = make()
    assert isinstance(fig, Figure)
    fig.canvas.draw() if hasattr(fig.canvas, "draw") else None


@pytest.mark.parametrize("name", NAMES)
def test_every_slider_value_changes_the_frame(name):
    ex = get_explorer(name)
    base = ex.defaults
    ref = ex.render(**base)
    for spec in ex.slider_specs:
        frames = {ex.render(**(base | {spec.name: v})) for v in spec.values}
        assert len(frames) == len(spec.values), spec.name
    assert ex.render(**base) == ref


def test_bad_input():
    with pytest.raises(ValueError, match="rtol"):
        viz.cost_experiment(rtol=0.0)
    with pytest.raises(ValueError, match="T must"):
        viz.random_logit_entropies(1, np.ones(2))
    with pytest.raises(ValueError, match="k must"):
        get_explorer("spectral-power").render(k=99)
