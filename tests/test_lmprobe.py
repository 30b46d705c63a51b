"""lipattn.book.lmprobe: attention constants against dense finite-difference
Jacobians of the attention layer on independently shortened windows, and the
byte interventions against dense Jacobians of the replaced windows."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import central_differences

from lipattn.book import lm, lmprobe
from lipattn.models import GPT2, random_state_dict

L, D, HEADS, CTX = 2, 8, 2, 8


@pytest.fixture(scope="module")
def model():
    sd = random_state_dict("gpt2", L, D, HEADS, vocab=256, n_pos=CTX, std=0.3, seed=1,
                           norm_std=0.3, bias_std=0.3)
    sd = {k: 3 * v if k.endswith("attn.c_attn.weight") else v for k, v in sd.items()}
    return GPT2.from_state_dict(sd, n_head=HEADS)


WIN = np.array([[72, 101, 108, 108, 111, 32, 119, 111],
                [40, 41, 58, 10, 32, 32, 32, 32]])


def test_attention_growth_is_the_attention_layer_on_a_shortened_window(model):
    g = lmprobe.attention_growth(model, WIN, lengths=(1, 2, 5, 8, 50), tol=1e-10)
    assert g["lengths"].tolist() == [1, 2, 5, 8]
    for a, tok in enumerate(WIN):
        for j, n in enumerate(g["lengths"]):
            X = model.embed(tok[:n])          # the window read alone, n bytes
            for i, blk in enumerate(model.blocks):
                Y = blk.norm_1.forward(X)[0]
                J = central_differences(lambda Z, b=blk: b.attn.forward(Z)[0], Y)
                ref = np.linalg.norm(J, 2)
                assert abs(g["attn"][a, i, j] - ref) < 1e-6 * ref
                r = np.sqrt(np.mean(np.sum(Y ** 2, axis=1)))
                assert np.isclose(g["radius"][a, i, j], r, rtol=1e-12)
                X = model.forward(X, start=i, stop=i + 1)
    # causal: a window's constant is at least its prefix's
    assert np.all(np.diff(g["attn"], axis=2) >= -1e-8 * g["attn"][..., 1:])


def test_growth_summary_against_direct_slopes():
    rng = np.random.default_rng(0)
    ks = np.array([2, 8, 32])
    A = np.exp(rng.standard_normal((5, 2, 3)))
    s = lmprobe.growth_summary({"lengths": ks, "attn": A, "radius": A + 1})
    slope = np.log(A[:, 1, 2] / A[:, 1, 1]) / np.log(4)
    assert np.isclose(s["g1_slope_med"], np.median(slope))
    assert s["g1_above_half"] == np.sum(slope > 0.5)
    med = np.median(A[:, 0], axis=0)
    b = np.linalg.lstsq(np.c_[np.ones(3), np.log(ks)], np.log(med), rcond=None)[0][1]
    assert np.isclose(s["g0_fit"], b)
    with pytest.raises(ValueError, match="lo"):
        lmprobe.growth_summary({"lengths": ks, "attn": A, "radius": A}, lo=4)


def test_byte_interventions_against_dense_jacobians(model):
    r = lmprobe.byte_interventions(model, WIN, n_pos=2, draws=2, seed=3, tol=1e-10)
    pool = set(WIN.ravel().tolist())
    for a, tok in enumerate(WIN):
        H = model.embed(tok)
        _, s, Vt = np.linalg.svd(central_differences(lambda Z: model.forward(Z), H))
        assert abs(r["base"][a] - s[0]) < 1e-6 * s[0]
        e = np.sum(Vt[0].reshape(H.shape) ** 2, axis=1)
        top = np.argsort(-e)[:2]
        assert sorted(r["top_pos"][a]) == sorted(top)
        assert np.isclose(r["top_share"][a], e[top].sum(), atol=1e-6)
        for arm in ("top", "random", "first"):
            for k in range(2):
                t = r[f"{arm}_tokens"][a, k]
                changed = np.flatnonzero(t != tok)
                assert set(t[changed].tolist()) <= pool
                want = {"top": set(top), "first": {0}}.get(arm)
                if want is not None:
                    assert set(changed) == want
                else:
                    assert len(changed) == 2 and not set(changed) & set(top)
                Hn = model.embed(t)
                _, sn, Vn = np.linalg.svd(central_differences(lambda Z: model.forward(Z), Hn))
                assert abs(r[arm][a, k] - sn[0]) < 1e-6 * sn[0]
                left = np.sum(Vn[0].reshape(H.shape)[top] ** 2)
                assert abs(r[f"{arm}_left"][a, k] - left) < 1e-5


def test_intervention_summary_against_direct_counts(model):
    r = lmprobe.byte_interventions(model, WIN, n_pos=2, draws=3, seed=0, tol=1e-8)
    s = lmprobe.intervention_summary(r)
    rt = r["top"] / r["base"][:, None]
    rr = r["random"] / r["base"][:, None]
    assert np.isclose(s["iv_top_med"], np.median(rt))
    assert np.isclose(s["iv_random_hi"], np.quantile(rr, 0.9))
    brk = np.median(abs(rt - 1), axis=1) <= np.median(abs(rr - 1), axis=1)
    assert s["iv_break"] == brk.sum()
    assert s["iv_windows"] == 2 and s["iv_draws"] == 3 and s["iv_n_pos"] == 2


def test_random_init_is_the_state_dict_of_that_seed(model):
    r = lmprobe.random_init(model, seed=4)
    sd = random_state_dict("gpt2", L, D, HEADS, vocab=256, n_pos=CTX, seed=4)
    assert np.array_equal(r.wte, sd["wte.weight"])
    assert np.array_equal(r.blocks[1].attn.W_O, sd["h.1.attn.c_proj.weight"])
    assert r.n_layer == L and r.n_head == HEADS


def test_bad_inputs_name_the_argument(model):
    with pytest.raises(ValueError, match="n_pos"):
        lmprobe.byte_interventions(model, WIN[:, :2], n_pos=2)
    with pytest.raises(ValueError, match="two different bytes"):
        lmprobe.byte_interventions(model, np.full((1, 4), 7))
    with pytest.raises(ValueError, match="lengths"):
        lmprobe.attention_growth(model, WIN[:, :2], lengths=(4, 8))
    with pytest.raises(TypeError, match="model"):
        lmprobe.attention_growth("gpt2", WIN)


def test_update_measurements_keeps_the_rest(tmp_path, model):
    path = tmp_path / "m"
    model.save_pretrained(path)
    text = bytes(np.random.default_rng(0).integers(32, 127, 200).astype(np.uint8))
    (path / "heldout.txt").write_bytes(text)
    res = lm.precompute(path, windows=2, trajectory_windows=1, N=CTX, tol=1e-6)
    (path / lm.MEASUREMENTS).write_text(json.dumps(res))
    with pytest.raises(ValueError, match="parts"):
        lmprobe.update_measurements(path, "nonsense")
    out = lmprobe.update_measurements(path, "growth,interventions", random_seeds=1)
    assert np.allclose(out["measure"]["stack"], res["measure"]["stack"])
    assert out["growth"]["attn"].shape == (2, L, 3)           # lengths 2, 4, 8
    assert out["growth_random"]["attn"].shape == (1, 2, L, 3)
    assert np.allclose(out["interventions"]["base"], res["measure"]["stack"], rtol=1e-5)


def test_attention_growth_with_zero_logits_is_uniform_averaging():
    """With W_Q = W_K = 0 every softmax row is uniform over its prefix and
    the logit term of the Jacobian vanishes, so the layer is the linear map
    Y -> P_n Y W_V W_O: constant ||P_n||_2 ||W_V W_O||_2 (Kronecker), with
    ||P_n||_2 non-decreasing in n and below 2 (Hardy's inequality)."""
    sd = random_state_dict("gpt2", L, D, HEADS, vocab=256, n_pos=CTX, seed=2)
    for i in range(L):
        sd[f"h.{i}.attn.c_attn.weight"][:, :2 * D] = 0.0
    m = GPT2.from_state_dict(sd, n_head=HEADS)
    ks = (1, 2, 4, 8)
    g = lmprobe.attention_growth(m, WIN, lengths=ks, tol=1e-10)
    P = [np.linalg.norm(np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None], 2)
         for n in ks]
    assert np.all(np.diff(P) >= 0) and max(P) < 2 and np.isclose(P[0], 1)
    for i in range(L):
        c = sd[f"h.{i}.attn.c_attn.weight"][:, 2 * D:] @ sd[f"h.{i}.attn.c_proj.weight"]
        ref = np.array(P) * np.linalg.norm(c, 2)
        assert np.allclose(g["attn"][:, i], ref, rtol=1e-8)
