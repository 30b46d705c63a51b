"""Experiments and figures of the scaling chapter (lipattn/book/viz/scaling.py),
and the library functions added for it to lipattn/scaling.py
(two_token_expectations_d, gradient_norms_fast, saturation_per_row)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from lipattn import init_gradients, quadrature, scaling
from lipattn.book.viz import scaling as viz
from lipattn.softmax import entropy, softmax, softmax_jacobian, softmax_jacobian_norm

FIELDS = ("entropy", "max_p", "jac_norm")


# ---------------------------------------------------------------------------
# library additions
# ---------------------------------------------------------------------------
def test_two_token_expectations_d_closed_form_at_d2():
    ex = quadrature.two_token_expectations_d(2, scaled=True)
    assert ex.max_p == pytest.approx(math.log(2), abs=1e-13)
    assert ex.jac_norm == pytest.approx(2 * math.log(2) - 1, abs=1e-13)
    assert ex.entropy == pytest.approx(2 * math.log(2) - math.pi**2 / 12, abs=1e-13)


@pytest.mark.parametrize("d", [1, 3, 16, 500, 4096])
@pytest.mark.parametrize("scaled", [True, False])
def test_two_token_expectations_d_converged_and_matches_mc(d, scaled):
    a = quadrature.two_token_expectations_d(d, scaled)
    b = quadrature.two_token_expectations_d(d, scaled, points=4001)
    for f in FIELDS:
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-11, abs=1e-15)
    mc = scaling.saturation_stats(d, 2, scaled, samples=40_000, seed=d)
    for f in FIELDS:
        assert abs(getattr(mc, f) - getattr(a, f)) < 4.5 * getattr(mc, f + "_se"), f


def test_two_token_expectations_d_limits():
    # scaled: d -> infinity gives i.i.d. N(0, 1) logits; the gap is O(1/d)
    lim = quadrature.two_token_expectations(1.0)
    gaps = [abs(quadrature.two_token_expectations_d(d, True).jac_norm - lim.jac_norm)
            for d in (64, 256, 1024)]
    assert gaps[0] > gaps[1] > gaps[2]
    assert 3.0 < gaps[0] / gaps[1] < 5.0 and 3.0 < gaps[1] / gaps[2] < 5.0
    # d = 1: scaling divides by 1
    two_d = quadrature.two_token_expectations_d
    assert two_d(1, True) == two_d(1, False)
    # unscaled, large d: the averaged leading asymptote E[1/(sqrt(pi) ||q||)]
    ex = quadrature.two_token_expectations_d(4096, False).jac_norm
    assert ex == pytest.approx(viz.mean_inverse_chi(4096) / math.sqrt(math.pi), rel=2e-3)
    with pytest.raises(ValueError, match="d must be"):
        quadrature.two_token_expectations_d(0)
    with pytest.raises(ValueError, match="points must be"):
        quadrature.two_token_expectations_d(4, points=10)


@pytest.mark.parametrize("d,n_keys,scaled", [(1, 4, True), (7, 8, False), (64, 16, True),
                                              (64, 16, False), (300, 3, False)])
def test_gradient_norms_fast_matches_direct(d, n_keys, scaled):
    fast = init_gradients.gradient_norms_fast(d, n_keys, scaled, samples=20_000, seed=1)
    slow = init_gradients.gradient_norms(d, n_keys, scaled, samples=4_000, seed=2)
    for name in ("logits", "query", "keys", "values"):
        se = math.hypot(getattr(fast, name + "_se"), getattr(slow, name + "_se"))
        assert abs(getattr(fast, name) - getattr(slow, name)) < 4.5 * se, name


def test_gradient_norms_fast_identities():
    # at d = 1 the two scalings are the same draws
    fast = init_gradients.gradient_norms_fast
    assert fast(1, 5, True, 100, 0) == fast(1, 5, False, 100, 0)
    g = init_gradients.gradient_norms_fast(64, 8, False, 5000, 0)
    assert 1 / math.sqrt(8) <= g.values <= 1.0  # ||p|| in [1/sqrt(N), 1]
    # without scaling the query gradient is several times larger; with scaling it is
    # about the logit gradient ((d - 1)/d in mean square, plus the part along q)
    sc = init_gradients.gradient_norms_fast(256, 16, True, 20_000, 3)
    un = init_gradients.gradient_norms_fast(256, 16, False, 20_000, 3)
    assert un.query > 3 * sc.query and un.logits < sc.logits
    assert sc.query == pytest.approx(sc.logits, rel=0.05)


def test_saturation_per_row_matches_softmax():
    s = 3.0 * np.random.default_rng(0).standard_normal((500, 9))
    h, mp, j = scaling.saturation_per_row(s)
    p = softmax(s)
    np.testing.assert_allclose(h, entropy(p), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(mp, p.max(axis=1), rtol=1e-14)
    np.testing.assert_allclose(j, softmax_jacobian_norm(s), rtol=1e-14)
    st = scaling.saturation_stats_from_logits(s)
    assert st.jac_norm == pytest.approx(j.mean(), rel=1e-14)
    with pytest.raises(ValueError):
        scaling.saturation_per_row(np.zeros(4))


# ---------------------------------------------------------------------------
# experiments
# ---------------------------------------------------------------------------
def test_mean_inverse_chi():
    assert viz.mean_inverse_chi(2) == pytest.approx(math.sqrt(math.pi / 2), rel=1e-14)
    r = np.sqrt(np.random.default_rng(0).chisquare(10, 400_000))
    assert viz.mean_inverse_chi(10) == pytest.approx(np.mean(1 / r), rel=3e-3)
    with pytest.raises(ValueError):
        viz.mean_inverse_chi(1)


def test_nested_logits_structure():
    s1 = viz.nested_logits(1, 8, True, 500)
    assert np.array_equal(s1, viz.nested_logits(1, 8, False, 500))
    # common random numbers: the direction is the same at every d, only the scale moves
    a, b = viz.nested_logits(16, 8, False, 500), viz.nested_logits(1024, 8, False, 500)
    ratio = b / a
    np.testing.assert_allclose(ratio, ratio[:, :1] * np.ones((1, 8)), rtol=1e-12)
    # the first N keys are shared across N
    np.testing.assert_array_equal(viz.nested_logits(64, 4, True, 50),
                                  viz.nested_logits(64, 64, True, 50)[:, :4])
    # exact law: variance c^2 E||q||^2 = d (unscaled) or 1 (scaled)
    s = viz.nested_logits(256, 1024, False, 2000)
    assert s.var() == pytest.approx(256, rel=0.05)
    r2 = viz._base_draws(2000, 1024, 0)[0][:, viz.D_GRID.index(256)]
    assert r2.mean() == pytest.approx(256, rel=4 * math.sqrt(2 * 256 / 2000) / 256)
    with pytest.raises(ValueError, match="d must be one of"):
        viz.nested_logits(3, 4, True)
    with pytest.raises(ValueError, match="n_keys"):
        viz.nested_logits(4, 2048, True)


def test_saturation_curves_use_the_library():
    cur = viz.saturation_curves(8, ds=(1, 64), samples=500, seed=3)
    ref = scaling.saturation_stats(64, 8, False, 500, seed=3 + 7919)
    assert cur.stats[False]["jac_norm"][1] == ref.jac_norm
    assert cur.stats[True]["jac_norm"][0] == cur.stats[False]["jac_norm"][0]  # d = 1


def test_fixed_sigma_profile_bounds_and_limit():
    prof = viz.fixed_sigma_profile(16, np.array([1e-3, 0.5, 4.0, 50.0]), samples=500)
    assert np.all(prof["p2"] <= prof["jac_norm"] + 1e-15)
    assert np.all(prof["jac_norm"] <= prof["p1"] + 1e-15)
    assert prof["jac_norm"][0] == pytest.approx(1 / 16, rel=5e-3)


def test_logit_step_gain_matches_the_second_moment():
    for d, scaled in ((512, True), (512, False)):
        c2 = 1 / d if scaled else 1.0
        gain = viz.logit_step_gain(d, 8, scaled, samples=100, seed=0)
        assert gain == pytest.approx(c2 * math.sqrt(d * (d + 9)), rel=0.1)


def test_jac_norm_samples_exact_per_query():
    j = viz.jac_norm_samples(16, 8, False, 100)
    np.testing.assert_allclose(j, softmax_jacobian_norm(viz.nested_logits(16, 8, False, 100)))
    assert np.all((j >= 0) & (j <= 0.5))


def test_two_token_sigma_table_bounds():
    t = viz.two_token_sigma_table(np.geomspace(1, 300, 30))
    for f in ("jac_norm", "entropy"):
        assert np.all(t[f + "_2"] <= t[f] * (1 + 1e-12))
        assert np.all(t[f] <= t[f + "_1"] * (1 + 1e-12))


def test_figures_build():
    figs = [
        viz.fig_intuition(),
        viz.fig_saturation_curves([viz.saturation_curves(2, samples=200),
                                   viz.saturation_curves(8, samples=200)]),
        viz.fig_two_token_sigma(viz.two_token_sigma_table(np.geomspace(0.1, 100, 20)),
                                samples=500),
        viz.fig_jac_distribution(n_keys=8, queries=300),
        viz.fig_nonmonotone({2: (np.full(13, 0.3), np.full(13, 0.01))},
                            viz.fixed_sigma_profile(8, np.geomspace(0.1, 10, 5), 200), 8),
        viz.fig_gradients(viz.gradient_curves(8, samples=200), n_keys=8),
        viz.fig_rem(samples=50),
        viz.fig_mechanism(),
    ]
    assert all(isinstance(f, Figure) for f in figs)


def test_mechanism_overlap_is_the_mean_jacobian_norm():
    """The shaded area of fig_mechanism, integrated here by the trapezoid rule,
    is E||J||_2 from the library's quadrature, and about 1/(sqrt(pi) sigma)."""
    x = np.linspace(-200.0, 200.0, 400_001)
    for sig in (1.0, 3.0, 10.0):
        dens = np.exp(-x * x / (4 * sig * sig)) / (2 * math.sqrt(math.pi) * sig)
        area = np.trapezoid(dens / (1 + np.cosh(x)), x)
        assert area == pytest.approx(quadrature.two_token_expectations(sig).jac_norm, rel=1e-9)
    assert area == pytest.approx(1 / (math.sqrt(math.pi) * 10.0), rel=0.01)


@pytest.mark.parametrize("d,scaled", [(64, True), (256, False)])
def test_gradient_samples_have_the_direct_distribution(d, scaled):
    """Per-query norms of the O(N) sampler against q, K, V drawn explicitly
    (two-sample Kolmogorov-Smirnov), and the quantiles against each other."""
    from scipy.stats import ks_2samp

    fast = init_gradients.gradient_samples(d, 16, scaled, samples=6_000, seed=1)
    rng = np.random.default_rng(2)
    b = 3_000
    q, k, v = (rng.standard_normal(shape) for shape in ((b, d), (b, 16, d), (b, 16, d)))
    g = rng.standard_normal((b, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    direct = init_gradients._attention_gradients(q, k, v, g, scaled)
    for name in ("logits", "query", "values"):
        ref = np.linalg.norm(direct[name].reshape(b, -1), axis=1)
        assert ks_2samp(fast[name], ref).pvalue > 1e-3, name
    summary = init_gradients.gradient_norms_fast(d, 16, scaled, samples=6_000, seed=1)
    assert summary.query_q == tuple(np.quantile(fast["query"], init_gradients.QUANTILES))
    assert summary.query_q[0] <= summary.query_q[1] <= summary.query_q[2]


def test_gradient_samples_where_the_gradient_goes():
    """Against a direct computation of dL/ds = J u and p: the logit gradient sums
    to 0; the shares are those of the two largest weights / the largest."""
    x = init_gradients.gradient_samples(1024, 8, False, samples=2_000, seed=5)
    assert np.abs(x["logit_sum"]).max() < 1e-12
    for name in ("logit_top2", "logit_top2_sum", "value_top"):
        assert np.all((x[name] >= 0) & (x[name] <= 1 + 1e-12)), name
    # rebuild one batch from the same draws in the documented order
    rng = np.random.default_rng(5)
    r = np.sqrt(rng.chisquare(1024, size=2_000))
    rng.chisquare(1023, size=2_000)
    a, u = rng.standard_normal((2_000, 8)), rng.standard_normal((2_000, 8))
    s = r[:, None] * a
    p = softmax(s)
    ds = np.einsum("bij,bj->bi", softmax_jacobian(s), u)       # J u, dense
    top = np.argsort(-p, axis=1)[:, :2]
    t = np.take_along_axis(ds, top, axis=1)
    keep = np.sum(ds**2, axis=1) > 1e-200
    np.testing.assert_allclose(x["logits"], np.linalg.norm(ds, axis=1), rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(x["logit_top2"][keep],
                               (np.sum(t**2, axis=1) / np.sum(ds**2, axis=1))[keep],
                               rtol=1e-9)
    np.testing.assert_allclose(x["value_top"], p.max(axis=1) ** 2 / np.sum(p**2, axis=1),
                               rtol=1e-12)
    # in the saturated regime the top two entries have opposite signs
    assert np.median(x["logit_top2_sum"]) < 0.05
    assert np.median(x["value_top"]) > 0.99
