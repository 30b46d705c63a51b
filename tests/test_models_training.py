"""Additions to lipattn/models/training.py: the gradient norm at every step and the
intervention hook (the rest of train_reversal is tested in test_prenorm.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lipattn.models import encoder, optim, training
from lipattn.softmax import softmax

KW = {"layers": 2, "d": 16, "vocab": 16, "n_tokens": 8, "batch": 4}


def _plain_gradient_norm(variant: str, seed: int, kw: dict) -> float:
    """The whole gradient's norm at step 0, re-derived in float64 from the public
    forward/backward: cross-entropy through the read-out, the embeddings by scatter."""
    model = training.init_model(kw["layers"], kw["d"], kw["vocab"], kw["n_tokens"], seed=seed)
    tok, tgt = training.reversal_batch(np.random.default_rng([seed, 2]), kw["batch"],
                                       kw["n_tokens"], kw["vocab"])
    X = model["embed"][tok] + model["pos"]
    out = encoder.forward(model["blocks"], X, variant=variant)
    P = softmax(out @ model["unembed"], axis=-1)
    dlog = P.copy()
    np.put_along_axis(dlog, tgt[..., None], np.take_along_axis(P, tgt[..., None], -1) - 1, -1)
    dlog /= tok.size
    g_unembed = out.reshape(-1, kw["d"]).T @ dlog.reshape(-1, kw["vocab"])
    grads, dX = encoder.backward(model["blocks"], X, dlog @ model["unembed"].T,
                                     variant=variant)
    g_embed = np.zeros_like(model["embed"])
    np.add.at(g_embed, tok.ravel(), dX.reshape(-1, kw["d"]))
    parts = [g_unembed, g_embed, dX.sum(axis=0)] + [g[k] for g in grads
                                                     for k in encoder.PARAM_NAMES]
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
    assert len(seen) == 3 + 2 * len(encoder.PARAM_NAMES)


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
        H = encoder.attention_inputs(model["blocks"], model["embed"][tok] + model["pos"],
                                         variant="pre")
        for l_, p in enumerate(model["blocks"]):
            lay = StabilisedAttention(p["W_Q"], p["W_K"], p["W_V"], n_head=2,
                                      qk_norm="layer" if qk else None,
                                      qk_norm_eps=encoder.EPS)
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


# ---------------------------------------------------------------------------
# train_stack: any stack of lipattn.layers, through the layers' backward
# ---------------------------------------------------------------------------
def _adam_reference(p, grads_per_step, lr, b1, b2):
    """Adam with bias correction, written out entry by entry in float64."""
    p = np.array(p, dtype=float)
    m = v = np.zeros_like(p)
    for t, g in enumerate(grads_per_step):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1 ** (t + 1))) / (np.sqrt(v / (1 - b2 ** (t + 1))) + 1e-9)
    return p


def test_adam_matches_the_written_out_rule():
    rng = np.random.default_rng(0)
    p = {"w": rng.standard_normal((3, 2))}
    start = p["w"].copy()
    gs = [rng.standard_normal((3, 2)) for _ in range(4)]
    opt = optim.Adam(p, 0.1, betas=(0.8, 0.9))
    for g in gs:
        opt.step({"w": g})
    np.testing.assert_allclose(p["w"], _adam_reference(start, gs, 0.1, 0.8, 0.9), rtol=1e-13)
    with pytest.raises(ValueError, match="grads must have the keys of params"):
        opt.step({})
    with pytest.raises(ValueError, match=r"grads\['w'\] must have the parameter's shape"):
        opt.step({"w": np.zeros(2)})
    with pytest.raises(ValueError, match="lr"):
        optim.Adam(p, 0.0)


def test_train_stack_steps_the_book_encoder_by_its_backward():
    """One step of train_stack on as_layers equals Adam on encoder.backward's grads."""
    params = encoder.init_params(2, 8, heads=2, seed=1)
    ref = [{k: np.array(v) if k in encoder.PARAM_NAMES else v for k, v in p.items()}
           for p in params]
    rng = np.random.default_rng(2)
    X, G = rng.standard_normal((2, 3, 5, 8))
    stack = encoder.as_layers(params, "pre")
    losses = training.train_stack(stack, lambda t: (X, None),
                                  lambda Y, _: (float(np.sum(G * Y)), G), steps=1, lr=1e-2)
    assert losses[0] == pytest.approx(np.sum(G * encoder.forward(ref, X, variant="pre")))
    grads, _ = encoder.backward(ref, X, G, variant="pre")
    for p, q, g in zip(params, ref, grads, strict=True):
        for k in encoder.PARAM_NAMES:
            np.testing.assert_allclose(p[k], _adam_reference(q[k], [g[k]], 1e-2, 0.9, 0.98),
                                       rtol=1e-12, atol=1e-14, err_msg=k)


@pytest.mark.parametrize("layout", ["gpt2", "llama"])
def test_train_stack_fits_a_decoder_layout_stack(layout):
    """A GPT-2- or Llama-layout stack of two blocks learns a fixed random target map
    (mean squared error falls by 10x) in float32, its params updated in place."""
    from lipattn.models import GPT2, Llama, random_state_dict

    d, N = 8, 4
    st = random_state_dict(layout, 2, d, 2, n_kv_head=None if layout == "gpt2" else 1, vocab=5,
                           n_pos=8, std=0.3, seed=3)
    model = (GPT2.from_state_dict(st, n_head=2, dtype=np.float32) if layout == "gpt2" else
             Llama.from_state_dict(st, n_head=2, n_kv_head=1, dtype=np.float32))
    from lipattn.layers import Sequential

    stack = Sequential(list(model.blocks))
    rng = np.random.default_rng(4)
    X = rng.standard_normal((16, N, d)).astype(np.float32)
    target = np.tanh(X @ rng.standard_normal((d, d)).astype(np.float32))
    before = {k: v.copy() for k, v in stack.params.items()}

    def mse(Y, T):
        return float(np.mean((Y - T) ** 2)), (2 * (Y - T) / Y.size).astype(np.float32)

    losses = training.train_stack(stack, lambda t: (X, target), mse, steps=150, lr=1e-2)
    assert losses[-1] < losses[0] / 10
    assert all(v.dtype == np.float32 for v in stack.params.values())
    assert all(not np.array_equal(v, before[k]) for k, v in stack.params.items())
    np.testing.assert_allclose(model.forward(X[0]), stack.forward(X[0])[0], rtol=1e-6)


def test_train_stack_calls_back_after_each_step():
    from lipattn.layers import LayerNorm

    ln = LayerNorm(np.ones(3), np.zeros(3), 1e-5)
    X = np.random.default_rng(0).standard_normal((2, 4, 3))
    seen = []
    losses = training.train_stack(
        ln, lambda t: (X, None), lambda Y, _: (float((Y ** 2).sum()), 2 * Y), steps=3, lr=1e-2,
        callback=lambda t, v: seen.append((t, v, ln.g.copy())))
    assert [(t, v) for t, v, _ in seen] == list(enumerate(losses))
    assert not np.array_equal(seen[0][2], np.ones(3))  # called after the update


def test_radam_rectification_matches_the_ema_as_a_simple_moving_average():
    """rho_k is the length of the simple moving average whose mean age equals that of
    the bias-corrected EMA of k squared gradients (Liu et al. 2020); r_t^2 is the
    ratio of the adaptive step's variances, rho/((rho - 2)(rho - 4)), at infinity and
    at k. Loop re-implementation of the definitions; zero where rho_k <= 4."""
    b2, steps = 0.98, 400
    r = optim.radam_rectification(steps, b2)
    def var(rho):
        return rho / ((rho - 2) * (rho - 4))
    rho_inf = (1 + b2) / (1 - b2)
    for t in range(steps):
        k = t + 1
        w = [b2 ** (k - i) for i in range(1, k + 1)]     # EMA weight of gradient i
        age = sum(wi * (k - i) for wi, i in zip(w, range(1, k + 1), strict=True)) / sum(w)
        rho = 2 * age + 1                                # SMA of length rho: mean age (rho-1)/2
        want = np.sqrt(var(rho_inf) / var(rho)) if rho > 4 else 0.0
        assert r[t] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert np.all(r[:4] == 0) and r[4] > 0 and np.all(np.diff(r[4:]) > 0) and r[-1] < 1
    assert optim.radam_rectification(10**5, 0.9)[-1] == pytest.approx(1.0, abs=1e-6)
    for bad in (0.5, 1.0, 0.0, True, "x"):
        with pytest.raises((ValueError, TypeError), match="beta2"):
            optim.radam_rectification(3, bad)
    with pytest.raises((ValueError, TypeError), match="steps"):
        optim.radam_rectification(0)


# -- the schedule, decoupled weight decay and clipping ------------------------
def test_learning_rate_is_the_closed_form_warm_up_then_cosine():
    lr, lo, w, T = 3e-3, 3e-4, 10, 111
    rates = np.array([optim.learning_rate(t, lr, w, schedule="cosine", steps=T, min_lr=lo)
                      for t in range(T + 5)])
    t = np.arange(T + 5)
    u = np.clip((t - w) / (T - 1 - w), 0, 1)
    closed = np.where(t < w, lr * (t + 1) / w, lo + (lr - lo) * (1 + np.cos(np.pi * u)) / 2)
    np.testing.assert_allclose(rates, closed, rtol=1e-15, atol=0)
    assert rates[w - 1] == rates[w] == lr and rates[T - 1] == lo  # the peak, then the floor
    assert np.all(np.diff(rates[w:T]) < 0) and np.all(rates[T:] == lo)
    # half-way through the decay the rate is the mean of peak and floor
    mid = optim.learning_rate(w + (T - 1 - w) // 2, lr, w, schedule="cosine", steps=T,
                                 min_lr=lo)
    assert mid == pytest.approx((lr + lo) / 2, rel=1e-12)
    # "constant" is the rule Adam always had, bit for bit
    for warm in (0, 7):
        for s in range(20):
            old = lr * (min(1.0, (s + 1) / warm) if warm else 1.0)
            assert optim.learning_rate(s, lr, warm) == old


def _adamw_reference(p, grads, *, lr, warmup, steps, min_lr, wd, clip, b1=0.9, b2=0.98):
    """AdamW with bias correction, a cosine schedule and global-norm clipping, written
    out as a plain loop over steps and parameters in float64 (decay for >= 2 axes)."""
    p = {k: np.array(v, dtype=float) for k, v in p.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    for t, g in enumerate(grads):
        if t < warmup:
            rate = lr * (t + 1) / warmup
        else:
            u = min(1.0, (t - warmup) / max(1, steps - 1 - warmup))
            rate = min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * u))
        norm = math.sqrt(sum(float(np.sum(x * x)) for x in g.values()))
        c = clip / norm if clip is not None and norm > clip else 1.0
        for k in p:
            gk = g[k] * c
            if p[k].ndim >= 2:
                p[k] = p[k] - rate * wd * p[k]
            m[k] = b1 * m[k] + (1 - b1) * gk
            v2[k] = b2 * v2[k] + (1 - b2) * gk * gk
            p[k] = p[k] - rate * (m[k] / (1 - b1 ** (t + 1))) / (
                np.sqrt(v2[k] / (1 - b2 ** (t + 1))) + 1e-9)
    return p


@pytest.mark.parametrize("clip", [None, 0.5])
def test_adamw_matches_a_plain_loop(clip):
    rng = np.random.default_rng(1)
    p = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3),
         "E": rng.standard_normal((2, 2, 3))}
    start = {k: v.copy() for k, v in p.items()}
    grads = [{k: rng.standard_normal(v.shape) for k, v in p.items()} for _ in range(12)]
    kw = {"lr": 0.05, "warmup": 3, "steps": 12, "min_lr": 0.005}
    opt = optim.Adam(p, kw["lr"], warmup=3, schedule="cosine", steps=12, min_lr=0.005,
                        weight_decay=0.3, clip=clip)
    norms = []
    for g in grads:
        opt.step(g)
        norms.append(opt.grad_norm)
    ref = _adamw_reference(start, grads, wd=0.3, clip=clip, **kw)
    for k in p:
        np.testing.assert_allclose(p[k], ref[k], rtol=1e-12, atol=1e-14, err_msg=k)
    np.testing.assert_allclose(norms, [math.sqrt(sum(np.sum(x * x) for x in g.values()))
                                       for g in grads], rtol=1e-13)
    if clip is not None:
        assert max(norms) > clip  # the clip acted
    # the decay touches the matrices only: a zero gradient leaves b unchanged, W shrinks
    q = {"W": np.ones((2, 2)), "b": np.ones(2)}
    opt = optim.Adam(q, 0.1, weight_decay=0.5)
    opt.step({"W": np.zeros((2, 2)), "b": np.zeros(2)})
    assert np.all(q["b"] == 1) and np.allclose(q["W"], 1 - 0.1 * 0.5)


def test_train_stack_defaults_are_bit_identical_to_plain_adam():
    """schedule/min_lr/weight_decay/clip at their defaults change no bit: the same
    run with the arguments spelled out, and Adam's old rate expression."""
    from lipattn.layers import LayerNorm, Sequential

    rng = np.random.default_rng(5)
    X = rng.standard_normal((3, 4, 6)).astype(np.float32)

    def run(**kw):
        params = encoder.init_params(1, 6, heads=2, seed=2)
        layers = encoder.as_layers(params, "pre")
        stack = Sequential([layers, LayerNorm(np.ones(6, np.float32), np.zeros(6, np.float32),
                                              1e-5)])
        losses = training.train_stack(stack, lambda t: (X, None),
                                      lambda Y, _: (float(np.sum(Y ** 2)), 2 * Y), steps=6,
                                      lr=1e-2, warmup=2, **kw)
        return losses, {k: v.copy() for k, v in stack.params.items()}

    a, pa = run()
    b, pb = run(schedule="constant", min_lr=0.0, weight_decay=0.0, clip=None)
    assert np.array_equal(a, b) and all(np.array_equal(pa[k], pb[k]) for k in pa)


@pytest.mark.parametrize("kw, name", [
    ({"schedule": "linear"}, "schedule"), ({"schedule": "cosine"}, "steps"),
    ({"min_lr": 0.2}, "min_lr"), ({"min_lr": -1e-3}, "min_lr"),
    ({"weight_decay": -0.1}, "weight_decay"), ({"weight_decay": 11.0}, "weight_decay"),
    ({"clip": 0.0}, "clip"), ({"clip": float("inf")}, "clip"), ({"steps": 0}, "steps")])
def test_adam_rejects_bad_schedule_arguments_by_name(kw, name):
    with pytest.raises(ValueError, match=name):
        optim.Adam({"w": np.zeros((2, 2))}, 0.1, **kw)
    if name != "clip" and name != "weight_decay":
        with pytest.raises(ValueError, match=name):
            optim.learning_rate(0, 0.1, **kw)


def test_learning_rate_rejects_bad_steps_by_name():
    for t, name in ((-1, "t"), (1.5, "t"), (True, "t")):
        with pytest.raises((ValueError, TypeError), match=name):
            optim.learning_rate(t, 0.1)
    with pytest.raises(ValueError, match="lr"):
        optim.learning_rate(0, 0.0)


def test_train_stack_hands_out_its_optimizer():
    from lipattn.layers import LayerNorm

    ln = LayerNorm(np.ones(3), np.zeros(3), 1e-5)
    X = np.random.default_rng(0).standard_normal((2, 4, 3))
    opt, rates = [], []
    training.train_stack(ln, lambda t: (X, None), lambda Y, _: (float((Y ** 2).sum()), 2 * Y),
                         steps=5, lr=1e-2, warmup=2, schedule="cosine", min_lr=1e-3,
                         callback=lambda t, v: rates.append(opt[0].rate), optimizer=opt)
    assert rates == [optim.learning_rate(t, 1e-2, 2, schedule="cosine", steps=5,
                                            min_lr=1e-3) for t in range(5)]
    with pytest.raises(TypeError, match="optimizer"):
        training.train_stack(ln, lambda t: (X, None), lambda Y, _: (0.0, Y), steps=1, lr=1e-2,
                             optimizer=())
