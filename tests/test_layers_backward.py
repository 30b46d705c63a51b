r"""Tests of the layer interface of :mod:`lipattn.layers`: batching, ``backward``, ``params``.

For every layer (LayerNorm, RMSNorm, the MLPs with each activation, the gated
MLP, multi-head attention with biases, grouped-query heads, RoPE, masks and
QK-norms) and for :class:`Sequential` / :class:`Residual` chains of them:

- ``backward``'s parameter gradients against dense central differences of
  :math:`\langle G, f_\theta(X)\rangle` in every entry of every parameter, and
  its ``dX`` against ``vjp`` and against central differences in X (and ``jvp`` as
  its adjoint);
- ``params`` holds the arrays themselves (perturbing them in place changes the
  layer) under the names of ``grads``, with the same shapes;
- batched runs -- parameters (R, 1, ...) against X (R, B, N, d) -- against a
  loop over runs and sequences of one-sequence layers built from each run's
  parameters (forward, jvp, vjp, and gradients summed over the sequences);
- one model's 2-D parameters broadcast over X (B1, B2, N, d): the gradients are
  the sum over the sequences.
"""

from __future__ import annotations

import numpy as np
import pytest

from lipattn.layers import (
    MLP,
    GatedMLP,
    LayerNorm,
    MultiHeadAttention,
    Residual,
    RMSNorm,
    Sequential,
)

D, N = 4, 3


def _rng(seed):
    return np.random.default_rng(seed)


def _mha(p, heads=2, kv=None, rope=None, mask=None, qk=False, biases=True, wo=True):
    norm = (lambda s: LayerNorm(p[f"{s}.g"], p[f"{s}.b"], 1e-5)) if qk else (lambda s: None)
    return MultiHeadAttention(p["W_Q"], p["W_K"], p["W_V"], p["W_O"] if wo else None,
                              n_head=heads, n_kv_head=kv,
                              b_Q=p.get("b_Q"), b_K=p.get("b_K"), b_V=p.get("b_V"),
                              b_O=p.get("b_O"), mask=mask, rope_theta=rope,
                              q_norm=norm("q_norm"), k_norm=norm("k_norm"))


def _mha_params(rng, heads=2, kv=None, qk=False, biases=True, wo=True, dh=2):
    kv = heads if kv is None else kv
    p = {"W_Q": rng.standard_normal((D, heads * dh)), "W_K": rng.standard_normal((D, kv * dh)),
         "W_V": rng.standard_normal((D, kv * dh))}
    if wo:
        p["W_O"] = rng.standard_normal((heads * dh, D)) / 2
    if biases:
        p |= {"b_Q": rng.standard_normal(heads * dh), "b_K": rng.standard_normal(kv * dh),
              "b_V": rng.standard_normal(kv * dh)}
        if wo:
            p["b_O"] = rng.standard_normal(D)
    if qk:
        p |= {"q_norm.g": 1 + rng.standard_normal(dh) / 3, "q_norm.b": rng.standard_normal(dh),
              "k_norm.g": 1 + rng.standard_normal(dh) / 3, "k_norm.b": rng.standard_normal(dh)}
    return p


def _ln_params(rng, pre=""):
    return {pre + "g": 1 + rng.standard_normal(D) / 3, pre + "b": rng.standard_normal(D) / 3}


def _mlp_params(rng, pre=""):
    return {pre + "W_1": rng.standard_normal((D, 6)), pre + "b_1": rng.standard_normal(6),
            pre + "W_2": rng.standard_normal((6, D)) / 2, pre + "b_2": rng.standard_normal(D)}


def _sub(p, pre):
    return {k[len(pre):]: v for k, v in p.items() if k.startswith(pre)}


def _pre_block(p):
    """GPT-2's block: X + A(LN_1 X), then + MLP(LN_2 X)."""
    return Sequential([
        Residual(Sequential([LayerNorm(p["attn.0.g"], p["attn.0.b"], 1e-5),
                             _mha(_sub(p, "attn.1."), mask="causal")])),
        Residual(Sequential([LayerNorm(p["mlp.0.g"], p["mlp.0.b"], 1e-5),
                             MLP(*(p[f"mlp.1.{k}"] for k in ("W_1", "b_1", "W_2", "b_2")),
                                 act="gelu_new")]))], names=["attn", "mlp"])


def _post_block(p):
    """The book's Post-LN block: LN_2(X_1 + F(X_1)), X_1 = LN_1(X + A(X)), QK-norm."""
    return Sequential([Residual(_mha(_sub(p, "0."), qk=True)),
                       LayerNorm(p["1.g"], p["1.b"], 1e-5),
                       Residual(MLP(*(p[f"2.{k}"] for k in ("W_1", "b_1", "W_2", "b_2")),
                                    act="relu")),
                       LayerNorm(p["3.g"], p["3.b"], 1e-5)])


def _llama_block(p):
    return Sequential([
        Residual(Sequential([RMSNorm(p["a.0.g"], 1e-6),
                             _mha(_sub(p, "a.1."), heads=2, kv=1, rope=100.0, mask="causal",
                                  biases=False)], names=["0", "1"])),
        Residual(Sequential([RMSNorm(p["m.0.g"], 1e-6),
                             GatedMLP(p["m.1.W_g"], p["m.1.W_u"], p["m.1.W_d"])]))],
        names=["a", "m"])


def _prefixed(pre, p):
    return {pre + k: v for k, v in p.items()}


def _gated_params(rng, pre=""):
    return {pre + "W_g": rng.standard_normal((D, 5)), pre + "W_u": rng.standard_normal((D, 5)),
            pre + "W_d": rng.standard_normal((5, D)) / 2}


# (name, factory(params) -> layer, params(rng))
CASES = [
    ("layernorm", lambda p: LayerNorm(p["g"], p["b"], 1e-5), _ln_params),
    ("layernorm-plain", lambda p: LayerNorm(None, None, 1e-5), lambda r: {}),
    ("rmsnorm", lambda p: RMSNorm(p["g"], 1e-6), lambda r: {"g": 1 + r.standard_normal(D) / 3}),
    *[(f"mlp-{act}", lambda p, act=act: MLP(p["W_1"], p["b_1"], p["W_2"], p["b_2"], act=act),
       _mlp_params) for act in ("relu", "gelu_new", "silu")],
    ("gated", lambda p: GatedMLP(p["W_g"], p["W_u"], p["W_d"]), _gated_params),
    ("mha-bidirectional", lambda p: _mha(p), lambda r: _mha_params(r)),
    ("mha-causal-gqa-rope", lambda p: _mha(p, heads=4, kv=2, rope=50.0, mask="causal"),
     lambda r: _mha_params(r, heads=4, kv=2)),
    ("mha-boolmask-no-WO", lambda p: _mha(p, mask=np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1]],
                                                           bool), wo=False),
     lambda r: _mha_params(r, wo=False)),
    ("mha-qknorm-rope", lambda p: _mha(p, qk=True, rope=10.0), lambda r: _mha_params(r, qk=True)),
    ("mha-qknorm-gqa", lambda p: _mha(p, heads=2, kv=1, qk=True, biases=False),
     lambda r: _mha_params(r, heads=2, kv=1, qk=True, biases=False)),
    ("residual-mlp", lambda p: Residual(MLP(p["W_1"], p["b_1"], p["W_2"], p["b_2"], act="silu")),
     _mlp_params),
    ("gpt2-block", _pre_block,
     lambda r: _ln_params(r, "attn.0.") | _prefixed("attn.1.", _mha_params(r))
     | _ln_params(r, "mlp.0.") | _mlp_params(r, "mlp.1.")),
    ("post-ln-block", _post_block,
     lambda r: _prefixed("0.", _mha_params(r, qk=True, biases=False)) | _ln_params(r, "1.")
     | _mlp_params(r, "2.") | _ln_params(r, "3.")),
    ("llama-block", _llama_block,
     lambda r: {"a.0.g": 1 + r.standard_normal(D) / 3}
     | _prefixed("a.1.", _mha_params(r, heads=2, kv=1, biases=False))
     | {"m.0.g": 1 + r.standard_normal(D) / 3} | _gated_params(r, "m.1.")),
]
IDS = [c[0] for c in CASES]


def _pairing(layer, X, G):
    return float(np.sum(G * layer.forward(X)[0]))


@pytest.mark.parametrize("name,make,draw", CASES, ids=IDS)
def test_backward_matches_central_differences_in_every_parameter_and_input(name, make, draw):
    rng = _rng(len(name))
    p = draw(rng)
    layer = make(p)
    X = rng.standard_normal((N, D))
    Y, state = layer.forward(X)
    G = rng.standard_normal(Y.shape)
    dX, grads = layer.backward(state, G)
    assert list(grads) == list(layer.params) and set(grads) == set(p)
    np.testing.assert_array_equal(dX, layer.vjp(state, G))
    h = 1e-6
    for k, arr in p.items():
        assert layer.params[k] is arr or np.shares_memory(layer.params[k], arr), k
        assert grads[k].shape == arr.shape, k
        fd = np.zeros(arr.shape)
        for idx in np.ndindex(arr.shape):
            old = arr[idx]
            arr[idx] = old + h                   # in place: the layer holds this array
            up = _pairing(layer, X, G)
            arr[idx] = old - h
            down = _pairing(layer, X, G)
            arr[idx] = old
            fd[idx] = (up - down) / (2 * h)
        np.testing.assert_allclose(grads[k], fd, rtol=1e-6, atol=1e-6 * max(1, np.abs(fd).max()),
                                   err_msg=k)
    fd = np.zeros(X.shape)
    for idx in np.ndindex(X.shape):
        Xp, Xm = X.copy(), X.copy()
        Xp[idx] += h
        Xm[idx] -= h
        fd[idx] = (_pairing(layer, Xp, G) - _pairing(layer, Xm, G)) / (2 * h)
    np.testing.assert_allclose(dX, fd, rtol=1e-6, atol=1e-6 * max(1, np.abs(fd).max()))
    E = rng.standard_normal(X.shape)          # jvp is the adjoint of the checked vjp
    assert np.sum(layer.jvp(state, E) * G) == pytest.approx(np.sum(E * dX), rel=1e-12)


def _extra(k, ndim):
    """Singleton axes after the run axis: one for the batch, one more for the token
    axis of vectors, one more for the head axis of a QK-norm's (..., heads, N, d_h)."""
    return 1 + (ndim == 1) + ("_norm." in k)


def _stack(ps):
    """Run r's parameters at index r of a leading axis, then singleton axes (_extra),
    as lipattn.models.encoder.stack_params does."""
    out = {}
    for k in ps[0]:
        a = np.stack([p[k] for p in ps])
        out[k] = a.reshape(a.shape[:1] + (1,) * _extra(k, a.ndim - 1) + a.shape[1:])
    return out


@pytest.mark.parametrize("name,make,draw", CASES, ids=IDS)
def test_batched_runs_match_a_loop_over_runs_and_sequences(name, make, draw):
    R, B = 3, 2
    rng = _rng(100 + len(name))
    ps = [draw(rng) for _ in range(R)]
    layer = make(_stack(ps))
    X, E = rng.standard_normal((2, R, B, N, D))
    Y, state = layer.forward(X)
    G = rng.standard_normal(Y.shape)
    jv, vj = layer.jvp(state, E), layer.vjp(state, G)
    dX, grads = layer.backward(state, G)
    np.testing.assert_array_equal(dX, vj)
    for r in range(R):
        one = make(ps[r])
        total = {k: 0.0 for k in ps[r]}
        for b in range(B):
            y, st = one.forward(X[r, b])
            np.testing.assert_allclose(Y[r, b], y, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(jv[r, b], one.jvp(st, E[r, b]), rtol=1e-11, atol=1e-11)
            dx, g = one.backward(st, G[r, b])
            np.testing.assert_allclose(dX[r, b], dx, rtol=1e-11, atol=1e-11)
            total = {k: total[k] + g[k] for k in total}
        for k, v in total.items():
            assert grads[k].shape == (R, *(1,) * _extra(k, v.ndim), *v.shape)
            np.testing.assert_allclose(grads[k][r].reshape(v.shape), v, rtol=1e-11,
                                       atol=1e-11, err_msg=k)


@pytest.mark.parametrize("name,make,draw", CASES, ids=IDS)
def test_one_model_broadcast_over_batch_axes_sums_the_gradients(name, make, draw):
    rng = _rng(200 + len(name))
    p = draw(rng)
    layer = make(p)
    X = rng.standard_normal((2, 3, N, D))
    Y, state = layer.forward(X)
    G = rng.standard_normal(Y.shape)
    dX, grads = layer.backward(state, G)
    total = {k: 0.0 for k in p}
    for idx in np.ndindex(X.shape[:2]):
        y, st = layer.forward(X[idx])
        np.testing.assert_allclose(Y[idx], y, rtol=1e-12, atol=1e-12)
        dx, g = layer.backward(st, G[idx])
        np.testing.assert_allclose(dX[idx], dx, rtol=1e-11, atol=1e-11)
        total = {k: total[k] + g[k] for k in total}
    for k, v in total.items():
        assert grads[k].shape == p[k].shape
        np.testing.assert_allclose(grads[k], v, rtol=1e-11, atol=1e-11, err_msg=k)


def test_float32_layers_stay_float32_and_hold_the_arrays_themselves():
    rng = _rng(5)
    p = {k: v.astype(np.float32) for k, v in (_ln_params(rng, "0.")
                                              | _prefixed("1.", _mlp_params(rng))).items()}
    seq = Sequential([LayerNorm(p["0.g"], p["0.b"], 1e-5),
                      MLP(p["1.W_1"], p["1.b_1"], p["1.W_2"], p["1.b_2"], act="relu")])
    assert all(seq.params[k] is v for k, v in p.items())
    X = rng.standard_normal((2, N, D)).astype(np.float32)
    Y, st = seq.forward(X)
    dX, grads = seq.backward(st, np.ones_like(Y))
    assert Y.dtype == dX.dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads.values())


def test_sequential_names_and_errors():
    rng = _rng(6)
    ln = LayerNorm(*_ln_params(rng).values(), 1e-5)
    seq = Sequential([ln, Residual(ln)], names=["a", "b"])
    assert list(seq.params) == ["a.g", "a.b", "b.g", "b.b"]
    with pytest.raises(ValueError, match="names must be 2 distinct names"):
        Sequential([ln, ln], names=["a", "a"])
    with pytest.raises(ValueError, match=r"LayerNorm\.forward's X must be an ndarray of shape "
                                         r"\(\.\.\., N, 4\)"):
        ln.forward(np.zeros(4))
    with pytest.raises(ValueError, match="g and b must both be arrays or both be None"):
        LayerNorm(np.ones(4), None, 1e-5)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., N, 2\)"):
        LayerNorm(None, None, 1e-5).forward(np.ones((3, 1)))
    with pytest.raises(TypeError, match="q_norm must be None or a norm layer"):
        MultiHeadAttention(*(np.eye(4) for _ in range(3)), q_norm="yes")
