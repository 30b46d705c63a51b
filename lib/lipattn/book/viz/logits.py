"""Attention-logit growth during training: a learning-rate sweep with and without QK-norm.

A small-scale version of the experiment of Wortsman et al. (2023, "Small-scale
proxies for large-scale Transformer training instabilities") on the book's
task: Pre-LN encoders trained on sequence reversal by
:func:`lipattn.models.training.train_reversal`, every learning rate and seed of
:data:`SWEEP` in one vectorised call per arm (QK-norm off and on). The two arms
share their initial weights and their batches (same seeds), so the
comparison is paired and QK-norm is the only change. Recorded: the largest
attention logit of each layer every ``logit_every`` steps, the loss at every
step, and the exact local Lipschitz constant of every attention sublayer at
the checkpoints ``keep_at``, at a fixed batch of real task inputs.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from matplotlib.figure import Figure

from ..._blas import single_threaded
from ..._validate import as_bool, as_count, as_float_in, as_positive_float, as_seed, as_tol
from ...lanczos import jacobian_norm
from ...layernorm import layer_norm_jacobian_norm
from ...layers import MultiHeadAttention, attention_core_jvp, attention_core_vjp, layer_lipschitz
from ...models import encoder
from ...models.training import reversal_batch, train_reversal
from ...stabilisers import StabilisedAttention
from .. import plotting
from .._check import as_reals, as_result, as_tokens
from .real import head_constants

__all__ = ["SWEEP", "TRAIN", "LONGER", "logit_sweep", "longer_runs", "attention_constants",
           "head_bounds", "summary", "fig_logit_sweep"]

#: The grid: peak learning rates (constant, no warm-up) x seeds.
SWEEP = {"lrs": (3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0), "seeds": (0, 1, 2, 3)}
#: The runs' sizes and what they record (keyword arguments of ``train_reversal``).
TRAIN = {"layers": 2, "d": 32, "heads": 4, "vocab": 16, "n_tokens": 8, "batch": 8,
         "steps": 200, "logit_every": 10, "keep_at": (0, 25, 200)}
#: The longer-budget runs: one learning rate per arm (QK-norm off, on), seeds,
#: warm-up lengths, steps, and the steps at which the final loss is read.
LONGER = {"lr": {False: 0.1, True: 1.0}, "seeds": tuple(range(8)), "warmups": (0, 100),
          "steps": 600, "at": (200, 600)}
#: Sequences of the fixed batch at which the constants are taken, and its seed.
PROBE = {"batch": 2, "seed": 12345}


def attention_constants(model: dict, tokens: np.ndarray, qk_norm: bool, *,
                        tol: float = 1e-6, value_path: bool = False) -> np.ndarray:
    r"""Exact local constants of a trained model's attention sublayers.

    For each layer l and sequence b, the spectral norm of the Jacobian of
    :math:`H \mapsto [P_1 H W_V^{(1)}, \dots] W_O + b_O` at the sublayer's
    actual input :math:`H = \mathrm{LN}_1(X_l)` (float64, Golub–Kahan–Lanczos
    on :class:`~lipattn.stabilisers.StabilisedAttention`'s products, to the
    relative tolerance ``tol``; the bias does not change the Jacobian).

    Parameters
    ----------
    model : dict
        One Pre-LN run, from :meth:`lipattn.models.training.TrainResult.run`.
    tokens : ndarray of int, shape (B, n_tokens)
    qk_norm : bool
        Whether the model normalises queries and keys (LayerNorm per head,
        :data:`lipattn.models.encoder.EPS`).
    value_path : bool, default False
        Instead, the spectral norm of the Jacobian's value term alone,
        :math:`E \mapsto [P_1 E W_V^{(1)}, \dots] W_O` with the attention
        matrices held at their values (the same algorithm and tolerance).

    Returns
    -------
    L : ndarray, shape (layers, B)
    """
    qk_norm, value_path = as_bool(qk_norm, "qk_norm"), as_bool(value_path, "value_path")
    tol = as_tol(tol)
    blocks, H = _attention_inputs(model, tokens)
    out = np.zeros((len(blocks), len(tokens)))
    for l_, p in enumerate(blocks):
        layer = StabilisedAttention(p["W_Q"], p["W_K"], p["W_V"], p["W_O"],
                                    n_head=int(p["heads"]),
                                    qk_norm="layer" if qk_norm else None,
                                    qk_norm_eps=encoder.EPS)
        for b in range(len(tokens)):
            out[l_, b] = (_value_norm(layer, H[l_][b], tol) if value_path
                          else layer_lipschitz(layer, H[l_][b], tol=tol).value)
    return out


def _attention_inputs(model: dict, tokens: np.ndarray) -> tuple[list, list]:
    """The model's blocks in float64 and each attention sublayer's input LN_1(X_l)."""
    model = as_result(model, "model", ("blocks", "embed", "pos"), producer="TrainResult.run")
    tokens = as_tokens(tokens, "tokens", np.shape(model["embed"])[0], np.shape(model["pos"])[0])
    blocks = [{k: v if k in encoder.SETTINGS else np.asarray(v, dtype=float)
               for k, v in p.items()} for p in model["blocks"]]
    X = np.asarray(model["embed"], dtype=float)[tokens] + np.asarray(model["pos"], dtype=float)
    return blocks, encoder.attention_inputs(blocks, X, variant="pre")


def head_bounds(model: dict, tokens: np.ndarray, *, tol: float = 1e-6) -> np.ndarray:
    r"""The two bounds of the heads theorem on a trained model's attention sublayers.

    For each layer l and sequence b, at the sublayer's actual input
    :math:`H = \mathrm{LN}_1(X_l)`: the exact constant of the layer, the sum over
    heads of the exact constants :math:`L_i` of each head through its rows of
    :math:`W_O`, and :math:`\|W_O\|_2 (\sum_i c_i^2)^{1/2}` with :math:`c_i` the
    exact constant of head i alone (:func:`lipattn.book.viz.real.head_constants`;
    every constant by Golub–Kahan–Lanczos to the relative tolerance ``tol``).

    Parameters
    ----------
    model : dict
        One Pre-LN run without QK-norm, from :meth:`lipattn.models.training.TrainResult.run`.
    tokens : ndarray of int, shape (B, n_tokens)

    Returns
    -------
    ndarray, shape (layers, B, 3)
        ``[..., 0]`` the exact constant, ``[..., 1]`` the sum, ``[..., 2]`` the
        root-sum-square form.
    """
    tol = as_tol(tol)
    blocks, H = _attention_inputs(model, tokens)
    if any(p.get("qk_norm", False) for p in blocks):
        raise ValueError("model must be trained without QK-norm (the heads theorem's "
                         "layer is plain multi-head attention)")
    out = np.zeros((len(blocks), len(tokens), 3))
    for l_, p in enumerate(blocks):
        layer = MultiHeadAttention(p["W_Q"], p["W_K"], p["W_V"], p["W_O"],
                                   n_head=int(p["heads"]))
        for b in range(len(tokens)):
            c = head_constants(layer, H[l_][b], tol=tol)
            out[l_, b] = c["exact"], c["sum"], c["sqrt_form"]
    return out


def _value_norm(layer: StabilisedAttention, H: np.ndarray, tol: float) -> float:
    """Norm of the value term of ``layer``'s Jacobian at H (queries and keys frozen)."""
    core = layer.forward(H)[1][0]
    zero = np.zeros_like(core.Q)
    W_O = layer.W_O
    jvp = lambda E: layer._merge(attention_core_jvp(            # noqa: E731
        core, zero, zero, layer._split(E @ layer.W_V))) @ W_O
    vjp = lambda G: layer._merge(attention_core_vjp(            # noqa: E731
        core, layer._split(G @ W_O.T))[2]) @ layer.W_V.T
    return jacobian_norm(jvp, vjp, H.shape, tol=tol).value


def _ln_gain(model: dict, tokens: np.ndarray) -> np.ndarray:
    """Median over tokens of 1/s at each layer's input stream, shape (layers,)."""
    X = np.asarray(model["embed"], dtype=float)[tokens] + np.asarray(model["pos"], dtype=float)
    blocks = [{k: v if k in encoder.SETTINGS else np.asarray(v, dtype=float)
               for k, v in p.items()} for p in model["blocks"]]
    stream = encoder.residual_stream(blocks, X, variant="pre")[:-1]
    return np.array([np.median(layer_norm_jacobian_norm(x, encoder.EPS)) for x in stream])


def logit_sweep(lrs: tuple = SWEEP["lrs"], seeds: tuple = SWEEP["seeds"],
                steps: int = TRAIN["steps"]) -> dict:
    """Train the grid ``lrs x seeds`` with and without QK-norm (cached).

    Returns
    -------
    dict
        ``"lrs"`` (n_lr,), ``"seeds"`` (n_seed,), ``"logit_steps"`` (n_rec,),
        ``"checkpoints"`` (the steps of ``keep_at`` up to ``steps``), and per arm
        ``False``/``True`` (QK-norm off/on) a dict of
        ``"max_logit"`` (n_lr, n_seed, n_rec, layers): largest attention logit;
        ``"loss"`` (n_lr, n_seed, steps): training loss, nats;
        ``"final_loss"`` (n_lr, n_seed): mean loss of the last 10 steps;
        ``"lipschitz"`` (n_lr, n_seed, n_ckpt, layers): the largest, over the
        probe sequences, exact local constant of each attention sublayer
        (:func:`attention_constants`);
        ``"value_path"`` (n_lr, n_seed, layers): the same as ``"lipschitz"`` at
        the last checkpoint for the value term alone (``value_path=True``);
        ``"ln_gain"`` (n_lr, n_seed, n_ckpt, layers): the median over the probe
        tokens of :math:`1/s`, the norm of the Jacobian of the layer's first
        LayerNorm (before its gain) at the residual stream entering it;
        and in the arm without QK-norm only, ``"heads"`` (n_lr, n_seed, layers,
        B, 3): :func:`head_bounds` at the last checkpoint for each probe sequence
        (the exact constant, the sum over heads, the root-sum-square form).
    """
    lrs = tuple(float(v) for v in as_reals(lrs, "lrs", positive=True, maximum=10.0))
    if not isinstance(seeds, (tuple, list)) or not seeds:
        raise TypeError(f"seeds must be a non-empty tuple of seeds; got {type(seeds).__name__}")
    seeds = tuple(as_seed(v, "each entry of seeds") for v in seeds)
    if len(lrs) * len(seeds) > 100:
        raise ValueError(f"lrs and seeds must make at most 100 runs; got {len(lrs) * len(seeds)}")
    return _logit_sweep(lrs, seeds, as_count(steps, "steps", maximum=10**4))


@lru_cache(maxsize=4, typed=True)
@single_threaded
def _logit_sweep(lrs: tuple[float, ...], seeds: tuple[int, ...], steps: int) -> dict:
    lr = np.repeat(np.asarray(lrs, dtype=float), len(seeds))
    sd = np.tile(np.asarray(seeds), len(lrs))
    kw = TRAIN | {"steps": steps, "keep_at": tuple(t for t in TRAIN["keep_at"] if t <= steps)}
    tokens = reversal_batch(np.random.default_rng(PROBE["seed"]), PROBE["batch"],
                            TRAIN["n_tokens"], TRAIN["vocab"])[0]
    shape = (len(lrs), len(seeds))
    out = {"lrs": np.asarray(lrs, dtype=float), "seeds": np.asarray(seeds),
           "checkpoints": np.asarray(kw["keep_at"])}
    for qk in (False, True):
        res = train_reversal("pre", lr, 0, sd, qk_norm=qk, **kw)
        lip = np.array([[attention_constants(res.run(i, at=t), tokens, qk).max(axis=1)
                         for t in kw["keep_at"]] for i in range(lr.size)])
        vp = np.array([attention_constants(res.run(i, at=kw["keep_at"][-1]), tokens, qk,
                                           value_path=True).max(axis=1)
                       for i in range(lr.size)])
        gain = np.array([[_ln_gain(res.run(i, at=t), tokens) for t in kw["keep_at"]]
                         for i in range(lr.size)])
        out["logit_steps"] = res.logit_steps
        out[qk] = {"max_logit": res.max_logit.reshape(*shape, *res.max_logit.shape[1:]),
                   "loss": res.loss.reshape(*shape, -1),
                   "final_loss": res.loss[:, -10:].mean(axis=1).reshape(shape),
                   "lipschitz": lip.reshape(*shape, *lip.shape[1:]),
                   "value_path": vp.reshape(*shape, -1),
                   "ln_gain": gain.reshape(*shape, *gain.shape[1:])}
        if not qk:
            hb = np.array([head_bounds(res.run(i, at=kw["keep_at"][-1]), tokens)
                           for i in range(lr.size)])
            out[qk]["heads"] = hb.reshape(*shape, *hb.shape[1:])
    return out


def longer_runs(lr: dict = LONGER["lr"], seeds: tuple = LONGER["seeds"],
                warmups: tuple = LONGER["warmups"], steps: int = LONGER["steps"],
                at: tuple = LONGER["at"]) -> dict:
    """The sweep's runs at a longer step budget and with a linear warm-up (cached).

    For each arm ``qk`` in ``lr`` (False: no QK-norm, True: unit-gain QK-LayerNorm),
    the runs of :data:`TRAIN`'s model and task at the learning rate ``lr[qk]``,
    every seed and every warm-up length (:func:`lipattn.models.training.train_reversal`,
    constant learning rate after the warm-up; warm-up 0 and the same seed give
    the run of :func:`logit_sweep` continued). Runs with the same seed share
    their initialisation and batches, within and across arms.

    Returns
    -------
    dict
        ``"at"`` (the steps), and per arm ``False``/``True`` a dict of
        ``"loss"`` (n_warm, n_seed, len(at)): mean loss of the 10 steps up to each
        step of ``at``, nats; ``"max_logit"`` (n_warm, n_seed): the largest
        attention logit over layers and the recorded steps (every 50).
    """
    if not isinstance(lr, dict) or not lr or not set(lr) <= {False, True}:
        raise TypeError(f"lr must be a dict from False/True (QK-norm off/on) to a learning "
                        f"rate; got {lr!r}")
    lrs = {bool(k): float(as_reals((v,), f"lr[{k}]", positive=True, maximum=1.0)[0])
           for k, v in lr.items()}
    if not isinstance(seeds, (tuple, list, range)) or not seeds:
        raise TypeError(f"seeds must be a non-empty tuple of seeds; got {seeds!r}")
    seeds = tuple(as_seed(v, "each entry of seeds") for v in seeds)
    steps = as_count(steps, "steps", maximum=10**4)
    if not isinstance(warmups, (tuple, list)) or not warmups:
        raise TypeError(f"warmups must be a non-empty tuple of step counts; got {warmups!r}")
    warmups = tuple(as_count(w, "each entry of warmups", 0, steps) for w in warmups)
    if not isinstance(at, (tuple, list)) or not at:
        raise TypeError(f"at must be a non-empty tuple of steps; got {at!r}")
    at = tuple(as_count(t, "each entry of at", 10, steps) for t in at)
    if len(lrs) * len(seeds) * len(warmups) > 100:
        raise ValueError("lr, seeds and warmups must make at most 100 runs per call")
    return _longer_runs(tuple(sorted(lrs.items())), seeds, warmups, steps, at)


@lru_cache(maxsize=2, typed=True)
@single_threaded
def _longer_runs(lrs: tuple, seeds: tuple, warmups: tuple, steps: int, at: tuple) -> dict:
    kw = {k: v for k, v in TRAIN.items() if k not in ("steps", "keep_at", "logit_every")}
    wu = np.repeat(np.asarray(warmups), len(seeds))
    sd = np.tile(np.asarray(seeds), len(warmups))
    out = {"at": np.asarray(at)}
    for qk, lr in lrs:
        res = train_reversal("pre", lr, wu, sd, qk_norm=qk, steps=steps, logit_every=50, **kw)
        loss = np.stack([res.loss[:, t - 10:t].mean(axis=1) for t in at], axis=1)
        out[qk] = {"loss": loss.reshape(len(warmups), len(seeds), len(at)),
                   "max_logit": res.max_logit.max(axis=(1, 2)).reshape(len(warmups),
                                                                      len(seeds))}
    return out


def summary(sweep: dict, *, big: float = 1e3, learned: float = 0.5) -> dict:
    """The numbers the chapter states, from :func:`logit_sweep`'s output.

    A run *learned* if its final loss is below ``learned`` nats (chance is
    ln(vocab)); its logit is *big* if the largest attention logit over layers and
    steps exceeded ``big``. Per arm ``a`` in ``("no", "qk")``:

    - ``{a}_logit``: (n_lr,) median over seeds of the largest logit;
    - ``{a}_learned``: (n_lr,) number of seeds that learned;
    - ``{a}_lip``: (n_lr,) median of the attention sublayers' largest constant
      at the last checkpoint;
    - ``{a}_lip0``: the same at step 0 (initial weights), median over all runs;
    - ``{a}_top``: the largest learning rate at which every seed learned;
    - ``{a}_big``: runs with a big logit; ``{a}_big_learned``: of those, how many learned;
    - ``{a}_small_failed``: runs without a big logit that did not learn.

    and ``n_seed``, ``n_lr``, and over both arms ``lip_learned_max`` (the
    largest final constant of a run that learned) and ``lip_failed_min`` (the
    smallest of a run that did not; ``None`` where no run is of that kind, as is
    ``{a}_top`` where no learning rate had every seed learn).
    """
    sweep = as_result(sweep, "sweep", ("lrs", "seeds", False, True), producer="logit_sweep")
    big = as_positive_float(big, "big")
    learned = as_float_in(learned, "learned", 0.0, 1e3, lo_open=True)
    out = {"n_seed": len(sweep["seeds"]), "n_lr": len(sweep["lrs"])}
    ends, oks = [], []
    for name, qk in (("no", False), ("qk", True)):
        a = sweep[qk]
        top = a["max_logit"].max(axis=(2, 3))
        ok = a["final_loss"] < learned
        lip = a["lipschitz"].max(axis=3)
        all_ok = np.flatnonzero(ok.all(axis=1))
        ends.append(lip[:, :, -1])
        oks.append(ok)
        out |= {f"{name}_logit": np.median(top, axis=1),
                f"{name}_learned": ok.sum(axis=1),
                f"{name}_lip": np.median(lip[:, :, -1], axis=1),
                f"{name}_lip0": float(np.median(lip[:, :, 0])),
                f"{name}_top": float(sweep["lrs"][all_ok].max()) if all_ok.size else None,
                f"{name}_big": int((top > big).sum()),
                f"{name}_big_learned": int((ok & (top > big)).sum()),
                f"{name}_small_failed": int((~ok & (top <= big)).sum())}
    end, ok = np.stack(ends), np.stack(oks)
    out["lip_learned_max"] = float(end[ok].max()) if ok.any() else None
    out["lip_failed_min"] = float(end[~ok].min()) if (~ok).any() else None
    return out


def fig_logit_sweep(sweep: dict) -> Figure:
    """Three panels against the learning rate, both arms: the largest attention logit
    over training, the final loss, and the attention sublayers' constant at the end
    (every run a faint marker, the median over seeds a line)."""
    sweep = as_result(sweep, "sweep", ("lrs", "seeds", False, True), producer="logit_sweep")
    fig, axes = plotting.figure(3, width=8.4, height=3.0)
    lrs = sweep["lrs"]
    names = {False: "no QK-norm", True: "QK-norm (LayerNorm per head)"}
    panels = [("largest attention logit", lambda a: a["max_logit"].max(axis=(2, 3))),
              ("final loss (nats)", lambda a: a["final_loss"]),
              ("attention constant, end", lambda a: a["lipschitz"][:, :, -1].max(axis=2))]
    for ax, (label, get) in zip(axes, panels, strict=True):
        for k, qk in enumerate((False, True)):
            vals = get(sweep[qk])
            for j in range(vals.shape[1]):
                ax.scatter(lrs, vals[:, j], s=10, color=f"C{k}", alpha=0.35, lw=0)
            ax.plot(lrs, np.median(vals, axis=1), "o-" if qk else "s-", ms=3.5,
                    color=f"C{k}", label=names[qk])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel(label)
    axes[1].axhline(np.log(TRAIN["vocab"]), color="0.5", ls=":", lw=1)
    axes[1].annotate("chance", (lrs[0], np.log(TRAIN["vocab"])), fontsize=8,
                     va="bottom", color="0.4")
    axes[0].legend(fontsize=8, loc="upper left")
    return fig
