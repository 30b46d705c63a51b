"""lipattn.book.viz.logits: the attention constants against a dense finite-difference
Jacobian of the encoder's own sublayer, the sweep's invariants, and the summary's counts."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn import transformer
from lipattn.book.viz import logits as lg
from lipattn.training import train_reversal


def _fd_constant(H, p, h=1e-6):
    """Spectral norm of the central-difference Jacobian of the encoder's attention sublayer."""
    f = lambda Z: transformer._attn_fwd(Z, p)[0].ravel()      # noqa: E731
    cols = []
    for k in range(H.size):
        E = np.zeros(H.size)
        E[k] = h
        cols.append((f(H + E.reshape(H.shape)) - f(H - E.reshape(H.shape))) / (2 * h))
    return np.linalg.norm(np.array(cols).T, 2)


@pytest.mark.parametrize("qk", [False, True])
def test_attention_constants_match_a_dense_jacobian_of_the_trained_sublayer(qk):
    kw = {"layers": 2, "d": 8, "heads": 2, "vocab": 6, "n_tokens": 4, "batch": 4, "steps": 5}
    model = train_reversal("pre", 3e-2, 0, 0, qk_norm=qk, **kw).run(0)
    tokens = np.array([[0, 1, 2, 3], [5, 5, 1, 0]])
    got = lg.attention_constants(model, tokens, qk, tol=1e-10)
    blocks = [{k: v if k in transformer.SETTINGS else np.asarray(v, float) for k, v in p.items()}
              for p in model["blocks"]]
    X = np.asarray(model["embed"], float)[tokens] + np.asarray(model["pos"], float)
    H = transformer.attention_inputs(blocks, X, variant="pre")
    for l_, p in enumerate(blocks):
        for b in range(2):
            assert got[l_, b] == pytest.approx(_fd_constant(H[l_][b], p), rel=1e-6)


def test_sweep_shapes_and_invariants():
    sw = lg.logit_sweep((1e-2, 1.0), (0,), 30)
    assert sw["checkpoints"].tolist() == [0, 25]
    for qk in (False, True):
        a = sw[qk]
        assert a["max_logit"].shape == (2, 1, 3, 2) and a["lipschitz"].shape == (2, 1, 2, 2)
        assert a["loss"].shape == (2, 1, 30)
        assert np.array_equal(a["lipschitz"][0, :, 0], a["lipschitz"][1, :, 0])  # same init
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
    s = np.sqrt(X.var(axis=-1) + transformer.EPS)              # layer 0's input stream
    assert sw[False]["ln_gain"][0, 0, 1, 0] == pytest.approx(np.median(1 / s), rel=1e-9)
