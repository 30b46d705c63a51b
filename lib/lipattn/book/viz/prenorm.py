"""Figures, experiments and explorers of the Pre-LN vs Post-LN chapter.

The experiments (:mod:`lipattn.book.prenorm`, :mod:`lipattn.models.training`) are run
once per kernel through the cached functions below, so that the chapter's
figures and its two explorers share one computation. Sizes are module
constants, stated in the chapter.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from ..._validate import as_count, as_int_at_least, as_positive_float, as_seed
from ...layernorm import layer_norm_jacobian_norm
from ...models.encoder import MATRICES
from ...models.optim import radam_rectification
from ...models.training import TrainResult, train_reversal
from .. import plotting
from .._check import as_reals, as_result, as_text
from ..prenorm import InitProfile, fit_power, init_profile, intervention_runs
from ..widgets import Explorer, Slider

__all__ = ["PROFILE_D", "PROFILE_SEEDS", "PROFILE_DEPTHS", "LRS", "WARMUPS", "TRAIN_SEEDS",
           "TRAIN", "profiles", "training_grid", "grid_index", "fig_ln_norm", "fig_intuition",
           "fig_profile", "fig_last_layer", "fig_training_grid", "fig_first_steps",
           "fig_amplification", "DepthExplorer", "WarmupExplorer", "INTERVENTIONS",
           "interventions", "fig_grad_norm", "fig_interventions", "RESCUES", "rescues"]

#: Gradients at initialisation: model dimension, seeds, depths of the explorer.
#: The per-layer gradient norms are heavy-tailed across seeds, so the chapter
#: reports medians and quantiles over many seeds (they are cheap).
PROFILE_D, PROFILE_SEEDS, PROFILE_TOKENS = 64, 48, 16
PROFILE_DEPTHS = (3, 6, 12, 24)
#: The warm-up grid: learning rates x warm-up lengths x seeds, per variant.
LRS = (3e-3, 1e-2)
WARMUPS = (0, 60)
TRAIN_SEEDS = tuple(range(16))
#: The training run's sizes (keyword arguments of ``train_reversal``).
TRAIN = {"layers": 6, "d": 32, "vocab": 16, "n_tokens": 8, "batch": 16, "steps": 300}
#: Interventions on the failed runs (Post-LN, lr 1e-2, no warm-up), each with every
#: seed of the grid: label -> (parameters, first steps, factor on their updates),
#: as in :func:`lipattn.book.prenorm.scaled_updates`.
INTERVENTIONS = {"first update ÷ 60": (None, 1, 1 / 60),
                 "W_Q, W_K frozen, steps 0–19": (("W_Q", "W_K"), 20, 0.0),
                 "W_1, W_2 frozen, steps 0–19": (("W_1", "W_2"), 20, 0.0)}
#: Interventions that shrink only the early updates of the same failed runs, every
#: parameter at once: short warm-ups, the 60-step warm-up cut off after 10 steps,
#: a smaller learning rate for 20 steps, and RAdam's rectification (every step).
RESCUES = {"warm-up over 5 steps": (None, 5, np.arange(1, 6) / 5),
           "warm-up over 20 steps": (None, 20, np.arange(1, 21) / 20),
           "60-step warm-up, first 10 steps only": (None, 10, np.arange(1, 11) / 60),
           "lr ÷ 10, steps 0–19": (None, 20, 0.1),
           "RAdam's rectification": (None, TRAIN["steps"],
                                     radam_rectification(TRAIN["steps"], 0.98))}
VARIANT_COLORS = {"post": "C1", "pre": "C0"}
VARIANT_NAMES = {"post": "Post-LN", "pre": "Pre-LN"}


def profiles(layers: int, d: int = PROFILE_D, seeds: int = PROFILE_SEEDS
             ) -> dict[str, InitProfile]:
    """Both variants' :func:`lipattn.book.prenorm.init_profile` (cached)."""
    return _profiles(as_count(layers, "layers", maximum=256), as_count(d, "d", maximum=1024),
                     as_count(seeds, "seeds", maximum=1000))


@lru_cache(maxsize=16, typed=True)
def _profiles(layers: int, d: int, seeds: int) -> dict[str, InitProfile]:
    return {v: init_profile(layers, d, v, seeds=seeds, n_tokens=PROFILE_TOKENS)
            for v in ("post", "pre")}


@lru_cache(maxsize=1, typed=True)
def training_grid() -> dict[str, TrainResult]:
    """The warm-up grid for both variants: ``LRS x WARMUPS x TRAIN_SEEDS`` runs each (cached)."""
    combos = list(itertools.product(LRS, WARMUPS, TRAIN_SEEDS))
    lr, warm, seed = (list(c) for c in zip(*combos, strict=True))
    return {v: train_reversal(v, lr, warm, seed, **TRAIN) for v in ("post", "pre")}


@lru_cache(maxsize=1, typed=True)
def interventions() -> tuple[list[str], TrainResult]:
    """:data:`INTERVENTIONS` on Post-LN at lr 1e-2 without warm-up, every seed of
    the grid, as one batch (cached); see :func:`lipattn.book.prenorm.intervention_runs`."""
    return intervention_runs(INTERVENTIONS, list(TRAIN_SEEDS), variant="post", lr=1e-2,
                             warmup=0, **TRAIN)


@lru_cache(maxsize=1, typed=True)
def rescues() -> tuple[list[str], TrainResult]:
    """:data:`RESCUES` on Post-LN at lr 1e-2 without warm-up, every seed of the grid,
    as one batch (cached), like :func:`interventions`."""
    return intervention_runs(RESCUES, list(TRAIN_SEEDS), variant="post", lr=1e-2,
                             warmup=0, **TRAIN)


def grid_index(lr: float, warmup: int, seed: int) -> int:
    """Run index of (lr, warmup, seed) in :func:`training_grid`'s results."""
    lr, warmup = as_positive_float(lr, "lr"), as_int_at_least(warmup, "warmup", 0)
    seed = as_seed(seed)
    for name, value, grid in (("lr", lr, LRS), ("warmup", warmup, WARMUPS),
                              ("seed", seed, TRAIN_SEEDS)):
        if value not in grid:
            raise ValueError(f"{name} must be one of the grid's {grid}; got {value!r}")
    return (LRS.index(lr) * len(WARMUPS) + WARMUPS.index(warmup)) * len(TRAIN_SEEDS) \
        + TRAIN_SEEDS.index(seed)


# ---------------------------------------------------------------------------
# LayerNorm
# ---------------------------------------------------------------------------
def fig_ln_norm(eps: float = 1e-5) -> Figure:
    """||J_LN||_2 against the input's standard deviation, d = 2 and d >= 3."""
    eps = as_positive_float(eps, "eps")
    if eps > 1.0:
        raise ValueError(f"eps must be a positive number at most 1; got {eps!r}")
    sig = np.geomspace(1e-5, 10, 300)
    fig, ax = plotting.figure(width=7.0, height=3.2)
    for d, style in ((2, "C1"), (3, "C0"), (64, "C2")):
        x = np.zeros((sig.size, d))
        x[:, 0], x[:, 1] = sig, -sig  # centred; std = sig * sqrt(2/d)
        std = sig * np.sqrt(2 / d)
        ax.plot(std, layer_norm_jacobian_norm(x, eps), color=style, lw=2 if d == 2 else 1.8,
                ls="-" if d != 64 else "--", label=f"d = {d}")
    ax.axhline(1 / np.sqrt(eps), color=plotting.ONE_COLOR, ls=":", lw=1.2,
               label=r"$1/\sqrt{\varepsilon}$")
    ax.axvline(np.sqrt(eps), color="0.6", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("standard deviation of the row, √var x (log axis)")
    ax.set_ylabel(r"$\|J_{\mathrm{LN}}(x)\|_2$ (log axis)")
    ax.set_title(r"LayerNorm's Jacobian norm, $\varepsilon = 10^{-5}$ "
                 r"(grey line: std = $\sqrt{\varepsilon}$)")
    ax.legend(loc="lower left")
    return fig


# ---------------------------------------------------------------------------
# gradients at initialisation
# ---------------------------------------------------------------------------
def _band(ax, x, samples, color, label):
    """Median over seeds as a line, 10-90 % quantiles as a band (samples: (seeds, n))."""
    lo, med, hi = np.quantile(samples, [0.1, 0.5, 0.9], axis=0)
    ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)
    ax.plot(x, med, color=color, marker="o", ms=3, label=label)


def fig_profile(layers: int = 12) -> Figure:
    """Per-layer gradient norms (W_Q and W_2), the residual stream and the
    gradient reaching each layer's input, both variants, at depth ``layers``."""
    prof = profiles(as_int_at_least(layers, "layers", 1, 48))
    fig, axes = plotting.figure(2, 2, width=8.4, height=5.8)
    axes = axes.ravel()
    x = np.arange(1, layers + 1)
    for v, p in prof.items():
        c, name = VARIANT_COLORS[v], VARIANT_NAMES[v]
        _band(axes[0], x, p.grad[:, :, MATRICES.index("W_2")], c, name)
        _band(axes[1], x, p.grad[:, :, MATRICES.index("W_Q")], c, name)
        _band(axes[2], np.arange(layers + 1), p.second_moment, c, name)
        _band(axes[3], np.arange(layers + 1), p.stream_grad, c, name)
    titles = (r"$\|\partial\ell/\partial W_2\|_F$ per layer",
              r"$\|\partial\ell/\partial W_Q\|_F$ per layer",
              "residual stream: mean squared entry", r"$\|\partial\ell/\partial X_l\|_F$")
    for ax, t in zip(axes, titles, strict=True):
        ax.set_yscale("log")
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("layer l (input → output)")
    axes[0].legend(loc="best", fontsize=8)
    fig.suptitle(f"At initialisation: L = {layers}, d = {PROFILE_D}, N = {PROFILE_TOKENS}, "
                 f"{PROFILE_SEEDS} seeds (median; band: 10–90 % quantiles)", fontsize=10)
    return fig


def _power_law_panel(ax, depths: np.ndarray, per_variant: dict) -> None:
    """Both variants' values (shape (depths, seeds)) against depth on log-log
    axes: the median with a 10-90 % band over seeds, and the power law fitted to
    the medians dotted, in the legend."""
    for v in ("post", "pre"):
        g = per_variant[v]
        b, a, se = fit_power(depths, np.median(g, axis=1))
        _band(ax, depths, g.T, VARIANT_COLORS[v],
              f"{VARIANT_NAMES[v]}: fit $\\propto L^{{{b:.2f} \\pm {se:.2f}}}$")
        ax.plot(depths, np.exp(a) * depths**b, color=VARIANT_COLORS[v], ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(depths, [str(int(x)) for x in depths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("depth L (log axis)")


def _check_per_depth(per_variant: dict, name: str, depths: np.ndarray) -> None:
    """Each variant's samples must be an array of shape (len(depths), seeds)."""
    for v in ("post", "pre"):
        if np.ndim(per_variant[v]) != 2 or np.shape(per_variant[v])[0] != depths.size:
            raise ValueError(f"{name}[{v!r}] must have shape ({depths.size}, seeds), one row "
                             f"per entry of depths; got shape {np.shape(per_variant[v])}")


def fig_last_layer(depths, grads: dict[str, np.ndarray], d: int) -> Figure:
    """The last layer's W_2 gradient against depth, with fitted power laws."""
    depths = as_reals(depths, "depths", positive=True)
    grads = as_result(grads, "grads", ("post", "pre"))
    _check_per_depth(grads, "grads", depths)
    d = as_count(d, "d")
    fig, ax = plotting.figure(width=6.4, height=3.4)
    _power_law_panel(ax, depths, grads)
    ax.set_ylabel(r"$\|\partial\ell/\partial W_2^{(L)}\|_F$ (log axis)")
    ax.set_title(f"Last layer's FFN gradient at initialisation, d = {d}")
    ax.legend(loc="lower left")
    return fig


# ---------------------------------------------------------------------------
# warm-up
# ---------------------------------------------------------------------------
def _check_grid(grid: dict, lr: float | None = None) -> dict:
    """``grid`` as :func:`training_grid` returns it, and ``lr`` one of :data:`LRS`."""
    grid = as_result(grid, "grid", ("post", "pre"), producer="training_grid")
    for v in ("post", "pre"):
        as_result(grid[v], f"grid[{v!r}]", cls=TrainResult, producer="training_grid")
    if lr is not None:
        grid_index(lr, 0, TRAIN_SEEDS[0])
    return grid


def _three_cases(ax, grid: dict[str, TrainResult], lr: float, field: str, **style) -> None:
    """Every seed's curve of ``field`` (a (runs, steps) attribute of TrainResult) at peak
    learning rate ``lr``: Post-LN with and without warm-up, Pre-LN without."""
    cases = (("post", 0, "C1", "-", "Post-LN, no warm-up"),
             ("post", WARMUPS[-1], "C1", "--", f"Post-LN, warm-up {WARMUPS[-1]} steps"),
             ("pre", 0, "C0", "-", "Pre-LN, no warm-up"))
    for v, w, color, ls, label in cases:
        for s in TRAIN_SEEDS:
            ax.plot(getattr(grid[v], field)[grid_index(lr, w, s)], color=color, ls=ls,
                    label=label if s == TRAIN_SEEDS[0] else None, **style)


def fig_intuition(grid: dict[str, TrainResult], lr: float = 1e-2) -> Figure:
    """Loss curves at one learning rate: Post-LN with and without warm-up, Pre-LN without."""
    grid = _check_grid(grid, lr)
    fig, ax = plotting.figure(width=7.0, height=3.2)
    _three_cases(ax, grid, lr, "loss", lw=1.4)
    ax.axhline(np.log(TRAIN["vocab"]), color="0.5", ls=":", lw=1, label="chance, ln 16")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 6)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("training loss (nats, log axis)")
    ax.set_title(f"Reversing 8 tokens, 6 layers, peak lr = {lr:g} ({len(TRAIN_SEEDS)} seeds each)")
    ax.legend(loc="lower left", fontsize=8)
    return fig


def fig_training_grid(grid: dict[str, TrainResult]) -> Figure:
    """Loss curves: rows variant, columns learning rate, colour warm-up."""
    grid = _check_grid(grid)
    fig, axes = plotting.figure(len(LRS), 2, width=10.5, height=5.0, sharex=True, sharey=True)
    chance = np.log(TRAIN["vocab"])
    for i, v in enumerate(("post", "pre")):
        res = grid[v]
        for j, lr in enumerate(LRS):
            ax = axes[i, j]
            for w, color in zip(WARMUPS, ("C3", "C2"), strict=True):
                for s in TRAIN_SEEDS:
                    k = grid_index(lr, w, s)
                    ax.plot(res.loss[k], color=color, lw=1.2, alpha=0.85,
                            label=(f"warm-up {w} steps" if w else "no warm-up")
                            if s == TRAIN_SEEDS[0] else None)
            ax.axhline(chance, color="0.5", ls=":", lw=1)
            ax.set_yscale("log")
            ax.set_ylim(1e-4, 6)
            ax.set_title(f"{VARIANT_NAMES[v]}, peak lr = {lr:g}", fontsize=10)
            if i == 1:
                ax.set_xlabel("step")
        axes[i, 0].set_ylabel("training loss (nats, log)")
    axes[0, 0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Reversal task, {len(TRAIN_SEEDS)} seeds per setting (dotted: chance, ln 16)",
                 fontsize=10)
    return fig


def fig_first_steps(grid: dict[str, TrainResult], lr: float = 1e-2) -> Figure:
    """Adam's first update per layer, and token diversity over the first steps."""
    grid = _check_grid(grid, lr)
    fig, axes = plotting.figure(2, width=10.0, height=3.3)
    layers = TRAIN["layers"]
    for v in ("post", "pre"):
        k = grid_index(lr, 0, TRAIN_SEEDS[0])
        res = grid[v]
        rel = res.update[k, 0]  # (layers, 6)
        for j in range(len(MATRICES)):
            axes[0].plot(np.arange(1, layers + 1) + (0.08 if v == "pre" else -0.08),
                         rel[:, j], ls="none", marker="os^v<>"[j], ms=5,
                         color=VARIANT_COLORS[v], alpha=0.8,
                         label=f"{VARIANT_NAMES[v]}" if j == 0 else None)
        for w, ls in zip(WARMUPS, ("-", "--"), strict=True):
            kk = grid_index(lr, w, TRAIN_SEEDS[0])
            axes[1].plot(res.diversity[kk, :40], color=VARIANT_COLORS[v], ls=ls,
                         label=f"{VARIANT_NAMES[v]}, " + (f"warm-up {w}" if w else "no warm-up"))
    axes[0].set_yscale("log")
    axes[0].set_xlabel("layer (markers: the six weight matrices)")
    axes[0].set_ylabel(r"$\|\Delta W\|_F / \|W\|_F$, first step")
    axes[0].set_title(f"Adam's first update, lr = {lr:g}, no warm-up")
    axes[0].legend(loc="best", fontsize=8)
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("token diversity of the output")
    axes[1].set_ylim(0, 1)
    axes[1].set_title(f"First 40 steps, lr = {lr:g}, one seed ({TRAIN_SEEDS[0]})")
    axes[1].legend(loc="best", fontsize=8)
    return fig


def fig_grad_norm(grid: dict[str, TrainResult], lr: float = 1e-2) -> Figure:
    """The whole gradient's norm at every step, every seed: Post-LN with and
    without warm-up and Pre-LN without, at one peak learning rate."""
    grid = _check_grid(grid, lr)
    fig, ax = plotting.figure(width=7.0, height=3.2)
    _three_cases(ax, grid, lr, "grad_total", lw=1.1, alpha=0.85)
    ax.set_yscale("log")
    ax.set_xlabel("Adam step")
    ax.set_ylabel("‖gradient‖ (all parameters, log axis)")
    ax.set_title(f"Gradient norm during training, peak lr = {lr:g} ({len(TRAIN_SEEDS)} seeds each)")
    ax.legend(loc="lower left", fontsize=8)
    return fig


def fig_interventions(grid: dict[str, TrainResult], labels: list[str], res: TrainResult,
                      lr: float = 1e-2, *, log_loss: bool = False) -> Figure:
    """Token diversity (left) and loss (right) of the failed Post-LN runs, unmodified
    and under each intervention in ``labels`` (from :func:`interventions` or
    :func:`rescues`), every seed; ``log_loss``: a log loss axis."""
    grid = _check_grid(grid, lr)
    if not isinstance(log_loss, bool):
        raise TypeError(f"log_loss must be a bool; got {type(log_loss).__name__}")
    res = as_result(res, "res", cls=TrainResult, producer="interventions")
    if not isinstance(labels, (list, tuple)) or not labels:
        raise TypeError(f"labels must be a non-empty list of labels (from interventions); "
                        f"got {type(labels).__name__}")
    labels = [as_text(x, "each entry of labels") for x in labels]
    fig, axes = plotting.figure(2, width=10.0, height=3.4)
    base = [grid_index(lr, 0, s) for s in TRAIN_SEEDS]
    curves = [("no intervention", grid["post"], base, "0.3")]
    kinds = list(dict.fromkeys(labels))
    if len(kinds) > 6:
        raise ValueError(f"labels must name at most 6 interventions; got {len(kinds)}")
    for lab, color in zip(kinds, ("C2", "C4", "C3", "C0", "C5", "C6"), strict=False):
        curves.append((lab, res, [i for i, x in enumerate(labels) if x == lab], color))
    for lab, r, idx, color in curves:
        for j, i in enumerate(idx):
            kw = {"color": color, "lw": 1.0, "alpha": 0.85, "label": lab if j == 0 else None}
            axes[0].plot(r.diversity[i], **kw)
            axes[1].plot(r.loss[i], **kw)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("token diversity of the output (log)")
    axes[1].axhline(np.log(TRAIN["vocab"]), color="0.5", ls=":", lw=1)
    axes[1].set_ylabel("training loss (nats; dotted: chance)")
    if log_loss:
        axes[1].set_yscale("log")
        axes[1].set_ylim(1e-4, 6)
    for ax in axes:
        ax.set_xlabel("Adam step")
    axes[0].set_title(f"Post-LN, lr = {lr:g}, no warm-up: interventions", fontsize=10)
    axes[1].set_title(f"{len(idx)} seeds per intervention", fontsize=10)
    axes[1].legend(loc="lower left" if log_loss else "upper right", fontsize=7)  # empty there
    return fig


# ---------------------------------------------------------------------------
# amplification
# ---------------------------------------------------------------------------
def fig_amplification(depths, amp: dict[str, dict[str, np.ndarray]],
                      sizes: dict[str, float]) -> Figure:
    """Output change against depth for random and sign perturbations."""
    depths = as_reals(depths, "depths", positive=True)
    amp = as_result(amp, "amp", ("random", "sign"))
    for kind in ("random", "sign"):
        _check_per_depth(as_result(amp[kind], f"amp[{kind!r}]", ("post", "pre")),
                         f"amp[{kind!r}]", depths)
    sizes = as_result(sizes, "sizes")
    fig, axes = plotting.figure(2, width=9.4, height=3.6)
    titles = {"random": "random ±η perturbation", "sign": "Adam-like: −η·sign(gradient)"}
    for ax, kind in zip(axes, ("random", "sign"), strict=True):
        _power_law_panel(ax, depths, amp[kind])
        ax.set_title(f"{titles[kind]}, η = {sizes[kind]:g}", fontsize=10)
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel(r"mean squared entry of $F(\theta+\Delta) - F(\theta)$")
    return fig


# ---------------------------------------------------------------------------
# explorers
# ---------------------------------------------------------------------------
_MATRIX_SLIDER = ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2")


class DepthExplorer(
        Explorer, name="prenorm-depth", size=(9.6, 3.0),
        title=f"Gradients at initialisation, per layer (d = {PROFILE_D}, N = {PROFILE_TOKENS}, "
               f"{PROFILE_SEEDS} seeds, medians)"):
    """Depth, variant and weight matrix: per-layer gradient norms, the residual
    stream's size and token diversity at initialisation."""

    layers = Slider(PROFILE_DEPTHS, label="depth L", default=12)
    variant = Slider(("post", "pre"), label="variant", default="pre",
                     fmt=lambda v: VARIANT_NAMES[v])
    matrix = Slider(_MATRIX_SLIDER, label="weight matrix", default="W_2")
    presets = {"Post-LN, L = 24, W_Q": {"variant": "post", "layers": 24, "matrix": "W_Q"},
               "Pre-LN, L = 24, W_2": {"variant": "pre", "layers": 24, "matrix": "W_2"}}

    def setup(self, fig: Figure):
        self._data = {L: profiles(L) for L in PROFILE_DEPTHS}
        ax_g, ax_s, ax_d = fig.subplots(1, 3)
        top = max(PROFILE_DEPTHS)
        self._g_band = ax_g.fill_between([0, 1], [1, 1], [1, 1], color="C0", alpha=0.2, lw=0)
        (self._g_line,) = ax_g.plot([], [], "o-", ms=3, color="C0")
        (self._g_other,) = ax_g.plot([], [], "--", lw=1, color="0.5",
                                     label="other variant (median)")
        ax_g.set_xlim(0.5, top + 0.5)
        ax_g.set_ylim(1e-8, 1e4)
        ax_g.set_yscale("log")
        ax_g.set_xlabel("layer l")
        ax_g.set_ylabel(r"$\|\partial\ell/\partial W\|_F$")
        ax_g.legend(loc="lower left", fontsize=8)
        self._g_title = ax_g.set_title("", fontsize=10)
        (self._s_line,) = ax_s.plot([], [], "o-", ms=3, color="C0")
        (self._s_other,) = ax_s.plot([], [], "--", lw=1, color="0.5")
        ax_s.set_xlim(-0.5, top + 0.5)
        ax_s.set_ylim(0.5, 40)
        ax_s.set_yscale("log")
        ax_s.set_xlabel("layer boundary l")
        ax_s.set_title("residual stream: mean squared entry", fontsize=10)
        (self._d_line,) = ax_d.plot([], [], "o-", ms=3, color="C0")
        (self._d_other,) = ax_d.plot([], [], "--", lw=1, color="0.5")
        ax_d.set_xlim(-0.5, top + 0.5)
        ax_d.set_ylim(1e-7, 1.5)
        ax_d.set_yscale("log")
        ax_d.set_xlabel("layer boundary l")
        ax_d.set_title(r"token diversity $\|X - \mathbf{1}\bar x^\top\|_F/\|X\|_F$",
                       fontsize=10)
        self._text = ax_g.text(0.97, 0.95, "", transform=ax_g.transAxes, ha="right", va="top",
                               fontsize=8, bbox={"fc": "white", "ec": "0.8", "alpha": 0.9})
        self._ax_g = ax_g
        return [self._g_band, self._g_line, self._g_other, self._g_title, self._s_line,
                self._s_other, self._d_line, self._d_other, self._text]

    def update(self, layers: int, variant: str, matrix: str) -> None:
        other = "pre" if variant == "post" else "post"
        p, q = self._data[layers][variant], self._data[layers][other]
        j = MATRICES.index(matrix)
        g = p.grad[:, :, j]
        x = np.arange(1, layers + 1)
        lo, hi = np.quantile(g, [0.1, 0.9], axis=0)
        verts = np.concatenate([np.stack([x, lo], 1), np.stack([x[::-1], hi[::-1]], 1)])
        self._g_band.set_paths([verts])
        color = VARIANT_COLORS[variant]
        self._g_band.set_facecolor(color)
        med = np.median
        self._g_line.set_data(x, med(g, 0))
        self._g_line.set_color(color)
        self._g_other.set_data(x, med(q.grad[:, :, j], 0))
        xs = np.arange(layers + 1)
        self._s_line.set_data(xs, med(p.second_moment, 0))
        self._s_other.set_data(xs, med(q.second_moment, 0))
        self._d_line.set_data(xs, med(p.diversity, 0))
        self._d_other.set_data(xs, med(q.diversity, 0))
        for line in (self._s_line, self._d_line):
            line.set_color(color)
        self._g_title.set_text(f"{VARIANT_NAMES[variant]}: {matrix}")
        self._text.set_text(f"last/first layer (median): {med(g[:, -1] / g[:, 0]):.3g}\n"
                            f"output diversity (median): {med(p.diversity[:, -1]):.2g}")


class WarmupExplorer(
        Explorer, name="prenorm-warmup", size=(9.0, 3.2),
        title=f"Training on reversal (L = {TRAIN['layers']}, d = {TRAIN['d']}, batch "
               f"{TRAIN['batch']}, Adam (0.9, 0.98), {len(TRAIN_SEEDS)} seeds)"):
    """Learning rate, warm-up and variant: loss and token diversity during training."""

    lr = Slider(LRS, label="peak learning rate", default=1e-2, fmt=lambda v: f"{v:g}")
    warmup = Slider(WARMUPS, label="linear warm-up (steps)", default=0)
    variant = Slider(("post", "pre"), label="variant", default="post",
                     fmt=lambda v: VARIANT_NAMES[v])
    presets = {"Post-LN, no warm-up": {"variant": "post", "lr": 1e-2, "warmup": 0},
               "Post-LN, warm-up": {"variant": "post", "lr": 1e-2, "warmup": 60},
               "Pre-LN, no warm-up": {"variant": "pre", "lr": 1e-2, "warmup": 0}}

    def setup(self, fig: Figure):
        self._grid = training_grid()
        steps = TRAIN["steps"]
        ax_l, ax_d = fig.subplots(1, 2)
        self._loss = [ax_l.plot([], [], lw=1.3)[0] for _ in TRAIN_SEEDS]
        self._div = [ax_d.plot([], [], lw=1.3)[0] for _ in TRAIN_SEEDS]
        ax_l.axhline(np.log(TRAIN["vocab"]), color="0.5", ls=":", lw=1, label="chance, ln 16")
        ax_l.set_xlim(0, steps)
        ax_l.set_ylim(1e-4, 6)
        ax_l.set_yscale("log")
        ax_l.set_xlabel("step")
        ax_l.set_ylabel("training loss (nats, log axis)")
        ax_l.legend(loc="lower left", fontsize=8)
        ax_d.set_xlim(0, steps)
        ax_d.set_ylim(-0.02, 1.02)
        ax_d.set_xlabel("step")
        ax_d.set_ylabel("token diversity of the output")
        self._title = ax_l.set_title("", fontsize=10)
        self._text = ax_d.text(0.97, 0.05, "", transform=ax_d.transAxes, ha="right",
                               va="bottom", fontsize=8,
                               bbox={"fc": "white", "ec": "0.8", "alpha": 0.9})
        if WARMUPS[-1]:
            ax_l.axvspan(0, 0, color="0.9")
        self._span = ax_l.axvspan(0, WARMUPS[-1], color="C2", alpha=0.08, lw=0)
        return [*self._loss, *self._div, self._title, self._text, self._span]

    def update(self, lr: float, warmup: int, variant: str) -> None:
        res = self._grid[variant]
        steps = np.arange(TRAIN["steps"])
        color = VARIANT_COLORS[variant]
        finals = []
        for s, ll, dl in zip(TRAIN_SEEDS, self._loss, self._div, strict=True):
            k = grid_index(lr, warmup, s)
            ll.set_data(steps, res.loss[k])
            dl.set_data(steps, res.diversity[k])
            for line in (ll, dl):
                line.set_color(color)
            finals.append(res.loss[k, -20:].mean())
        self._span.set_visible(bool(warmup))
        self._title.set_text(f"{VARIANT_NAMES[variant]}, lr = {lr:g}, "
                             + (f"warm-up {warmup} steps" if warmup else "no warm-up"))
        finals = np.array(finals)
        self._text.set_text(f"trained (final loss < 0.5): {int(np.sum(finals < 0.5))} of "
                            f"{finals.size} seeds\nfinal loss (last 20 steps): median "
                            f"{np.median(finals):.2g}, max {finals.max():.2g}")
