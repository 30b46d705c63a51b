"""lipattn.book.viz.lm: Chapter 8's figures and the direction explorer's data."""

from __future__ import annotations

import numpy as np
import pytest

from lipattn.book.viz import lm as lmviz


def test_byte_label():
    assert lmviz.byte_label(32) == "space" and lmviz.byte_label(10) == "\\n"
    assert lmviz.byte_label(ord("a")) == "'a'" and lmviz.byte_label(7) == "0x07"
    assert lmviz.byte_label(32, "zh") == "空格" and lmviz.byte_label(10, "zh") == "\\n"
    assert lmviz.byte_label(ord("a"), lang="zh") == "'a'"
    with pytest.raises(ValueError, match="lang must be one of"):
        lmviz.byte_label(32, "fr")
    with pytest.raises(ValueError, match=r"b must be an integer in \[0, 255\]"):
        lmviz.byte_label(256)


def _fake(W=5, L=4, S=3):
    rng = np.random.default_rng(0)
    block = 1 + rng.random((W, L))
    return ({"block": block, "attention": rng.random((W, L)), "mlp": rng.random((W, L)),
             "stack": block.prod(1) / 2, "product": block.prod(1)},
            {"steps": np.array([0, 500, 1000]), "block": 1 + rng.random((S, W, L)),
             "max_logit": rng.random((S, W, L)), "stack": 1 + rng.random((S, W))})


def test_figures_draw_what_they_are_given():
    meas, traj = _fake()
    fig = lmviz.fig_constants(meas)
    ax1, ax2 = fig.axes[:2]
    med = np.median(meas["block"], axis=0)
    assert np.allclose(ax1.lines[0].get_ydata(), med)
    assert np.allclose(ax2.lines[0].get_xdata(), meas["product"])
    fig = lmviz.fig_trajectory(traj)
    assert np.allclose(fig.axes[1].lines[2].get_ydata(),
                       np.median(traj["max_logit"][:, :, 2], axis=1))
    with pytest.raises(ValueError, match="meas"):
        lmviz.fig_constants({"block": meas["block"]})


def test_stability_explorer_draws_the_shipped_seeds():
    """The explorer's lines are the shipped records of the chosen cell, seed by
    seed, and its title counts the failures that stability.failures finds."""
    from lipattn.book import stability
    R = stability.read_results()
    F = stability.failures(R["runs"], R["unigram_bits"])
    ex = lmviz.StabilityExplorer()
    for lr, qk, arm in ((0.3, "off", "none"), (1.0, "on", "all")):
        ex.render(lr=lr, qk_norm=qk, arm=arm)
        rs = sorted((r["seed"], i) for i, r in enumerate(R["runs"])
                    if r["lr"] == lr and r["qk_norm"] == (qk == "on") and r["arm"] == arm)
        for j, (_, i) in enumerate(rs):
            r = R["runs"][i]
            assert np.allclose(ex._bits[j].get_ydata(), r["heldout_bits"])
            assert np.allclose(ex._logit[j].get_ydata(),
                               [max(x) for x in r["max_logit"]])
        n = sum(F[i]["failed"] for _, i in rs)
        assert f": {n} of {len(rs)} seeds fail" in ex._title.get_text()


def test_a_cell_whose_runs_all_diverged_is_drawn_not_left_out():
    """fig_stability_lr marks a (rate, QK-norm, arm) cell with no finite run by a
    cross in both panels, where its quantiles would be NaN; the shipped sweep has no
    such cell and gets no cross."""
    import copy

    from lipattn.book import stability

    res = stability.read_results()
    crosses = lambda fig: [ln for ax in fig.axes for ln in ax.get_lines()  # noqa: E731
                           if ln.get_marker() == "x"]
    assert crosses(lmviz.fig_stability_lr(res)) == []
    gone = copy.deepcopy(res)
    top = max(r["lr"] for r in gone["runs"])
    for r in gone["runs"]:
        if r["lr"] == top and not r["qk_norm"]:
            r["diverged_at"] = 1
    marks = crosses(lmviz.fig_stability_lr(gone, arms=("none", "all")))
    assert len(marks) == 2 * 2                     # 2 arms without QK-norm, 2 panels
    for ln in marks:
        assert np.allclose(ln.get_xdata(), top, rtol=0.1)
    legend = [t.get_text() for t in lmviz.fig_stability_lr(gone).axes[0].get_legend().texts]
    assert "all runs diverged" in legend
    qk_only = copy.deepcopy(res)                   # not the first arm drawn: still labelled
    for r in qk_only["runs"]:
        if r["lr"] == top and r["qk_norm"]:
            r["diverged_at"] = 1
    legend = [t.get_text() for t in lmviz.fig_stability_lr(qk_only).axes[0].get_legend().texts]
    assert legend.count("all runs diverged") == 1
    sparse = copy.deepcopy(res)                    # a cell with no runs is not "all diverged"
    sparse["runs"] = [r for r in sparse["runs"] if not (r["lr"] == top and r["arm"] == "all")]
    assert crosses(lmviz.fig_stability_lr(sparse, arms=("none", "all"))) == []


def test_fig_loss_marks_where_the_held_out_loss_levels_off():
    """The dotted vertical line sits at loss_summary's flat_step."""
    curve = [[0, 8.0], [100, 3.0], [200, 2.2], [300, 2.01], [400, 2.0]]
    train = {"heldout_curve": curve, "train_bits": [3.0] * 400, "unigram_bits": 4.5}
    fig = lmviz.fig_loss(train)
    vert = [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == ":"
            and np.ptp(ln.get_xdata()) == 0]
    assert len(vert) == 1 and vert[0].get_xdata()[0] == 300
