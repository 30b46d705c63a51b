"""Input sensitivity of deep stacks (lipattn/sensitivity.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn import sensitivity as se
from lipattn import transformer as tr
from lipattn.layernorm import layer_norm_jacobian


def _model(L=3, d=6, seed=0):
    P = tr.init_params(L, d, seed=seed)
    X = np.random.default_rng(seed + 10).standard_normal((4, d))
    return P, X


@pytest.mark.parametrize("variant", ["post", "pre"])
def test_stack_jacobian_matches_the_exact_backward_pass(variant):
    """J^T G from the hand-written backward pass, for random G: an independent
    reference for the central differences."""
    P, X = _model()
    J = se.stack_jacobian(P, X, variant=variant)
    G = np.random.default_rng(1).standard_normal((3, *X.shape))
    for g in G:
        _, gX = tr.backward(P, X, g, variant=variant)
        assert np.allclose(J.T @ g.ravel(), gX.ravel(), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("variant", ["post", "pre"])
def test_chain_rule_and_per_layer_norms(variant):
    """The whole stack's Jacobian is the product of the layers' (plus Pre-LN's
    final LayerNorm), and layer_jacobian_norms are those layers' norms."""
    P, X = _model(L=3)
    states = tr.residual_stream(P, X, variant=variant)
    Js = [se.stack_jacobian([p], x, variant=variant, final_norm=False)
          for p, x in zip(P, states[:-1], strict=True)]
    chain = Js[2] @ Js[1] @ Js[0]
    whole = se.stack_jacobian(P, X, variant=variant, final_norm=False)
    assert np.allclose(whole, chain, rtol=1e-6, atol=1e-7)
    if variant == "pre":  # the final LayerNorm, token by token (block diagonal)
        blocks = layer_norm_jacobian(states[-1])
        final = np.zeros((X.size, X.size))
        d = X.shape[1]
        for i, b in enumerate(blocks):
            final[i * d:(i + 1) * d, i * d:(i + 1) * d] = b
        assert np.allclose(se.stack_jacobian(P, X, variant="pre"), final @ whole,
                           rtol=1e-6, atol=1e-7)
    norms = se.layer_jacobian_norms(P, X, variant=variant)
    assert np.allclose(norms, [np.linalg.norm(J, 2) for J in Js], rtol=1e-7)


def test_scale_branches_scales_both_branches_exactly():
    P, X = _model(L=1)
    no_ffn = [p | {"W_2": 0 * p["W_2"]} for p in P]  # the FFN adds b_2 = 0
    step = tr.residual_stream(no_ffn, X, variant="pre")[1] - X  # A(LN X)
    half = tr.residual_stream(se.scale_branches(no_ffn, 0.5), X, variant="pre")[1] - X
    assert np.allclose(half, 0.5 * step, rtol=1e-12, atol=1e-14)
    same = se.scale_branches(P, 1.0)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(P, same, strict=True)
               for k in tr.PARAM_NAMES)
    tiny = se.scale_branches(P, 1e-9)  # Pre-LN's stream then barely moves
    assert np.allclose(tr.residual_stream(tiny, X, variant="pre")[1], X, atol=1e-7)


def test_input_sensitivity_bound_holds_and_shapes():
    r = se.input_sensitivity((1, 3), 6, variant="pre", seeds=2, n_tokens=4)
    assert r.end_to_end.shape == r.product.shape == r.relative.shape == (2, 2)
    assert r.layer_norms.shape == (2, 3)
    assert np.all(r.product >= r.end_to_end * (1 - 1e-9))
    assert np.all(np.isfinite(r.relative)) and np.all(r.relative > 0)
    # one layer: the product is that layer's norm times the final LayerNorm's
    post = se.input_sensitivity((1,), 6, variant="post", seeds=1, n_tokens=4)
    assert np.isclose(post.product[0, 0], post.layer_norms[0, 0])
    assert post.product[0, 0] >= post.end_to_end[0, 0] * (1 - 1e-9)


def test_bad_inputs():
    P, X = _model(L=1)
    with pytest.raises(ValueError, match="variant must be"):
        se.stack_jacobian(P, X, variant="mid")
    with pytest.raises(ValueError, match="X must be"):
        se.stack_jacobian(P, X[0], variant="pre")
    with pytest.raises(ValueError, match="alpha"):
        se.scale_branches(P, 0.0)
    with pytest.raises(ValueError, match="h"):
        se.layer_jacobian_norms(P, X, variant="post", h=-1.0)
    with pytest.raises(ValueError, match="depths"):
        se.input_sensitivity((0,), 6, variant="post")
    with pytest.raises(ValueError, match="variant must be"):
        se.input_sensitivity((1,), 6, variant="none")
    with pytest.raises((TypeError, ValueError)):
        se.scale_branches("params", 1.0)


def test_figure_draws_every_series():
    from lipattn.book.viz.sensitivity import fig_sensitivity

    kw = {"seeds": 2, "n_tokens": 3}
    scan = {v: se.input_sensitivity((1, 2), 6, variant=v, **kw) for v in ("post", "pre")}
    scan["pre_scaled"] = se.input_sensitivity((2,), 6, variant="pre", alpha=0.5, **kw)
    ax1, ax2 = fig_sensitivity(scan).axes
    assert len(ax1.lines) == 4 and len(ax2.lines) == 4  # 3 curves and the line at 1
    bound = ax1.lines[0].get_ydata()  # Post-LN's product, median over seeds
    assert np.allclose(bound, np.median(scan["post"].product, axis=1))


def test_final_norm_must_be_a_bool_and_h_a_meaningful_step():
    p = tr.init_params(1, 4, seed=0)
    X = np.random.default_rng(0).standard_normal((2, 4))
    with pytest.raises(TypeError, match="^final_norm must be True or False"):
        se.stack_jacobian(p, X, variant="pre", final_norm="False")
    for h in (1e-300, 0.0, 1.0):
        with pytest.raises(ValueError, match="^h must"):
            se.stack_jacobian(p, X, variant="pre", h=h)
        with pytest.raises(ValueError, match="^h must"):
            se.layer_jacobian_norms(p, X, variant="pre", h=h)
