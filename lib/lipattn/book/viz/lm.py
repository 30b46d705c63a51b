"""Figures and the explorer of Chapter 8 (the trained byte-level GPT-2).

The measurements are :mod:`lipattn.book.lm`'s, precomputed into the
``measurements.json`` shipped next to the checkpoint
(:func:`lipattn.book.lm.precompute`); this module only draws them.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure

from ..._validate import as_choice, as_int_at_least
from .. import lm as _lm
from .. import plotting
from .._check import as_result
from ..widgets import Explorer, Slider

__all__ = ["byte_label", "fig_loss", "fig_constants", "fig_trajectory", "fig_stability_lr",
           "fig_stability_training", "SensitiveDirectionExplorer", "StabilityExplorer"]

#: Windows the explorer offers (the first of the precomputed ones).
EXPLORER_WINDOWS = 16
#: The maps whose most sensitive direction the explorer shows (the model has 4 blocks).
MAPS = ("stack", "block 1", "block 2", "block 3", "block 4")


def byte_label(b: int, lang: str = "en") -> str:
    """A byte as the reader would name it: ``'a'``, ``space``, ``\\n``, or ``0x07``
    (``lang="zh"``: the same, with ``空格`` for the space)."""
    b = as_int_at_least(b, "b", 0, 255)
    space = "空格" if as_choice(lang, "lang", ("en", "zh")) == "zh" else "space"
    names = {32: space, 10: "\\n", 9: "\\t", 13: "\\r"}
    if b in names:
        return names[b]
    return repr(chr(b)) if 33 <= b < 127 else f"0x{b:02x}"


def fig_loss(train: dict) -> Figure:
    """Bits per byte against the training step (``training.json``): the held-out
    curve, the training loss (mean of each 100 steps), the held-out unigram entropy
    and 0.7 times it; a dotted line at :func:`lipattn.book.lm.loss_summary`'s
    ``flat_step``."""
    s = _lm.loss_summary(train)
    curve = np.asarray(train["heldout_curve"], dtype=float)
    bits = np.asarray(train["train_bits"], dtype=float)
    fig, ax = plotting.figure(1, height=3.2)
    n = bits.size // 100 * 100
    if n:
        ax.plot(np.arange(50, n, 100) + 1, bits[:n].reshape(-1, 100).mean(axis=1),
                color="C1", lw=1, label="training (mean of 100 steps)")
    ax.plot(curve[:, 0], curve[:, 1], color="C0", lw=1.6, label="held-out")
    if "unigram_bits" in train:
        H = float(train["unigram_bits"])
        ax.axhline(H, color=plotting.ONE_COLOR, ls="--", lw=1, label="unigram entropy")
        ax.axhline(0.7 * H, color=plotting.ONE_COLOR, ls=":", lw=1, label="0.7 × unigram")
    ax.axvline(s["flat_step"], color="C2", ls=":", lw=1.2,
               label="held-out within 2 % of its last value")
    ax.set_ylim(0.9 * min(curve[:, 1].min(), bits.min()), 5.0)
    ax.set_xlabel("training step")
    ax.set_ylabel("bits per byte")
    ax.legend(fontsize=7.5, loc="center right")
    return fig


def fig_constants(meas: dict) -> Figure:
    """Left: per-layer block, attention-branch and MLP-branch constants over windows
    (median, band 10-90 %). Right: exact stack constant against the product of the
    block constants, one point per window, with the diagonal."""
    m = as_result(meas, "meas", ("block", "attention", "mlp", "stack", "product"),
                  producer="lipattn.book.lm.measure")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.3)
    layers = np.arange(1, m["block"].shape[1] + 1)
    for k, (key, lab) in enumerate((("block", "block"), ("attention", "attention branch"),
                                    ("mlp", "MLP branch"))):
        a = m[key]
        lo, mid, hi = np.quantile(a, [0.1, 0.5, 0.9], axis=0)
        ax1.fill_between(layers, lo, hi, color=f"C{k}", alpha=0.2, lw=0)
        ax1.plot(layers, mid, "o-", color=f"C{k}", ms=4, label=lab)
    ax1.set_yscale("log")
    ax1.set_xticks(layers)
    ax1.set_xlabel("layer l")
    ax1.set_ylabel(r"exact local constant $\|J\|_2$")
    ax1.legend(fontsize=8)
    p, s = m["product"], m["stack"]
    ax2.loglog(p, s, "o", ms=3.5, alpha=0.7, color="C3")
    lim = [min(s.min(), p.min()) / 1.5, max(s.max(), p.max()) * 1.5]
    ax2.plot(lim, lim, "--", color=plotting.ONE_COLOR, lw=1, label="exact = product")
    ax2.set_xlim(lim)
    ax2.set_ylim(lim)
    ax2.set_xlabel("product of the 4 block constants")
    ax2.set_ylabel("exact constant of the stack")
    ax2.legend(fontsize=8, loc="upper left")
    return fig


def fig_trajectory(traj: dict) -> Figure:
    """Against the training step: median block constants (left) and the median largest
    absolute attention logit (right), per layer, over the trajectory's windows."""
    t = as_result(traj, "traj", ("steps", "block", "max_logit", "stack"),
                  producer="lipattn.book.lm.trajectory")
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.3)
    steps = np.maximum(t["steps"], 1)
    for i in range(t["block"].shape[2]):
        ax1.plot(steps, np.median(t["block"][:, :, i], axis=1), "o-", ms=3, color=f"C{i}",
                 label=f"block {i + 1}")
        ax2.plot(steps, np.median(t["max_logit"][:, :, i], axis=1), "o-", ms=3,
                 color=f"C{i}", label=f"layer {i + 1}")
    ax1.plot(steps, np.median(t["stack"], axis=1), "k--", lw=1.2, label="stack")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("training step (step 0 drawn at 1)")
        ax.legend(fontsize=7.5)
    ax1.set_yscale("log")
    ax1.set_ylabel(r"exact constant (median)")
    ax2.set_ylabel(r"largest $|$attention logit$|$ (median)")
    return fig


_LS = {"none": "-", "warmup": "--", "decay": "-.", "zloss": ":", "all": (0, (5, 1, 1, 1))}


def _sweep(result: dict) -> tuple[list[dict], list[float]]:
    res = as_result(result, "result", ("runs",),
                    producer="lipattn.book.stability.read_results")
    runs = res["runs"]
    if not isinstance(runs, list) or not runs or not all(
            isinstance(r, dict) and {"lr", "qk_norm", "arm", "heldout_bits"} <= set(r)
            for r in runs):
        raise ValueError("result['runs'] must be a non-empty list of stability runs")
    return runs, sorted({r["lr"] for r in runs})


def _arms(runs: list[dict], arms) -> tuple[str, ...]:
    have = {r["arm"] for r in runs}
    if isinstance(arms, str) or not isinstance(arms, (tuple, list)) or not arms \
            or not all(isinstance(a, str) and a in have for a in arms):
        raise ValueError(f"arms must be a non-empty tuple of the sweep's arms "
                         f"{sorted(have)}; got {arms!r}")
    return tuple(arms)


def fig_stability_lr(result: dict, arms: tuple = ("none", "all")) -> Figure:
    """Against the peak learning rate, per QK-norm setting and mitigation arm in
    ``arms``: the final held-out bits/byte (left) and the final largest attention
    logit of any layer (right, log scale, with QK-norm's gain bound dotted, arm
    ``none``); medians over seeds, bars from the 10 % to the 90 % quantile.
    Diverged runs are left out of the quantiles; a cell whose runs all diverged
    is drawn as a cross at the top of both panels."""
    runs, lrs = _sweep(result)
    arms = _arms(runs, arms)
    fig, (ax1, ax2) = plotting.figure(2, width=8.4, height=3.4)
    combos = [(qk, a) for qk in (False, True) for a in arms]
    for k, (qk, arm) in enumerate(combos):
        col = "C1" if qk else "C0"
        lab = ("QK-norm" if qk else "no QK-norm") + ("" if arm == "none" else f", {arm}")
        x = np.array(lrs) * 1.04 ** (k - (len(combos) - 1) / 2)
        cells = [[r["diverged_at"] is not None for r in runs if r["lr"] == lr
                  and r["qk_norm"] == qk and r["arm"] == arm] for lr in lrs]
        gone = [bool(c) and all(c) for c in cells]       # a cell with runs, all diverged
        for ax in (ax1, ax2) if any(gone) else ():
            first = not any(ln.get_label() == "all runs diverged" for ln in ax1.get_lines())
            ax.plot(x[np.array(gone)], [0.97] * sum(gone), "x", color=col, ms=6,
                    transform=ax.get_xaxis_transform(), clip_on=False,
                    label="all runs diverged" if ax is ax1 and first else None)
        for ax, get in ((ax1, lambda r: r["heldout_bits"][-1]),
                        (ax2, lambda r: max(r["max_logit"][-1]))):
            q = np.array([np.quantile([get(r) for r in runs if r["lr"] == lr
                                       and r["qk_norm"] == qk and r["arm"] == arm
                                       and r["diverged_at"] is None] or [np.nan],
                                      [0.1, 0.5, 0.9]) for lr in lrs])
            ax.errorbar(x, q[:, 1], yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], fmt="o",
                        ls=_LS.get(arm, "-"), color=col, ms=4, capsize=2, lw=1.3,
                        label=lab if ax is ax1 else None)
        if qk and arm == arms[0]:
            b = [np.median([max(r["gain_bound"][-1]) for r in runs if r["lr"] == lr
                            and r["qk_norm"] and r["arm"] == arm]) for lr in lrs]
            ax2.plot(lrs, b, ":", color=col, lw=1.5, label=f"gain bound ({arm})")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
    ax2.set_yscale("log")
    ax1.set_ylabel("final held-out bits/byte")
    ax2.set_ylabel(r"final largest $|$attention logit$|$")
    ax1.legend(fontsize=7.5)
    ax2.legend(fontsize=7.5)
    return fig


def _seed_curves(ax_logit, ax_bits, runs: list[dict], lr: float, arm: str,
                 unigram: float | None = None) -> list:
    """Per seed, the largest logit (any layer) and the held-out bits/byte against the
    step, QK-norm off (C0) and on (C1); returns the lines."""
    lines = []
    for qk, col, lab in ((False, "C0", "no QK-norm"), (True, "C1", "QK-norm")):
        rs = sorted((r for r in runs if r["lr"] == lr and r["qk_norm"] == qk
                     and r["arm"] == arm), key=lambda r: r["seed"])
        for j, r in enumerate(rs):
            st = np.maximum(r["eval_steps"], 1)
            lines += ax_logit.plot(st, np.max(r["max_logit"], axis=-1), "-", color=col,
                                   lw=1.0, alpha=0.8, label=lab if j == 0 else None)
            lines += ax_bits.plot(st, r["heldout_bits"], "-", color=col, lw=1.0,
                                  alpha=0.8, label=lab if j == 0 else None)
    if unigram is not None:
        ax_bits.axhline(unigram, color="0.4", ls=":", lw=1.0, label="unigram entropy")
    return lines


def fig_stability_training(result: dict, lr: float, arm: str = "none") -> Figure:
    """Through training at the peak rate ``lr``, mitigation arm ``arm``, QK-norm off
    and on, one line per seed: the largest attention logit (any layer, top left)
    and the held-out bits/byte (top right, with the held-out unigram entropy
    dotted); the exact local constant of the stack of blocks at checkpoints,
    median over windows, one line per measured run of that arm, at the (at most
    two) rates with measured runs (bottom)."""
    runs, lrs = _sweep(result)
    if lr not in lrs:
        raise ValueError(f"lr must be one of the sweep's rates {lrs}; got {lr!r}")
    arm = _arms(runs, (arm,))[0]
    fig, axes = plotting.figure(2, 2, width=8.4, height=6.2)
    (ax1, ax2), (ax3, ax4) = axes
    _seed_curves(ax1, ax2, runs, lr, arm, result.get("unigram_bits"))
    crates = sorted({r["lr"] for r in runs if r["const"] and r["arm"] == arm})[:2]
    for ax, rate in zip((ax3, ax4), crates + [None] * (2 - len(crates)), strict=True):
        if rate is None:
            ax.set_axis_off()
            continue
        for qk, col, lab in ((False, "C0", "no QK-norm"), (True, "C1", "QK-norm")):
            first = True
            for r in runs:
                if r["lr"] != rate or r["qk_norm"] != qk or not r["const"] \
                        or r["arm"] != arm:
                    continue
                st = sorted(int(k) for k in r["const"])
                ax.plot(np.maximum(st, 1), [np.median(r["const"][str(k)]) for k in st],
                        "o-", color=col, ms=3, lw=1, label=lab if first else None)
                first = False
        ax.set_yscale("log")
        ax.set_ylabel("exact constant (median)")
        ax.set_title(f"blocks' constant, peak rate {rate:g}", fontsize=9)
        ax.set_xscale("log")
        ax.set_xlabel("training step (step 0 drawn at 1)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7.5)
    ax1.set_yscale("log")
    ax1.set_ylabel(r"largest $|$attention logit$|$")
    ax2.set_ylabel("held-out bits/byte")
    lo, hi = ax2.get_ylim()
    if hi > 10 * max(lo, 1e-9):      # spikes: a log axis keeps the plateau legible
        ax2.set_yscale("log")
    for ax in (ax1, ax2):
        ax.set_title(f"peak rate {lr:g}, arm {arm}; one line per seed", fontsize=9)
        ax.legend(fontsize=7.5)
        ax.set_xscale("log")
        ax.set_xlabel("training step (step 0 drawn at 1)")
    return fig


@lru_cache(maxsize=1)
def _explorer_data() -> dict:
    m = _lm.read_measurements(_lm.checkpoint_dir(weights=False), check=False)["measure"]
    if m["block"].shape[1] != len(MAPS) - 1 or m["tokens"].shape[0] < EXPLORER_WINDOWS:
        raise ValueError(f"the explorer expects {len(MAPS) - 1} blocks and at least "
                         f"{EXPLORER_WINDOWS} windows; got {m['block'].shape}")
    return m


class SensitiveDirectionExplorer(
        Explorer, name="lm-direction", size=(8.4, 3.3),
        title="Where the trained model's most sensitive input direction sits"):
    """Held-out window and map: where the most sensitive input direction sits."""

    window = Slider(tuple(range(EXPLORER_WINDOWS)), label="held-out window", default=0)
    map = Slider(MAPS, label="map", default="stack")
    presets = {"stack, window 0": {"window": 0, "map": "stack"},
               "block 1, window 0": {"window": 0, "map": "block 1"}}

    def setup(self, fig: Figure):
        self._m = m = _explorer_data()
        N = m["tokens"].shape[1]
        ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
        pos = np.arange(N)
        (self._line,) = ax.plot(pos, np.ones(N), "-", lw=1.0, color="C0",
                                drawstyle="steps-mid")
        (self._first,) = ax.plot([0], [1.0], "o", ms=7, color="C3",
                                 label="position 0 (first token)")
        (self._top,) = ax.plot([0], [1.0], "v", ms=7, color="C2", label="largest")
        ax.set_yscale("log")
        ax.set_ylim(1e-7, 1.5)
        ax.set_xlim(-2, N + 1)
        ax.set_xlabel("position in the window")
        ax.set_ylabel("share of the direction's energy")
        ax.legend(fontsize=7.5, loc="upper right")
        k = m["prefix_k"][0]
        for row in m["prefix"][:EXPLORER_WINDOWS]:
            ax2.plot(k, row, "-", color="0.75", lw=0.7)
        (self._pref,) = ax2.plot(k, m["prefix"][0], "o-", color="C1", ms=3.5, lw=1.8)
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log")
        lo, hi = m["prefix"][:EXPLORER_WINDOWS].min(), m["prefix"][:EXPLORER_WINDOWS].max()
        ax2.set_ylim(lo / 1.3, hi * 1.3)
        ax2.set_xlabel("prefix length k")
        ax2.set_ylabel(r"stack constant at $H_{1:k}$")
        self._title = fig.suptitle(" ", fontsize=9)
        return [self._line, self._first, self._top, self._pref, self._title]

    def update(self, window: int, map: str) -> None:  # noqa: A002 - the slider's name
        m = self._m
        e = m["energy"][window] if map == "stack" else \
            m["block_energy"][window, MAPS.index(map) - 1]
        e = np.maximum(e, 1e-7)
        self._line.set_ydata(e)
        self._first.set_data([0], [e[0]])
        j = int(np.argmax(e))
        self._top.set_data([j], [e[j]])
        self._pref.set_ydata(m["prefix"][window])
        b = m["tokens"][window, j]
        self._title.set_text(f"window {window}, {map}: position 0 holds {100 * e[0]:.2g} %; "
                             f"largest share {e[j]:.1%} at position {j} (byte {byte_label(b)})")


#: The shipped sweep's peak rates and mitigation arms, the stability explorer's sliders.
STABILITY_LRS = (0.01, 0.3, 1.0)
STABILITY_ARMS = ("none", "warmup", "decay", "zloss", "all")


@lru_cache(maxsize=1)
def _stability_data() -> dict:
    from .. import stability
    res = stability.read_results()
    runs = res["runs"]
    if sorted({r["lr"] for r in runs}) != list(STABILITY_LRS) or \
            {r["arm"] for r in runs} != set(STABILITY_ARMS):
        raise ValueError(f"the explorer expects the rates {STABILITY_LRS} and the arms "
                         f"{STABILITY_ARMS}; the shipped sweep differs")
    fails = stability.failures(runs, res["unigram_bits"])
    cells: dict = {}
    for r, f in zip(runs, fails, strict=True):
        cells.setdefault((r["lr"], r["qk_norm"], r["arm"]), []).append(
            (r["seed"], np.maximum(r["eval_steps"], 1), np.max(r["max_logit"], axis=-1),
             np.asarray(r["heldout_bits"], float), f))
    return {"cells": {k: sorted(v, key=lambda x: x[0]) for k, v in cells.items()},
            "unigram": res["unigram_bits"], "stuck": stability.STUCK,
            "n_seeds": len({r["seed"] for r in runs}),
            "steps": max(r["eval_steps"][-1] for r in runs),
            "logit_max": max(np.max(r["max_logit"]) for r in runs),
            "bits_max": max(max(r["heldout_bits"]) for r in runs)}


class StabilityExplorer(
        Explorer, name="lm-stability", size=(8.4, 3.3),
        title="The stability sweep: one line per seed"):
    """Peak rate, QK-norm and mitigation arm: each seed's largest attention logit and
    held-out bits/byte through training, from the shipped sweep."""

    lr = Slider(STABILITY_LRS, label="peak learning rate", default=0.3)
    qk_norm = Slider(("off", "on"), label="QK-norm", default="off")
    arm = Slider(STABILITY_ARMS, label="mitigations", default="none")
    presets = {"rate 0.3, no QK-norm": {"lr": 0.3, "qk_norm": "off", "arm": "none"},
               "rate 0.3, QK-norm": {"lr": 0.3, "qk_norm": "on", "arm": "none"},
               "rate 1, all mitigations": {"lr": 1.0, "qk_norm": "off", "arm": "all"}}

    def setup(self, fig: Figure):
        self._d = d = _stability_data()
        ax1, ax2 = fig.subplots(1, 2)
        x = [1, d["steps"]]
        self._logit = [ax1.plot(x, [1, 1], "-", lw=1.2, color=f"C{j}")[0]
                       for j in range(d["n_seeds"])]
        self._bits = [ax2.plot(x, [1, 1], "-", lw=1.2, color=f"C{j}",
                               label=f"seed {j}")[0] for j in range(d["n_seeds"])]
        ax2.axhline(d["unigram"], color="0.3", ls=":", lw=1.0, label="unigram entropy")
        ax2.axhline(d["stuck"] * d["unigram"], color="0.6", ls="--", lw=0.8,
                    label="stuck line")
        for ax in (ax1, ax2):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(1, d["steps"] * 1.1)
            ax.set_xlabel("training step (step 0 drawn at 1)")
        ax1.set_ylim(1, d["logit_max"] * 2)
        ax2.set_ylim(2, max(d["bits_max"] * 1.3, 10))
        ax1.set_ylabel(r"largest $|$attention logit$|$")
        ax2.set_ylabel("held-out bits/byte")
        # in the logit panel's empty upper left, clear of the loss spikes
        ax1.legend(handles=[*self._bits, *ax2.get_lines()[-2:]], fontsize=7,
                   loc="upper left")
        self._title = fig.suptitle(" ", fontsize=9)
        return [*self._logit, *self._bits, self._title]

    def update(self, lr: float, qk_norm: str, arm: str) -> None:
        runs = self._d["cells"][(lr, qk_norm == "on", arm)]
        for j, (_, st, lg, h, _) in enumerate(runs):
            self._logit[j].set_data(st, lg)
            self._bits[j].set_data(st, h)
        fails = [f for *_, f in runs]
        n = {k: sum(f[k] for f in fails) for k in ("spiked", "stuck", "diverged")}
        self._title.set_text(
            f"rate {lr:g}, QK-norm {qk_norm}, mitigations {arm}: "
            f"{sum(f['failed'] for f in fails)} of {len(runs)} seeds fail "
            f"({n['spiked']} spiked, {n['stuck']} stuck, {n['diverged']} diverged)")
