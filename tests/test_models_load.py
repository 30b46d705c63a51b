"""Tests of :func:`lipattn.models.load` (``models.families``, ``checkpoint``, ``blocks``).

The project has no torch: every checkpoint here is written by this file, in
Hugging Face's layout (``config.json`` as transformers 5 -- or 4 -- writes it
for the family, safetensors files by the small writer below, float32, float16
or bfloat16, one file or shards with an index). References:

- a loop-based re-implementation of each family's forward pass from the
  published formulas (Hugging Face's ``modeling_*.py`` conventions: norms, the
  (1 + w) gain, RoPE's ``rotate_half`` and llama3 frequencies, the logit scale
  and soft-cap, QK-norm, post-norms, fused projections), token by token and
  head by head, written here and sharing no code with the library;
- dense central-difference Jacobians of that reference for the constants;
- the bits of bfloat16 numbers built by hand for the exact conversion;
- every refusal by its message.
"""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest
from test_lipschitz import central_differences

from lipattn.models import load
from lipattn.models.checkpoint import Checkpoint, bfloat16_bits_to_float32
from lipattn.models.families import FAMILIES

# --------------------------------------------------------------------------
# writing checkpoints
# --------------------------------------------------------------------------
_CODES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) and return their uint16 bits."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def stored(x: np.ndarray, code: str) -> np.ndarray:
    """The float64 values that ``x`` has once stored as ``code`` (what a reader must return)."""
    if code == "BF16":
        bits = to_bf16_bits(x).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return np.asarray(x).astype(_CODES[code]).astype(np.float64)


def write_safetensors(path, tensors: dict, code: str) -> None:
    """A safetensors file: u64 header length, JSON header, raw little-endian data."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, x in tensors.items():
        raw = (to_bf16_bits(x) if code == "BF16" else np.asarray(x).astype(_CODES[code]))
        raw = raw.astype(raw.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(np.shape(x)),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def save(tmp_path, config: dict, tensors: dict, code: str = "F32", shards: int = 1,
         prefix: str = "model."):
    """A save_pretrained-like directory; returns (path, the tensors as stored, float64)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config, indent=2))
    named = {prefix + k: v for k, v in tensors.items()}
    if shards == 1:
        write_safetensors(tmp_path / "model.safetensors", named, code)
    else:
        names = list(named)
        groups = [names[i::shards] for i in range(shards)]
        wmap = {}
        for j, g in enumerate(groups):
            fn = f"model-{j + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(tmp_path / fn, {k: named[k] for k in g}, code)
            wmap.update({k: fn for k in g})
        (tmp_path / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": wmap}))
    return tmp_path, {k: stored(v, code) for k, v in tensors.items()}


# --------------------------------------------------------------------------
# configs as transformers writes them, and random weights
# --------------------------------------------------------------------------
D, H_, KV, F, V, L, NTOK = 16, 4, 2, 24, 20, 2, 5
_TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=0.02,
               use_cache=True, tie_word_embeddings=False, attention_dropout=0.0,
               max_position_embeddings=64, dtype="float32", transformers_version="5.24.0")
_ROPE = {"rope_theta": 10000.0, "rope_type": "default"}
_SIZES = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
              num_attention_heads=H_, num_key_value_heads=KV, rms_norm_eps=1e-6)


def config(family: str, **over) -> dict:
    """A config.json of ``family`` with the keys transformers 5.24 writes (tiny sizes)."""
    if family == "gpt2":
        c = dict(vocab_size=V, n_positions=16, n_embd=D, n_layer=L, n_head=H_, n_inner=None,
                 activation_function="gelu_new", resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                 layer_norm_epsilon=1e-5, initializer_range=0.02, summary_type="cls_index",
                 summary_use_proj=True, summary_activation=None, summary_proj_to_labels=True,
                 summary_first_dropout=0.1, scale_attn_weights=True, use_cache=True,
                 bos_token_id=50256, eos_token_id=50256, pad_token_id=None,
                 scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False,
                 add_cross_attention=False, tie_word_embeddings=True,
                 architectures=["GPT2LMHeadModel"], dtype="float32",
                 transformers_version="5.24.0")
    else:
        c = dict(_TOKENS, **_SIZES, hidden_act="silu", rope_parameters=dict(_ROPE))
        c["architectures"] = [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                               "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                               "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
                               "phi3": "Phi3ForCausalLM"}[family]]
        if family == "llama":
            c.update(attention_bias=False, mlp_bias=False, head_dim=D // H_, pretraining_tp=1)
        elif family == "mistral":
            c.update(head_dim=D // H_, sliding_window=64)
        elif family in ("qwen2", "qwen3"):
            c.update(use_sliding_window=False, sliding_window=None, max_window_layers=28,
                     layer_types=["full_attention"] * L)
            if family == "qwen3":
                c.update(head_dim=8, attention_bias=False)
        elif family == "gemma":
            c.update(head_dim=8, hidden_act="gelu_pytorch_tanh", attention_bias=False,
                     use_bidirectional_attention=None, num_key_value_heads=1,
                     tie_word_embeddings=True, pad_token_id=0)
        elif family == "gemma2":
            del c["hidden_act"]
            c.update(head_dim=8, hidden_activation="gelu_pytorch_tanh", attention_bias=False,
                     query_pre_attn_scalar=12, sliding_window=64,
                     layer_types=["sliding_attention", "full_attention"],
                     final_logit_softcapping=30.0, attn_logit_softcapping=3.0,
                     use_bidirectional_attention=None, tie_word_embeddings=True)
        elif family == "phi3":
            c.update(resid_pdrop=0.0, embd_pdrop=0.0, original_max_position_embeddings=64,
                     rms_norm_eps=1e-5, sliding_window=None,
                     rope_parameters=dict(_ROPE, partial_rotary_factor=1.0))
    c["model_type"] = family
    c.update(over)
    return c


def weights(cfg: dict, seed: int = 0, w: float = 0.4) -> dict:
    """Random tensors with Hugging Face's names (no prefix) and nn.Linear / Conv1D layouts."""
    rng = np.random.default_rng(seed)
    r = lambda *s: (w * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    fam = cfg["model_type"]
    gain = ((lambda: (0.3 * rng.standard_normal(D)).astype(np.float32))
            if fam.startswith("gemma") else
            (lambda: (1 + 0.3 * rng.standard_normal(D)).astype(np.float32)))
    t = {}
    if fam == "gpt2":
        t["wte.weight"], t["wpe.weight"] = r(V, D), r(16, D)
        for i in range(L):
            p = f"h.{i}."
            for k in ("ln_1", "ln_2"):
                t[p + k + ".weight"], t[p + k + ".bias"] = gain(), r(D)
            t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"] = r(D, 3 * D), r(3 * D)
            t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = r(D, D), r(D)
            t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = r(D, 4 * D), r(4 * D)
            t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = r(4 * D, D), r(D)
        t["ln_f.weight"], t["ln_f.bias"] = gain(), r(D)
        return t
    dh = cfg.get("head_dim") or D // H_
    kv = cfg["num_key_value_heads"]
    dq, dkv = H_ * dh, kv * dh
    t["embed_tokens.weight"] = r(V, D)
    bias = cfg.get("attention_bias", False)
    for i in range(L):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        names = ["input_layernorm", "post_attention_layernorm"]
        if fam == "gemma2":
            names += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        for k in names:
            t[p + k + ".weight"] = gain()
        if fam == "phi3":
            t[a + "qkv_proj.weight"] = r(dq + 2 * dkv, D)
            t[p + "mlp.gate_up_proj.weight"] = r(2 * F, D)
        else:
            t[a + "q_proj.weight"], t[a + "k_proj.weight"] = r(dq, D), r(dkv, D)
            t[a + "v_proj.weight"] = r(dkv, D)
            t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"] = r(F, D), r(F, D)
        if fam == "qwen2" or bias:
            t[a + "q_proj.bias"], t[a + "k_proj.bias"], t[a + "v_proj.bias"] = r(dq), r(dkv), r(dkv)
        if bias:
            t[a + "o_proj.bias"] = r(D)
        t[a + "o_proj.weight"] = r(D, dq)
        if fam == "qwen3":
            t[a + "q_norm.weight"] = (1 + 0.3 * rng.standard_normal(dh)).astype(np.float32)
            t[a + "k_norm.weight"] = (1 + 0.3 * rng.standard_normal(dh)).astype(np.float32)
        t[p + "mlp.down_proj.weight"] = r(D, F)
    t["norm.weight"] = gain()
    if not cfg.get("tie_word_embeddings", False):
        t["lm_head.weight"] = r(V, D)
    return t


# --------------------------------------------------------------------------
# the reference: the published formulas, one token and one head at a time
# --------------------------------------------------------------------------
def ref_act(name, x):
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "gelu":
        return 0.5 * x * math.erfc(-x / math.sqrt(2))
    if name == "relu":
        return max(x, 0.0)
    return x / (1 + math.exp(-x))                                  # silu


def ref_layernorm(x, g, b, eps):
    mu = sum(x) / len(x)
    var = sum((v - mu) ** 2 for v in x) / len(x)
    return np.array([g[i] * (x[i] - mu) / math.sqrt(var + eps) + b[i] for i in range(len(x))])


def ref_rmsnorm(x, g, eps, offset):
    ms = sum(v * v for v in x) / len(x)
    return np.array([(offset + g[i]) * x[i] / math.sqrt(ms + eps) for i in range(len(x))])


def ref_inv_freq(dh, theta, scaling):
    """HF's float32 inv_freq (``_compute_default_rope_parameters`` / ``_compute_llama3_...``)."""
    f32 = np.float32
    out = []
    for i in range(0, dh, 2):
        # torch's float32 pow is correctly rounded: the double power rounded once
        inv = f32(1.0) / f32(float(f32(theta)) ** float(f32(i) / f32(dh)))
        if scaling is not None:
            fac, lo, hi = f32(scaling["factor"]), scaling["low_freq_factor"], \
                scaling["high_freq_factor"]
            old = scaling["original_max_position_embeddings"]
            wl = f32(2 * math.pi) / inv
            if wl > old / lo:
                inv = inv / fac
            elif not wl < old / hi:                                 # medium: interpolate
                a = (f32(old) / wl - f32(lo)) / f32(hi - lo)
                inv = (1 - a) * inv / fac + a * inv
        out.append(f32(inv))
    return out


def ref_rope(x, t, inv):
    """rotate_half RoPE of one head vector at position t."""
    h = len(x) // 2
    y = np.empty(len(x))
    for i in range(h):
        ang = float(np.float32(t) * inv[i])
        c, s = math.cos(ang), math.sin(ang)
        y[i] = x[i] * c - x[i + h] * s
        y[i + h] = x[i + h] * c + x[i] * s
    return y


def ref_forward(cfg, T, X, *, stop=None, final=False):
    """Blocks 0..stop-1 (then the final norm) of the family at hidden states X, by loops."""
    fam, N = cfg["model_type"], X.shape[0]
    stop = L if stop is None else stop
    X = np.array(X, dtype=np.float64)
    if fam == "gpt2":
        eps, act, nh = cfg["layer_norm_epsilon"], cfg["activation_function"], H_
        dh = D // nh
        for li in range(stop):
            p = f"h.{li}."
            Y = np.array([ref_layernorm(x, T[p + "ln_1.weight"], T[p + "ln_1.bias"], eps)
                          for x in X])
            qkv = Y @ T[p + "attn.c_attn.weight"] + T[p + "attn.c_attn.bias"]
            Oh = np.zeros((N, D))
            for hd in range(nh):
                cols = slice(hd * dh, (hd + 1) * dh)
                q, k, v = qkv[:, :D][:, cols], qkv[:, D:2 * D][:, cols], qkv[:, 2 * D:][:, cols]
                scale = 1 / math.sqrt(dh) if cfg.get("scale_attn_weights", True) else 1.0
                for t in range(N):
                    s = [scale * sum(q[t, j] * k[u, j] for j in range(dh)) for u in range(t + 1)]
                    m = max(s)
                    e = [math.exp(v_ - m) for v_ in s]
                    Oh[t, cols] = sum(e[u] / sum(e) * v[u] for u in range(t + 1))
            X = X + Oh @ T[p + "attn.c_proj.weight"] + T[p + "attn.c_proj.bias"]
            Y = np.array([ref_layernorm(x, T[p + "ln_2.weight"], T[p + "ln_2.bias"], eps)
                          for x in X])
            Hh = Y @ T[p + "mlp.c_fc.weight"] + T[p + "mlp.c_fc.bias"]
            Hh = np.vectorize(lambda z: ref_act(act, z))(Hh)
            X = X + Hh @ T[p + "mlp.c_proj.weight"] + T[p + "mlp.c_proj.bias"]
        if final:
            X = np.array([ref_layernorm(x, T["ln_f.weight"], T["ln_f.bias"], eps) for x in X])
        return X

    gem = fam.startswith("gemma")
    off = 1.0 if gem else 0.0
    eps = cfg["rms_norm_eps"]
    act = cfg.get("hidden_activation") or cfg["hidden_act"]
    act = "gelu_pytorch_tanh" if (fam == "gemma" and act == "gelu") else act
    nkv = cfg["num_key_value_heads"]
    dh = cfg.get("head_dim") or D // H_
    rp = cfg.get("rope_parameters") or dict(cfg.get("rope_scaling") or {},
                                            rope_theta=cfg.get("rope_theta", 10000.0))
    scaling = rp if rp.get("rope_type", rp.get("type")) == "llama3" else None
    inv = ref_inv_freq(dh, rp["rope_theta"], scaling)
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if fam == "gemma2" else dh ** -0.5
    cap = cfg.get("attn_logit_softcapping") if fam == "gemma2" else None
    rms = lambda x, g: ref_rmsnorm(x, g, eps, off)  # noqa: E731
    lin = lambda Y, name: Y @ T[name].T + (T[name[:-6] + "bias"]  # noqa: E731
                                           if name[:-6] + "bias" in T else 0)
    for li in range(stop):
        p, a = f"layers.{li}.", f"layers.{li}.self_attn."
        Y = np.array([rms(x, T[p + "input_layernorm.weight"]) for x in X])
        if fam == "phi3":
            qkv = Y @ T[a + "qkv_proj.weight"].T
            Q, K, Vv = qkv[:, :H_ * dh], qkv[:, H_ * dh:(H_ + nkv) * dh], qkv[:, (H_ + nkv) * dh:]
        else:
            Q, K, Vv = (lin(Y, a + f"{k}_proj.weight") for k in "qkv")
        Oh = np.zeros((N, H_ * dh))
        for hd in range(H_):
            g = hd // (H_ // nkv)                                   # repeat_kv
            qs = [Q[t, hd * dh:(hd + 1) * dh] for t in range(N)]
            ks = [K[t, g * dh:(g + 1) * dh] for t in range(N)]
            vs = [Vv[t, g * dh:(g + 1) * dh] for t in range(N)]
            if fam == "qwen3":
                qs = [ref_rmsnorm(q, T[a + "q_norm.weight"], eps, 0.0) for q in qs]
                ks = [ref_rmsnorm(k, T[a + "k_norm.weight"], eps, 0.0) for k in ks]
            qs = [ref_rope(q, t, inv) for t, q in enumerate(qs)]
            ks = [ref_rope(k, t, inv) for t, k in enumerate(ks)]
            for t in range(N):
                s = []
                for u in range(t + 1):
                    z = scale * float(np.dot(qs[t], ks[u]))
                    s.append(cap * math.tanh(z / cap) if cap else z)
                m = max(s)
                e = [math.exp(v_ - m) for v_ in s]
                Oh[t, hd * dh:(hd + 1) * dh] = sum(e[u] / sum(e) * vs[u] for u in range(t + 1))
        A = lin(Oh, a + "o_proj.weight")
        if fam == "gemma2":
            A = np.array([rms(x, T[p + "post_attention_layernorm.weight"]) for x in A])
        X = X + A
        pre = "pre_feedforward_layernorm" if fam == "gemma2" else "post_attention_layernorm"
        Y = np.array([rms(x, T[p + pre + ".weight"]) for x in X])
        if fam == "phi3":
            gu = Y @ T[p + "mlp.gate_up_proj.weight"].T
            G, U = gu[:, :F], gu[:, F:]
        else:
            G, U = Y @ T[p + "mlp.gate_proj.weight"].T, Y @ T[p + "mlp.up_proj.weight"].T
        M = (np.vectorize(lambda z: ref_act(act, z))(G) * U) @ T[p + "mlp.down_proj.weight"].T
        if fam == "gemma2":
            M = np.array([rms(x, T[p + "post_feedforward_layernorm.weight"]) for x in M])
        X = X + M
    if final:
        X = np.array([rms(x, T["norm.weight"]) for x in X])
    return X


def ref_embed(cfg, T, tokens):
    if cfg["model_type"] == "gpt2":
        return np.array([T["wte.weight"][t] + T["wpe.weight"][i] for i, t in enumerate(tokens)])
    E = np.array([T["embed_tokens.weight"][t] for t in tokens])
    return E * math.sqrt(D) if cfg["model_type"].startswith("gemma") else E


FAMILY_NAMES = ["gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"]
TOKENS = np.array([3, 17, 5, 11, 9])


def build(tmp_path, family, code="F32", shards=1, seed=0, **over):
    cfg = config(family, **over)
    path, T = save(tmp_path / f"{family}-{code}-{shards}", cfg, weights(cfg, seed), code, shards,
                   prefix="transformer." if family == "gpt2" else "model.")
    return cfg, path, T


# --------------------------------------------------------------------------
# every family: forward passes, embeddings, constants
# --------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("code,shards", [("F32", 1), ("BF16", 3), ("F16", 1)])
def test_forward_matches_the_loop_reference(tmp_path, family, code, shards):
    cfg, path, T = build(tmp_path, family, code, shards)
    model = load(path)
    assert model.model_type == family and model.n_layer == L
    E = model.embed(TOKENS)
    np.testing.assert_allclose(E, ref_embed(cfg, T, TOKENS), rtol=1e-15, atol=0)
    X = np.random.default_rng(1).standard_normal((NTOK, D))
    for stop, final in ((1, False), (L, True)):
        ref = ref_forward(cfg, T, X, stop=stop, final=final)
        got = model.forward(X, stop=stop, final_norm=final)
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-12 * np.abs(ref).max())


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_constants_match_dense_finite_differences_of_the_reference(tmp_path, family):
    cfg, path, T = build(tmp_path, family, "BF16", 2, seed=4)
    model = load(path)
    X = 0.7 * np.random.default_rng(2).standard_normal((NTOK, D))
    for stop, final in ((1, False), (L, True)):
        J = central_differences(
            lambda Z, stop=stop, final=final: ref_forward(cfg, T, Z, stop=stop, final=final), X,
            h=1e-5)
        sigma = np.linalg.norm(J, 2)
        got = model.local_lipschitz(X, stop=stop, final_norm=final)
        assert abs(got - sigma) <= 1e-7 * sigma, (stop, final, got, sigma)


def test_float32_model_reads_bf16_exactly_and_agrees_to_float32_rounding(tmp_path):
    cfg, path, T = build(tmp_path, "llama", "BF16", 2)
    m32, m64 = load(path, dtype=np.float32), load(path)
    assert m32.blocks[0].attn.W_Q.dtype == np.float32
    np.testing.assert_array_equal(m32.blocks[0].attn.W_Q, m64.blocks[0].attn.W_Q)
    X = np.random.default_rng(0).standard_normal((NTOK, D))
    np.testing.assert_allclose(m32.forward(X), m64.forward(X), rtol=1e-4, atol=1e-4)


def test_transformers_4_configs_give_the_same_model(tmp_path):
    """rope_theta / rope_scaling at the top level (transformers 4) = rope_parameters (5)."""
    llama3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16}
    c5 = config("llama", rope_parameters={"rope_type": "llama3", "rope_theta": 500.0, **llama3})
    c4 = {k: v for k, v in c5.items() if k not in ("rope_parameters", "dtype")}
    c4.update(rope_theta=500.0, rope_scaling={"rope_type": "llama3", **llama3},
              torch_dtype="float32", transformers_version="4.46.0")
    c4old = dict(c4, rope_scaling={"type": "llama3", **llama3})
    T = weights(c5)
    X = np.random.default_rng(0).standard_normal((NTOK, D))
    outs = []
    for i, c in enumerate((c5, c4, c4old)):
        path, Ts = save(tmp_path / str(i), c, T)
        outs.append(load(path).forward(X))
    ref = ref_forward(c5, Ts, X)
    for out in outs:
        np.testing.assert_allclose(out, ref, rtol=0, atol=2e-12 * np.abs(ref).max())
    # the scaling is not a no-op at these positions
    path, _ = save(tmp_path / "plain", config("llama", rope_parameters={
        "rope_type": "default", "rope_theta": 500.0}), T)
    assert np.abs(load(path).forward(X) - ref).max() > 1e-3


def test_gemma_is_read_as_gemma_though_its_tensors_are_llamas(tmp_path):
    """Same tensor names, same shapes: only model_type tells them apart, and it is used."""
    cg = config("gemma", num_key_value_heads=KV)
    cl = {k: v for k, v in cg.items() if k not in ("use_bidirectional_attention",)}
    cl.update(model_type="llama", mlp_bias=False, hidden_act="silu")
    T = weights(cg)
    pg, Tg = save(tmp_path / "g", cg, T)
    pl, _ = save(tmp_path / "l", cl, T)
    X = np.random.default_rng(0).standard_normal((NTOK, D))
    g, ll = load(pg).forward(X), load(pl).forward(X)
    np.testing.assert_allclose(g, ref_forward(cg, Tg, X), rtol=0, atol=2e-12 * np.abs(g).max())
    assert np.abs(g - ll).max() > 0.1 * np.abs(g).max()
    # the legacy hidden_act "gelu" of Gemma's releases is the tanh approximation (GemmaConfig)
    pl2, _ = save(tmp_path / "g2", dict(cg, hidden_act="gelu"), T)
    np.testing.assert_array_equal(load(pl2).forward(X), g)


def test_sliding_windows_per_layer_as_each_family_sets_them(tmp_path):
    cases = {
        "mistral": (config("mistral", sliding_window=3), [3, 3]),
        "phi3": (config("phi3", sliding_window=4), [4, 4]),
        "gemma2": (config("gemma2", sliding_window=3), [3, None]),
        "gemma2-default": ({k: v for k, v in config("gemma2", sliding_window=3).items()
                            if k != "layer_types"}, [3, None]),
        "qwen2-off": (config("qwen2", sliding_window=3), [None, None]),
        "qwen2-v4": ({k: v for k, v in config("qwen2", use_sliding_window=True, sliding_window=3,
                                                max_window_layers=1).items()
                      if k != "layer_types"}, [None, 3]),
        "qwen3": (config("qwen3", use_sliding_window=True, sliding_window=3,
                         layer_types=["sliding_attention", "full_attention"]), [3, None]),
        "llama": (config("llama"), [None, None]),
    }
    for name, (cfg, want) in cases.items():
        path, _ = save(tmp_path / name, cfg, weights(cfg))
        m = load(path)
        assert [m.blocks[i].sliding_window for i in range(L)] == want, name


# --------------------------------------------------------------------------
# reading: bf16 bits, shards, laziness, malformed files
# --------------------------------------------------------------------------
def test_bfloat16_conversion_is_exact():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1000) * 10.0 ** rng.integers(-30, 30, 1000)).astype(np.float32)
    x = (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)    # bf16-representable
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(bfloat16_bits_to_float32(bits), x)
    special = np.array([0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F7F, 0x0001], np.uint16)
    np.testing.assert_array_equal(bfloat16_bits_to_float32(special),
                                  [0.0, -0.0, 1.0, -1.0, 3.3895313892515355e38,
                                   9.183549615799121e-41])


def test_checkpoint_reads_lazily_from_memory_maps(tmp_path):
    cfg, path, T = build(tmp_path, "llama", "BF16", 3)
    ck = Checkpoint(path)
    assert len(ck.files) == 3 and len(ck.tensors) == len(T)
    t = ck.tensors["model.layers.1.mlp.up_proj.weight"]
    assert isinstance(t._bits(), np.memmap) and t.shape == (F, D) and t.stored == "BF16"
    np.testing.assert_array_equal(t.read(), T["layers.1.mlp.up_proj.weight"])
    np.testing.assert_array_equal(t[2:4], T["layers.1.mlp.up_proj.weight"][2:4])
    model = load(path)
    assert model.blocks.cached == []                        # no block read yet
    model.local_lipschitz(np.ones((3, D)), start=1, stop=2)
    assert model.blocks.cached == [1]
    b0 = model.blocks[0]
    assert model.blocks[0] is b0 and model.blocks.cached == [1, 0]   # read once
    small = load(path)
    small.blocks.cache_bytes = 1                            # one block at a time
    c0 = small.blocks[0]
    small.blocks[1]
    assert small.blocks.cached == [1]
    assert small.blocks[0] is not c0 and small.blocks.cached == [0]


def test_one_block_constant_holds_one_block(tmp_path):
    """A block's constant allocates about one block's weights, not the model's."""
    big = dict(hidden_size=64, intermediate_size=256, num_attention_heads=4,
               num_key_value_heads=4, head_dim=16, num_hidden_layers=8, vocab_size=V)
    cfg = config("llama", **big)
    rng = np.random.default_rng(0)
    T = {}
    for i in range(8):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        for k in ("q", "k", "v", "o"):
            T[a + f"{k}_proj.weight"] = (0.05 * rng.standard_normal((64, 64))).astype(np.float32)
        for k in ("gate", "up"):
            T[p + f"mlp.{k}_proj.weight"] = (0.05 * rng.standard_normal((256, 64))).astype(
                np.float32)
        T[p + "mlp.down_proj.weight"] = (0.05 * rng.standard_normal((64, 256))).astype(np.float32)
        T[p + "input_layernorm.weight"] = T[p + "post_attention_layernorm.weight"] = np.ones(
            64, np.float32)
    T["embed_tokens.weight"], T["norm.weight"] = np.ones((V, 64), np.float32), np.ones(
        64, np.float32)
    path, _ = save(tmp_path / "big", cfg, T, "BF16")
    block_bytes = 8 * (4 * 64 * 64 + 3 * 256 * 64)            # one block in float64
    X = np.random.default_rng(1).standard_normal((4, 64))
    tracemalloc.start()
    model = load(path)
    model.local_lipschitz(X, start=5, stop=6, tol=1e-6)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * block_bytes < 8 * block_bytes, (peak, block_bytes)


def test_malformed_directories_and_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load(tmp_path)
    cfg = config("llama")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "pytorch_model.bin").write_bytes(b"0")
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin found"):
        load(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}" +
                                                 b" " * 6)
    with pytest.raises(ValueError, match="not a safetensors file"):
        load(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x01")
    with pytest.raises(ValueError, match="not a safetensors file"):
        load(tmp_path)


def test_missing_extra_misshapen_and_non_finite_tensors_are_named(tmp_path):
    cfg = config("llama")
    T = weights(cfg)
    miss = dict(T)
    del miss["layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match=r"no tensor 'layers.1.mlp.up_proj.weight'"):
        load(save(tmp_path / "a", cfg, miss)[0])
    with pytest.raises(NotImplementedError, match=r"does not use: 'model.layers.0.mlp.up_proj"
                                                  r".bias'"):
        load(save(tmp_path / "b", cfg, dict(T, **{"layers.0.mlp.up_proj.bias": np.ones(F)}))[0])
    with pytest.raises(ValueError, match=r"has shape \(8, 16\); the config gives \(4, 16\)"):
        load(save(tmp_path / "c", config("llama", num_key_value_heads=1), T)[0])
    bad = dict(T, **{"layers.0.self_attn.q_proj.weight": np.full((D, D), np.nan, np.float32)})
    m = load(save(tmp_path / "d", cfg, bad)[0])
    with pytest.raises(ValueError, match="must be finite"):
        m.forward(np.ones((2, D)), stop=1)
    # a GPT-2 checkpoint with a Llama config: named missing tensor
    g = config("gpt2")
    with pytest.raises(ValueError, match="no tensor 'embed_tokens.weight'"):
        load(save(tmp_path / "e", cfg, weights(g), prefix="transformer.")[0])


# --------------------------------------------------------------------------
# refusals: NotImplementedError naming the model_type and the option
# --------------------------------------------------------------------------
REFUSALS = [
    ({"model_type": "bert"}, "model_type 'bert' is not modelled"),
    ({"model_type": None}, "no 'model_type'"),
    ({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": True},
     "'gpt2'.*scale_attn_by_inverse_layer_idx"),
    ({"model_type": "gpt2", "reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
    ({"model_type": "gpt2", "activation_function": "gelu_fast"},
     "activation_function.*'gelu_fast'"),
    ({"model_type": "gpt2", "add_cross_attention": True}, "add_cross_attention"),
    ({"model_type": "llama", "mlp_bias": True}, "'llama'.*mlp_bias"),
    ({"model_type": "llama", "hidden_act": "gelu_10"}, "hidden_act.*gelu_10"),
    ({"model_type": "llama", "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4,
                                                  "factor": 4.0}}, "rope_type 'yarn'"),
    ({"model_type": "llama", "rope_parameters": {"rope_type": "linear", "rope_theta": 1e4,
                                                  "factor": 2.0}}, "rope_type 'linear'"),
    ({"model_type": "llama", "rope_parameters": None, "rope_scaling": {"type": "dynamic",
                                                                       "factor": 2.0}},
     "rope_type 'dynamic'"),
    ({"model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                  "factor": 2.0}}, "RoPE parameters"),
    ({"model_type": "llama", "some_new_option": 3}, "'llama'.*'some_new_option'"),
    ({"model_type": "llama", "quantization_config": {"quant_method": "bitsandbytes"}},
     "quantization_config"),
    ({"model_type": "mistral", "layer_types": ["full_attention"] * 2}, "'layer_types'"),
    ({"model_type": "qwen2", "layer_types": ["chunked_attention"] * 2}, "chunked_attention"),
    ({"model_type": "gemma", "use_bidirectional_attention": True},
     "'gemma'.*use_bidirectional_attention"),
    ({"model_type": "gemma", "mlp_bias": False}, "'gemma'.*'mlp_bias'"),
    ({"model_type": "gemma", "hidden_activation": "silu"}, "disagree"),
    ({"model_type": "gemma2", "use_bidirectional_attention": True}, "use_bidirectional"),
    ({"model_type": "phi3", "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4,
                                                 "partial_rotary_factor": 1.0,
                                                 "short_factor": [1.0], "long_factor": [1.0]}},
     "rope_type 'longrope'"),
    ({"model_type": "phi3", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                 "partial_rotary_factor": 0.5}},
     "partial_rotary_factor"),
    ({"model_type": "qwen3", "attention_dropout": 0.0, "sliding_window_pattern": 2},
     "sliding_window_pattern"),
]


@pytest.mark.parametrize("over,message", REFUSALS)
def test_refusals_name_the_model_type_and_the_option(tmp_path, over, message):
    fam = over["model_type"] if over["model_type"] in FAMILIES else "llama"
    cfg = config(fam, **{k: v for k, v in over.items() if k != "model_type"})
    cfg["model_type"] = over["model_type"]
    if cfg["model_type"] is None:
        del cfg["model_type"]
    path, _ = save(tmp_path, cfg, weights(config(fam)),
                   prefix="transformer." if fam == "gpt2" else "model.")
    with pytest.raises(NotImplementedError, match=message):
        load(path)


def test_every_family_table_lists_known_keys_once():
    for fam, t in FAMILIES.items():
        read, none, fixed = set(t["read"]), set(t["no_effect"]), set(t["fixed"])
        assert not (read & none or read & fixed or none & fixed), fam


def test_bad_values_are_named(tmp_path):
    for over, msg in (({"num_attention_heads": 0}, r"config\['num_attention_heads'\]"),
                      ({"num_key_value_heads": 3}, "num_key_value_heads"),
                      ({"rms_norm_eps": -1.0}, "rms_norm_eps"),
                      ({"attention_bias": "yes"}, "attention_bias")):
        path, _ = save(tmp_path / msg[:5], config("llama", **over), weights(config("llama")))
        with pytest.raises(ValueError, match=msg):
            load(path)
    with pytest.raises(ValueError, match="dtype"):
        load(tmp_path, dtype=np.float16)


def test_rope_frequencies_are_torchs_bits():
    """Bits of torch's float32 inv_freq (theta 5e5, head_dim 128, Llama 3) where numpy's float32
    pow is 1 ulp off, and the llama3-scaled frequencies transformers 5.24 computed."""
    from lipattn.layers.rope import rope_inv_freq
    torch_bits = {2: 1059709382, 6: 1049992931, 7: 1047774305, 15: 1027413636, 21: 1012729580,
                  25: 1002613366, 35: 977823878, 38: 970501249, 42: 960419060, 46: 950538859,
                  48: 945754308, 51: 938552192, 62: 910836144}
    inv = rope_inv_freq(128, 500000.0)
    assert {i: int(inv[i].view(np.uint32)) for i in torch_bits} == torch_bits
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 16.0, "original_max_position_embeddings": 64}
    hf = np.array([6.6084510e-01, 4.7007538e-03, 1.7677668e-04, 6.6478697e-06], np.float32)
    np.testing.assert_array_equal(rope_inv_freq(8, 500000.0, llama3), hf)
    np.testing.assert_array_equal(rope_inv_freq(8, 500000.0, llama3),
                                  ref_inv_freq(8, 500000.0, llama3))


# --------------------------------------------------------------------------
# from_state_dict accepts what PyTorch users hold (issue 24 item 4); no torch here
# --------------------------------------------------------------------------
class FakeDevice:
    def __init__(self, type_: str) -> None:
        self.type = type_

    def __str__(self) -> str:
        return self.type + (":0" if self.type != "cpu" else "")


class FakeTensor:
    """The surface of a torch.Tensor that a conversion may use: detach, cpu, float, numpy,
    dtype, device, shape, requires_grad (numpy() refuses a tensor that requires grad, and a
    bfloat16 one, as torch does)."""

    def __init__(self, values, dtype="torch.float32", device="cpu", requires_grad=False):
        self._v, self.dtype, self.device = np.asarray(values), dtype, FakeDevice(device)
        self.requires_grad, self.shape = requires_grad, np.shape(values)

    def detach(self):
        return FakeTensor(self._v, self.dtype, self.device.type)

    def cpu(self):
        return FakeTensor(self._v, self.dtype, "cpu", self.requires_grad)

    def float(self):
        return FakeTensor(self._v.astype(np.float32), "torch.float32", self.device.type,
                          self.requires_grad)

    def numpy(self):
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad.")
        if self.dtype in ("torch.bfloat16", "torch.float8_e4m3fn"):
            raise TypeError(f"Got unsupported ScalarType {self.dtype[6:]}")
        if self.device.type != "cpu":
            raise TypeError("can't convert cuda:0 device type tensor to numpy.")
        return self._v

    def __array__(self, dtype=None, copy=None):
        return self.numpy() if dtype is None else self.numpy().astype(dtype)


def _llama_state_dict():
    cfg = config("llama")
    return {k: stored(v, "BF16") for k, v in weights(cfg).items() if k != "lm_head.weight"}


def test_from_state_dict_takes_cpu_tensors_bf16_and_requires_grad():
    from lipattn.models import Llama
    st = _llama_state_dict()                          # bf16-representable values
    X = np.random.default_rng(0).standard_normal((NTOK, D))
    ref = Llama.from_state_dict(st, n_head=H_, n_kv_head=KV).forward(X)
    for kw in ({"dtype": "torch.bfloat16"}, {"requires_grad": True},
               {"dtype": "torch.bfloat16", "requires_grad": True}, {"dtype": "torch.float16"}):
        vals = {k: (v.astype(np.float16) if kw.get("dtype") == "torch.float16" else v)
                for k, v in st.items()}
        tensors = {"model." + k: FakeTensor(v, **kw) for k, v in vals.items()}
        got = Llama.from_state_dict(tensors, n_head=H_, n_kv_head=KV).forward(X)
        if kw.get("dtype") == "torch.float16":
            exp = Llama.from_state_dict({k: v.astype(np.float64) for k, v in vals.items()},
                                        n_head=H_, n_kv_head=KV).forward(X)
            np.testing.assert_array_equal(got, exp)
        else:
            np.testing.assert_array_equal(got, ref)


def test_from_state_dict_names_tensors_it_cannot_convert():
    from lipattn.models import Llama
    st = {k: FakeTensor(v) for k, v in _llama_state_dict().items()}
    st["norm.weight"] = FakeTensor(np.ones(D), device="cuda")
    with pytest.raises(TypeError, match=r"state\['norm.weight'\] is a tensor on cuda:0.*\.cpu\(\)"):
        Llama.from_state_dict(st, n_head=H_, n_kv_head=KV)
    st["norm.weight"] = FakeTensor(np.ones(D), dtype="torch.float8_e4m3fn")
    with pytest.raises(TypeError, match=r"state\['norm.weight'\] is a tensor of dtype "
                                        r"torch.float8_e4m3fn"):
        Llama.from_state_dict(st, n_head=H_, n_kv_head=KV)


def test_from_state_dict_takes_ml_dtypes_bfloat16_arrays():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from lipattn.models import Llama
    st = _llama_state_dict()
    X = np.random.default_rng(0).standard_normal((NTOK, D))
    ref = Llama.from_state_dict(st, n_head=H_, n_kv_head=KV).forward(X)
    bf = {k: v.astype(ml_dtypes.bfloat16) for k, v in st.items()}
    np.testing.assert_array_equal(Llama.from_state_dict(bf, n_head=H_, n_kv_head=KV).forward(X),
                                  ref)


# config.json files of released checkpoints, as transformers 4 wrote them (their sizes shrunk)
_SHRINK = dict(hidden_size=D, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H_,
               vocab_size=V)
RELEASED = {
    "gpt2": dict(activation_function="gelu_new", architectures=["GPT2LMHeadModel"],
                 attn_pdrop=0.1, bos_token_id=50256, embd_pdrop=0.1, eos_token_id=50256,
                 initializer_range=0.02, layer_norm_epsilon=1e-05, model_type="gpt2", n_ctx=1024,
                 n_embd=D, n_head=H_, n_layer=L, n_positions=16, resid_pdrop=0.1,
                 summary_activation=None, summary_first_dropout=0.1, summary_proj_to_labels=True,
                 summary_type="cls_index", summary_use_proj=True,
                 task_specific_params={"text-generation": {"do_sample": True, "max_length": 50}},
                 vocab_size=V),
    "llama-3.1": dict(_SHRINK, architectures=["LlamaForCausalLM"], attention_bias=False,
                      attention_dropout=0.0, bos_token_id=128000,
                      eos_token_id=[128001, 128008, 128009], hidden_act="silu",
                      initializer_range=0.02, max_position_embeddings=131072, mlp_bias=False,
                      model_type="llama", num_key_value_heads=KV, pretraining_tp=1,
                      rms_norm_eps=1e-05, rope_scaling={
                          "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                      rope_theta=500000.0, tie_word_embeddings=False, torch_dtype="bfloat16",
                      transformers_version="4.43.0.dev0", use_cache=True),
    "mistral-7b": dict(_SHRINK, architectures=["MistralForCausalLM"], bos_token_id=1,
                       eos_token_id=2, hidden_act="silu", initializer_range=0.02,
                       max_position_embeddings=32768, model_type="mistral",
                       num_key_value_heads=KV, rms_norm_eps=1e-05, rope_theta=10000.0,
                       sliding_window=4096, tie_word_embeddings=False, torch_dtype="bfloat16",
                       transformers_version="4.34.0.dev0", use_cache=True),
    "qwen2.5": dict(_SHRINK, architectures=["Qwen2ForCausalLM"], attention_dropout=0.0,
                    bos_token_id=151643, eos_token_id=151643, hidden_act="silu",
                    initializer_range=0.02, max_position_embeddings=32768, max_window_layers=28,
                    model_type="qwen2", num_key_value_heads=KV, rms_norm_eps=1e-06,
                    rope_scaling=None, rope_theta=1000000.0, sliding_window=131072,
                    tie_word_embeddings=True, torch_dtype="bfloat16",
                    transformers_version="4.43.1", use_cache=True, use_sliding_window=False),
    "qwen3": dict(_SHRINK, architectures=["Qwen3ForCausalLM"], attention_bias=False,
                  attention_dropout=0.0, bos_token_id=151643, eos_token_id=151645, head_dim=8,
                  hidden_act="silu", initializer_range=0.02, max_position_embeddings=40960,
                  max_window_layers=28, model_type="qwen3", num_key_value_heads=KV,
                  rms_norm_eps=1e-06, rope_scaling=None, rope_theta=1000000,
                  sliding_window=None, tie_word_embeddings=True, torch_dtype="bfloat16",
                  transformers_version="4.51.0", use_cache=True, use_sliding_window=False),
    "gemma-2b": dict(_SHRINK, architectures=["GemmaForCausalLM"], attention_bias=False,
                     attention_dropout=0.0, bos_token_id=2, eos_token_id=1, head_dim=8,
                     hidden_act="gelu", initializer_range=0.02, max_position_embeddings=8192,
                     model_type="gemma", num_key_value_heads=1, pad_token_id=0,
                     rms_norm_eps=1e-06, rope_scaling=None, rope_theta=10000.0,
                     torch_dtype="bfloat16", transformers_version="4.38.0.dev0", use_cache=True),
    "gemma-2-2b": dict(_SHRINK, architectures=["Gemma2ForCausalLM"], attention_bias=False,
                       attention_dropout=0.0, attn_logit_softcapping=50.0, bos_token_id=2,
                       cache_implementation="hybrid", eos_token_id=1,
                       final_logit_softcapping=30.0, head_dim=8, hidden_act="gelu_pytorch_tanh",
                       hidden_activation="gelu_pytorch_tanh", initializer_range=0.02,
                       max_position_embeddings=8192, model_type="gemma2", num_key_value_heads=KV,
                       pad_token_id=0, query_pre_attn_scalar=256, rms_norm_eps=1e-06,
                       rope_theta=10000.0, sliding_window=4096, sliding_window_size=4096,
                       torch_dtype="float32", transformers_version="4.42.4", use_cache=True),
    "phi-3-mini": dict(_SHRINK, _name_or_path="Phi-3-mini-4k-instruct",
                       architectures=["Phi3ForCausalLM"], attention_bias=False,
                       attention_dropout=0.0, auto_map={
                           "AutoConfig": "configuration_phi3.Phi3Config",
                           "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
                       bos_token_id=1, embd_pdrop=0.0, eos_token_id=32000, hidden_act="silu",
                       initializer_range=0.02, max_position_embeddings=4096, model_type="phi3",
                       num_key_value_heads=KV, original_max_position_embeddings=4096,
                       pad_token_id=32000, resid_pdrop=0.0, rms_norm_eps=1e-05,
                       rope_scaling=None, rope_theta=10000.0, sliding_window=2047,
                       tie_word_embeddings=False, torch_dtype="bfloat16",
                       transformers_version="4.40.2", use_cache=True),
}


@pytest.mark.parametrize("name", list(RELEASED))
def test_released_transformers_4_configs_load_and_match_the_reference(tmp_path, name):
    cfg = RELEASED[name]
    fam = cfg["model_type"]
    path, T = save(tmp_path, cfg, weights(cfg), "BF16",
                   prefix="transformer." if fam == "gpt2" else "model.")
    model = load(path)
    X = np.random.default_rng(3).standard_normal((NTOK, D))
    ref = ref_forward(cfg, T, X, final=True)
    np.testing.assert_allclose(model.forward(X, final_norm=True), ref, rtol=0,
                               atol=2e-12 * np.abs(ref).max())


@pytest.mark.parametrize("family,over", [
    ("gpt2", {"activation_function": "relu"}), ("gpt2", {"activation_function": "gelu"}),
    ("gpt2", {"scale_attn_weights": False}), ("llama", {"hidden_act": "gelu"}),
    ("llama", {"attention_bias": True}), ("llama", {"head_dim": 8}),
    ("qwen3", {"attention_bias": True}), ("gemma2", {"attn_logit_softcapping": None}),
    ("gemma", {"hidden_activation": "gelu_pytorch_tanh", "hidden_act": "gelu"}),
    ("mistral", {"num_key_value_heads": 1}),
])
def test_modelled_options_match_the_reference(tmp_path, family, over):
    cfg, path, T = build(tmp_path, family, "F32", 1, seed=7, **over)
    X = np.random.default_rng(4).standard_normal((NTOK, D))
    ref = ref_forward(cfg, T, X, final=True)
    np.testing.assert_allclose(load(path).forward(X, final_norm=True), ref, rtol=0,
                               atol=2e-12 * np.abs(ref).max())


def test_rope_config_errors_are_named(tmp_path):
    T = weights(config("llama"))
    for over, msg in (({"rope_parameters": [1, 2]}, r"config\['rope_parameters'\] must be"),
                      ({"rope_parameters": None, "rope_scaling": "x"}, r"config\['rope_scaling'\]"),
                      ({"rope_scaling": {"rope_type": "llama3"}}, "both"),
                      ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4,
                                            "factor": 8.0}}, "missing")):
        path, _ = save(tmp_path / str(len(msg)), config("llama", **over), T)
        with pytest.raises(ValueError, match=msg):
            load(path)


def test_a_layout_never_reads_another_familys_tensors(tmp_path):
    g2 = weights(config("gemma2"))
    with pytest.raises(NotImplementedError, match="'llama'.*does not use.*feedforward_layernorm"):
        load(save(tmp_path / "a", config("llama", head_dim=8), g2)[0])
    with pytest.raises(ValueError, match="no tensor 'layers.0.pre_feedforward_layernorm.weight'"):
        load(save(tmp_path / "b", config("gemma2"),
                  weights(config("gemma", num_key_value_heads=KV)))[0])
    q3 = weights(config("qwen3", attention_bias=True))     # Qwen 2's biases, and more
    with pytest.raises(NotImplementedError, match="'qwen2'.*does not use.*o_proj.bias"):
        load(save(tmp_path / "c", config("qwen2", head_dim=8), q3)[0])
