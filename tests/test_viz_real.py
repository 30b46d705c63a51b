"""lipattn.book.viz.real: the initialisations, the experiments' invariants and the explorer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import central_differences

from lipattn import l2attention
from lipattn import lipschitz as lip
from lipattn.book.explorers import get_explorer
from lipattn.book.viz import real
from lipattn.layers import MultiHeadAttention, layer_jacobian


def test_head_constants_against_dense_jacobians():
    rng = np.random.default_rng(3)
    d, h = 6, 3
    W = [rng.standard_normal((d, d)) / 2 for _ in range(4)]
    attn = MultiHeadAttention(*W, n_head=h, b_Q=rng.standard_normal(d), mask="causal")
    X = rng.standard_normal((5, d))
    hc = real.head_constants(attn, X)
    full = np.linalg.norm(central_differences(lambda Z: attn.forward(Z)[0], X), 2)
    assert abs(hc["exact"] - full) < 1e-6 * full
    for i in range(h):
        head = attn.head(i)
        Li = np.linalg.norm(central_differences(lambda Z, hd=head: hd.forward(Z)[0], X), 2)
        assert abs(hc["L_h"][i] - Li) < 1e-6 * Li
        bare = lambda Z, hd=head: hd.forward(Z)[0] @ np.linalg.pinv(hd.W_O)  # noqa: E731
        ci = np.linalg.norm(central_differences(bare, X), 2)
        assert abs(hc["c_h"][i] - ci) < 1e-5 * ci
    assert hc["exact"] <= min(hc["sum"], hc["sqrt_form"]) * (1 + 1e-9)


def test_head_constants_keep_the_key_bias_under_rope():
    """With RoPE the key bias enters the Jacobian, so the bare heads must keep it."""
    rng = np.random.default_rng(4)
    d, h = 8, 2
    W = [rng.standard_normal((d, d)) / 2 for _ in range(4)]
    attn = MultiHeadAttention(*W, n_head=h, b_K=3 * rng.standard_normal(d), mask="causal",
                              rope_theta=10.0)
    X = rng.standard_normal((5, d))
    hc = real.head_constants(attn, X)
    for i in range(h):
        head = attn.head(i)
        bare = lambda Z, hd=head: hd.forward(Z)[0] @ np.linalg.pinv(hd.W_O)  # noqa: E731
        ci = np.linalg.norm(central_differences(bare, X), 2)
        assert abs(hc["c_h"][i] - ci) < 1e-5 * ci
    assert hc["exact"] <= min(hc["sum"], hc["sqrt_form"]) * (1 + 1e-9)


@pytest.mark.parametrize("layout", ["gpt2", "llama"])
def test_depth_profile_obeys_the_chain_rule(layout):
    p = real.depth_profile(layout, 6, [1, 3, 6], d=16, n_head=2, N=4, seed=4)
    assert abs(p["exact"][0] - p["product"][0]) < 1e-5 * p["product"][0]
    assert np.all(p["exact"] <= p["product"] * (1 + 1e-5))
    assert p["blocks"].shape == (6,) and np.all(p["blocks"] > 0)


def test_scale_curves_match_independent_paths():
    ts = [0.5, 4.0]
    c = real.scale_curves("random", ts, d=3, N=4, seed=5)
    X, Wq, Wk, Wv = real._family("random", 3, 4, 5)
    for k, t in enumerate(ts):
        std = lip.local_lipschitz(t * X, Wq, Wk, Wv, method="dense")
        assert abs(c["standard"][k] - std) < 1e-7 * std
        lin = lip.local_lipschitz(t * X, Wq / math.sqrt(3), Wk, Wv, method="dense")
        assert abs(c["linear"][k] - lin) < 1e-7 * lin
        n = [W / np.linalg.norm(W, 2) for W in (Wq, Wk, Wv)]
        sig = lip.local_lipschitz(t * X, *n, method="dense")
        assert abs(c["sigma"][k] - sig) < 1e-7 * sig
        l2 = l2attention.l2_local_lipschitz(t * X, Wq, Wv, method="dense")
        assert abs(c["l2"][k] - l2) < 1e-7 * l2
    with pytest.raises(ValueError, match="family"):
        real.scale_curves("sink", ts)
    with pytest.raises(ValueError, match="layout"):
        real.random_model("bert", 1, 8, 2)


def test_explorer_shows_the_highlighted_variant():
    ex = get_explorer("stabilisers-t")
    ex.render(t=64.0, family="two-sided", variant="qknorm")
    lines = ex._lines
    assert lines["qknorm"].get_linewidth() > lines["standard"].get_linewidth()
    assert "QK-RMSNorm" in ex._title.get_text()
    data = real._explorer_data()["two-sided"]
    assert data["qknorm"][-1] > data["standard"][-1] > data["l2"][-1]


def test_gqa_bounds_obey_the_theorem_and_mqa_is_one_group():
    out = real.gqa_bounds((4, 1), (0, 1), d=16, n_head=4, N=5)
    exact, per_head, grouped = out[..., 0], out[..., 1], out[..., 2]
    assert np.all(exact <= grouped * (1 + 1e-6)) and np.all(grouped <= per_head * (1 + 1e-6))
    assert np.allclose(out[0, :, 1], out[0, :, 2], rtol=1e-6)       # h_kv = h: groups = heads
    assert np.allclose(out[1, :, 0], out[1, :, 2], rtol=1e-6)       # MQA: one group, the layer
    attn, X = real.gqa_attention(2, d=16, n_head=4, N=5)
    assert attn.n_kv_head == 2 and X.shape == (5, 16)
    f = lambda Y: attn.forward(Y)[0]                                  # noqa: E731
    assert np.allclose(layer_jacobian(attn, X), central_differences(f, X), atol=1e-7)
    with pytest.raises(ValueError, match="n_kv_head must divide n_head"):
        real.gqa_attention(3, d=16, n_head=4)
