"""lipattn.book.viz.logits: the attention constants against a dense finite-difference
Jacobian of the encoder's own sublayer, the sweep's invariants, and the summary's counts."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn.book.viz import logits as lg
from lipattn.models import encoder
from lipattn.models.training import train_reversal


def _fd_constant(H, p, h=1e-6):
    """Spectral norm of the central-difference Jacobian of the encoder's attention sublayer."""
    f = lambda Z: encoder._attn_fwd(Z, p)[0].ravel()      # noqa: E731
    cols = []
    for k in range(H.size):
        E = np.zeros(H.size)
        E[k] = h
        cols.append((f(H + E.reshape(H.shape)) - f(H - E.reshape(H.shape))) / (2 * h))
    return np.linalg.norm(np.array(cols).T, 2)


def _tiny_run(qk):
    """A 5-step run at d = 8, two heads; two sequences; the blocks in float64 and the
    attention sublayers' inputs, computed with the encoder's own functions."""
    kw = {"layers": 2, "d": 8, "heads": 2, "vocab": 6, "n_tokens": 4, "batch": 4, "steps": 5}
    model = train_reversal("pre", 3e-2, 0, 0, qk_norm=qk, **kw).run(0)
    tokens = np.array([[0, 1, 2, 3], [5, 5, 1, 0]])
    blocks = [{k: v if k in encoder.SETTINGS else np.asarray(v, float) for k, v in p.items()}
              for p in model["blocks"]]
    X = np.asarray(model["embed"], float)[tokens] + np.asarray(model["pos"], float)
    H = encoder.attention_inputs(blocks, X, variant="pre")
    return model, tokens, blocks, H


@pytest.mark.parametrize("qk", [False, True])
def test_attention_constants_match_a_dense_jacobian_of_the_trained_sublayer(qk):
    model, tokens, blocks, H = _tiny_run(qk)
    got = lg.attention_constants(model, tokens, qk, tol=1e-10)
    for l_, p in enumerate(blocks):
        for b in range(2):
            assert got[l_, b] == pytest.approx(_fd_constant(H[l_][b], p), rel=1e-6)


def test_sweep_shapes_and_invariants():
    sw = lg.logit_sweep((1e-2, 1.0), (0,), 30)
    assert sw["checkpoints"].tolist() == [0, 25]
    for qk in (False, True):
        a = sw[qk]
        assert a["max_logit"].shape == (2, 1, 3, 2) and a["lipschitz"].shape == (2, 1, 2, 2)
        assert a["loss"].shape == (2, 1, 30) and a["value_path"].shape == (2, 1, 2)
        assert np.array_equal(a["lipschitz"][0, :, 0], a["lipschitz"][1, :, 0])  # same init
    assert sw[False]["heads"].shape == (2, 1, 2, lg.PROBE["batch"], 3) and "heads" not in sw[True]
    hb = sw[False]["heads"]
    assert np.all(hb[..., 0] <= hb[..., 1:].min(axis=-1) * (1 + 1e-5))   # the heads theorem
    d_h = lg.TRAIN["d"] // lg.TRAIN["heads"]
    assert np.all(sw[True]["max_logit"] <= np.sqrt(d_h))     # |LN(q)| <= sqrt(d_h)


def test_summary_counts_a_synthetic_sweep():
    lrs = np.array([1e-2, 1e-1, 1.0])
    top = np.array([[5.0, 6.0], [2e3, 50.0], [1e5, 3e4]])           # (n_lr, n_seed)
    final = np.array([[0.01, 0.02], [2.7, 0.05], [3.0, 0.5]])
    arm = {"max_logit": top[:, :, None, None] * np.ones((1, 1, 2, 3)),
           "final_loss": final,
           "lipschitz": np.stack([np.ones((3, 2, 1)), top[:, :, None]], axis=2)}
    s = lg.summary({"lrs": lrs, "seeds": np.array([0, 1]), False: arm, True: arm}, big=1e3)
    assert s["no_learned"].tolist() == [2, 1, 0] and s["no_top"] == 1e-2
    assert s["no_big"] == 3 and s["no_big_learned"] == 0 and s["no_small_failed"] == 0
    np.testing.assert_allclose(s["no_logit"], np.median(top, axis=1))
    np.testing.assert_allclose(s["no_lip"], np.median(top, axis=1))
    assert s["no_lip0"] == 1.0 and s["n_seed"] == 2
    assert s["lip_learned_max"] == 50.0 and s["lip_failed_min"] == 2e3


def test_ln_gain_is_one_over_the_per_token_deviation():
    sw = lg.logit_sweep((1e-2, 1.0), (0,), 30)
    model = train_reversal("pre", 1e-2, 0, 0, **(lg.TRAIN | {"steps": 25, "keep_at": ()})).run(0)
    tokens = lg.reversal_batch(np.random.default_rng(lg.PROBE["seed"]), lg.PROBE["batch"],
                               lg.TRAIN["n_tokens"], lg.TRAIN["vocab"])[0]
    X = np.asarray(model["embed"], float)[tokens] + np.asarray(model["pos"], float)
    s = np.sqrt(X.var(axis=-1) + encoder.EPS)              # layer 0's input stream
    assert sw[False]["ln_gain"][0, 0, 1, 0] == pytest.approx(np.median(1 / s), rel=1e-9)


@pytest.mark.parametrize("qk", [False, True])
def test_value_path_is_the_norm_of_a_dense_kronecker_reference(qk):
    """The value term sum_h P_h E W_V^h W_O^h is (row-major vec) sum_h P_h kron (W_V^h W_O^h)^T,
    with P from a plain-numpy softmax of the (optionally LayerNormed) logits."""
    model, tokens, blocks, H = _tiny_run(qk)
    got = lg.attention_constants(model, tokens, qk, tol=1e-10, value_path=True)
    ln = lambda z: (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True)  # noqa: E731
                                                             + encoder.EPS)
    for l_, p in enumerate(blocks):
        for b in range(2):
            J = 0
            for h in range(2):
                sl = slice(4 * h, 4 * h + 4)
                q, k = H[l_][b] @ p["W_Q"][:, sl], H[l_][b] @ p["W_K"][:, sl]
                q, k = (ln(q), ln(k)) if qk else (q, k)
                S = q @ k.T / 2.0
                P = np.exp(S - S.max(1, keepdims=True))
                P /= P.sum(1, keepdims=True)
                J = J + np.kron(P, (p["W_V"][:, sl] @ p["W_O"][sl]).T)
            assert got[l_, b] == pytest.approx(np.linalg.norm(J, 2), rel=1e-8)


def test_head_bounds_match_dense_jacobians_of_each_head():
    """Each head's constant is the central-difference Jacobian of the encoder's own sublayer
    with the other heads' value columns zeroed (their outputs vanish), with W_O for L_i and
    the identity for c_i; the exact constant is the whole sublayer's."""
    model, tokens, blocks, H = _tiny_run(False)
    got = lg.head_bounds(model, tokens, tol=1e-10)
    assert got.shape == (2, 2, 3)
    for l_, p in enumerate(blocks):
        for b in range(2):
            L, c = [], []
            for h in range(2):
                keep = np.zeros(8)
                keep[4 * h:4 * h + 4] = 1
                head = p | {"W_V": p["W_V"] * keep, "b_O": 0 * p["b_O"]}
                L.append(_fd_constant(H[l_][b], head))
                c.append(_fd_constant(H[l_][b], head | {"W_O": np.eye(8)}))
            ref = (_fd_constant(H[l_][b], p), sum(L),
                   np.linalg.norm(p["W_O"], 2) * np.sqrt(np.sum(np.square(c))))
            np.testing.assert_allclose(got[l_, b], ref, rtol=1e-6)
            assert ref[0] <= min(ref[1:]) * (1 + 1e-9)        # the heads theorem


def test_head_bounds_refuse_a_qk_normed_model():
    kw = {"layers": 1, "d": 8, "heads": 2, "vocab": 6, "n_tokens": 4, "batch": 4, "steps": 1}
    model = train_reversal("pre", 3e-2, 0, 0, qk_norm=True, **kw).run(0)
    with pytest.raises(ValueError, match="model"):
        lg.head_bounds(model, np.array([[0, 1, 2, 3]]))


def test_longer_runs_continue_the_same_runs_and_refuse_by_name():
    lr = {False: 0.03, True: 0.03}
    out = lg.longer_runs(lr, (0, 1), (0, 5), steps=20, at=(10, 20))
    assert out["at"].tolist() == [10, 20]
    kw = {k: v for k, v in lg.TRAIN.items() if k not in ("steps", "keep_at", "logit_every")}
    for qk in (False, True):
        a = out[qk]
        assert a["loss"].shape == (2, 2, 2) and a["max_logit"].shape == (2, 2)
        assert np.all(np.isfinite(a["loss"]))
        one = train_reversal("pre", 0.03, 0, 1, qk_norm=qk, steps=20, **kw)   # a run alone
        assert np.allclose(a["loss"][0, 1], [one.loss[0, :10].mean(), one.loss[0, 10:].mean()],
                           rtol=1e-5)
        assert not np.allclose(a["loss"][0, :, 0], a["loss"][1, :, 0])   # warm-up changes it
    assert np.all(out[True]["max_logit"] <= np.sqrt(lg.TRAIN["d"] // lg.TRAIN["heads"]))
    with pytest.raises(TypeError, match="lr must be a dict"):
        lg.longer_runs({"qk": 0.1})
    with pytest.raises(ValueError, match="at"):
        lg.longer_runs(lr, (0,), (0,), steps=20, at=(30,))
