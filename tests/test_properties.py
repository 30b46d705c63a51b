"""Properties of the public API over adversarial inputs (hypothesis).

Two families:

- *bad inputs*: every argument of every function below, replaced by a value of
  the wrong type (bool, str, complex, None), a non-finite or out-of-range value,
  a count of 1e9 or more, or an array of the wrong shape or dtype or with a
  NaN/inf entry, raises ``ValueError`` or ``TypeError`` whose message names
  that argument;
- *extreme valid inputs*: the iterative and norm routines are scale-invariant
  (the result for ``c * A`` is ``c`` times the result for ``A``, for c from
  1e-200 to 1e200), checked against a dense SVD of the unscaled input, and
  return finite values without warnings.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.sparse.linalg import aslinearoperator

from lipattn import (
    adversarial,
    bounds,
    collapse,
    compositions,
    init_gradients,
    l2attention,
    layernorm,
    lipschitz,
    quadrature,
    scaling,
    spectral,
)
from lipattn import softmax as sm
from lipattn.attention import check_attention_args
from lipattn.book import prenorm, sensitivity
from lipattn.models import encoder, encoder_sublayers, training

SCALES = [1e-200, 1e-100, 1e-10, 1e10, 1e100, 1e200]
FAST = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_rng = np.random.default_rng(20)
X = _rng.standard_normal((3, 4))
W_Q, W_K = _rng.standard_normal((2, 4, 2))
W_V = _rng.standard_normal((4, 4))
A = _rng.standard_normal((5, 3))
PARAMS = encoder.init_params(1, 4, d_ff=4, seed=0)
TINY = encoder.init_params(1, 2, d_ff=2, seed=0)

# ---------------------------------------------------------------------------
# bad inputs: (function, valid keyword arguments, {argument: kind})
# kinds: array, count, seed, tol, bool, positive, choice, params, step
# ---------------------------------------------------------------------------
CASES = {
    "power_iteration": (spectral.power_iteration, {"A": A, "iters": 3, "seed": 0},
                        {"A": "array", "iters": "count", "seed": "seed"}),
    "power_iteration_u0": (spectral.power_iteration, {"A": A, "iters": 3, "u0": np.ones(5)},
                           {"u0": "array"}),
    "spectral_norm": (spectral.spectral_norm, {"A": A, "tol": 1e-10},
                      {"A": "array", "tol": "tol"}),
    "spectral_normalize": (spectral.spectral_normalize, {"W": A, "u": np.ones(5), "iters": 2},
                           {"W": "array", "u": "array", "iters": "count"}),
    "lanczos_cost": (spectral.lanczos_cost, {"A": A, "tol": 1e-8, "seed": 0},
                     {"A": "array", "tol": "tol", "seed": "seed"}),
    "matrix_with_spectrum": (spectral.matrix_with_spectrum,
                             {"singular_values": [2.0, 1.0], "seed": 0},
                             {"singular_values": "array", "seed": "seed"}),
    "track_drift": (spectral.track_drift,
                    {"W0": A, "steps": 2, "drift": 0.1, "persistent": True, "iters": 1,
                     "seed": 0},
                    {"W0": "array", "steps": "count", "persistent": "bool", "iters": "count",
                     "seed": "seed"}),
    "spectral_2norm": (collapse.spectral_2norm, {"A": A}, {"A": "array"}),
    "cubic_constant": (collapse.cubic_constant, {"W_Q": W_Q, "W_K": W_K, "W_V": W_V},
                       {"W_Q": "array", "W_K": "array", "W_V": "array"}),
    "cubic_leading_term": (collapse.cubic_leading_term,
                           {"R": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V},
                           {"R": "array", "W_Q": "array", "W_K": "array", "W_V": "array"}),
    "diameter": (collapse.diameter, {"X": X}, {"X": "array"}),
    "random_weights": (collapse.random_weights, {"d": 4, "scale": 1.0, "layers": 2, "seed": 0},
                       {"d": "count", "scale": "positive", "layers": "count", "seed": "seed"}),
    "trajectory": (collapse.trajectory,
                   {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V, "layers": 2},
                   {"X": "array", "W_V": "array", "layers": "count"}),
    "check_attention_args": (check_attention_args, {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V},
                             {"X": "array", "W_Q": "array", "W_K": "array", "W_V": "array"}),
    "init_params": (encoder.init_params, {"layers": 1, "d": 4, "heads": 1, "seed": 0},
                    {"layers": "count", "d": "count", "heads": "count", "seed": "seed"}),
    "forward": (encoder.forward, {"params": PARAMS, "X": X, "variant": "pre"},
                {"params": "params", "X": "array", "variant": "choice"}),
    "gradient_check": (encoder.gradient_check,
                       {"params": TINY, "X": X[:2, :2], "variant": "pre", "seed": 0, "h": 1e-6},
                       {"X": "array", "seed": "seed", "h": "step"}),
    "init_model": (training.init_model,
                   {"layers": 1, "d": 4, "vocab": 3, "n_tokens": 3, "seed": 0},
                   {"vocab": "count", "n_tokens": "count", "d": "count", "seed": "seed"}),
    "stack_jacobian": (sensitivity.stack_jacobian,
                       {"params": PARAMS, "X": X, "variant": "pre", "final_norm": True},
                       {"X": "array", "variant": "choice", "final_norm": "bool"}),
    "input_sensitivity": (sensitivity.input_sensitivity,
                          {"depths": [1], "d": 4, "variant": "pre", "seeds": 1, "n_tokens": 2},
                          {"d": "count", "seeds": "count", "n_tokens": "count"}),
    "init_profile": (prenorm.init_profile,
                     {"layers": 1, "d": 4, "variant": "pre", "seeds": 1, "n_tokens": 2},
                     {"layers": "count", "d": "count", "seeds": "count", "n_tokens": "count"}),
    "amplification": (prenorm.amplification,
                      {"depths": [1], "d": 4, "seeds": 1, "n_tokens": 2, "directions": 1},
                      {"d": "count", "seeds": "count", "n_tokens": "count",
                       "directions": "count", "size": "positive"}),
    "fit_power": (prenorm.fit_power, {"x": [1.0, 2.0, 4.0], "y": [1.0, 2.0, 3.0]},
                  {"x": "array", "y": "array"}),
    "fit_log": (prenorm.fit_log, {"x": [1.0, 2.0, 4.0], "y": [1.0, 2.0, 3.0]},
                {"x": "array", "y": "array"}),
    "sample_logits": (scaling.sample_logits,
                      {"d": 4, "n_keys": 3, "scaled": True, "samples": 10, "seed": 0},
                      {"d": "count", "n_keys": "count", "scaled": "bool", "samples": "count",
                       "seed": "seed"}),
    "saturation_stats": (scaling.saturation_stats,
                         {"d": 4, "n_keys": 3, "samples": 10, "seed": 0},
                         {"d": "count", "n_keys": "count", "samples": "count", "seed": "seed"}),
    "gradient_norms": (init_gradients.gradient_norms,
                       {"d": 4, "n_keys": 3, "samples": 10, "seed": 0},
                       {"d": "count", "n_keys": "count", "samples": "count", "seed": "seed"}),
    "two_token_expectations_d": (quadrature.two_token_expectations_d, {"d": 4, "points": 201},
                                 {"d": "count", "points": "count"}),
    "softmax": (sm.softmax, {"z": X, "temperature": 1.0}, {"z": "array",
                                                            "temperature": "positive"}),
    "layer_norm": (layernorm.layer_norm, {"x": X, "eps": 1e-5}, {"x": "array",
                                                                 "eps": "positive"}),
    "local_lipschitz_bound": (bounds.local_lipschitz_bound,
                              {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V},
                              {"X": "array", "W_Q": "array", "W_K": "array", "W_V": "array"}),
    "card_bound": (bounds.card_bound, {"X": X, "W_Q": W_Q, "W_K": W_K, "W_V": W_V, "C": 1.0},
                   {"X": "array", "W_V": "array", "C": "positive"}),
    "l2_self_attention": (l2attention.l2_self_attention, {"X": X, "W_Q": W_Q, "W_V": W_V},
                          {"X": "array", "W_Q": "array", "W_V": "array"}),
    "l2_local_lipschitz": (l2attention.l2_local_lipschitz,
                           {"X": X, "W_Q": W_Q, "W_V": W_V, "tol": 1e-10},
                           {"X": "array", "W_V": "array", "tol": "tol"}),
    "sublayer_constants": (encoder_sublayers.sublayer_constants,
                           {"params": PARAMS, "X": X, "variant": "pre", "tol": 1e-8},
                           {"X": "array", "variant": "choice", "tol": "tol",
                            "input_scale": "positive"}),
    "two_sided_tokens": (adversarial.two_sided_tokens, {"t": 1.0, "N": 3, "d": 2},
                         {"N": "count", "d": "count"}),
    "sink_tokens": (adversarial.sink_tokens, {"R": 1.0, "N": 3, "u": [1.0, 0.0]},
                    {"N": "count", "u": "array"}),
}

_wrong_type = st.sampled_from([None, "1", True, 1j, b"x", object()])
_bad_real = st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, 0.0])
_huge_count = st.integers(min_value=10**9, max_value=10**30)
BAD = {
    "count": st.one_of(_wrong_type, _huge_count, st.integers(max_value=-1), st.just(2.5),
                       st.just(float("nan"))),
    "seed": st.one_of(st.sampled_from([None, "0", True, 1j, 0.5, float("nan")]),
                      st.integers(max_value=-1)),
    "tol": st.one_of(_wrong_type, _bad_real, st.floats(min_value=0.6, max_value=1e300),
                     st.floats(min_value=1e-300, max_value=1e-16)),
    "bool": st.sampled_from(["False", "True", 0, 1, None, 1.0]),
    "positive": st.one_of(_wrong_type, _bad_real),
    "step": st.one_of(_wrong_type, _bad_real, st.floats(min_value=1e-300, max_value=1e-13),
                      st.floats(min_value=1.0, max_value=1e300)),
    "choice": st.sampled_from(["False", "PRE", "", None, 1, True]),
}


def _bad_arrays(v: np.ndarray):
    """Arrays like ``v`` that must be rejected: non-finite entries, wrong dtypes, shapes."""
    v = np.asarray(v, dtype=float)

    def poison(i, val):
        w = v.copy()
        w.flat[i % w.size] = val
        return w

    return st.one_of(
        st.builds(poison, st.integers(0, 10**6), st.sampled_from([np.nan, np.inf, -np.inf])),
        st.sampled_from([v.astype(complex), v > 0, v.astype(str), v.astype(object),
                         np.zeros((0,) + v.shape[1:]), v.reshape(-1)[:0], None, "array",
                         True, 1j, np.float64(1.5), [[1.0, 2.0], [3.0]]]),
    )


def _cases_of(kinds):
    return [(name, arg) for name, (_, _, k) in CASES.items() for arg, kind in k.items()
            if kind in kinds]


def _assert_rejected(name: str, arg: str, value) -> None:
    fn, base, _ = CASES[name]
    kw = dict(base)
    kw[arg] = value
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            fn(**kw)
        except (ValueError, TypeError) as exc:
            msg = str(exc)
            assert re.search(rf"(^|\W){re.escape(arg)}(\W|$)", msg), (
                f"{name}({arg}={value!r}) raised {type(exc).__name__} without naming "
                f"{arg!r}: {msg}")
            return
    pytest.fail(f"{name}({arg}={value!r}) was accepted")


@pytest.mark.parametrize(("name", "arg"), _cases_of({"count", "seed", "tol", "bool",
                                                     "positive", "step", "choice"}))
@FAST
@given(data=st.data())
def test_bad_scalars_raise_naming_the_argument(name, arg, data):
    value = data.draw(BAD[CASES[name][2][arg]])
    _assert_rejected(name, arg, value)


@pytest.mark.parametrize(("name", "arg"), _cases_of({"array"}))
@FAST
@given(data=st.data())
def test_bad_arrays_raise_naming_the_argument(name, arg, data):
    base = CASES[name][1][arg]
    value = data.draw(_bad_arrays(base))
    if value is None and name == "power_iteration_u0":
        return  # u0=None is the documented default (a random start)
    if name == "softmax" and isinstance(value, np.ndarray) and value.dtype == float \
            and np.any(np.isneginf(value)):
        return  # -inf logits are masked keys, documented as valid
    _assert_rejected(name, arg, value)


@pytest.mark.parametrize("key", ["b_1", "W_Q", "ln2_g"])
@pytest.mark.parametrize("bad", [np.inf, np.nan, "x", 1j, True])
def test_check_params_names_the_bad_entry(key, bad):
    p = [dict(q) for q in PARAMS]
    arr = np.asarray(p[0][key])
    p[0][key] = np.full(arr.shape, bad)
    with pytest.raises((ValueError, TypeError), match=re.escape(f"params[0]['{key}']")):
        encoder.forward(p, X, variant="pre")


def test_stack_params_rejects_differing_heads():
    with pytest.raises(ValueError, match="heads"):
        encoder.stack_params([encoder.init_params(1, 4, heads=2),
                              encoder.init_params(1, 4, heads=1)])


@pytest.mark.parametrize("betas", [(0.9, 1.5), (1.0, 0.98), (-0.1, 0.9), (0.9,), 0.9,
                                   ("0.9", 0.98)])
def test_train_reversal_rejects_bad_betas(betas):
    with pytest.raises((ValueError, TypeError), match="betas"):
        training.train_reversal("pre", 1e-3, 0, 0, layers=1, d=4, steps=1, betas=betas)


@pytest.mark.parametrize("lr", ["0.001", True, [1e-3, "x"], float("nan"), 0.0, -1e-3, 2.0])
def test_train_reversal_rejects_bad_lr(lr):
    with pytest.raises((ValueError, TypeError), match="lr"):
        training.train_reversal("pre", lr, 0, 0, layers=1, d=4, steps=1)


@pytest.mark.parametrize("x", [[2.0, 2.0, 2.0], [3, 3, 3, 3]])
@pytest.mark.parametrize("fit", [prenorm.fit_power, prenorm.fit_log])
def test_fits_reject_all_equal_x(fit, x):
    with pytest.raises(ValueError, match="^x must have at least two distinct"):
        fit(x, np.arange(1.0, len(x) + 1))


# ---------------------------------------------------------------------------
# extreme valid inputs: scale invariance against a dense SVD of the unscaled input
# ---------------------------------------------------------------------------
matrices = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**32 - 1)).map(
    lambda t: np.random.default_rng(t[2]).standard_normal(t[:2]))


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


@pytest.mark.parametrize("c", SCALES)
@FAST
@given(M=matrices)
def test_power_iteration_is_scale_invariant(c, M):
    ref = spectral.power_iteration(M, 8)
    run = _quiet(spectral.power_iteration, c * M, 8)
    np.testing.assert_allclose(run.sigma, c * ref.sigma, rtol=1e-12)
    np.testing.assert_allclose(run.u, ref.u, rtol=1e-10, atol=1e-12)
    assert np.all(run.sigma <= c * np.linalg.norm(M, 2) * (1 + 1e-12))


@pytest.mark.parametrize("c", SCALES)
@FAST
@given(M=matrices)
def test_spectral_norm_is_scale_invariant(c, M):
    exact = np.linalg.norm(M, 2)
    assert _quiet(spectral.spectral_norm, c * M) == pytest.approx(c * exact, rel=1e-13)
    op = aslinearoperator(c * M)
    assert _quiet(spectral.spectral_norm, op) == pytest.approx(c * exact, rel=1e-8)
    assert _quiet(collapse.spectral_2norm, c * M) == pytest.approx(c * exact, rel=1e-12)


@pytest.mark.parametrize("c", SCALES)
def test_spectral_norm_lanczos_paths_are_scale_invariant(c):
    M = np.random.default_rng(1).standard_normal((600, 450))  # above DENSE_MAX_ENTRIES
    exact = np.linalg.norm(M, 2)
    assert _quiet(spectral.spectral_norm, c * M) == pytest.approx(c * exact, rel=1e-9)
    small = M[:40, :30]
    assert _quiet(spectral.lanczos_cost, c * small, 1e-10)[1] == pytest.approx(
        c * np.linalg.norm(small, 2), rel=1e-9)


@pytest.mark.parametrize("c", SCALES)
@FAST
@given(M=matrices)
def test_spectral_normalize_is_scale_invariant(c, M):
    u = np.ones(M.shape[0])
    if not np.any(M.T @ u):
        return
    W1, u1, s1 = spectral.spectral_normalize(M, u, 3)
    Wc, uc, sc = _quiet(spectral.spectral_normalize, c * M, c * u, 3)
    assert sc == pytest.approx(c * s1, rel=1e-12)
    np.testing.assert_allclose(Wc, W1, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(uc, u1, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("c", SCALES)
def test_track_drift_is_scale_invariant(c):
    W = np.random.default_rng(2).standard_normal((6, 4))
    ref = spectral.track_drift(W, 4, 0.1, seed=3)
    got = _quiet(spectral.track_drift, c * W, 4, 0.1, seed=3)
    np.testing.assert_allclose(got.sigma_hat, c * ref.sigma_hat, rtol=1e-11)
    np.testing.assert_allclose(got.sigma, c * ref.sigma, rtol=1e-12)


@pytest.mark.parametrize("c", SCALES)
@FAST
@given(seed=st.integers(0, 2**32 - 1), d_k=st.integers(1, 4))
def test_cubic_constant_is_scale_invariant(c, seed, d_k):
    r = np.random.default_rng(seed)
    Q, K = r.standard_normal((2, 4, d_k))
    V = r.standard_normal((4, 3))
    ref = np.linalg.norm(Q @ K.T, 2) * np.linalg.norm(V, 2) / (2 * math.sqrt(d_k))
    assert _quiet(collapse.cubic_constant, c * Q, K, V) == pytest.approx(c * ref, rel=1e-12)
    assert _quiet(collapse.cubic_constant, c * Q, K / c, V) == pytest.approx(ref, rel=1e-12)
    assert _quiet(collapse.cubic_constant, Q, K, c * V) == pytest.approx(c * ref, rel=1e-12)


def test_cubic_constant_that_overflows_raises():
    with pytest.raises(ValueError, match="W_Q, W_K, W_V must give a cubic constant"):
        collapse.cubic_constant(1e200 * W_Q, 1e200 * W_K, W_V)


@pytest.mark.parametrize("c", SCALES)
def test_sink_tokens_are_scale_invariant(c):
    u = np.array([3.0, -4.0])
    ref = np.array([[0.6, -0.8], [0.3, -0.4], [0.3, -0.4]])
    np.testing.assert_allclose(_quiet(adversarial.sink_tokens, 2.0, 3, c * u), 2 * ref,
                               rtol=1e-15)
    np.testing.assert_allclose(_quiet(adversarial.sink_tokens, c, 3, u), c * ref, rtol=1e-15)


@pytest.mark.parametrize("c", SCALES)
def test_bounds_and_norms_are_scale_invariant(c):
    ref = bounds.local_lipschitz_bound(X, W_Q, W_K, W_V)
    # (c X, W_Q / c, W_K / c) has the same logits and the same bound
    assert _quiet(bounds.local_lipschitz_bound, c * X, W_Q / c, W_K / c, W_V) == \
        pytest.approx(ref, rel=1e-12)
    assert _quiet(bounds.local_lipschitz_bound, X, W_Q, W_K, c * W_V) == \
        pytest.approx(c * ref, rel=1e-12)
    card = bounds.card_bound(X, W_Q, W_K, W_V)
    assert _quiet(bounds.card_bound, X, W_Q, W_K, c * W_V) == pytest.approx(c * card,
                                                                            rel=1e-12)
    assert _quiet(collapse.diameter, c * X) == pytest.approx(c * collapse.diameter(X),
                                                             rel=1e-13)
    lead = collapse.cubic_leading_term(X, W_Q, W_K, W_V)
    np.testing.assert_allclose(_quiet(collapse.cubic_leading_term, X, W_Q, W_K, c * W_V),
                               c * lead, rtol=1e-12, atol=0)


def test_local_bound_stays_above_the_exact_constant():
    for seed in range(10):
        r = np.random.default_rng(seed)
        Xs, Q, K, V = r.standard_normal((4, 4, 4))
        for t in (1e-3, 1.0, 5.0):
            exact = lipschitz.local_lipschitz(t * Xs, Q, K, V, method="dense")
            assert exact <= bounds.local_lipschitz_bound(t * Xs, Q, K, V) * (1 + 1e-12)


@pytest.mark.parametrize("c", [1e10, 1e100, 1e200, 1e300])
def test_pre_ln_forward_of_a_huge_input_is_its_layernorm(c):
    """Pre-LN: the sublayers add O(1) to a stream of size c, and the final LayerNorm
    is scale-invariant, so forward(c X) -> (X - mean) / std row by row."""
    out = _quiet(encoder.forward, PARAMS, c * X, variant="pre")
    centred = X - X.mean(axis=-1, keepdims=True)
    ref = centred / np.sqrt(np.mean(centred**2, axis=-1, keepdims=True))
    np.testing.assert_allclose(out, ref, rtol=1e-8, atol=1e-8)


def test_post_ln_forward_of_a_huge_input_raises_clearly():
    with pytest.raises(ValueError, match="^params and X must keep the attention logits finite"):
        encoder.forward(PARAMS, 1e200 * X, variant="post")


@FAST
@given(x=arrays(np.float64, (3, 5), elements=st.floats(-1e3, 1e3)))
def test_layernorm_shortcut_matches_layer_norm(x):
    """The Transformer's LayerNorm shortcut agrees with lipattn.layernorm, also
    where its squares overflow (the scaled fallback)."""
    from lipattn.layernorm import _ln
    for c in (1.0, 1e200, 1e-200):
        y, inv_s = _quiet(_ln, c * x, 1e-5)
        # the plain path centres without rescaling: near-constant rows keep a
        # residual of about |x| * 1e-16, divided by sqrt(eps)
        atol = 1e-14 * float(np.max(np.abs(x))) / math.sqrt(1e-5) + 1e-15
        np.testing.assert_allclose(y, layernorm.layer_norm(c * x), rtol=1e-9, atol=atol)
        np.testing.assert_allclose(inv_s[..., 0],
                                   layernorm.layer_norm_jacobian_norm(c * x), rtol=1e-9)


def test_gradient_check_rejects_meaningless_steps():
    for h in (0.0, 1e-300, -1e-6, 10.0):
        with pytest.raises(ValueError, match="^h must"):
            encoder.gradient_check(TINY, X[:2, :2], variant="pre", h=h)


def test_zero_operator_has_norm_zero():
    op = aslinearoperator(np.zeros((30, 20)))
    assert spectral.spectral_norm(op) == 0.0
    assert spectral.lanczos_cost(op, 1e-8) == (0, 0.0)
    assert spectral.spectral_norm(np.zeros((600, 500))) == 0.0


@pytest.mark.parametrize("c", SCALES)
def test_relu_network_norms_are_scale_invariant(c):
    """The bias-free ReLU network is positively homogeneous in each weight: scaling
    one weight by c scales every Jacobian norm and both bounds by c."""
    r = np.random.default_rng(4)
    ws = [r.standard_normal((3, 4)), r.standard_normal((4, 4)), r.standard_normal((4, 2))]
    Xs = r.standard_normal((6, 3))
    ref = (compositions.product_bound(ws), compositions.relu_mlp_jacobian_norms(ws, Xs),
           compositions.pattern_bound(ws))
    scaled = [ws[0], c * ws[1], ws[2]]
    assert _quiet(compositions.product_bound, scaled) == pytest.approx(c * ref[0], rel=1e-13)
    np.testing.assert_allclose(_quiet(compositions.relu_mlp_jacobian_norms, scaled, c * Xs),
                               c * ref[1], rtol=1e-12, atol=0)
    assert _quiet(compositions.pattern_bound, scaled) == pytest.approx(c * ref[2], rel=1e-12)


def test_dobrushin_rejects_non_stochastic_rows():
    with pytest.raises(ValueError, match="^P must be row-stochastic"):
        collapse.dobrushin(np.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="^P must be row-stochastic"):
        collapse.dobrushin(np.array([[1.5, -0.5], [0.5, 0.5]]))


@pytest.mark.parametrize(("kw", "phrase"), [({"ndim": 1}, "with 1 axis "),
                                              ({"ndim": 2}, "with 2 axes "),
                                              ({"min_ndim": 1}, "with at least 1 axis "),
                                              ({"min_ndim": 2}, "with at least 2 axes ")])
def test_array_errors_count_axes_in_english(kw, phrase):
    from lipattn._validate import as_real_array
    with pytest.raises(ValueError) as err:
        as_real_array(np.array([np.nan]), "s", **kw)
    assert phrase in str(err.value)
