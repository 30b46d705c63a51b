"""lipattn.book.lm: Chapter 8's measurements, against dense finite-difference Jacobians
and a loop re-implementation of the attention statistics."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from conftest import central_differences

from lipattn.book import lm
from lipattn.models import GPT2, load, random_state_dict

L, D, HEADS, CTX = 2, 8, 2, 8


def _save(path, seed=0, scale=1.0):
    """A small GPT-2 checkpoint with weights large enough for non-trivial attention."""
    sd = random_state_dict("gpt2", L, D, HEADS, vocab=256, n_pos=CTX, std=0.3, seed=seed,
                           norm_std=0.3, bias_std=0.3)
    sd = {k: v * scale if k.endswith("attn.c_attn.weight") else v for k, v in sd.items()}
    GPT2.from_state_dict(sd, n_head=HEADS).save_pretrained(path)
    text = bytes(np.random.default_rng(seed).integers(32, 127, 200).astype(np.uint8))
    (path / "heldout.txt").write_bytes(text)
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return _save(tmp_path_factory.mktemp("lm") / "m", scale=3.0)


TOK = np.array([72, 101, 108, 108, 111, 32, 119, 111])


def test_window_constants_match_dense_jacobians(ckpt):
    m = load(ckpt)
    r = lm.window_constants(m, TOK, tol=1e-10)
    H = m.embed(TOK)
    J = central_differences(lambda Z: m.forward(Z), H)
    U, s, Vt = np.linalg.svd(J)
    assert abs(r["stack"] - s[0]) < 1e-6 * s[0]
    # the energy of the top right singular vector per position (sign-free)
    assert np.allclose(r["energy"], np.sum(Vt[0].reshape(H.shape) ** 2, axis=1), atol=1e-5)
    assert abs(r["energy"].sum() - 1) < 1e-9
    Jf = central_differences(lambda Z: m.forward(Z, final_norm=True), H)
    assert abs(r["stack_final"] - np.linalg.norm(Jf, 2)) < 1e-6 * r["stack_final"]
    X = H
    for i in range(L):
        Jb = central_differences(lambda Z, i=i: m.forward(Z, start=i, stop=i + 1), X)
        assert abs(r["block"][i] - np.linalg.norm(Jb, 2)) < 1e-6 * r["block"][i]
        blk = m.blocks[i]
        Ja = central_differences(lambda Z, b=blk: b.attention_branch.forward(Z)[0], X)
        assert abs(r["attention"][i] - np.linalg.norm(Ja, 2)) < 1e-6 * r["attention"][i]
        Xm = blk.layers[0].forward(X)[0]
        Jm = central_differences(lambda Z, b=blk: b.mlp_branch.forward(Z)[0], Xm)
        assert abs(r["mlp"][i] - np.linalg.norm(Jm, 2)) < 1e-6 * r["mlp"][i]
        # Theorem 7.1's bounds hold, and the chain rule: block <= (1 + a)(1 + m)
        assert r["attn_exact"][i] <= min(r["head_sum"][i], r["head_sqrt"][i]) * (1 + 1e-8)
        assert r["block"][i] <= (1 + r["attention"][i]) * (1 + r["mlp"][i]) * (1 + 1e-8)
        X = m.forward(X, start=i, stop=i + 1)
    assert r["stack"] <= r["product"] * (1 + 1e-8)
    assert math.isclose(r["product"], np.prod(r["block"]))


def test_prefixes_are_the_leading_blocks_of_the_jacobian(ckpt):
    """Proposition 8.1: the constant at H[:k] is the norm of J's leading k x k block."""
    m = load(ckpt)
    r = lm.window_constants(m, TOK, tol=1e-10, prefixes=(1, 3, 5, 8, 64))
    assert r["prefix_k"].tolist() == [1, 3, 5, 8]
    H = m.embed(TOK)
    J = central_differences(lambda Z: m.forward(Z), H).reshape(CTX, D, CTX, D)
    for k, c in zip(r["prefix_k"], r["prefix"], strict=True):
        lead = J[:k, :, :k, :].reshape(k * D, k * D)
        assert abs(c - np.linalg.norm(lead, 2)) < 1e-6 * c
    assert np.all(np.diff(r["prefix"]) >= -1e-8 * r["prefix"][1:])
    assert np.abs(J[0, :, 1:, :]).max() < 1e-8         # causal: row 0 sees token 0 only


def test_attention_stats_against_a_loop(ckpt):
    m = load(ckpt)
    a = lm.attention_stats(m, TOK)
    H = m.embed(TOK)
    dh = D // HEADS
    for i, blk in enumerate(m.blocks):
        att = blk.attn
        X = blk.norm_1.forward(H)[0]
        Q, K = X @ att.W_Q + att.b_Q, X @ att.W_K + att.b_K
        top, mass = 0.0, []
        for h in range(HEADS):
            q, k = Q[:, h * dh:(h + 1) * dh], K[:, h * dh:(h + 1) * dh]
            first = []
            for r in range(CTX):
                s = np.array([q[r] @ k[j] / math.sqrt(dh) for j in range(r + 1)])
                top = max(top, np.abs(s).max())
                p = np.exp(s - s.max())
                p /= p.sum()
                if r >= 1:
                    first.append(p[0])
            mass.append(np.mean(first))
        assert abs(a["max_logit"][i] - top) < 1e-10 * top
        assert np.allclose(a["first_mass"][i], mass, atol=1e-12)
        H = blk.forward(H)[0]


def test_window_tokens():
    text = bytes(range(50))
    w = lm.window_tokens(text, 10, 5)
    assert w.shape == (5, 10) and w.dtype == np.int64
    assert w[0, 0] == 0 and w[-1, -1] == 49
    assert lm.window_tokens(text, 10, 1).tolist() == [list(range(10))]
    with pytest.raises(ValueError, match="at least N = 60"):
        lm.window_tokens(text, 60, 2)
    with pytest.raises(TypeError, match="text must be bytes"):
        lm.window_tokens("abc", 2, 1)


def test_bad_tokens_and_models(ckpt):
    m = load(ckpt)
    with pytest.raises(ValueError, match="1 to 8 token ids"):
        lm.window_constants(m, np.arange(9))
    with pytest.raises(ValueError, match=r"in \[0, 256\)"):
        lm.attention_stats(m, [1, 300])
    with pytest.raises(TypeError, match="model must be a GPT-2 model"):
        lm.attention_stats("model", [1, 2])


def test_measure_trajectory_and_precompute(ckpt, tmp_path):
    run = tmp_path / "run"
    for step, seed in ((20, 1), (10, 2)):
        _save(run / f"step-{step:06d}", seed=seed)
    (run / "step-000030").mkdir()                        # incomplete: skipped
    assert [s for s, _ in lm.run_steps(run)] == [10, 20]
    m = load(ckpt)
    w = lm.window_tokens((ckpt / "heldout.txt").read_bytes(), CTX, 3)
    tr = lm.trajectory(lm.run_steps(run), w[:2])
    assert tr["block"].shape == (2, 2, L) and tr["max_logit"].shape == (2, 2, L)
    m10 = load(run / "step-000010")
    assert abs(tr["stack"][0, 1] - m10.local_lipschitz(m10.embed(w[1]), tol=1e-6)) \
        < 1e-5 * tr["stack"][0, 1]
    assert np.allclose(tr["product"], tr["block"].prod(axis=2))
    (ckpt / "training.json").write_text(json.dumps({"args": {"steps": "40"}}))
    shutil.copytree(ckpt, run / "step-000035")    # the same weights at another step
    res = lm.precompute(ckpt, run_dir=run, windows=3, trajectory_windows=2,
                        cache=tmp_path / "cache")
    assert res["trajectory"]["steps"] == [10, 20, 35, 40]    # cached per step
    again = lm.precompute(ckpt, run_dir=run, windows=3, trajectory_windows=2,
                          cache=tmp_path / "cache")
    assert again["trajectory"] == res["trajectory"]     # from the cache
    direct = lm.measure(m, w)
    assert np.allclose(res["measure"]["stack"], direct["stack"], rtol=1e-6)
    (ckpt / lm.MEASUREMENTS).write_text(json.dumps(res))
    back = lm.read_measurements(ckpt)
    assert np.allclose(back["measure"]["block"], direct["block"], rtol=1e-6)
    other = _save(tmp_path / "other", seed=5)
    (other / lm.MEASUREMENTS).write_text(json.dumps(res))
    with pytest.raises(ValueError, match="computed from other weights"):
        lm.read_measurements(other)
    assert lm.read_measurements(other, check=False)["sha256"] == res["sha256"]


def test_checkpoint_dir_names_what_is_missing():
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        lm.checkpoint_dir("no-such-model")
    with pytest.raises(ValueError, match="directory name"):
        lm.checkpoint_dir("../x")


def test_summaries_against_direct_computations(ckpt):
    m = load(ckpt)
    w = lm.window_tokens((ckpt / "heldout.txt").read_bytes(), CTX, 4)
    meas = lm.measure(m, w)
    S = lm.constants_summary(meas)
    assert S["stack_med"] == pytest.approx(np.median(meas["stack"]))
    assert S["block1_hi"] == pytest.approx(np.quantile(meas["block"][:, 1], 0.9))
    assert S["head0_lo"] == pytest.approx(np.quantile(meas["heads"][:, 0].max(1), 0.1))
    assert S["prod_ratio_min"] >= 1 - 1e-6 and S["hs_min"] >= 1 - 1e-6
    assert 0 <= S["top_block"] < L and 1 <= S["top_block_count"] <= 4
    D = lm.direction_summary(meas)
    assert D["e0_med_pct"] == pytest.approx(100 * np.median(meas["energy"][:, 0]))
    assert D["e0_uniform_pct"] == pytest.approx(100 / CTX)
    assert sum(n for _, n, _ in D["top_bytes"]) <= 4 and -1 <= D["rho_e0_fm"] <= 1
    assert D["fm_n_heads"] == L * HEADS
    A = lm.scale_alignment(m, meas)
    s_inv = [1 / np.sqrt(m.embed(t).var(axis=1) + m.eps) for t in w]
    assert A["scale_match"] == sum(int(np.argmax(e) == np.argmax(s))
                                   for e, s in zip(meas["energy"], s_inv, strict=True))
    assert -1 <= A["scale_rho_med"] <= 1 and A["scale_ratio_med"] >= 1
    T = lm.trajectory_summary(lm.trajectory([(0, m), (5, m)], w[:2]))
    assert T["tr_st_0"] == pytest.approx(T["tr_st_T"]) and T["tr_logit_up"] == 0


def test_uniform_first_mass_is_a_harmonic_number():
    for N in (2, 3, 128):
        HN = sum(1 / i for i in range(1, N + 1))
        assert lm.uniform_first_mass(N) == pytest.approx((HN - 1) / (N - 1), rel=1e-14)
    with pytest.raises(ValueError):
        lm.uniform_first_mass(1)


def test_recipe_and_parameter_count(ckpt):
    assert lm.recipe({"decay": "constant"}) == "then a constant learning rate"
    r = lm.recipe({"decay": "cosine", "min_lr": "0.0003", "weight_decay": "0.1",
                   "clip": "1.0"})
    assert r == ("a cosine decay to 0.0003, decoupled weight decay 0.1, "
                 "gradient clipping at norm 1")
    assert lm.recipe({"decay": "constant"}, "zh") == "此后学习率保持不变"
    r_zh = lm.recipe({"decay": "cosine", "min_lr": "0.0003", "weight_decay": "0.1",
                      "clip": "1.0"}, lang="zh")
    assert r_zh == "余弦衰减到 0.0003，解耦权重衰减 0.1，梯度范数裁剪到 1"
    assert lm.recipe({"decay": "cosine"}, "zh") == "余弦衰减到峰值的十分之一"
    with pytest.raises(ValueError, match="lang must be one of"):
        lm.recipe({"decay": "constant"}, "fr")
    sd = random_state_dict("gpt2", L, D, HEADS, vocab=256, n_pos=CTX)
    n = sum(v.size for v in sd.values())
    assert lm.n_parameters(load(ckpt)) == n


def test_loss_summary_on_a_curve_worked_by_hand():
    """A held-out curve whose answers are read off by hand: it falls from 8 to about 2
    and wobbles within 2 % of its last value 2.00 from step 400 on."""
    curve = [[0, 8.0], [100, 4.0], [200, 3.0], [300, 2.5], [400, 2.03], [500, 1.99],
             [600, 2.03], [700, 2.01], [800, 2.0], [900, 2.015], [1000, 2.0]]
    train = {"heldout_curve": curve, "train_bits": [3.0] * 950 + [1.5] * 50}
    s = lm.loss_summary(train)
    assert s["loss_steps"] == 1000 and s["loss_T"] == 2.0
    assert (s["loss_best"], s["loss_best_step"]) == (1.99, 500)
    assert s["loss_drop20"] == pytest.approx(0.0)             # 800: 2.0 -> 2.0
    assert s["loss_drop40"] == pytest.approx(0.03)            # 600: 2.03 -> 2.0
    assert s["loss_drop40_pct"] == pytest.approx(100 * 0.03 / 2.03)
    assert s["flat_step"] == 400                               # |2.5 - 2| > 2 % at 300
    assert lm.loss_summary(train, flat_tol=0.01)["flat_step"] == 700   # 2.03: 1.5 % off
    assert s["train_T"] == 1.5 and s["gap_T"] == pytest.approx(0.5)
    assert s["train_drop20"] == pytest.approx(3.0 - 1.5)     # steps 750-799 vs 950-999
    # the evaluation at or before 80 % of the steps when 80 % falls between two
    odd = {"heldout_curve": [[0, 5.0], [70, 3.0], [90, 2.0], [100, 1.5]], "train_bits": [1.0]}
    assert lm.loss_summary(odd)["loss_drop20"] == pytest.approx(3.0 - 1.5)
    assert lm.loss_summary(odd)["loss_drop20_pct"] == pytest.approx(50.0)
    with pytest.raises(ValueError, match="heldout_curve"):
        lm.loss_summary({"heldout_curve": [[0, 1.0], [0, 2.0]], "train_bits": [1.0]})
    with pytest.raises(ValueError, match="heldout_curve"):     # would divide by 0
        lm.loss_summary({"heldout_curve": [[0, 1.0], [10, 0.0]], "train_bits": [1.0]})
