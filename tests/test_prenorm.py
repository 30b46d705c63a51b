"""The Pre-LN vs Post-LN experiments (lipattn/book/prenorm.py, lipattn/models/training.py)
and the chapter's figures and explorers (lipattn/book/viz/prenorm.py)."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from lipattn._blas import single_threaded_blas
from lipattn.book import prenorm
from lipattn.book.viz import prenorm as viz
from lipattn.models import encoder, training

W2 = encoder.MATRICES.index("W_2")


# ---------------------------------------------------------------------------
# gradients at initialisation
# ---------------------------------------------------------------------------
def test_pre_ln_profile_falls_towards_the_output():
    """Tolerances: 8 seeds at d = 32; the chapter's d = 64 ratios are 0.45, 0.28."""
    ratios = []
    for L in (6, 12):
        g = prenorm.init_profile(L, 32, "pre", seeds=8).grad.mean(axis=0)[:, W2]
        ratios.append(g[-1] / g[0])
    assert ratios[0] < 0.7 and ratios[1] < 0.5 and ratios[1] < ratios[0]


def test_pre_ln_last_layer_scales_like_inverse_sqrt_depth():
    """Fitted exponent within 0.15 of -1/2 for Pre-LN, within 0.15 of 0 for Post-LN
    (L = 3..24, d = 32, 8 seeds)."""
    depths = (3, 6, 12, 24)
    g = prenorm.last_layer_gradients(depths, 32, seeds=8)
    pre, _, _ = prenorm.fit_power(depths, g["pre"].mean(axis=1))
    post, _, _ = prenorm.fit_power(depths, g["post"].mean(axis=1))
    assert abs(pre + 0.5) < 0.15 and abs(post) < 0.15


def test_profile_internals_match_independent_computations():
    prof = prenorm.init_profile(4, 16, "pre", seeds=3)
    # the final LN's 1/s against the stream's last state, recomputed
    params = encoder.stack_params([encoder.init_params(4, 16, seed=s)
                                       for s in range(3)])
    rng = np.random.default_rng([4, 16, 16])
    X = rng.standard_normal((3, 16, 16))
    last = encoder.residual_stream(params, X, variant="pre")[-1]
    inv_s = 1 / np.sqrt(last.var(axis=-1) + 1e-5)
    np.testing.assert_allclose(prof.final_inv_s, inv_s.mean(axis=-1), rtol=1e-10)
    np.testing.assert_allclose(prof.second_moment[:, -1], np.mean(last**2, axis=(1, 2)))
    # the post-LN stream is LayerNormed: mean squared entry is v/(v + eps) ~ 1
    post = prenorm.init_profile(4, 16, "post", seeds=3)
    assert np.allclose(post.second_moment[:, 1:], 1, atol=1e-3)
    assert post.grad.shape == (3, 4, 6) and post.stream_grad.shape == (3, 5)


def test_post_ln_collapses_tokens_with_depth():
    div = [prenorm.init_profile(L, 32, "post", seeds=4).diversity[:, -1].mean()
           for L in (3, 12)]
    assert div[1] < 0.2 * div[0]


def test_fits_recover_known_laws():
    x = np.array([1.0, 2, 4, 8, 16])
    b, a, se = prenorm.fit_power(x, 3 * x**-0.5)
    assert b == pytest.approx(-0.5) and np.exp(a) == pytest.approx(3) and se < 1e-10
    b, a, rel = prenorm.fit_log(x, 2 + 0.5 * np.log(x))
    assert b == pytest.approx(0.5) and a == pytest.approx(2) and rel < 1e-12
    with pytest.raises(ValueError, match="positive"):
        prenorm.fit_power([1, 2, 3], [1, -1, 2])


def test_amplification_small_perturbation_is_linear_and_grows_faster_for_post():
    d1 = prenorm.amplification((4,), 16, seeds=4, size=1e-4, kind="random", directions=2)
    d2 = prenorm.amplification((4,), 16, seeds=4, size=2e-4, kind="random", directions=2)
    # same seeds, same directions: the squared change scales like eta^2
    np.testing.assert_allclose(d2["pre"] / d1["pre"], 4, rtol=0.02)
    amp = prenorm.amplification((2, 16), 16, seeds=6, size=1e-3, kind="random")
    growth = {v: amp[v][1].mean() / amp[v][0].mean() for v in amp}
    assert growth["post"] > growth["pre"] > 1
    s = prenorm.amplification((2,), 16, seeds=2, size=1e-5, kind="sign")
    assert np.all(s["post"] > 0)
    with pytest.raises(ValueError, match="kind"):
        prenorm.amplification((2,), 8, kind="adam")
    with pytest.raises(ValueError, match="size"):
        prenorm.amplification((2,), 8, size=0.0)


def test_experiment_bad_inputs():
    with pytest.raises(ValueError, match="variant"):
        prenorm.init_profile(2, 8, "middle")
    with pytest.raises(ValueError, match="layers"):
        prenorm.init_profile(0, 8, "pre")
    with pytest.raises(ValueError, match="matrix"):
        prenorm.last_layer_gradients((2,), 8, matrix="W_9")


# ---------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------
def test_adam_first_step_is_lr_times_sign():
    res = training.train_reversal("post", [1e-3, 4e-3], 0, 0, layers=2, d=16, steps=2,
                                  batch=4)
    model = training.init_model(2, 16, 16, 8, seed=0)
    W = model["blocks"][0]["W_Q"]
    # every entry moved by lr (the gradient has no exact zeros)
    for i, lr in enumerate((1e-3, 4e-3)):
        assert res.update[i, 0, 0, 0] == pytest.approx(lr * 16 / np.linalg.norm(W), rel=1e-5)


def test_runs_are_independent_of_their_batch_mates():
    kw = {"layers": 2, "d": 16, "steps": 5, "batch": 4}
    together = training.train_reversal("pre", [1e-3, 1e-2], [0, 3], [0, 1], **kw)
    alone = training.train_reversal("pre", 1e-2, 3, 1, **kw)
    np.testing.assert_allclose(together.loss[1], alone.loss[0], rtol=1e-4)


def test_warmup_grid_outcome_at_reduced_size():
    """Post-LN at lr 1e-2 without warm-up stalls at chance with collapsed tokens;
    Pre-LN trains (reduced: 120 steps, one seed)."""
    kw = {"layers": 6, "d": 32, "batch": 16, "steps": 120}
    post = training.train_reversal("post", 1e-2, 0, 0, **kw)
    pre = training.train_reversal("pre", 1e-2, 0, 0, **kw)
    chance = np.log(16)
    assert abs(post.loss[0, -20:].mean() - chance) < 0.05
    assert post.diversity[0, -1] < 0.05
    assert pre.loss[0, -20:].mean() < 0.1


def test_trained_model_roundtrip():
    res = training.train_reversal("pre", 1e-2, 0, 3, layers=2, d=16, steps=3, batch=4)
    model = res.run(0)
    tokens = np.random.default_rng(0).integers(0, 16, size=(5, 8))
    logits = training.model_forward(model, tokens)
    assert logits.shape == (5, 8, 16) and np.all(np.isfinite(logits))
    # the same model run by the batched trainer's forward: first step's loss
    X = model["embed"][tokens] + model["pos"]
    out = encoder.forward(model["blocks"], X, variant="pre")
    np.testing.assert_allclose(out @ model["unembed"], logits)
    with pytest.raises(ValueError, match="tokens"):
        training.model_forward(model, np.full((2, 8), 16))
    with pytest.raises(ValueError, match="i must"):
        res.run(3)


def test_training_bad_inputs():
    with pytest.raises(ValueError, match="variant"):
        training.train_reversal("both", 1e-3, 0, 0)
    with pytest.raises(ValueError, match="lr"):
        training.train_reversal("pre", -1e-3, 0, 0)
    with pytest.raises(ValueError, match="warmup"):
        training.train_reversal("pre", 1e-3, 2.5, 0)
    with pytest.raises(ValueError, match="lr"):
        training.train_reversal("pre", [1e-3, 1e-3], 0, [0, 1, 2])
    with pytest.raises(ValueError, match="steps"):
        training.train_reversal("pre", 1e-3, 0, 0, steps=0)


def test_single_threaded_blas_restores_and_matches():
    a = np.random.default_rng(0).standard_normal((64, 64))
    with single_threaded_blas():
        inside = a @ a
    np.testing.assert_allclose(inside, a @ a)


# ---------------------------------------------------------------------------
# figures and explorers
# ---------------------------------------------------------------------------
def test_static_figures_build():
    assert isinstance(viz.fig_ln_norm(), Figure)
    assert isinstance(viz.fig_profile(3), Figure)
    g = prenorm.last_layer_gradients((2, 4, 8), 16, seeds=3)
    assert isinstance(viz.fig_last_layer((2, 4, 8), g, 16), Figure)


def test_depth_explorer_shows_the_profile_it_claims():
    """The chapter's 'try this': Post-LN, L = 24, W_Q falls by orders of magnitude
    and the output diversity is near 1e-3; Pre-LN's W_2 falls too."""
    prof = viz.profiles(24)
    j = encoder.MATRICES.index("W_Q")
    g = prof["post"].grad.mean(axis=0)[:, j]
    assert g[-1] / g[0] < 1e-3
    assert prof["post"].diversity[:, -1].mean() < 5e-3
    g2 = prof["pre"].grad.mean(axis=0)[:, W2]
    assert g2[-1] < 0.5 * g2[0]


def test_more_bad_inputs():
    p = encoder.init_params(1, 4, seed=0)
    with pytest.raises(ValueError, match="variant"):
        encoder.gradient_check(p, np.zeros((2, 4)), variant="mid")
    with pytest.raises(ValueError, match="X must"):
        encoder.gradient_check(p, np.zeros((2, 3)), variant="pre")
    with pytest.raises(ValueError, match="^x must have at least 3 points"):
        prenorm.fit_log([1, 2], [1, 2])
    with pytest.raises(ValueError, match="^x must be positive"):
        prenorm.fit_log([1, 2, -3], [1, 2, 3])
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="vocab"):
        training.reversal_batch(rng, 2, 4, 1)
    with pytest.raises(ValueError, match="n_tokens"):
        training.init_model(1, 4, 8, 0)
    tokens, targets = training.reversal_batch(rng, 3, 5, 7)
    assert tokens.shape == (3, 5) and np.array_equal(targets, tokens[:, ::-1])
    assert tokens.min() >= 0 and tokens.max() < 7


def test_power_law_panel_fits_the_medians_not_the_means():
    """One heavy-tailed seed moves the mean, not the median: the legend's exponent
    is the least-squares slope of log(median) on log(L), computed independently."""
    depths = np.array([2.0, 4.0, 8.0, 16.0])
    rng = np.random.default_rng(0)
    base = depths[:, None] ** -0.5 * np.exp(0.1 * rng.standard_normal((4, 9)))
    heavy = base.copy()
    heavy[:, 0] *= depths**3  # one outlier seed that grows fast
    fig = viz.fig_last_layer(depths, {"post": heavy, "pre": base}, 16)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    for name, data in (("Post-LN", heavy), ("Pre-LN", base)):
        slope = np.polyfit(np.log(depths), np.log(np.median(data, axis=1)), 1)[0]
        label = next(s for s in labels if s.startswith(name))
        assert f"{slope:.2f}" in label, (label, slope)
    mean_slope = np.polyfit(np.log(depths), np.log(heavy.mean(axis=1)), 1)[0]
    assert mean_slope > 0  # the mean would have shown growth


def test_profile_bands_are_median_and_quantiles():
    """fig_profile draws the median over seeds (not the mean) for the W_2 panel."""
    fig = viz.fig_profile(3)
    prof = viz.profiles(3)
    lines = fig.axes[0].get_lines()
    for v, line in zip(("post", "pre"), lines, strict=True):
        np.testing.assert_allclose(line.get_ydata(),
                                   np.median(prof[v].grad[:, :, W2], axis=0), rtol=1e-12)


# ---------------------------------------------------------------------------
# exact layer Jacobians and interventions
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["post", "pre"])
def test_encoder_layer_matches_the_encoder_and_its_dense_jacobian(variant):
    from lipattn.book import sensitivity
    params = encoder.init_params(3, 8, heads=2, seed=1)
    X = np.random.default_rng(2).standard_normal((5, 8))
    stream = encoder.residual_stream(params, X, variant=variant)
    for l_, p in enumerate(params):
        ps = {k: v if k == "heads" else np.reshape(v, np.shape(v)[-2:] if k.startswith("W_")
                                                   else (-1,)) for k, v in p.items()}
        Y, _ = prenorm.encoder_layer(ps, variant).forward(stream[l_])
        np.testing.assert_allclose(Y, stream[l_ + 1], rtol=1e-12, atol=1e-12)
    # the exact norms against dense central-difference Jacobians (sensitivity), on
    # init_profile's models (seed s) and inputs
    exact = prenorm.layer_jacobian_norms(3, 8, variant, seeds=2, n_tokens=5)
    Xs, _ = prenorm._inputs(3, 8, 2, 5)
    for s in range(2):
        fd = sensitivity.layer_jacobian_norms(
            encoder.init_params(3, 8, seed=s), Xs[s], variant=variant)
        np.testing.assert_allclose(exact[s], fd, rtol=1e-6)


def test_layer_jacobian_norm_bounds_every_backward_gain():
    """||J_l||_2 >= ||dl/dX_l|| / ||dl/dX_{l+1}|| for init_profile's read-out, every seed."""
    J = prenorm.layer_jacobian_norms(4, 16, "post", seeds=4)
    sg = prenorm.init_profile(4, 16, "post", seeds=4).stream_grad
    assert np.all(sg[:, :-1] / sg[:, 1:] <= J * (1 + 1e-9))


def test_scaled_updates_freeze_and_scale_the_chosen_runs():
    kw = {"layers": 2, "d": 16, "batch": 4, "steps": 4}
    labels, res = prenorm.intervention_runs(
        {"none": None, "freeze FFN": (("W_1", "W_2"), 4, 0.0), "all / 4 once": (None, 1, 0.25)},
        [0, 1], variant="post", lr=1e-2, **kw)
    assert labels == ["none"] * 2 + ["freeze FFN"] * 2 + ["all / 4 once"] * 2
    base = training.train_reversal("post", 1e-2, 0, [0, 1], **kw)
    np.testing.assert_allclose(res.loss[:2], base.loss, rtol=1e-5)
    for i, s in ((2, 0), (3, 1)):
        init = training.init_model(2, 16, 16, 8, seed=s)["blocks"]
        for l_ in range(2):
            for k in ("W_1", "W_2"):
                np.testing.assert_array_equal(res.run(i)["blocks"][l_][k],
                                              init[l_][k].astype(np.float32))
    # the first update scaled by 1/4: Adam's first step is lr * sign(g), so 0.25 lr
    np.testing.assert_allclose(res.update[4:, 0], 0.25 * base.update[:, 0], rtol=1e-5)
    with pytest.raises(ValueError, match="factor"):
        prenorm.scaled_updates({0: (None, 1, -1.0)})
    with pytest.raises(TypeError, match="names"):
        prenorm.scaled_updates({0: ("W_Q", 1, 0.0)})
    with pytest.raises(TypeError, match="interventions"):
        prenorm.intervention_runs({}, [0])


def test_a_per_step_factor_schedule_is_the_trainers_warm_up():
    """Factors (t + 1)/k on every update for k steps = train_reversal's warm-up of k steps."""
    kw = {"layers": 2, "d": 16, "batch": 4, "steps": 8}
    labels, res = prenorm.intervention_runs({"ramp": (None, 5, np.arange(1, 6) / 5)},
                                            [0, 1], variant="post", lr=1e-2, **kw)
    warm = training.train_reversal("post", 1e-2, 5, [0, 1], **kw)
    np.testing.assert_allclose(res.loss, warm.loss, rtol=1e-4)
    np.testing.assert_allclose(res.update, warm.update, rtol=1e-4)
    for bad in ([0.5, 0.5], [1.0, -1.0, 1.0]):
        with pytest.raises(ValueError, match="factor"):
            prenorm.scaled_updates({0: (None, 3, bad)})
    with pytest.raises(ValueError, match="factor"):
        prenorm.scaled_updates({0: (None, 2, [1.0, np.nan])})


def test_new_figures_build():
    kw = {"layers": 2, "d": 16, "batch": 4, "steps": 3}
    # a small grid of training_grid's layout (fig_grad_norm indexes it by grid_index)
    full = {v: training.train_reversal(
        v, [lr for lr in viz.LRS for _ in viz.WARMUPS for _ in viz.TRAIN_SEEDS],
        [w for _ in viz.LRS for w in viz.WARMUPS for _ in viz.TRAIN_SEEDS],
        [s for _ in viz.LRS for _ in viz.WARMUPS for s in viz.TRAIN_SEEDS], **kw)
        for v in ("post", "pre")}
    assert isinstance(viz.fig_grad_norm(full), Figure)
    labels, res = prenorm.intervention_runs(viz.INTERVENTIONS, list(viz.TRAIN_SEEDS), **kw)
    fig = viz.fig_interventions(full, labels, res)
    assert len(fig.axes[0].get_lines()) == len(viz.TRAIN_SEEDS) * (1 + len(viz.INTERVENTIONS))
