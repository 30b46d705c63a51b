"""lipattn.book.stability: the QK-norm / mitigations sweep on real text."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lipattn.book import stability as st
from lipattn.book.corpus import stdlib_corpus
from lipattn.layers import attention_logits


@pytest.fixture(scope="module")
def corpus():
    return stdlib_corpus()


def test_build_is_a_llama_layout_with_learned_qk_gains():
    m, lm = st.build(True, 1, 16, 2, seed=0)
    assert m.model_type == "qwen3" and "wpe" not in lm.params
    names = set(lm.params)
    assert {"body.0.0.0.1.q_norm.g", "body.0.0.0.1.k_norm.g"} <= names or any(
        k.endswith("q_norm.g") for k in names)
    m0, lm0 = st.build(False, 1, 16, 2, seed=0)
    assert m0.blocks[0].attn.q_norm is None
    assert not any("q_norm" in k for k in lm0.params)


def test_gain_bound_bounds_every_logit_and_is_attained_in_the_limit():
    rng = np.random.default_rng(0)
    m, _ = st.build(True, 2, 16, 2, seed=1)
    for b in m.blocks:              # random learned gains, some large
        b.attn.q_norm.g[...] = rng.normal(0, 3, b.attn.q_norm.g.shape)
        b.attn.k_norm.g[...] = rng.normal(0, 3, b.attn.k_norm.g.shape)
        for W in (b.attn.W_Q, b.attn.W_K):
            W[...] = rng.normal(0, 1, W.shape)
    t = rng.integers(0, 256, (3, 12))
    got, bound = st.max_logits(m, t), st.gain_bound(m)
    assert np.all(got <= bound) and np.all(got > 0)
    # independent reference: logits of one head from q, k by hand (layer 1)
    b = m.blocks[0]
    X = b.norm_1.forward(m.embed_tokens[t].astype(np.float64))[0]
    _, state = b.attn.forward(X.astype(np.float32))
    T = attention_logits(state.core.Q, state.core.K, scale=state.core.scale)
    assert np.isclose(np.abs(T[..., np.tril(np.ones((12, 12), bool))]).max(), got[0],
                      rtol=1e-5)
    # the bound: max|g_q| max|g_k| sqrt(d_h), by hand
    a = b.attn
    assert np.isclose(bound[0], np.abs(a.q_norm.g).max() * np.abs(a.k_norm.g).max()
                      * math.sqrt(a.head_dim), rtol=1e-6)
    with pytest.raises(ValueError, match="model"):
        st.gain_bound(st.build(False, 1, 16, 2)[0])


def test_short_retrain_keeps_the_direction_of_the_page(corpus):
    """The page's main statement, at a high rate: without QK-norm the largest logit
    grows far beyond QK-norm's (paired seeds), which stays below its gain bound."""
    for seed in (0, 1):
        kw = dict(lr=0.1, seed=seed, mitigations=False, steps=40, eval_every=20,
                  corpus=corpus)
        plain = st.train_run(qk_norm=False, **kw)
        qk = st.train_run(qk_norm=True, **kw)
        assert plain["diverged_at"] is None and qk["diverged_at"] is None
        assert max(plain["max_logit"][-1]) > 10 * max(qk["max_logit"][-1])
        assert all(x <= b for L, B in zip(qk["max_logit"], qk["gain_bound"], strict=True)
                   for x, b in zip(L, B, strict=True))
        assert qk["heldout_bits"][-1] < qk["heldout_bits"][0]


def test_mitigation_names_and_arms():
    assert st.mitigation_set(True) == ("warmup", "decay", "zloss")
    assert st.mitigation_set(False) == ()
    assert st.mitigation_set(["zloss", "warmup"]) == ("warmup", "zloss")
    assert st.mitigation_set(frozenset({"decay"})) == ("decay",)
    assert st.arm_name(()) == "none" and st.arm_name(True) == "all"
    assert st.arm_name(("zloss", "decay")) == "decay+zloss"
    with pytest.raises(ValueError, match="mitigations"):
        st.mitigation_set(["warmup", "warmup"])
    with pytest.raises(ValueError, match="mitigations"):
        st.mitigation_set(["clip"])
    with pytest.raises(TypeError, match="mitigations"):
        st.mitigation_set("warmup")          # a bare string is not a collection


def test_each_mitigation_acts_only_through_its_setting(corpus):
    """Switched on with its setting at zero, a mitigation changes nothing (the
    same seed gives the same run); with its setting on, it changes the run."""
    kw = dict(qk_norm=False, lr=3e-3, seed=0, steps=6, eval_every=3, corpus=corpus)
    none = st.train_run(mitigations=(), warmup_frac=0.5, **kw)
    off = {"warmup": dict(warmup_frac=0.0), "decay": dict(decay=0.0, warmup_frac=0.5),
           "zloss": dict(z_loss=0.0, warmup_frac=0.5)}
    for m in st.MITIGATIONS:
        on = st.train_run(mitigations=(m,), warmup_frac=0.5, **kw)   # 3 warm-up steps
        zero = st.train_run(mitigations=(m,), **kw, **off[m])
        assert on["arm"] == m and on["mitigations"] == [m]
        assert on["heldout_bits"][0] == none["heldout_bits"][0]   # same init
        assert zero["heldout_bits"] == none["heldout_bits"]
        assert on["heldout_bits"][-1] != none["heldout_bits"][-1]
    both = st.train_run(mitigations=True, warmup_frac=0.5, **kw)
    assert both["arm"] == "all"
    assert both["mitigations"] == ["warmup", "decay", "zloss"]


def _run(lr, seed, h, qk=False, arm="none", logit=4.0, diverged=None):
    n = len(h)
    return {"qk_norm": qk, "arm": arm, "mitigations": [], "lr": lr, "seed": seed,
            "eval_steps": list(range(0, 10 * n, 10)), "heldout_bits": list(h),
            "max_logit": [[1.0]] * (n - 1) + [[logit]],
            "gain_bound": [[8.0]] * n if qk else [], "diverged_at": diverged,
            "const": {}}


def test_failures_by_hand():
    H = 4.5
    runs = [_run(0.01, 0, [8, 4, 3.0]),                  # reference, learns
            _run(0.3, 0, [8, 4.3, 4.2]),                 # stuck: >= 0.9 H = 4.05
            _run(1.0, 0, [8, 4.0, 5.2, 3.9]),            # spike: 5.2 - 4.0 > 1
            _run(0.01, 1, [8, 4.3, 4.2]),                # reference does not learn
            _run(0.3, 1, [8, 4.3, 4.2]),                 # so not stuck
            _run(1.0, 1, [8, 4.0, 4.9], diverged=20)]    # diverged, no spike
    F = st.failures(runs, H)
    assert [f["stuck"] for f in F] == [False, True, False, False, False, False]
    assert [f["spiked"] for f in F] == [False, False, True, False, False, False]
    assert [f["diverged"] for f in F] == [False] * 5 + [True]
    assert [f["failed"] for f in F] == [False, True, True, False, False, True]
    assert math.isclose(F[2]["rise"], 1.2) and F[0]["rise"] == 0.0
    # the thresholds are parameters
    assert not st.failures(runs, H, spike=1.5)[2]["spiked"]
    assert not st.failures(runs, H, stuck=0.95)[1]["stuck"]
    with pytest.raises(ValueError, match="spike"):
        st.failures(runs, H, spike=0.0)
    with pytest.raises(ValueError, match="unigram_bits"):
        st.failures(runs, -1.0)


def test_late_slope_fits_only_the_final_fraction():
    t = np.arange(0, 201, 20)
    h = np.where(t < 100, 9.0 - 0.05 * t, 4.0 - 0.002 * (t - 100))  # kink at 100
    r = {"eval_steps": t.tolist(), "heldout_bits": h.tolist()}
    assert math.isclose(st.late_slope(r), 0.2)           # per 100 steps
    assert math.isclose(st.late_slope(r, frac=0.5), 0.2)
    # the whole run: the least-squares line through both pieces, by hand
    tc, hc = t - t.mean(), h - h.mean()
    assert math.isclose(st.late_slope(r, frac=1.0), -100 * (tc @ hc) / (tc @ tc))
    rising = {"eval_steps": [0, 10, 20], "heldout_bits": [3.0, 3.1, 3.2]}
    assert math.isclose(st.late_slope(rising), -1.0)     # negative: rising
    with pytest.raises(ValueError, match="frac"):
        st.late_slope(r, frac=0.01)                      # one step left
    with pytest.raises(ValueError, match="frac"):
        st.late_slope(r, frac=0.0)
    with pytest.raises(ValueError, match="run"):
        st.late_slope({"eval_steps": [0, 10], "heldout_bits": [1.0]})
    with pytest.raises(TypeError, match="run"):
        st.late_slope({"heldout_bits": [1.0, 2.0]})


def _fake(lrs=(1e-2, 1e-1), seeds=(0, 1), arms=("none", "zloss")):
    runs = []
    for lr in lrs:
        for s in seeds:
            for qk in (False, True):
                for arm in arms:
                    bad = lr == lrs[-1] and not qk and arm == "none"
                    h = [8.0, 4.0, 4.4 if bad else 3.0]
                    runs.append({"qk_norm": qk, "arm": arm, "mitigations": [],
                                 "lr": lr, "seed": s,
                                 "eval_steps": [0, 10, 20], "heldout_bits": h,
                                 "max_logit": [[1.0], [5.0], [2e4 if bad else 4.0]],
                                 "gain_bound": [[2.0], [6.0], [8.0]] if qk else [],
                                 "diverged_at": None, "const": {}})
    return {"args": {}, "git_commit": "x", "runs": runs, "cells": [],
            "unigram_bits": 4.5}


def test_summary_counts_what_it_says():
    S = st.summary(_fake())
    assert S["n_runs"] == 16 and S["n_seeds"] == 2 and S["steps"] == 20
    assert S["n_arms"] == 2 and S["eval_every"] == 10
    assert math.isclose(S["stuck_bits"], 0.9 * 4.5)
    # plain, no mitigation, at the top rate: both seeds stuck (4.4 >= 4.05)
    assert S["plain_none_stuck1"] == 2 and S["plain_none_failed1"] == 2
    assert S["plain_zloss_failed1"] == 0 and S["qk_none_failed1"] == 0
    assert S["plain_failed"] == 2 and S["qk_failed"] == 0 and S["failed"] == 2
    assert S["qkwins1"] == 2 and S["qkpairs1"] == 4 and S["qkfix1"] == 2
    assert S["plain_zloss_fix1"] == 2 and S["plain_zloss_break1"] == 0
    assert math.isclose(S["plain_zloss_dbits1"], -1.4)
    assert S["big_runs"] == 2 and S["big_failed"] == 2 and S["small_failed"] == 0
    assert S["bound_ok"] == 1.0 and math.isclose(S["bound_ratio"], 5 / 6)
    assert math.isclose(S["plain_none_bits1"], 4.4)
    # Wortsman's LR sensitivity: mean of min(L, L0) minus the best: (3 + 4.4)/2 - 3
    assert math.isclose(S["plain_sens_none"], 0.7) and S["qk_sens_none"] == 0.0
    rows = st.summarise(_fake()["runs"], 4.5)
    assert len(rows) == 8 and rows[1]["stuck"] == 2 and rows[1]["arm"] == "none"


def test_summary_and_reader_refuse_bad_input(tmp_path):
    with pytest.raises(TypeError, match="result"):
        st.summary([])
    with pytest.raises(ValueError, match="spike"):
        st.summary(_fake(), spike=-1.0)
    with pytest.raises(ValueError, match="path"):
        st.read_results(tmp_path / "none.json")
    with pytest.raises(ValueError, match="lr"):
        st.train_run(qk_norm=False, lr=0.0, seed=0, mitigations=False)
    with pytest.raises(TypeError, match="corpus"):
        st.train_run(qk_norm=False, lr=0.1, seed=0, mitigations=False, corpus=(b"a", b"b"))
    with pytest.raises(ValueError, match="mitigations"):
        st.train_run(qk_norm=False, lr=0.1, seed=0, mitigations=("clip",))


def test_shipped_results_have_the_design_the_page_states():
    R = st.read_results()
    S = st.summary(R)
    rows = st.summarise(R["runs"], R["unigram_bits"])
    assert len(rows) == 2 * S["n_arms"] * S["n_lrs"]
    assert all(r["runs"] == S["n_seeds"] >= 3 for r in rows)
    assert {r["arm"] for r in rows} == set(st.ARMS)
    assert S["bound_ok"] == 1.0
    assert R["git_commit"] != "unknown" and not R["git_commit"].endswith("+dirty")
    # the cells stored in the file are the ones the module computes now
    assert rows == R["cells"]
    # the page's main statement, on the shipped runs
    assert S["plain_none_logit1"] > 10 * S["qk_none_logit1"]


def test_long_budget_check_counts_what_the_page_states():
    """Chapter 8's check of the budget (data/stability_long.json), read with json
    and numpy only: the stuck test, the spike test and the second-half slopes
    written out here, against the counts the page glues from the module."""
    R = json.loads(st.LONG.read_text())
    short = json.loads(st.DATA.read_text())
    assert R["args"]["out"] == "stability_long.json"        # no machine path
    assert int(R["args"]["steps"]) == 4 * int(short["args"]["steps"])
    assert R["git_commit"] != "unknown" and not R["git_commit"].endswith("+dirty")
    runs, line = R["runs"], 0.9 * R["unigram_bits"]
    assert len(runs) == 24 and all(r["diverged_at"] is None for r in runs)
    lo, hi = sorted({r["lr"] for r in runs})
    end = {(r["qk_norm"], r["arm"], r["seed"], r["lr"]): r["heldout_bits"][-1]
           for r in runs}
    stuck = {k[:3]: v >= line > end[k[:3] + (lo,)] for k, v in end.items() if k[3] == hi}
    rise = [max(np.asarray(r["heldout_bits"]) - np.minimum.accumulate(r["heldout_bits"]))
            for r in runs]
    assert max(rise) < 1.0                                  # no spike
    count = {(qk, a): sum(v for k, v in stuck.items() if k[:2] == (qk, a))
             for qk in (False, True) for a in ("none", "all")}
    assert count == {(False, "none"): 2, (False, "all"): 3,
                     (True, "none"): 0, (True, "all"): 0}
    # the module's counts are the same
    S = st.summary(st.read_results(st.LONG))
    assert [S[f"{t}_{a}_stuck1"] for t in ("plain", "qk") for a in ("none", "all")] \
        == [count[(qk, a)] for qk in (False, True) for a in ("none", "all")]
    assert S["failed"] == sum(count.values()) and S["diverged"] == 0
    # the runs without QK-norm at the higher rate, by hand
    plain = [r for r in runs if r["lr"] == hi and not r["qk_norm"]]
    slopes = []
    for r in plain:
        t, h = np.asarray(r["eval_steps"], float), np.asarray(r["heldout_bits"])
        k = t >= t[-1] / 2
        tc = t[k] - t[k].mean()
        slopes.append(-100 * (tc @ (h[k] - h[k].mean())) / (tc @ tc))
    assert np.allclose(slopes, [st.late_slope(r) for r in plain])
    assert sum(x > 0 for x in slopes) == len(plain) - 1     # one rises
    assert sum(min(r["heldout_bits"]) < line for r in plain) == 2
    # every one of them ends far above its own seed at the low rate and above
    # its paired run with QK-norm
    for r in plain:
        k = (r["arm"], r["seed"])
        assert r["heldout_bits"][-1] - end[(False, *k, lo)] > 1.0
        assert r["heldout_bits"][-1] - end[(True, *k, hi)] > 1.1
    # with no mitigation, the long runs are the short sweep's, continued
    old = {(r["qk_norm"], r["lr"], r["seed"]): r for r in short["runs"]
           if r["arm"] == "none"}
    for r in (r for r in runs if r["arm"] == "none"):
        o = old[(r["qk_norm"], r["lr"], r["seed"])]
        shared = sorted(set(r["eval_steps"]) & set(o["eval_steps"]))
        assert len(shared) == 17 and shared[-1] == 640
        a = dict(zip(r["eval_steps"], r["heldout_bits"], strict=True))
        b = dict(zip(o["eval_steps"], o["heldout_bits"], strict=True))
        assert [a[t] for t in shared] == [b[t] for t in shared]


def test_stability_figures_draw_the_runs():
    from lipattn.book.viz import lm as lmviz
    R = _fake()
    fig = lmviz.fig_stability_lr(R, arms=("none",))
    ax1 = fig.axes[0]
    meds = [np.median([r["heldout_bits"][-1] for r in R["runs"] if r["lr"] == lr
                       and not r["qk_norm"] and r["arm"] == "none"]) for lr in (1e-2, 1e-1)]
    assert np.allclose(ax1.lines[0].get_ydata(), meds)
    fig = lmviz.fig_stability_training(R, 1e-1)
    assert np.allclose(fig.axes[0].lines[0].get_ydata(), [1.0, 5.0, 2e4])
    assert np.allclose(fig.axes[1].lines[0].get_ydata(), [8.0, 4.0, 4.4])
    with pytest.raises(ValueError, match="lr"):
        lmviz.fig_stability_training(R, 0.5)
    with pytest.raises(ValueError, match="arms"):
        lmviz.fig_stability_lr(R, arms=("decay",))


def _rms(x, g, eps=1e-6):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * g


def test_max_logits_against_queries_and_keys_rebuilt_by_hand():
    """Independent of the library's attention: RMSNorm, per-head RMSNorm with
    gains, and Hugging Face's half-split RoPE (rotate_half) written out here."""
    rng = np.random.default_rng(3)
    m, _ = st.build(True, 1, 32, 2, seed=2)
    a, b = m.blocks[0].attn, m.blocks[0]
    for gn in (a.q_norm.g, a.k_norm.g):
        gn[...] = rng.uniform(0.5, 3.0, gn.shape)
    for W in (a.W_Q, a.W_K):
        W[...] *= 50
    t = rng.integers(0, 256, (2, 10))
    X = _rms(m.embed_tokens[t].astype(np.float64), b.norm_1.g)
    dh, N = a.head_dim, t.shape[1]

    def heads(W, g):
        Y = (X @ W.astype(np.float64)).reshape(2, N, -1, dh).swapaxes(1, 2)
        return _rms(Y, g.astype(np.float64))
    ang = np.arange(N)[:, None] / 1e4 ** (np.arange(0, dh, 2) / dh)
    ang = np.concatenate([ang, ang], -1)

    def rope(Y):
        half = np.concatenate([-Y[..., dh // 2:], Y[..., :dh // 2]], -1)
        return Y * np.cos(ang) + half * np.sin(ang)
    Q, K = rope(heads(a.W_Q, a.q_norm.g)), rope(heads(a.W_K, a.k_norm.g))
    T = Q @ K.swapaxes(-1, -2) / math.sqrt(dh)
    mine = np.abs(T[..., np.tril(np.ones((N, N), bool))]).max()
    assert np.isclose(st.max_logits(m, t)[0], mine, rtol=1e-4)
    assert mine <= st.gain_bound(m)[0]


def test_gain_bound_is_attained_in_the_limit():
    """Equal gains c, W_Q = W_K large: the diagonal logit at position 0 (no
    rotation) is c^2 d_h m/(m + eps)/sqrt(d_h) -> c^2 sqrt(d_h), the bound."""
    m, _ = st.build(True, 1, 32, 2, seed=0)
    a = m.blocks[0].attn
    a.q_norm.g[...] = a.k_norm.g[...] = 2.5
    a.W_Q[...] *= 1e3
    a.W_K[...] = a.W_Q
    t = np.zeros((1, 1), np.int64)
    got, bound = st.max_logits(m, t)[0], st.gain_bound(m)[0]
    assert math.isclose(bound, 2.5 ** 2 * math.sqrt(a.head_dim))
    assert bound * (1 - 1e-5) < got <= bound * (1 + 1e-6)
