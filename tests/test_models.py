"""Tests of :mod:`lipattn.models` and :mod:`lipattn.layers`.

- the models' forward passes against plain, slow, loop-based numpy
  re-implementations of the published formulas written here (token by token,
  head by head; not the library's code);
- every layer's jvp and vjp, and the models' block and stack products, against
  dense central-difference Jacobians, at small sizes with random non-trivial
  LayerNorm / RMSNorm gains and biases;
- exact constants against the SVD of those Jacobians; masks against the
  unmasked computation on allowed sub-blocks; head-permutation invariance; the
  causal first token's row; c * W_V scaling; float32 mode; bad input.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_lipschitz import central_differences as central_jacobian

from lipattn.layers import (
    MLP,
    GatedMLP,
    LayerNorm,
    MultiHeadAttention,
    Residual,
    RMSNorm,
    Sequential,
    layer_lipschitz,
)
from lipattn.models import GPT2, Llama, random_state_dict


# --------------------------------------------------------------------------
# random Hugging Face state dicts
# --------------------------------------------------------------------------
def gpt2_state(L=2, d=8, d_ff=12, vocab=11, n_pos=10, seed=0, w=0.5):
    """Large random weights, norm gains and biases: every term of the derivatives matters."""
    return random_state_dict("gpt2", L, d, 2, d_ff=d_ff, vocab=vocab, n_pos=n_pos, std=w,
                             norm_std=0.3, bias_std=w, seed=seed)


def llama_state(L=2, d=16, n_head=4, n_kv=2, d_ff=20, vocab=11, seed=0, w=0.4):
    return random_state_dict("llama", L, d, n_head, n_kv_head=n_kv, d_ff=d_ff, vocab=vocab,
                             std=w, norm_std=0.3, seed=seed)


def test_random_state_dicts_load_and_follow_hugging_face_init():
    st = random_state_dict("gpt2", 4, 64, 4, seed=1)
    for name, w in st.items():
        if name.endswith("c_proj.weight"):
            assert abs(w.std() / (0.02 / math.sqrt(8)) - 1) < 0.05, name
        elif w.ndim == 1 and name.endswith("weight"):          # LayerNorm gains
            assert np.all(w == 1)
        elif name.endswith("bias"):
            assert np.all(w == 0), name
        else:
            assert abs(w.std() / 0.02 - 1) < 0.1, name
    assert GPT2.from_state_dict(st, n_head=4).n_layer == 4     # every key read
    deep = random_state_dict("gpt2", 1, 64, 4, init_depth=12, seed=1)["h.0.mlp.c_proj.weight"]
    assert abs(deep.std() / (0.02 / math.sqrt(24)) - 1) < 0.05
    ls = random_state_dict("llama", 2, 64, 4, n_kv_head=2, seed=2)
    assert ls["layers.0.mlp.gate_proj.weight"].shape == (192, 64)   # 8 d / 3 -> 192
    assert ls["layers.0.self_attn.k_proj.weight"].shape == (32, 64)
    for name in ("layers.1.self_attn.o_proj.weight", "layers.1.mlp.down_proj.weight"):
        assert abs(ls[name].std() / 0.02 - 1) < 0.1              # no residual rescaling
    assert np.all(ls["norm.weight"] == 1)
    assert Llama.from_state_dict(ls, n_head=4, n_kv_head=2).d_model == 64
    noisy = random_state_dict("gpt2", 1, 64, 4, norm_std=0.3, bias_std=0.1, seed=3)
    assert abs(np.std(noisy["h.0.ln_1.weight"] - 1) / 0.3 - 1) < 0.3
    assert abs(np.std(noisy["h.0.mlp.c_fc.bias"]) / 0.1 - 1) < 0.1
    again = random_state_dict("gpt2", 1, 64, 4, norm_std=0.3, bias_std=0.1, seed=3)
    assert all(np.array_equal(noisy[k], again[k]) for k in noisy)     # seeded


def test_random_state_dict_bad_arguments_name_them():
    for kw, match in ((dict(layout="bert"), "layout"), (dict(n_head=3), "n_head must divide"),
                      (dict(n_layer=0), "n_layer"), (dict(std=0.0), "std"),
                      (dict(norm_std=-1.0), "norm_std"), (dict(n_kv_head=2), "n_kv_head"),
                      (dict(layout="llama", n_kv_head=3), "n_kv_head must divide"),
                      (dict(layout="llama", bias_std=0.1), "bias_std"),
                      (dict(layout="llama", init_depth=4), "init_depth"),
                      (dict(vocab=10**9), "entries")):
        args = dict(layout="gpt2", n_layer=1, d_model=8, n_head=4) | kw
        with pytest.raises(ValueError, match=match):
            random_state_dict(**args)
    with pytest.raises(TypeError, match="seed"):
        random_state_dict("gpt2", 1, 8, 2, seed=1.5)


# --------------------------------------------------------------------------
# independent references: the published formulas, one token and one head at a time
# --------------------------------------------------------------------------
def ref_layernorm(x, g, b, eps):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        mu = sum(x[t]) / len(x[t])
        var = sum((v - mu) ** 2 for v in x[t]) / len(x[t])
        out[t] = [(x[t, k] - mu) / math.sqrt(var + eps) * g[k] + b[k] for k in range(len(g))]
    return out


def ref_rmsnorm(x, g, eps):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        ms = sum(v * v for v in x[t]) / len(x[t])
        out[t] = [x[t, k] / math.sqrt(ms + eps) * g[k] for k in range(len(g))]
    return out


def ref_gelu_new(x):
    return np.vectorize(lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi)
                                                           * (v + 0.044715 * v**3))))(x)


def ref_silu(x):
    return np.vectorize(lambda v: v / (1 + math.exp(-v)))(x)


def ref_causal_heads(q, k, v, n_head, n_kv):
    """q: (N, n_head, dh), k, v: (N, n_kv, dh): causal softmax attention per head."""
    N, _, dh = q.shape
    out = np.zeros((N, n_head, v.shape[2]))
    for h in range(n_head):
        g = h // (n_head // n_kv)        # repeat_kv: heads h*rep .. share kv head h // rep
        for i in range(N):
            s = [float(q[i, h] @ k[j, g]) / math.sqrt(dh) for j in range(i + 1)]
            m = max(s)
            w = [math.exp(x - m) for x in s]
            out[i, h] = sum(w[j] / sum(w) * v[j, g] for j in range(i + 1))
    return out


def ref_gpt2(st, H, n_head, eps=1e-5, final=True):
    d = H.shape[1]
    L = 1 + max(int(k.split(".")[1]) for k in st if k.startswith("h."))
    x = H.copy()
    for i in range(L):
        p = lambda n, i=i: st[f"h.{i}.{n}"]                  # noqa: E731
        a = ref_layernorm(x, p("ln_1.weight"), p("ln_1.bias"), eps)
        qkv = a @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        split = lambda z: z.reshape(len(z), n_head, d // n_head)   # noqa: E731
        heads = ref_causal_heads(split(qkv[:, :d]), split(qkv[:, d:2 * d]),
                                 split(qkv[:, 2 * d:]), n_head, n_head)
        x = x + heads.reshape(len(x), d) @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = ref_layernorm(x, p("ln_2.weight"), p("ln_2.bias"), eps)
        h = ref_gelu_new(m @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    return ref_layernorm(x, st["ln_f.weight"], st["ln_f.bias"], eps) if final else x


def ref_rope(x, theta):
    """x: (N, heads, dh); position t rotates the pairs (i, i + dh/2) by t * theta^(-2i/dh)."""
    N, nh, dh = x.shape
    out = np.zeros_like(x)
    for t in range(N):
        for h in range(nh):
            for i in range(dh // 2):
                ang = t * theta ** (-2 * i / dh)
                c, s = math.cos(ang), math.sin(ang)
                a, b = x[t, h, i], x[t, h, i + dh // 2]
                out[t, h, i] = a * c - b * s
                out[t, h, i + dh // 2] = b * c + a * s
    return out


def ref_llama(st, H, n_head, n_kv, theta=10000.0, eps=1e-6, final=True):
    N, d = H.shape
    dh = d // n_head
    L = 1 + max(int(k.split(".")[1]) for k in st if k.startswith("layers."))
    x = H.copy()
    for i in range(L):
        p = lambda n, i=i: st[f"layers.{i}.{n}"]             # noqa: E731
        a = ref_rmsnorm(x, p("input_layernorm.weight"), eps)
        q = ref_rope((a @ p("self_attn.q_proj.weight").T).reshape(N, n_head, dh), theta)
        k = ref_rope((a @ p("self_attn.k_proj.weight").T).reshape(N, n_kv, dh), theta)
        v = (a @ p("self_attn.v_proj.weight").T).reshape(N, n_kv, dh)
        heads = ref_causal_heads(q, k, v, n_head, n_kv)
        x = x + heads.reshape(N, d) @ p("self_attn.o_proj.weight").T
        m = ref_rmsnorm(x, p("post_attention_layernorm.weight"), eps)
        h = ref_silu(m @ p("mlp.gate_proj.weight").T) * (m @ p("mlp.up_proj.weight").T)
        x = x + h @ p("mlp.down_proj.weight").T
    return ref_rmsnorm(x, st["norm.weight"], eps) if final else x


# --------------------------------------------------------------------------
# dense Jacobians
# --------------------------------------------------------------------------
def product_jacobians(jvp, vjp, in_shape, out_shape):
    n, m = int(np.prod(in_shape)), int(np.prod(out_shape))
    J = np.column_stack([jvp(np.eye(n)[k].reshape(in_shape)).reshape(-1) for k in range(n)])
    JT = np.column_stack([vjp(np.eye(m)[k].reshape(out_shape)).reshape(-1) for k in range(m)])
    return J, JT


def check_layer(layer, X, rtol=1e-6):
    Y, state = layer.forward(X)
    fd = central_jacobian(lambda Z: layer.forward(Z)[0], X)
    J, JT = product_jacobians(lambda E: layer.jvp(state, E), lambda G: layer.vjp(state, G),
                              X.shape, Y.shape)
    scale = max(1.0, np.abs(fd).max())
    np.testing.assert_allclose(J, fd, atol=rtol * scale)
    np.testing.assert_allclose(JT, J.T, atol=1e-12 * scale)
    return J


RNG = np.random.default_rng(123)


def _w(*s, scale=0.6):
    return scale * RNG.standard_normal(s)


# --------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------
def test_norm_layers_against_finite_differences():
    X = 2 * RNG.standard_normal((4, 6)) + 1
    check_layer(LayerNorm(1 + _w(6), _w(6), 1e-5), X)
    check_layer(RMSNorm(1 + _w(6), 1e-6), X)


@pytest.mark.parametrize("act", ["relu", "gelu_new", "silu"])
def test_mlps_against_finite_differences(act):
    X = RNG.standard_normal((3, 5))
    check_layer(MLP(_w(5, 7), _w(7), _w(7, 5), _w(5), act=act), X)
    check_layer(GatedMLP(_w(5, 7), _w(5, 7), _w(7, 5), act=act), X)


@pytest.mark.parametrize("n_head,n_kv,rope,mask", [
    (1, 1, None, None), (2, 2, None, "causal"), (4, 2, 10000.0, "causal"),
    (4, 1, 50.0, "custom"), (2, 1, None, "custom")])
def test_attention_layer_against_finite_differences(n_head, n_kv, rope, mask):
    N, d, dh = 5, 8, 4
    if mask == "custom":
        mask = RNG.uniform(size=(N, N)) < 0.5
        mask[np.arange(N), np.arange(N)] = True
    layer = MultiHeadAttention(_w(d, n_head * dh), _w(d, n_kv * dh), _w(d, n_kv * 3),
                               _w(n_head * 3, d), n_head=n_head, n_kv_head=n_kv,
                               b_Q=_w(n_head * dh), b_K=_w(n_kv * dh), b_V=_w(n_kv * 3),
                               b_O=_w(d), mask=mask, rope_theta=rope)
    X = 1.5 * RNG.standard_normal((N, d))
    J = check_layer(layer, X)
    assert layer_lipschitz(layer, X).value == pytest.approx(np.linalg.norm(J, 2), rel=1e-9)
    # the heads' contributions add up to the output (plus b_O)
    total = sum(layer.head(i).forward(X)[0] for i in range(n_head)) + layer.b_O
    np.testing.assert_allclose(total, layer.forward(X)[0], atol=1e-13)


def test_query_bias_matters():
    """The reported bug: b_Q != 0 changes the constant (only b_K, b_V and b_O drop out)."""
    N, d = 6, 4
    X = RNG.standard_normal((N, d))
    W = [_w(d, d, scale=1.5) for _ in range(4)]
    base = MultiHeadAttention(*W, n_head=2)
    with_q = MultiHeadAttention(*W, n_head=2, b_Q=_w(d, scale=2.0))
    with_kvo = MultiHeadAttention(*W, n_head=2, b_K=_w(d), b_V=_w(d), b_O=_w(d))
    L0, Lq = layer_lipschitz(base, X).value, layer_lipschitz(with_q, X).value
    assert abs(Lq - L0) > 1e-3 * L0
    assert layer_lipschitz(with_kvo, X).value == pytest.approx(L0, rel=1e-9)
    J = check_layer(with_q, X)
    assert Lq == pytest.approx(np.linalg.norm(J, 2), rel=1e-9)


def test_masked_attention_layer_on_allowed_sub_blocks():
    """A block-diagonal mask: each group's output is the unmasked layer on that group."""
    N, d = 6, 8
    g = np.array([0, 1, 0, 1, 1, 0])
    mask = g[:, None] == g[None, :]
    W = dict(W_Q=_w(d, d), W_K=_w(d, d), W_V=_w(d, d), W_O=_w(d, d))
    b = dict(b_Q=_w(d), b_K=_w(d), b_V=_w(d), b_O=_w(d))
    X = RNG.standard_normal((N, d))
    masked = MultiHeadAttention(**W, **b, n_head=2, mask=mask)
    free = MultiHeadAttention(**W, **b, n_head=2)
    Y = masked.forward(X)[0]
    for k in (0, 1):
        idx = np.flatnonzero(g == k)
        np.testing.assert_allclose(Y[idx], free.forward(X[idx])[0], atol=1e-13)
    L = layer_lipschitz(masked, X).value
    assert L == pytest.approx(max(layer_lipschitz(free, X[g == k]).value for k in (0, 1)),
                              rel=1e-9)


def test_compositions():
    X = RNG.standard_normal((3, 4))
    f = Sequential([LayerNorm(1 + _w(4), _w(4), 1e-5), MLP(_w(4, 6), _w(6), _w(6, 4), _w(4))])
    J = check_layer(Residual(f), X)
    np.testing.assert_allclose(J - np.eye(12), check_layer(f, X), atol=1e-6)


# --------------------------------------------------------------------------
# GPT-2
# --------------------------------------------------------------------------
def test_gpt2_forward_matches_the_loop_reference():
    st = gpt2_state(L=3, seed=1)
    model = GPT2.from_state_dict(st, n_head=2)
    assert model.n_layer == 3 and model.d_model == 8
    tokens = np.array([3, 1, 4, 1, 5, 9])
    H = model.embed(tokens)
    np.testing.assert_allclose(H, st["wte.weight"][tokens] + st["wpe.weight"][:6])
    np.testing.assert_allclose(model.forward(H, final_norm=True), ref_gpt2(st, H, 2),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.forward(H), ref_gpt2(st, H, 2, final=False),
                               rtol=1e-12, atol=1e-12)
    # start/stop compose
    mid = model.forward(H, stop=1)
    np.testing.assert_allclose(model.forward(mid, start=1), model.forward(H), atol=1e-13)
    np.testing.assert_array_equal(model.forward(H, start=2, stop=2), H)


def test_gpt2_prefix_and_ignored_keys():
    st = gpt2_state(seed=2)
    full = {"transformer." + k: v for k, v in st.items()}
    full |= {"lm_head.weight": np.ones((11, 8)), "transformer.h.0.attn.bias": np.ones((1, 1, 4, 4)),
             "transformer.h.1.attn.masked_bias": np.array(-1e4)}
    H = np.random.default_rng(0).standard_normal((4, 8))
    np.testing.assert_array_equal(GPT2.from_state_dict(full, n_head=2).forward(H),
                                  GPT2.from_state_dict(st, n_head=2).forward(H))


def _models():
    return {"gpt2": GPT2.from_state_dict(gpt2_state(seed=3), n_head=2),
            "llama": Llama.from_state_dict(llama_state(seed=4), n_head=4, n_kv_head=2)}


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("start,stop,final_norm", [(0, 1, False), (1, 2, False),
                                                   (0, 2, True), (0, 0, True)])
def test_products_and_constants_against_finite_differences(kind, start, stop, final_norm):
    """Block and stack jvp/vjp against central differences of forward; the constant
    against the SVD of the dense Jacobian."""
    model = _models()[kind]
    H = model.embed(np.array([1, 2, 3, 4, 5]))
    kw = dict(start=start, stop=stop, final_norm=final_norm)
    fd = central_jacobian(lambda Z: model.forward(Z, **kw), H)
    J, JT = product_jacobians(lambda E: model.jvp(H, E, **kw), lambda G: model.vjp(H, G, **kw),
                              H.shape, H.shape)
    np.testing.assert_allclose(J, fd, atol=1e-6 * np.abs(fd).max())
    np.testing.assert_allclose(JT, J.T, atol=1e-12 * np.abs(J).max())
    est = model.local_lipschitz_info(H, **kw)
    assert est.value == pytest.approx(np.linalg.norm(J, 2), rel=1e-9)
    assert model.local_lipschitz(H, **kw) == est.value


def test_sublayer_and_head_constants_against_dense_jacobians():
    st = gpt2_state(seed=4)
    model = GPT2.from_state_dict(st, n_head=2)
    H0 = model.embed(np.array([0, 5, 2, 7]))
    X = model.block_input(H0, 1)
    blk = model.blocks[1]
    attn = lambda Z: blk.attn.forward(blk.norm_1.forward(Z)[0])[0]     # noqa: E731
    Ja = central_jacobian(attn, X)
    assert model.sublayer_lipschitz(X, 1) == pytest.approx(np.linalg.norm(Ja, 2), rel=1e-6)
    assert model.sublayer_lipschitz(X, 1, residual=True) == pytest.approx(
        np.linalg.norm(Ja + np.eye(Ja.shape[0]), 2), rel=1e-6)
    X1 = X + attn(X)
    mlp = lambda Z: blk.mlp.forward(blk.norm_2.forward(Z)[0])[0]       # noqa: E731
    Jm = central_jacobian(mlp, X1)
    assert model.sublayer_lipschitz(X, 1, branch="mlp") == pytest.approx(
        np.linalg.norm(Jm, 2), rel=1e-6)
    assert model.sublayer_lipschitz(X, 1, branch="mlp", residual=True) == pytest.approx(
        np.linalg.norm(Jm + np.eye(Jm.shape[0]), 2), rel=1e-6)
    # head i: softmax(q_i k_i^T / sqrt(dh)) v_i W_O[rows of head i], from LN_1's output
    d, dh = 8, 4
    W, b = st["h.1.attn.c_attn.weight"], st["h.1.attn.c_attn.bias"]
    Wo = st["h.1.attn.c_proj.weight"]
    heads = model.head_lipschitz(X, 1, include_norm=False)
    A = blk.norm_1.forward(X)[0]
    for i in range(2):
        def head(Z, i=i):
            q, k, v = (Z @ W[:, s:s + dh] + b[s:s + dh]
                       for s in (i * dh, d + i * dh, 2 * d + i * dh))
            o = ref_causal_heads(q[:, None], k[:, None], v[:, None], 1, 1)[:, 0]
            return o @ Wo[i * dh:(i + 1) * dh]
        assert heads[i] == pytest.approx(np.linalg.norm(central_jacobian(head, A), 2), rel=1e-6)
    with_norm = model.head_lipschitz(X, 1)
    assert with_norm.shape == (2,) and np.all(with_norm > 0)


def _permute_gpt2_heads(st, layer, perm, d, n_head):
    st = dict(st)
    dh = d // n_head
    cols = np.concatenate([np.arange(h * dh, (h + 1) * dh) for h in perm])
    p = f"h.{layer}.attn."
    W, b = st[p + "c_attn.weight"], st[p + "c_attn.bias"]
    idx = np.concatenate([cols, d + cols, 2 * d + cols])
    st[p + "c_attn.weight"], st[p + "c_attn.bias"] = W[:, idx], b[idx]
    st[p + "c_proj.weight"] = st[p + "c_proj.weight"][cols]
    return st


def test_head_permutation_invariance_gpt2():
    d, n_head = 12, 3
    st = gpt2_state(d=d, seed=5)
    perm = [2, 0, 1]
    a = GPT2.from_state_dict(st, n_head=n_head)
    b = GPT2.from_state_dict(_permute_gpt2_heads(st, 0, perm, d, n_head), n_head=n_head)
    H = a.embed(np.array([1, 2, 3, 4, 5, 6]))
    np.testing.assert_allclose(b.forward(H), a.forward(H), atol=1e-13)
    assert b.local_lipschitz(H) == pytest.approx(a.local_lipschitz(H), rel=1e-9)
    np.testing.assert_allclose(b.head_lipschitz(H, 0), a.head_lipschitz(H, 0)[perm], rtol=1e-9)


def test_causal_first_token_row():
    """Output token 0 of a causal stack depends on input token 0 only, and is the
    stack applied to the one-token sequence; later inputs never reach earlier outputs."""
    model = GPT2.from_state_dict(gpt2_state(seed=6), n_head=2)
    H = model.embed(np.array([4, 3, 2, 1, 0]))
    N, d = H.shape
    J, _ = product_jacobians(lambda E: model.jvp(H, E, final_norm=True),
                             lambda G: model.vjp(H, G, final_norm=True), H.shape, H.shape)
    J = J.reshape(N, d, N, d)
    for i in range(N):
        assert np.all(J[i, :, i + 1:, :] == 0.0)
    one = central_jacobian(lambda Z: model.forward(Z, final_norm=True), H[:1])
    np.testing.assert_allclose(J[0, :, 0, :], one, atol=1e-6)
    assert model.local_lipschitz(H[:1], final_norm=True) == pytest.approx(
        np.linalg.norm(one, 2), rel=1e-6)


@pytest.mark.parametrize("c", [1e-100, 1e-3, 10.0, 1e100])
def test_constants_of_c_times_w_v(c):
    """Scaling W_V and b_V by c scales the attention branch and each head by c."""
    d = 8
    st = gpt2_state(seed=7)
    sc = dict(st)
    for i in range(2):
        W, b = st[f"h.{i}.attn.c_attn.weight"].copy(), st[f"h.{i}.attn.c_attn.bias"].copy()
        W[:, 2 * d:] *= c
        b[2 * d:] *= c
        sc[f"h.{i}.attn.c_attn.weight"], sc[f"h.{i}.attn.c_attn.bias"] = W, b
    a, s = GPT2.from_state_dict(st, n_head=2), GPT2.from_state_dict(sc, n_head=2)
    H = a.embed(np.array([1, 2, 3, 4]))
    assert s.sublayer_lipschitz(H, 0) / c == pytest.approx(a.sublayer_lipschitz(H, 0), rel=1e-9)
    np.testing.assert_allclose(s.head_lipschitz(H, 0) / c, a.head_lipschitz(H, 0), rtol=1e-9)


def test_float32_mode():
    st = gpt2_state(seed=8)
    m64 = GPT2.from_state_dict(st, n_head=2)
    m32 = GPT2.from_state_dict(st, n_head=2, dtype=np.float32)
    H = m64.embed(np.array([1, 2, 3, 4, 5]))
    Y = m32.forward(H, final_norm=True)
    assert Y.dtype == np.float32
    np.testing.assert_allclose(Y, m64.forward(H, final_norm=True), rtol=1e-4, atol=1e-5)
    est = m32.local_lipschitz_info(H, tol=1e-10)      # raised to 1e-5 in float32
    assert est.value == pytest.approx(m64.local_lipschitz(H), rel=1e-4)
    assert 0 < est.residual <= 1e-5


# --------------------------------------------------------------------------
# Llama
# --------------------------------------------------------------------------
@pytest.mark.parametrize("n_head,n_kv", [(4, 2), (4, 4), (4, 1)])
def test_llama_forward_matches_the_loop_reference(n_head, n_kv):
    st = llama_state(n_head=n_head, n_kv=n_kv, seed=n_kv)
    model = Llama.from_state_dict(st, n_head=n_head, n_kv_head=n_kv, rope_theta=100.0)
    tokens = np.array([3, 1, 4, 1, 5, 9, 2])
    H = model.embed(tokens)
    np.testing.assert_array_equal(H, st["embed_tokens.weight"][tokens])
    # Hugging Face (and so the library) takes RoPE's angles in float32: about 1e-7 apart
    ref = ref_llama(st, H, n_head, n_kv, theta=100.0)
    np.testing.assert_allclose(model.forward(H, final_norm=True), ref, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(model.forward(H), ref_llama(st, H, n_head, n_kv, 100.0,
                                                           final=False), rtol=2e-6, atol=2e-6)


def test_llama_prefix_ignored_keys_and_attention_biases():
    st = llama_state(seed=3)
    full = {"model." + k: v for k, v in st.items()} | {"lm_head.weight": np.ones((11, 16))}
    full["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(2)
    H = np.random.default_rng(1).standard_normal((4, 16))
    kw = dict(n_head=4, n_kv_head=2)
    np.testing.assert_array_equal(Llama.from_state_dict(full, **kw).forward(H),
                                  Llama.from_state_dict(st, **kw).forward(H))
    biased = dict(st, **{"layers.0.self_attn.q_proj.bias": np.ones(16)})
    assert not np.allclose(Llama.from_state_dict(biased, **kw).forward(H),
                           Llama.from_state_dict(st, **kw).forward(H))


def test_head_permutation_invariance_llama_gqa():
    """Permuting the key/value groups (with their query heads) changes nothing."""
    n_head, n_kv, d = 4, 2, 16
    st = llama_state(n_head=n_head, n_kv=n_kv, seed=9)
    dh = d // n_head
    kv_perm, q_perm = [1, 0], [2, 3, 0, 1]
    rows = lambda perm: np.concatenate([np.arange(h * dh, (h + 1) * dh) for h in perm])  # noqa: E731
    ps = dict(st)
    a = "layers.1.self_attn."
    ps[a + "q_proj.weight"] = st[a + "q_proj.weight"][rows(q_perm)]
    ps[a + "k_proj.weight"] = st[a + "k_proj.weight"][rows(kv_perm)]
    ps[a + "v_proj.weight"] = st[a + "v_proj.weight"][rows(kv_perm)]
    ps[a + "o_proj.weight"] = st[a + "o_proj.weight"][:, rows(q_perm)]
    kw = dict(n_head=n_head, n_kv_head=n_kv)
    m, p = Llama.from_state_dict(st, **kw), Llama.from_state_dict(ps, **kw)
    H = m.embed(np.array([1, 2, 3, 4, 5, 6]))
    np.testing.assert_allclose(p.forward(H), m.forward(H), atol=1e-13)
    assert p.local_lipschitz(H) == pytest.approx(m.local_lipschitz(H), rel=1e-9)
    X = m.block_input(H, 1)
    np.testing.assert_allclose(p.head_lipschitz(X, 1), m.head_lipschitz(X, 1)[q_perm], rtol=1e-9)


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------
def test_float32_state_dicts_compute_in_float64_by_default():
    """Exported float32 weights are cast up exactly: the same model as their float64 copy."""
    for cls, st, kw in ((GPT2, gpt2_state(seed=9), dict(n_head=2)),
                        (Llama, llama_state(seed=9), dict(n_head=4, n_kv_head=2))):
        st32 = {k: v.astype(np.float32) for k, v in st.items()}
        a = cls.from_state_dict(st32, **kw)
        b = cls.from_state_dict({k: v.astype(np.float64) for k, v in st32.items()}, **kw)
        assert all(layer.attn.W_Q.dtype == np.float64 for layer in a.blocks)
        H = a.embed(np.array([1, 2, 3, 4]))
        assert H.dtype == np.float64
        Y = a.forward(H, final_norm=True)
        assert Y.dtype == np.float64
        np.testing.assert_array_equal(Y, b.forward(H, final_norm=True))
        assert a.local_lipschitz(H) == b.local_lipschitz(H)
        c = cls.from_state_dict(st32, **kw, dtype=np.float32)
        assert c.forward(H.astype(np.float32)).dtype == np.float32


def test_bad_state_dicts():
    st = gpt2_state()
    for key in ("h.1.attn.c_attn.bias", "ln_f.weight", "wpe.weight", "wte.weight"):
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            GPT2.from_state_dict({k: v for k, v in st.items() if k != key}, n_head=2)
    with pytest.raises(ValueError, match=r"h\.0\.attn\.c_proj\.weight.*shape \(8, 8\)"):
        GPT2.from_state_dict(st | {"h.0.attn.c_proj.weight": np.ones((8, 7))}, n_head=2)
    with pytest.raises(ValueError, match="h.0.ln_1.bias"):
        GPT2.from_state_dict(st | {"h.0.ln_1.bias": np.full(8, np.nan)}, n_head=2)
    with pytest.raises(ValueError, match="n_head must divide"):
        GPT2.from_state_dict(st, n_head=3)
    with pytest.raises(ValueError, match="does not use.*h.0.attn.q_proj"):
        GPT2.from_state_dict(st | {"h.0.attn.q_proj.weight": np.ones(3)}, n_head=2)
    with pytest.raises(TypeError, match="state"):
        GPT2.from_state_dict([1, 2], n_head=2)
    with pytest.raises(ValueError, match="eps"):
        GPT2.from_state_dict(st, n_head=2, eps=0.0)
    with pytest.raises(ValueError, match="dtype"):
        GPT2.from_state_dict(st, n_head=2, dtype=np.int64)
    ls = llama_state()
    with pytest.raises(ValueError, match="n_kv_head must divide"):
        Llama.from_state_dict(ls, n_head=4, n_kv_head=3)
    with pytest.raises(ValueError, match="n_head must divide"):
        Llama.from_state_dict(ls, n_head=5, n_kv_head=1)
    with pytest.raises(ValueError, match="layers.1.mlp.up_proj.weight"):
        Llama.from_state_dict({k: v for k, v in ls.items() if "1.mlp.up" not in k},
                              n_head=4, n_kv_head=2)
    with pytest.raises(ValueError, match=r"k_proj\.weight.*shape \(8, 16\)"):
        Llama.from_state_dict(ls, n_head=4, n_kv_head=4)   # k_proj is (8, 16) for 2 kv heads
    with pytest.raises(ValueError, match="rope_theta"):
        Llama.from_state_dict(ls, n_head=4, n_kv_head=2, rope_theta=-1.0)


def test_bad_hidden_states_and_ranges():
    model = GPT2.from_state_dict(gpt2_state(), n_head=2)
    H = np.zeros((3, 8))
    for bad in (np.zeros((3, 7)), np.zeros(8), np.zeros((0, 8)), np.full((3, 8), np.inf)):
        with pytest.raises(ValueError, match="H"):
            model.forward(bad)
        with pytest.raises(ValueError, match="H"):
            model.local_lipschitz(bad)
    with pytest.raises(TypeError, match="H"):
        model.forward("H")
    for kw, match in ((dict(start=3), "start"), (dict(start=-1), "start"),
                      (dict(start=2, stop=1), "stop"), (dict(stop=3), "stop")):
        with pytest.raises(ValueError, match=match):
            model.forward(H, **kw)
        with pytest.raises(ValueError, match=match):
            model.local_lipschitz(H, **kw)
    with pytest.raises(TypeError, match="final_norm"):
        model.forward(H, final_norm="False")
    with pytest.raises(TypeError, match="start"):
        model.forward(H, start=1.0)
    with pytest.raises(ValueError, match="tol"):
        model.local_lipschitz(H, tol=1e300)
    with pytest.raises(ValueError, match="layer"):
        model.sublayer_lipschitz(H, 2)
    with pytest.raises(ValueError, match="branch"):
        model.sublayer_lipschitz(H, 0, branch="ffn")
    with pytest.raises(ValueError, match="E"):
        model.jvp(H, np.zeros((2, 8)))
    with pytest.raises(ValueError, match="tokens"):
        model.embed(np.array([0, 11]))
    with pytest.raises(ValueError, match="n_positions"):
        model.embed(np.zeros(11, dtype=int))
    with pytest.raises(TypeError, match="tokens"):
        model.embed(np.array([0.5]))



@pytest.mark.parametrize("c", [1e-150, 1e150, 1e300])
def test_extreme_hidden_states_stay_finite_without_warnings(c):
    """The norms divide every row by its largest entry first: LN(c x) and RMS(c x) are
    finite for any finite c x, so are the blocks (x + branch) and their constants."""
    H = np.random.default_rng(2).standard_normal((4, 8))
    g = GPT2.from_state_dict(gpt2_state(), n_head=2)
    ln_only = g.forward(c * H, start=2, final_norm=True)
    assert np.all(np.isfinite(g.forward(c * H, final_norm=True)))
    if c >= 1e150:   # eps is negligible: LN(c x) = g (x - mean)/std + b up to rounding
        no_eps = (H - H.mean(1, keepdims=True)) / H.std(1, keepdims=True)
        np.testing.assert_allclose(ln_only, g.final.g * no_eps + g.final.b, rtol=1e-12,
                                   atol=1e-12)
    l_ = Llama.from_state_dict(llama_state(d=8, n_head=2, n_kv=1), n_head=2, n_kv_head=1)
    assert np.all(np.isfinite(l_.forward(c * H, final_norm=True)))
    for m in (g, l_):
        assert np.isfinite(m.local_lipschitz(c * H, stop=1))


# --------------------------------------------------------------------------
# the README's "Use it on your own model" runs as written
# --------------------------------------------------------------------------
def _readme_blocks():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split("## Use it on your own model", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    return [b for b in blocks if "transformers" not in b]     # the PyTorch export step


def test_readme_example_runs_on_a_saved_checkpoint_and_state_dicts(tmp_path, monkeypatch, capsys):
    """The README's numpy blocks, run as written: ``load`` on a GPT-2 checkpoint directory
    (config.json and a bf16 model.safetensors, written as save_pretrained does, at
    "path/to/gpt2"), then ``from_state_dict`` on random GPT-2- and Llama-shaped .npz state
    dicts with the README's head counts, large enough vocabularies, and the prefixes and
    extra keys of the *LMHead / *ForCausalLM classes."""
    from test_models_load import config, write_safetensors

    g = gpt2_state(L=2, d=24, vocab=21832, n_pos=16, seed=11)
    ckpt = tmp_path / "path" / "to" / "gpt2"
    ckpt.mkdir(parents=True)
    cfg = config("gpt2", n_embd=24, n_head=12, n_inner=12, vocab_size=21832, n_positions=16)
    (ckpt / "config.json").write_text(json.dumps(cfg))
    write_safetensors(ckpt / "model.safetensors", {"transformer." + k: v for k, v in g.items()},
                      "BF16")
    g = {"transformer." + k: v for k, v in g.items()} | {"lm_head.weight": g["wte.weight"]}
    np.savez(tmp_path / "gpt2.npz", **g)
    ls = llama_state(L=2, d=64, n_head=32, n_kv=8, d_ff=40, vocab=17355, seed=12)
    np.savez(tmp_path / "llama.npz", **{"model." + k: v for k, v in ls.items()})
    monkeypatch.chdir(tmp_path)
    blocks = _readme_blocks()
    assert len(blocks) == 3
    env: dict = {}
    for b in blocks:
        exec(compile(b, "README.md", "exec"), env)   # noqa: S102
    model, stream = env["model"], env["stream"]
    assert model.model_type == "gpt2" and model.n_layer == 2 and model.d_model == 24
    assert env["H"].shape == (4, 24)
    np.testing.assert_allclose(stream[2], model.forward(stream[0]))
    # the stack's constant (no final norm) is at most the product of the block constants
    assert env["stack"] <= np.prod(env["blocks"]) * (1 + 1e-9)
    assert env["heads"].shape == (12,) and env["attn"] > 0 and env["mlp"] >= 1 - 1e-9
    out = capsys.readouterr().out
    assert "stack" in out and "<= product of the block constants" in out
    assert env["llama"].n_kv_head == 8 and env["gpt2"].n_layer == 2
    # the padding block: the masked constant is the constant of the real tokens' prefix
    # (the padded key is masked, and the padded query's row sees only real keys)
    info = env["info"]
    assert info.input_direction.shape == (4, 24)
    np.testing.assert_allclose(np.linalg.norm(info.input_direction), 1.0, rtol=1e-12)
    assert info.value >= model.local_lipschitz(env["H"][:3]) * (1 - 1e-8)


def test_bad_layer_arguments_name_the_argument():
    d = 4
    W = np.ones((d, d))
    cases = [
        (lambda: MultiHeadAttention(W, W, W, W, n_head=3), ValueError, "W_Q"),
        (lambda: MultiHeadAttention(W, W, W, W, n_head=2, n_kv_head=3), ValueError, "n_kv_head"),
        (lambda: MultiHeadAttention(W, np.ones((d, 3)), W, W, n_head=2), ValueError, "W_K"),
        (lambda: MultiHeadAttention(W, W, W, np.ones((3, d)), n_head=2), ValueError, "W_O"),
        (lambda: MultiHeadAttention(W, W, W, W, b_Q=np.ones(3)), ValueError, "b_Q"),
        (lambda: MultiHeadAttention(W, W, W, None, b_O=np.ones(4)), ValueError, "b_O"),
        (lambda: MultiHeadAttention(W, W, W, W, mask="future"), ValueError, "mask"),
        (lambda: MultiHeadAttention(W, W, W, W, mask=np.ones((3, 3))), TypeError, "mask"),
        (lambda: MultiHeadAttention(np.ones((d, 3)), np.ones((d, 3)), W, rope_theta=1e4),
         ValueError, "even"),
        (lambda: MultiHeadAttention(W, W, W, W, n_head=0), ValueError, "n_head"),
        (lambda: MultiHeadAttention(W * np.nan, W, W, W), ValueError, "W_Q"),
        (lambda: LayerNorm(np.ones(d), np.ones(3), 1e-5), ValueError, "b"),
        (lambda: LayerNorm(np.ones(d), np.ones(d), 0.0), ValueError, "eps"),
        (lambda: RMSNorm("g", 1e-5), TypeError, "g"),
        (lambda: MLP(W, np.ones(d), W, np.ones(d), act="tanh"), ValueError, "act"),
        (lambda: GatedMLP(W, np.ones((d, 3)), W), ValueError, "W_u"),
        (lambda: layer_lipschitz(object(), W), TypeError, "layer"),
        (lambda: layer_lipschitz(RMSNorm(np.ones(d), 1e-6), W[:, :3]), ValueError, "X"),
        (lambda: MultiHeadAttention(W, W, W, W, mask=np.tri(3, dtype=bool)).forward(W),
         ValueError, "mask"),
    ]
    for make, err, match in cases:
        with pytest.raises(err, match=match):
            make()
