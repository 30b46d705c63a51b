"""Additions to lipattn/training.py: the gradient norm at every step and the
intervention hook (the rest of train_reversal is tested in test_prenorm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn import training, transformer
from lipattn.softmax import softmax

KW = {"layers": 2, "d": 16, "vocab": 16, "n_tokens": 8, "batch": 4}


def _plain_gradient_norm(variant: str, seed: int, kw: dict) -> float:
    """The whole gradient's norm at step 0, re-derived in float64 from the public
    forward/backward: cross-entropy through the read-out, the embeddings by scatter."""
    model = training.init_model(kw["layers"], kw["d"], kw["vocab"], kw["n_tokens"], seed=seed)
    tok, tgt = training.reversal_batch(np.random.default_rng([seed, 2]), kw["batch"],
                                       kw["n_tokens"], kw["vocab"])
    X = model["embed"][tok] + model["pos"]
    out = transformer.forward(model["blocks"], X, variant=variant)
    P = softmax(out @ model["unembed"], axis=-1)
    dlog = P.copy()
    np.put_along_axis(dlog, tgt[..., None], np.take_along_axis(P, tgt[..., None], -1) - 1, -1)
    dlog /= tok.size
    g_unembed = out.reshape(-1, kw["d"]).T @ dlog.reshape(-1, kw["vocab"])
    grads, dX = transformer.backward(model["blocks"], X, dlog @ model["unembed"].T,
                                     variant=variant)
    g_embed = np.zeros_like(model["embed"])
    np.add.at(g_embed, tok.ravel(), dX.reshape(-1, kw["d"]))
    parts = [g_unembed, g_embed, dX.sum(axis=0)] + [g[k] for g in grads
                                                     for k in transformer.PARAM_NAMES]
    return float(np.sqrt(sum(np.sum(np.square(p)) for p in parts)))


@pytest.mark.parametrize("variant", ["post", "pre"])
def test_grad_total_at_step_0_matches_a_plain_float64_gradient(variant):
    res = training.train_reversal(variant, 1e-3, 0, [0, 3], steps=2, **KW)
    assert res.grad_total.shape == (2, 2) and np.all(res.grad_total > 0)
    for i, seed in enumerate((0, 3)):
        ref = _plain_gradient_norm(variant, seed, KW)
        assert res.grad_total[i, 0] == pytest.approx(ref, rel=1e-4)  # float32 training


def test_grad_total_bounds_the_per_matrix_norms():
    res = training.train_reversal("post", 1e-3, 0, 0, steps=1, **KW)
    assert res.grad_total[0, 0] >= np.sqrt(np.sum(res.grad_norm[0] ** 2))


def test_step_hook_default_and_no_op_leave_training_bit_identical():
    kw = KW | {"steps": 6}
    calls = []
    a = training.train_reversal("post", [1e-2, 3e-3], [0, 2], [0, 1], **kw)
    b = training.train_reversal("post", [1e-2, 3e-3], [0, 2], [0, 1],
                                step_hook=lambda t, step: calls.append(t), **kw)
    assert calls == list(range(6))
    for f in ("loss", "diversity", "grad_norm", "update", "grad_total"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert np.array_equal(a.model["embed"], b.model["embed"])


def test_step_hook_sees_writable_views_of_every_update():
    seen = {}

    def hook(t, step):
        seen.update({k: v.shape for k, v in step.items()})
        step[("blocks", 0, "W_Q")][0] = 0.0      # freeze run 0's first W_Q

    res = training.train_reversal("pre", 1e-2, 0, [0, 0], steps=3, step_hook=hook, **KW)
    init = training.init_model(2, 16, 16, 8, seed=0)["blocks"][0]["W_Q"]
    np.testing.assert_array_equal(res.run(0)["blocks"][0]["W_Q"], init.astype(np.float32))
    assert not np.allclose(res.run(1)["blocks"][0]["W_Q"], init)   # run 1 trained it
    assert seen[("embed",)] == (2, 16, 16) and seen[("blocks", 1, "W_2")] == (2, 1, 64, 16)
    assert len(seen) == 3 + 2 * len(transformer.PARAM_NAMES)


def test_step_hook_must_be_callable():
    with pytest.raises(TypeError, match="step_hook"):
        training.train_reversal("pre", 1e-3, 0, 0, steps=1, step_hook=3, **KW)


def test_max_logit_matches_the_logits_of_a_plain_forward_pass():
    from lipattn.stabilisers import StabilisedAttention

    for qk in (False, True):
        res = training.train_reversal("pre", 3e-2, 0, 1, steps=3, heads=2, qk_norm=qk,
                                      logit_every=2, **KW)
        assert res.logit_steps.tolist() == [0, 2] and res.max_logit.shape == (1, 2, 2)
        model = training.init_model(2, 16, 16, 8, heads=2, seed=1, qk_norm=qk)
        tok, _ = training.reversal_batch(np.random.default_rng([1, 2]), 4, 8, 16)
        H = transformer.attention_inputs(model["blocks"], model["embed"][tok] + model["pos"],
                                         variant="pre")
        for l_, p in enumerate(model["blocks"]):
            lay = StabilisedAttention(p["W_Q"], p["W_K"], p["W_V"], n_head=2,
                                      qk_norm="layer" if qk else None,
                                      qk_norm_eps=transformer.EPS)
            ref = max(lay.logits(h).max() for h in H[l_])
            assert res.max_logit[0, 0, l_] == pytest.approx(ref, rel=1e-4, abs=1e-5)
        if qk:
            assert np.all(res.max_logit <= np.sqrt(8))   # d_h = 8


def test_recording_and_snapshots_leave_training_bit_identical():
    kw = KW | {"steps": 5}
    a = training.train_reversal("pre", [1e-2, 3e-3], 0, [0, 1], **kw)
    b = training.train_reversal("pre", [1e-2, 3e-3], 0, [0, 1], logit_every=1,
                                keep_at=(0, 2, 5), **kw)
    for f in ("loss", "diversity", "grad_norm", "update", "grad_total"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert sorted(b.snapshots) == [0, 2, 5] and a.snapshots == {}
    init = training.init_model(2, 16, 16, 8, seed=1)
    np.testing.assert_array_equal(b.run(1, at=0)["embed"], init["embed"].astype(np.float32))
    for k in ("embed", "unembed"):
        assert np.array_equal(b.run(1, at=5)[k], a.run(1)[k])
    short = training.train_reversal("pre", [1e-2, 3e-3], 0, [0, 1], **(KW | {"steps": 2}))
    assert np.array_equal(b.run(0, at=2)["blocks"][1]["W_1"], short.run(0)["blocks"][1]["W_1"])
    with pytest.raises(ValueError, match="at must be"):
        b.run(0, at=3)
    with pytest.raises(ValueError, match="keep_at"):
        training.train_reversal("pre", 1e-3, 0, 0, steps=2, keep_at=(3,), **KW)
    with pytest.raises(TypeError, match="qk_norm"):
        training.train_reversal("pre", 1e-3, 0, 0, steps=2, qk_norm="on", **KW)
