"""Tests of the model API of :mod:`lipattn.models.decoder` and :mod:`lipattn.models.masks`.

- ``attention_mask`` and ``sliding_window``: forward passes against the loop
  references of ``test_models`` with the attention of every head rewritten
  here as Hugging Face's mask predicates (``causal_mask_function``,
  ``sliding_window_overlay``, ``padding_mask_function``), one query and one key
  at a time; products and constants against dense central-difference
  Jacobians of the masked forward pass; the masked model is never changed;
- singular vectors: unit norm, ``J v = sigma u`` against the dense Jacobian to
  the certified residual, for the stack, sublayers, heads and one output row;
- the per-position view (``token_sensitivity``, ``row_lipschitz``) against the
  rows of the dense Jacobian; ``seed``; ``__repr__``; bad arguments.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import test_models
from test_lipschitz import central_differences
from test_models import gpt2_state, llama_state, ref_gpt2, ref_llama

from lipattn.models import GPT2, Llama
from lipattn.models.masks import attention_mask_matrix, check_attention_mask


# --------------------------------------------------------------------------
# Hugging Face's mask predicates, one (query, key) pair at a time
# --------------------------------------------------------------------------
def hf_allowed(q_idx, kv_idx, pad, window):
    """``and_masks(causal, sliding_window_overlay(window), padding_mask_function(pad))``."""
    ok = kv_idx <= q_idx                                   # causal_mask_function
    if window is not None:
        ok = ok and kv_idx > q_idx - window                # sliding_window_overlay
    if pad is not None:
        ok = ok and bool(pad[kv_idx])                      # padding_mask_function
    return ok


def masked_heads(pad, windows):
    """A stand-in for ``test_models.ref_causal_heads`` that applies the HF predicates.

    ``windows`` lists the sliding window of each block in call order (the loop
    references call the heads once per block).
    """
    calls = iter(windows)

    def heads(q, k, v, n_head, n_kv):
        window = next(calls)
        N, _, dh = q.shape
        out = np.zeros((N, n_head, v.shape[2]))
        for h in range(n_head):
            g = h // (n_head // n_kv)
            for i in range(N):
                keys = [j for j in range(N) if hf_allowed(i, j, pad, window)]
                s = [float(q[i, h] @ k[j, g]) / math.sqrt(dh) for j in keys]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                out[i, h] = sum(wj / sum(w) * v[j, g] for wj, j in zip(w, keys, strict=True))
        return out

    return heads


def _llama(window=None, seed=0):
    st = llama_state(seed=seed)
    model = Llama.from_state_dict(st, n_head=4, n_kv_head=2)
    if window is not None:
        model.blocks[1].sliding_window = window      # as lipattn.models.load records it
    return st, model


def _gpt2(seed=0):
    st = gpt2_state(seed=seed)
    return st, GPT2.from_state_dict(st, n_head=2)


PADS = [None, [1, 1, 1, 1, 1, 0, 0], [1, 1, 0, 1, 1, 1, 0], [1, 0, 0, 0, 1, 1, 1]]


def test_mask_matrix_is_hugging_faces():
    # sdpa_mask's docstring example: sliding_window=3, N = 5
    want = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0],
                     [0, 0, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(attention_mask_matrix(5, sliding_window=3), want)
    pad = np.array([1, 1, 0, 1, 0, 1, 1, 0], dtype=bool)
    for window in (None, 1, 2, 3, 8, 20):
        ref = np.array([[hf_allowed(i, j, pad, window) for j in range(8)] for i in range(8)])
        if ref.any(axis=1).all():
            got = attention_mask_matrix(8, attention_mask=pad, sliding_window=window)
            np.testing.assert_array_equal(got, ref)
        else:        # a padded query with no key: the error names HF's rows with none
            rows = np.flatnonzero(~ref.any(axis=1)).tolist()
            with pytest.raises(ValueError, match=rf"positions {re.escape(str(rows))}"):
                attention_mask_matrix(8, attention_mask=pad, sliding_window=window)
    np.testing.assert_array_equal(attention_mask_matrix(4), np.tri(4, dtype=bool))


@pytest.mark.parametrize("pad", PADS)
@pytest.mark.parametrize("window", [None, 3])
def test_llama_forward_with_masks_matches_the_hf_loop_reference(pad, window, monkeypatch):
    st, model = _llama(window)
    H = np.random.default_rng(1).standard_normal((7, 16))
    allowed = [[hf_allowed(i, j, pad, w) for j in range(7)] for i in range(7) for w in (window,)]
    if not np.all(np.any(allowed, axis=1)):     # a padded query with no key: refused
        with pytest.raises(ValueError, match="no key to attend to"):
            model.forward(H, attention_mask=pad)
        return
    monkeypatch.setattr(test_models, "ref_causal_heads", masked_heads(pad, [None, window]))
    ref = ref_llama(st, H, 4, 2)
    got = model.forward(H, final_norm=True, attention_mask=pad)
    # RoPE's angles are float32 (as Hugging Face's): about 1e-7 apart
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)
    if pad is not None or window is not None:     # the masks matter at this tolerance
        assert np.abs(_llama()[1].forward(H, final_norm=True) - ref).max() > 1e-3


@pytest.mark.parametrize("pad", PADS[1:])
def test_gpt2_forward_with_padding_matches_the_hf_loop_reference(pad, monkeypatch):
    st, model = _gpt2()
    H = np.random.default_rng(2).standard_normal((7, 8))
    monkeypatch.setattr(test_models, "ref_causal_heads", masked_heads(pad, [None, None]))
    np.testing.assert_allclose(model.forward(H, final_norm=True, attention_mask=pad),
                               ref_gpt2(st, H, 2), rtol=1e-11, atol=1e-11)


def test_real_tokens_do_not_depend_on_padding():
    _, model = _gpt2()
    H = np.random.default_rng(3).standard_normal((7, 8))
    pad = np.array([1, 1, 0, 1, 0, 0, 1])
    out = model.forward(H, attention_mask=pad)
    real = np.flatnonzero(pad)
    np.testing.assert_allclose(out[real], model.forward(H[real]), rtol=1e-13, atol=1e-13)
    H2 = H.copy()
    H2[pad == 0] = 5.0                     # anything at the padded positions
    np.testing.assert_allclose(model.forward(H2, attention_mask=pad)[real], out[real],
                               rtol=1e-13, atol=1e-13)
    # no padding and an all-ones mask are the same map
    np.testing.assert_array_equal(model.forward(H, attention_mask=np.ones(7, int)),
                                  model.forward(H))


def test_a_window_of_at_least_n_changes_nothing_and_one_sees_only_itself():
    _, plain = _llama()
    H = np.random.default_rng(4).standard_normal((7, 16))
    _, wide = _llama(window=7)
    np.testing.assert_array_equal(wide.forward(H), plain.forward(H))
    _, narrow = _llama(window=3)
    assert not np.allclose(narrow.forward(H), plain.forward(H))
    # window 1 on every block: each token attends only to itself, so row t of the
    # output is the model applied to token t alone at its position (RoPE is relative)
    for b in plain.blocks:
        b.sliding_window = 1
    out = plain.forward(H)
    for t in (0, 3, 6):
        np.testing.assert_allclose(out[t], plain.forward(H[t:t + 1])[0], rtol=1e-12,
                                   atol=1e-12)


def test_masked_calls_leave_the_model_unchanged_and_interleave():
    _, model = _llama(window=3)
    H = np.random.default_rng(5).standard_normal((7, 16))
    pad = [1, 1, 1, 1, 0, 1, 0]
    masks = [b.attn.mask for b in model.blocks]
    a = model.forward(H, attention_mask=pad)
    b = model.forward(H)
    assert [blk.attn.mask for blk in model.blocks] == masks == ["causal", "causal"]
    np.testing.assert_array_equal(model.forward(H, attention_mask=pad), a)
    np.testing.assert_array_equal(model.forward(H), b)
    assert model.blocks[0].sliding_window is None     # the class default


def _dense(model, H, pad, **kw):
    return central_differences(lambda Z: model.forward(Z, attention_mask=pad, **kw), H)


def _check_directions(est, J, in_shape, out_shape, rel=1e-6):
    v, u = est.input_direction, est.output_direction
    assert v.shape == in_shape and u.shape == out_shape
    assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-12)
    assert np.linalg.norm(u) == pytest.approx(1.0, abs=1e-12)
    sigma = est.value
    assert sigma == pytest.approx(np.linalg.norm(J, 2), rel=rel)
    # J v = sigma u (FD Jacobian: 1e-6-accurate entries)
    assert np.linalg.norm(J @ v.ravel() - sigma * u.ravel()) <= max(est.residual, 1e-6) * sigma
    assert np.linalg.norm(J.T @ u.ravel() - sigma * v.ravel()) <= max(est.residual, 1e-6) * sigma


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("pad", [None, [1, 1, 0, 1, 1, 0, 0]])
def test_masked_products_constants_and_directions_against_finite_differences(kind, pad):
    _, model = _gpt2() if kind == "gpt2" else _llama(window=3)
    rng = np.random.default_rng(6)
    H = rng.standard_normal((7, model.d_model))
    J = _dense(model, H, pad, final_norm=True)
    E, G = rng.standard_normal((2, 7, model.d_model))
    scale = np.abs(J).max()
    np.testing.assert_allclose(model.jvp(H, E, final_norm=True, attention_mask=pad).ravel(),
                               J @ E.ravel(), atol=1e-6 * scale * 10)
    np.testing.assert_allclose(model.vjp(H, G, final_norm=True, attention_mask=pad).ravel(),
                               J.T @ G.ravel(), atol=1e-6 * scale * 10)
    est = model.local_lipschitz_info(H, final_norm=True, attention_mask=pad, tol=1e-12)
    _check_directions(est, J, H.shape, H.shape)
    # the exact relation, with the library's own products (no finite differences)
    Jv = model.jvp(H, est.input_direction, final_norm=True, attention_mask=pad)
    assert np.linalg.norm(Jv - est.value * est.output_direction) <= 1e-12 * est.value
    JTu = model.vjp(H, est.output_direction, final_norm=True, attention_mask=pad)
    assert np.linalg.norm(JTu - est.value * est.input_direction) <= 2 * est.residual * est.value
    assert model.local_lipschitz(H, final_norm=True, attention_mask=pad) == pytest.approx(
        est.value, rel=1e-10)


def test_padding_changes_the_constant_as_the_dense_jacobian_does():
    _, model = _llama()
    H = np.random.default_rng(7).standard_normal((7, 16))
    pad = [1, 1, 1, 0, 1, 1, 0]
    c = model.local_lipschitz(H, attention_mask=pad)
    assert c == pytest.approx(np.linalg.norm(_dense(model, H, pad), 2), rel=1e-6)
    assert abs(c - model.local_lipschitz(H)) > 1e-3 * c


def test_left_padding_is_a_clear_error():
    _, model = _llama()
    H = np.random.default_rng(8).standard_normal((7, 16))
    with pytest.raises(ValueError, match=r"padded positions \[0, 1\] \(before the first real"):
        model.forward(H, attention_mask=[0, 0, 1, 1, 1, 1, 1])
    _, windowed = _llama(window=2)
    with pytest.raises(ValueError, match=r"\[5, 6\] \(with only padding in their sliding window"):
        windowed.local_lipschitz(H, attention_mask=[1, 1, 1, 1, 0, 0, 0])


def test_sublayer_and_head_info_against_dense_jacobians():
    _, model = _llama(window=3)
    rng = np.random.default_rng(9)
    H = rng.standard_normal((7, 16))
    pad = [1, 1, 1, 1, 0, 1, 1]
    X = model.block_input(H, 1, attention_mask=pad)
    block = model._block(1, 7, check_attention_mask(pad, 7))
    Ja = central_differences(lambda Z: block.attention_branch.forward(Z)[0], X)
    est = model.sublayer_lipschitz_info(X, 1, attention_mask=pad, tol=1e-12)
    _check_directions(est, Ja, X.shape, X.shape)
    assert model.sublayer_lipschitz(X, 1, attention_mask=pad) == pytest.approx(est.value,
                                                                                rel=1e-10)
    Xm = block.layers[0].forward(X)[0]
    Jm = central_differences(lambda Z: Z + block.mlp_branch.forward(Z)[0], Xm)
    _check_directions(model.sublayer_lipschitz_info(X, 1, branch="mlp", residual=True,
                                                    attention_mask=pad, tol=1e-12),
                      Jm, X.shape, X.shape)
    infos = model.head_lipschitz_info(X, 1, attention_mask=pad, tol=1e-12)
    assert len(infos) == 4
    np.testing.assert_allclose([e.value for e in infos],
                               model.head_lipschitz(X, 1, attention_mask=pad), rtol=1e-10)
    for i in (0, 3):
        head = block.attn.head(i)
        Jh = central_differences(lambda Z, h=head: h.forward(block.norm_1.forward(Z)[0])[0], X)
        _check_directions(infos[i], Jh, X.shape, X.shape)
    # the window and the padding matter for the heads
    assert not np.allclose(model.head_lipschitz(X, 1), [e.value for e in infos], rtol=1e-3)


def test_row_constants_and_token_sensitivity_against_the_dense_jacobian():
    _, model = _gpt2()
    rng = np.random.default_rng(10)
    H = rng.standard_normal((7, 8))
    J = _dense(model, H, None, final_norm=True)
    for row in (0, 3, -1):
        r = row % 7
        rows = J[r * 8:(r + 1) * 8]
        est = model.row_lipschitz_info(H, row, final_norm=True, tol=1e-12)
        _check_directions(est, rows, (7, 8), (8,))
        assert np.all(est.input_direction[r + 1:] == 0)          # causal
        assert model.row_lipschitz(H, row, final_norm=True) == pytest.approx(est.value,
                                                                             rel=1e-10)
    # every row's constant is at most the whole map's
    assert max(model.row_lipschitz(H, r) for r in range(7)) <= model.local_lipschitz(H) * (
        1 + 1e-9)
    sens = model.token_sensitivity(H, final_norm=True)
    info = model.local_lipschitz_info(H, final_norm=True)
    assert sens.shape == (7,)
    assert np.sum(sens**2) == pytest.approx(1.0, abs=1e-12)
    # the top right singular vector of the dense Jacobian, up to its sign
    v = np.linalg.svd(J)[2][0].reshape(7, 8)
    np.testing.assert_allclose(sens, np.linalg.norm(v, axis=1), atol=1e-5)
    np.testing.assert_allclose(np.abs(info.input_direction), np.abs(v), atol=1e-5)


def test_seed_changes_the_start_not_the_value():
    _, model = _llama()
    H = np.random.default_rng(11).standard_normal((7, 16))
    a = model.local_lipschitz_info(H, tol=1e-12, seed=0)
    b = model.local_lipschitz_info(H, tol=1e-12, seed=123)
    assert a.value == pytest.approx(b.value, rel=1e-10)
    assert a == b or a.products != b.products or a.value != b.value   # compare ignores vectors
    for method in (model.local_lipschitz, model.token_sensitivity):
        with pytest.raises(TypeError, match="seed"):
            method(H, seed=1.5)
        with pytest.raises(ValueError, match="seed"):
            method(H, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        model.head_lipschitz(H, 0, seed="0")
    with pytest.raises(TypeError, match="seed"):
        model.sublayer_lipschitz(H, 0, seed=None)
    with pytest.raises(TypeError, match="seed"):
        model.row_lipschitz(H, 0, seed=2.0)


def test_repr():
    _, model = _llama()
    r = repr(model)
    assert r.startswith("Llama(") and r.endswith(", dtype=float64)")
    assert "n_layer=2, d_model=16, n_head=4, n_kv_head=2, head_dim=4" in r
    assert "sliding_window" not in r
    model.blocks[1].sliding_window = 3
    assert "sliding_window=[None, 3]" in repr(model)
    _, g = _gpt2()
    assert repr(g).startswith("GPT2(") and "n_layer=2, d_model=8, n_head=2, n_kv_head=2" in repr(g)


def test_bad_attention_masks_and_rows_name_the_argument():
    _, model = _gpt2()
    H = np.zeros((4, 8))
    for bad, err, match in (("1111", TypeError, "attention_mask must be an array"),
                            ([1, 1, 1], ValueError, r"shape \(N,\) = \(4,\)"),
                            ([[1, 1, 1, 1]], ValueError, r"pass attention_mask\[0\]"),
                            ([1, 2, 1, 1], ValueError, "only 0"),
                            ([0.5, 1, 1, 1], ValueError, "only 0"),
                            ([0, 0, 0, 0], ValueError, "at least one real token"),
                            (np.array(["a"] * 4), TypeError, "dtype"),
                            ([1, 1, None, 1], TypeError, "dtype")):
        with pytest.raises(err, match=match):
            model.forward(H, attention_mask=bad)
    model.forward(H, attention_mask=np.array([True, True, False, True]))
    model.forward(H, attention_mask=[1.0, 1.0, 1.0, 0.0])
    for row, err in ((4, ValueError), (-5, ValueError), (1.0, TypeError), (True, TypeError)):
        with pytest.raises(err, match="row"):
            model.row_lipschitz(H, row)


def test_float32_model_directions_hold_to_float32_accuracy():
    st = llama_state()
    m32 = Llama.from_state_dict(st, n_head=4, n_kv_head=2, dtype=np.float32)
    m64 = Llama.from_state_dict(st, n_head=4, n_kv_head=2)
    H = np.random.default_rng(12).standard_normal((7, 16))
    pad = [1, 1, 1, 1, 1, 0, 1]
    e32 = m32.local_lipschitz_info(H, attention_mask=pad, final_norm=True)
    e64 = m64.local_lipschitz_info(H, attention_mask=pad, final_norm=True)
    assert e32.value == pytest.approx(e64.value, rel=1e-5)
    Jv = m64.jvp(H, e32.input_direction, attention_mask=pad, final_norm=True)
    assert np.linalg.norm(Jv - e32.value * e32.output_direction) <= 1e-5 * e32.value
    # the same singular pair up to its sign
    sign = np.sign(np.sum(e32.input_direction * e64.input_direction))
    np.testing.assert_allclose(sign * e32.input_direction, e64.input_direction, atol=1e-4)


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_sliding_windows_read_by_load_mask_the_attention(tmp_path, family):
    # a query of a windowed block sees only the last 3 tokens, so block 0's output row t
    # is its output on tokens t-2..t alone (RoPE is relative; its tables are float32)
    from test_models_load import build

    from lipattn.models import load

    model = load(build(tmp_path, family, sliding_window=3)[1])
    assert model.blocks[0].sliding_window == 3
    X = np.random.default_rng(13).standard_normal((7, model.d_model))
    out = model.forward(X, stop=1)
    for t in range(7):
        window = model.forward(X[max(0, t - 2):t + 1], stop=1)[-1]
        np.testing.assert_allclose(out[t], window, rtol=2e-6, atol=2e-6 * np.abs(out).max())
    wide = load(build(tmp_path / "wide", family, sliding_window=64)[1])
    assert np.abs(wide.forward(X, stop=1) - out).max() > 1e-3 * np.abs(out).max()
    # the constant of the windowed block against its dense Jacobian
    J = central_differences(lambda Z: model.forward(Z, stop=1), X)
    assert model.local_lipschitz(X, stop=1) == pytest.approx(np.linalg.norm(J, 2), rel=1e-6)
