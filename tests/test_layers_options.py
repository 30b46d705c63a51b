"""Tests of the layer options the real models need (LAYER_API.md): Gemma's (1 + w) RMSNorm,
the exact-erf GELU and gelu_pytorch_tanh, MultiHeadAttention's ``scale``, ``softcap`` and
``rope_scaling`` (llama3), and RMSNorm QK-norms with an offset.

Each option goes through the three checks of :mod:`test_layers_backward` (backward against
central differences in every parameter and the input; batched runs against a loop over runs
and sequences; one model broadcast over batch axes), plus closed forms and errors here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import test_layers_backward as tlb

from lipattn.layers import ACTIVATIONS, MLP, GatedMLP, MultiHeadAttention, RMSNorm, Sequential
from lipattn.layers.activations import gelu, gelu_new

D = tlb.D
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 3.0,
          "original_max_position_embeddings": 8}


def _attn(p, **kw):
    qn = RMSNorm(p["q_norm.g"], 1e-6, offset=1.0) if "q_norm.g" in p else None
    kn = RMSNorm(p["k_norm.g"], 1e-6, offset=1.0) if "k_norm.g" in p else None
    return MultiHeadAttention(p["W_Q"], p["W_K"], p["W_V"], p["W_O"], n_head=2, n_kv_head=1,
                              b_Q=p.get("b_Q"), b_K=p.get("b_K"), b_V=p.get("b_V"),
                              b_O=p.get("b_O"), mask="causal", q_norm=qn, k_norm=kn, **kw)


def _attn_params(r, qk=False, dh=4):
    p = tlb._mha_params(r, heads=2, kv=1, dh=dh)
    if qk:
        p |= {"q_norm.g": r.standard_normal(dh) / 3, "k_norm.g": r.standard_normal(dh) / 3}
    return p


CASES = [
    ("rmsnorm-offset", lambda p: RMSNorm(p["g"], 1e-6, offset=1.0),
     lambda r: {"g": r.standard_normal(D) / 3}),
    *[(f"mlp-{act}", lambda p, act=act: MLP(p["W_1"], p["b_1"], p["W_2"], p["b_2"], act=act),
       tlb._mlp_params) for act in ("gelu", "gelu_pytorch_tanh")],
    ("gated-gelu-tanh", lambda p: GatedMLP(p["W_g"], p["W_u"], p["W_d"], act="gelu_pytorch_tanh"),
     tlb._gated_params),
    ("mha-scale-softcap", lambda p: _attn(p, scale=0.7, softcap=1.5, rope_theta=50.0),
     _attn_params),
    ("mha-llama3-rope", lambda p: _attn(p, rope_theta=500.0, rope_scaling=LLAMA3), _attn_params),
    ("mha-qk-rmsnorm-offset", lambda p: _attn(p, rope_theta=10.0, softcap=2.0),
     lambda r: _attn_params(r, qk=True)),
    ("gemma2-branch", lambda p: Sequential([RMSNorm(p["0.g"], 1e-6, offset=1.0),
                                            _attn(tlb._sub(p, "1."), scale=0.5, softcap=3.0,
                                                  rope_theta=10.0),
                                            RMSNorm(p["2.g"], 1e-6, offset=1.0)]),
     lambda r: {"0.g": r.standard_normal(D) / 3} | tlb._prefixed("1.", _attn_params(r))
     | {"2.g": r.standard_normal(D) / 3}),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name,make,draw", CASES, ids=IDS)
def test_backward_against_central_differences(name, make, draw):
    tlb.test_backward_matches_central_differences_in_every_parameter_and_input(name, make, draw)


@pytest.mark.parametrize("name,make,draw", CASES, ids=IDS)
def test_batched_runs_against_a_loop(name, make, draw):
    tlb.test_batched_runs_match_a_loop_over_runs_and_sequences(name, make, draw)


@pytest.mark.parametrize("name,make,draw", CASES, ids=IDS)
def test_broadcast_model_sums_the_gradients(name, make, draw):
    tlb.test_one_model_broadcast_over_batch_axes_sums_the_gradients(name, make, draw)


def test_gelu_closed_forms_and_names():
    x = np.linspace(-12, 12, 241)
    y, dy = gelu(x)
    # x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (no cancellation in the left tail)
    np.testing.assert_allclose(y, [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x],
                               rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(
        dy, [0.5 * math.erfc(-v / math.sqrt(2)) + v * math.exp(-v * v / 2)
             / math.sqrt(2 * math.pi) for v in x], rtol=1e-13, atol=1e-16)
    assert ACTIVATIONS["gelu_pytorch_tanh"] is gelu_new and ACTIVATIONS["gelu"] is gelu
    big = np.array([-1e300, -40.0, 40.0, 1e300])
    with np.errstate(over="raise", invalid="raise"):
        y, dy = gelu(big)                                        # no overflow
    np.testing.assert_array_equal(y, [-0.0, -0.0, 40.0, 1e300])
    assert gelu(x.astype(np.float32))[0].dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_tanh_is_finite_and_exact_for_huge_inputs(dtype):
    # the tanh form, written out: 0.5 x (1 + tanh u), u = sqrt(2/pi)(x + 0.044715 x^3)
    x = np.linspace(-25, 25, 501)
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    t = np.tanh(u)
    du = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x**2)
    y, dy = gelu_new(x)
    np.testing.assert_allclose(y, 0.5 * x * (1 + t), rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(dy, 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du,
                               rtol=1e-14, atol=1e-300)
    big = np.array([-np.finfo(dtype).max, -1e30, -30, 30, 1e30, np.finfo(dtype).max], dtype)
    with np.errstate(all="raise"):
        y, dy = gelu_new(big)                                    # no overflow, no NaN
    np.testing.assert_array_equal(y, np.where(big > 0, big, 0))  # the ReLU limits
    np.testing.assert_array_equal(dy, (big > 0).astype(dtype))
    assert y.dtype == dy.dtype == dtype


def test_rmsnorm_offset_is_a_gain_of_one_plus_g():
    rng = np.random.default_rng(0)
    g, X = rng.standard_normal(D), rng.standard_normal((3, D))
    np.testing.assert_allclose(RMSNorm(g, 1e-6, offset=1.0).forward(X)[0],
                               RMSNorm(1 + g, 1e-6).forward(X)[0], rtol=1e-15)
    norm = RMSNorm(g, 1e-6, offset=1.0)
    assert norm.params["g"] is norm.g
    with pytest.raises(TypeError, match="offset"):
        RMSNorm(g, 1e-6, offset="1")


def test_scale_softcap_and_llama3_change_what_they_should():
    rng = np.random.default_rng(1)
    p = _attn_params(rng)
    X = rng.standard_normal((6, D))
    base = _attn(p, rope_theta=50.0).forward(X)[0]
    dh = 4
    np.testing.assert_allclose(_attn(p, rope_theta=50.0, scale=dh ** -0.5).forward(X)[0], base,
                               rtol=1e-15)
    assert np.abs(_attn(p, rope_theta=50.0, scale=0.1).forward(X)[0] - base).max() > 1e-3
    np.testing.assert_allclose(_attn(p, rope_theta=50.0, softcap=1e9).forward(X)[0], base,
                               rtol=1e-12)
    # the head of a layer keeps its options: heads sum to the output less b_O
    layer = _attn(p, rope_theta=500.0, rope_scaling=LLAMA3, scale=0.6, softcap=2.5)
    Y = layer.forward(X)[0]
    heads = sum(layer.head(i).forward(X)[0] for i in range(2))
    np.testing.assert_allclose(heads + layer.b_O, Y, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("kw,message", [
    ({"scale": 0.0}, "scale"), ({"softcap": -1.0}, "softcap"),
    ({"rope_scaling": LLAMA3}, "rope_scaling needs rope_theta"),
    ({"rope_theta": 10.0, "rope_scaling": {"rope_type": "yarn"}}, "rope_type 'llama3'"),
    ({"rope_theta": 10.0, "rope_scaling": {"rope_type": "llama3", "factor": 2.0}}, "missing"),
    ({"rope_theta": 10.0, "rope_scaling": dict(LLAMA3, high_freq_factor=0.5)},
     "high_freq_factor > low_freq_factor"),
])
def test_option_errors_name_the_argument(kw, message):
    p = _attn_params(np.random.default_rng(0))
    with pytest.raises((TypeError, ValueError), match=message):
        _attn(p, **kw)
