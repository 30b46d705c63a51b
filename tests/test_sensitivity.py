"""Input sensitivity of deep stacks (lipattn/book/sensitivity.py).

The exact constants (Lanczos on the layers' jvp and vjp) against the SVD of
dense central-difference Jacobians of :func:`lipattn.models.encoder.forward`
computed here, and against the hand-written backward pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_lipschitz import central_differences

from lipattn.book import sensitivity as se
from lipattn.layernorm import layer_norm_jacobian
from lipattn.models import encoder as tr


def _model(L=3, d=6, seed=0, heads=1, affine=False):
    P = tr.init_params(L, d, seed=seed, heads=heads)
    rng = np.random.default_rng(seed + 10)
    if affine:   # non-trivial LayerNorm gains and biases, and biases everywhere
        for p in P:
            for k in ("ln1_g", "ln2_g"):
                p[k] = 1 + 0.3 * rng.standard_normal(d)
            for k in ("ln1_b", "ln2_b", "b_O", "b_1", "b_2"):
                p[k] = 0.3 * rng.standard_normal(p[k].shape)
    X = rng.standard_normal((4, d))
    return P, X


def _fd(P, X, variant, final_norm=True):
    """Dense Jacobian of the stack by central differences (an independent reference)."""
    if variant == "pre" and not final_norm:
        f = lambda Z: tr.residual_stream(P, Z, variant=variant)[-1]  # noqa: E731
    else:
        f = lambda Z: tr.forward(P, Z, variant=variant)  # noqa: E731
    return central_differences(f, X, h=1e-6)


@pytest.mark.parametrize("variant", ["post", "pre"])
@pytest.mark.parametrize("heads,affine", [(1, False), (2, True)])
def test_exact_constants_match_dense_finite_difference_jacobians(variant, heads, affine):
    P, X = _model(L=3, heads=heads, affine=affine)
    for final_norm in (True, False):
        fd = np.linalg.norm(_fd(P, X, variant, final_norm), 2)
        exact = se.stack_lipschitz(P, X, variant=variant, final_norm=final_norm)
        assert exact == pytest.approx(fd, rel=1e-7)
    stream = tr.residual_stream(P, X, variant=variant)
    fd_layers = [np.linalg.norm(_fd([p], x, variant, final_norm=False), 2)
                 for p, x in zip(P, stream[:-1], strict=True)]
    np.testing.assert_allclose(se.layer_jacobian_norms(P, X, variant=variant), fd_layers,
                               rtol=1e-7)
    np.testing.assert_allclose(se.stack_jacobian(P, X, variant=variant), _fd(P, X, variant),
                               atol=1e-7)


@pytest.mark.parametrize("variant", ["post", "pre"])
def test_stack_jacobian_matches_the_exact_backward_pass(variant):
    """J^T G from the hand-written backward pass, for random G: an independent
    reference for the jvp-built Jacobian."""
    P, X = _model(heads=2, affine=True)
    J = se.stack_jacobian(P, X, variant=variant)
    G = np.random.default_rng(1).standard_normal((3, *X.shape))
    for g in G:
        _, gX = tr.backward(P, X, g, variant=variant)
        assert np.allclose(J.T @ g.ravel(), gX.ravel(), rtol=1e-12, atol=1e-12)


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
    assert np.allclose(whole, chain, rtol=1e-10, atol=1e-12)
    if variant == "pre":  # the final LayerNorm, token by token (block diagonal)
        blocks = layer_norm_jacobian(states[-1])
        final = np.zeros((X.size, X.size))
        d = X.shape[1]
        for i, b in enumerate(blocks):
            final[i * d:(i + 1) * d, i * d:(i + 1) * d] = b
        assert np.allclose(se.stack_jacobian(P, X, variant="pre"), final @ whole,
                           rtol=1e-10, atol=1e-12)
    norms = se.layer_jacobian_norms(P, X, variant=variant)
    assert np.allclose(norms, [np.linalg.norm(J, 2) for J in Js], rtol=1e-9)


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
    with pytest.raises(ValueError, match="tol"):
        se.layer_jacobian_norms(P, X, variant="post", tol=-1.0)
    with pytest.raises(ValueError, match="tol"):
        se.stack_lipschitz(P, X, variant="post", tol=2.0)
    with pytest.raises(ValueError, match="X must have shape"):
        se.stack_lipschitz(P, X[:, :3], variant="post")
    with pytest.raises(ValueError, match="no leading run axes"):
        se.stack_lipschitz(tr.stack_params([P, P]), X, variant="post")
    with pytest.raises(ValueError, match="N \\* d <="):
        se.stack_jacobian(tr.init_params(1, 64), np.ones((40, 64)), variant="pre")
    big = [p | {"b_1": p["b_1"] + 1e308, "W_2": p["W_2"] * 1e10} for p in P]
    with pytest.raises(ValueError, match="^params and X must keep the hidden states finite"):
        se.stack_lipschitz(big, X, variant="pre")
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


def test_final_norm_must_be_a_bool():
    p = tr.init_params(1, 4, seed=0)
    X = np.random.default_rng(0).standard_normal((2, 4))
    for fn in (se.stack_jacobian, se.stack_lipschitz):
        with pytest.raises(TypeError, match="^final_norm must be True or False"):
            fn(p, X, variant="pre", final_norm="False")


def test_vanishing_branches_give_the_identity():
    """Pre-LN without final norm and with zero branches is the identity: constant 1."""
    P, X = _model(L=2)
    zero = se.scale_branches(P, 1e-300)
    assert se.stack_lipschitz(zero, X, variant="pre", final_norm=False) == pytest.approx(
        1.0, rel=1e-12)
