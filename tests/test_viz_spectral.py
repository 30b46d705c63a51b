"""Power iteration in the spectral-normalisation chapter: experiments, figures and
explorers (lipattn/book/viz/spectral.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from lipattn import spectral
from lipattn.book.explorers import get_explorer
from lipattn.book.viz import spectral as viz

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
        err, bound = data["err"][rho], data["tan2"][rho] * rho ** (4.0 * k - 2)
        # the bound holds in exact arithmetic; in float64 only above rounding level
        assert np.all((err <= bound * (1 + 1e-9)) | (np.abs(err) < 1e-14))
        assert np.all(np.abs(err[err > bound * (1 + 1e-9)]) < 1e-14)
    # at rho = 0.5 the bound falls below the rounding level well before step 60
    k = data["k"]
    assert np.any(data["err"][0.5] > data["tan2"][0.5] * 0.5 ** (4.0 * k - 2))


def test_cost_experiment_orders():
    data = viz.cost_experiment(gaps=[0.005, 0.3], n=120)
    assert data["power"][0] > 3 * data["gkl"][0]          # tight gap: Lanczos wins
    assert data["power"][0] > data["power"][1]
    assert np.all(data["power"] >= data["power_err"])     # the certificate is stricter
    for key in ("power", "gkl", "svds"):
        assert np.all(np.abs(data[f"err_{key}"]) < 1e-8)


def test_power_to_residual_certifies_a_singular_value():
    A = spectral.matrix_with_spectrum([1.0, 0.7, 0.69, 0.2], (9, 6), seed=3)
    out = viz.power_to_residual(A, 1e-6, seed=2)
    # replay the same steps independently
    u = np.random.default_rng(2).standard_normal(9)
    u /= np.linalg.norm(u)
    for _ in range(out["steps"]):
        v = A.T @ u / np.linalg.norm(A.T @ u)
        u, sig = A @ v / np.linalg.norm(A @ v), np.linalg.norm(A @ v)
    assert sig == pytest.approx(out["sigma"], rel=1e-12)
    assert np.linalg.norm(A.T @ u - sig * v) == pytest.approx(out["residual"], rel=1e-6,
                                                               abs=1e-15)
    assert out["residual"] <= 1e-6 * out["sigma"] and out["products"] == 2 * out["steps"] + 1
    s = np.linalg.svd(A, compute_uv=False)
    assert np.min(np.abs(s - out["sigma"])) <= out["residual"] / math.sqrt(2) + 1e-15
    with pytest.raises(ValueError, match="max_iters"):
        viz.power_to_residual(A, 1e-12, max_iters=2)


def _ritz_top(M, v0, k):
    # independent reference: Rayleigh-Ritz on an orthonormal Krylov basis (two passes
    # of Gram-Schmidt)
    Q = [v0 / np.linalg.norm(v0)]
    for _ in range(k - 1):
        w = M @ Q[-1]
        for _ in range(2):
            w -= np.array(Q).T @ (np.array(Q) @ w)
        Q.append(w / np.linalg.norm(w))
    Q = np.array(Q).T
    return np.linalg.eigvalsh(Q.T @ M @ Q)[-1]


def test_chebyshev_bound_holds_and_kps_steps_inverts_it():
    from numpy.polynomial import chebyshev
    lam = np.r_[1.0, 0.9, np.linspace(0.85, 0.0, 58)]
    X = np.linalg.qr(np.random.default_rng(0).standard_normal((60, 60)))[0]
    M = (X * lam) @ X.T
    v0 = np.random.default_rng(1).standard_normal(60)
    c = X.T @ v0
    tan2 = float(np.sum(c[1:] ** 2) / c[0] ** 2)
    gamma = (lam[0] - lam[1]) / (lam[1] - lam[-1])

    def T(j):
        return chebyshev.chebval(1 + 2 * gamma, [0] * j + [1])

    for k in range(1, 16):
        err = (lam[0] - _ritz_top(M, v0, k)) / (lam[0] - lam[-1])
        assert -1e-12 <= err <= tan2 / T(k - 1) ** 2 * (1 + 1e-9)
        # the closed form of T_j(1 + 2 gamma)
        assert T(k - 1) == pytest.approx(math.cosh(2 * (k - 1) * math.asinh(math.sqrt(gamma))))
    for rtol in (1e-2, 1e-6, 1e-10):
        k = viz.kps_steps(gamma, tan2, rtol)
        assert tan2 / T(k - 1) ** 2 <= rtol < tan2 / T(k - 2) ** 2


@pytest.mark.parametrize("make", [
    lambda: viz.fig_intuition(),
    lambda: viz.fig_rate(viz.rate_experiment(iters=30)),
    lambda: viz.fig_cost(viz.cost_experiment(gaps=[0.05, 0.5], n=60)),
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
    with pytest.raises(ValueError, match="rtol"):
        viz.kps_steps(0.1, 1.0, 0.0)
    with pytest.raises(ValueError, match="gamma"):
        viz.kps_steps(0.0, 1.0, 1e-3)
    with pytest.raises(ValueError, match="k must"):
        get_explorer("spectral-power").render(k=99)
