"""Figures, experiments and the explorer of the Lipschitz chapter (book/viz/lipschitz.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from lipattn.book.explorers import get_explorer
from lipattn.book.viz import lipschitz as viz
from lipattn.lipschitz import local_lipschitz


def test_tokens_families():
    X = viz.tokens("two-sided", 2.0, 3)
    np.testing.assert_array_equal(X, [[0, 0], [2, 0], [-2, 0]])
    S = viz.tokens("sink", 4.0, 5)
    np.testing.assert_allclose(np.linalg.norm(S, axis=1), [4, 2, 2, 2, 2])
    R = viz.tokens("random", 3.0, 7)
    np.testing.assert_allclose(np.linalg.norm(R, axis=1), 3.0)
    with pytest.raises(ValueError, match="config"):
        viz.tokens("gaussian", 1.0, 3)
    with pytest.raises(ValueError, match="N"):
        viz.tokens("random", 1.0, 1)


def test_explorer_data_bound_holds_and_card_fails():
    data = viz._explorer_data()
    for (cfg, N), c in data.items():
        assert np.all(c.exact <= c.bound * (1 + 1e-12)), (cfg, N)
        assert np.all(c.l2 <= c.kim), (cfg, N)
        # an independent dense computation agrees with the matrix-free frames
        X = viz.tokens(cfg, c.t[-1], N)
        assert c.exact[-1] == pytest.approx(local_lipschitz(X, *viz.IDENTITY, method="dense"),
                                            rel=1e-8)
    c4 = data[("two-sided", 4)]
    assert c4.exact[c4.t == 6.0][0] > c4.card[c4.t == 6.0][0]
    assert c4.exact[c4.t == 4.0][0] < c4.card[c4.t == 4.0][0]
    s64 = data[("sink", 64)]
    assert s64.exact[s64.t == 8.0][0] == pytest.approx(8.0, rel=0.05)
    assert np.all(s64.exact[s64.t <= 2.0] < 1.2)


def test_castin_code_bound_is_above_the_exact_constant():
    rng = np.random.default_rng(0)
    for _ in range(30):
        N, d = int(rng.integers(2, 10)), int(rng.integers(1, 4))
        W = [rng.standard_normal((d, d)) for _ in range(3)]
        X = 10 ** rng.uniform(-1, 1) * rng.standard_normal((N, d))
        assert local_lipschitz(X, *W) <= viz.castin_code_bound(X, *W)


def _castin_reference(X, W_Q, W_K, W_V):
    """The code bound as Castin et al.'s code writes it (no rescaling)."""
    A = W_Q @ W_K.T / math.sqrt(W_Q.shape[1])
    diff = X[:, None, :] - X[None, :, :]
    r = float(np.sqrt(np.max(np.sum(diff * diff, axis=-1))))
    rho = max(float(np.max(np.linalg.norm(X @ A.T, axis=1))),
              float(np.max(np.linalg.norm(X @ A, axis=1))))
    N = X.shape[0]
    return float(np.linalg.norm(W_V, 2)), rho * r * math.sqrt(N + 1), N


def test_castin_code_bound_matches_the_formula_at_every_scale():
    """Equal to the direct formula at ordinary inputs; at 2**±400 times them (where the
    direct formula overflows or underflows) equal to its exact scaling."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((5, 3))
    W = [rng.standard_normal((3, 4)) for _ in range(2)] + [rng.standard_normal((3, 2))]
    v, t, N = _castin_reference(X, *W)
    assert viz.castin_code_bound(X, *W) == pytest.approx(v * math.sqrt(t * t + N), rel=1e-14)
    c = 2.0**400  # r and rho are linear in X, so t scales as c^2 and dominates N
    assert viz.castin_code_bound(c * X, *W) == pytest.approx(v * c * c * t, rel=1e-14)
    assert viz.castin_code_bound(X / c, *W) == pytest.approx(v * math.sqrt(N), rel=1e-14)
    with pytest.raises(ValueError, match="X, W_Q, W_K, W_V must give .* overflows"):
        viz.castin_code_bound(1e200 * X, *W)


@pytest.mark.parametrize("arg, bad, exc", [
    ("X", np.full((5, 3), np.nan), ValueError), ("X", np.full((5, 3), np.inf), ValueError),
    ("X", np.ones((5, 3), bool), TypeError), ("X", np.ones((5, 3), complex), TypeError),
    ("X", "x", TypeError), ("X", np.ones(3), ValueError), ("X", np.ones((2, 5, 3)), ValueError),
    ("W_Q", np.ones((4, 4)), ValueError), ("W_K", np.ones((3, 2)), ValueError),
    ("W_V", np.ones((2, 2)), ValueError), ("W_V", True, TypeError)])
def test_castin_code_bound_refuses_bad_input_by_name(arg, bad, exc):
    rng = np.random.default_rng(0)
    good = {"X": rng.standard_normal((5, 3)), "W_Q": np.eye(3), "W_K": np.eye(3),
            "W_V": np.eye(3)}
    with pytest.raises(exc, match=arg):
        viz.castin_code_bound(**good | {arg: bad})


def test_figures_and_tables():
    curves = viz.growth_curves("two-sided", 3, [1.0, 8.0])
    assert curves.exact[1] > curves.card[1]
    assert isinstance(viz.fig_t_growth(curves), Figure)
    table = viz.sink_table([8.0], [2, 8])
    assert table[8.0][1] == pytest.approx(math.sqrt(8), rel=0.05)
    assert isinstance(viz.fig_sqrt_n(table, [2, 8]), Figure)
    ratios = viz.looseness_sample(8, seed=1)
    assert min(r.min() for r in ratios.values()) >= 1 - 1e-12
    assert isinstance(viz.fig_looseness(ratios), Figure)
    rows = viz.cost_table([(4, 2)])
    assert rows[0]["rel_diff"] < 1e-8 and rows[0]["products"] > 0
    assert viz.cost_html(rows).count("<tr>") == 2
    with pytest.raises(ValueError, match="samples"):
        viz.looseness_sample(0)


def test_fig_trained_plots_medians_and_maxima_of_every_series():
    from lipattn.models.encoder import init_params
    from lipattn.models.encoder_sublayers import sublayer_constants

    params = init_params(3, 4, d_ff=6, seed=0)
    X = np.random.default_rng(0).standard_normal((5, 6, 4))
    const = {(v, s): sublayer_constants(params, X, variant=v)
             for v in ("pre", "post") for s in ("init", "trained")}
    fig = viz.fig_trained(const)
    ax = fig.axes[0]
    assert len(fig.axes) == 2 and len(ax.lines) == 2 * 2 * 3   # states x stats x series
    c = const["pre", "init"]
    ys = {tuple(np.round(line.get_ydata(), 12)) for line in ax.lines}
    assert tuple(np.round(np.median(c.exact, axis=1), 12)) in ys
    assert tuple(np.round(c.card.max(axis=1), 12)) in ys


def test_explorer_frames_change_with_every_slider():
    ex = get_explorer("lipschitz-t")
    base = ex.render(t=4.0, N=16, config="two-sided")
    for change in ({"t": 8.0}, {"N": 64}, {"config": "sink"}):
        assert ex.render(**({"t": 4.0, "N": 16, "config": "two-sided"} | change)) != base


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 3.0, 12.0])
def test_two_sided_constant_mp_matches_the_dense_svd(t):
    """The two-block reduction against the dense Jacobian's SVD (float64)."""
    from lipattn.adversarial import two_sided_tokens
    from lipattn.lipschitz import attention_jacobian

    I2 = np.eye(2)
    dense = np.linalg.norm(attention_jacobian(two_sided_tokens(t), I2, I2, I2), 2)
    assert float(viz.two_sided_constant_mp(t)) == pytest.approx(dense, rel=1e-12)


def test_two_sided_expansion_in_mpmath():
    """L = (sqrt2/3) t^2 + 1/3 + 1/(3 sqrt2 t^2) + O(t^-4): the t^-2 coefficient, from two t."""
    import mpmath

    with mpmath.workdps(60):
        c = {t: (viz.two_sided_constant_mp(t) - mpmath.sqrt(2) / 3 * t**2 - mpmath.mpf(1) / 3)
             * t**2 for t in (100, 400)}
        assert abs(c[400] - 1 / (3 * mpmath.sqrt(2))) < abs(c[100] - 1 / (3 * mpmath.sqrt(2)))
        assert abs(c[400] - 1 / (3 * mpmath.sqrt(2))) < 1e-5
