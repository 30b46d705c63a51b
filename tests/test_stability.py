"""lipattn.book.stability: the QK-norm / mitigations sweep on real text."""

from __future__ import annotations

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


def test_mitigations_change_the_loss_and_the_weights(corpus):
    kw = dict(qk_norm=False, lr=3e-3, seed=0, steps=4, eval_every=2, corpus=corpus)
    a, b = st.train_run(mitigations=False, **kw), st.train_run(mitigations=True, **kw)
    assert a["heldout_bits"][0] == b["heldout_bits"][0]        # same initialisation
    assert a["heldout_bits"][-1] != b["heldout_bits"][-1]


def _fake(lrs=(1e-2, 1e-1), seeds=(0, 1)):
    runs = []
    for lr in lrs:
        for s in seeds:
            for qk in (False, True):
                for mit in (False, True):
                    bad = lr == lrs[-1] and not qk
                    h = [8.0, 4.0, 4.6 if bad else 3.0]
                    runs.append({"qk_norm": qk, "mitigations": mit, "lr": lr, "seed": s,
                                 "eval_steps": [0, 10, 20], "heldout_bits": h,
                                 "max_logit": [[1.0], [5.0], [900.0 if bad else 4.0]],
                                 "gain_bound": [[2.0], [6.0], [8.0]] if qk else [],
                                 "diverged_at": None, "const": {}})
    return {"args": {}, "git_commit": "x", "runs": runs, "cells": []}


def test_summary_counts_what_it_says():
    S = st.summary(_fake())
    assert S["n_runs"] == 16 and S["n_seeds"] == 2 and S["steps"] == 20
    assert S["plain_unstable"] == 2 and S["mit_unstable"] == 2 and S["qk_unstable"] == 0
    assert S["wins_top"] == 2 and S["pairs_top"] == 2
    assert S["logit_wins"] == 4 and S["logit_pairs"] == 8
    assert S["plain_first_bad_lr"] == 0.1 and S["bound_ok"] == 1.0
    # Wortsman's LR sensitivity: mean of min(L, L0) minus the best: (3 + 4.6)/2 - 3
    assert math.isclose(S["plain_sens"], 0.8) and S["qk_sens"] == 0.0
    rows = st.summarise(_fake()["runs"])
    assert len(rows) == 8 and rows[1]["spiked"] == 2


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


def test_shipped_results_have_the_design_the_page_states():
    R = st.read_results()
    S = st.summary(R)
    rows = st.summarise(R["runs"])
    assert len(rows) == 4 * S["n_lrs"] and all(r["runs"] == S["n_seeds"] >= 8 for r in rows)
    assert S["bound_ok"] == 1.0
    assert R["git_commit"] != "unknown" and not R["git_commit"].endswith("+dirty")
    # the page's main statement, on the shipped runs
    assert S["plain_logit_top"] > 10 * S["qk_logit_top"]


def test_stability_figures_draw_the_medians():
    from lipattn.book.viz import lm as lmviz
    R = _fake()
    fig = lmviz.fig_stability_lr(R)
    ax1 = fig.axes[0]
    meds = [np.median([r["heldout_bits"][-1] for r in R["runs"] if r["lr"] == lr
                       and not r["qk_norm"] and not r["mitigations"]]) for lr in (1e-2, 1e-1)]
    assert np.allclose(ax1.lines[0].get_ydata(), meds)
    fig = lmviz.fig_stability_training(R, 1e-1)
    assert np.allclose(fig.axes[0].lines[0].get_ydata(), [1.0, 5.0, 900.0])
    with pytest.raises(ValueError, match="lr"):
        lmviz.fig_stability_training(R, 0.5)
