r"""Training stability of tiny byte-level decoders, with and without QK-norm.

A sweep in the manner of :cite:t:`wortsman2024small`, on the book's real text
(:func:`lipattn.book.corpus.stdlib_corpus`): tiny Llama-layout decoders
(RMSNorm, SwiGLU, RoPE, tied embedding, no position embedding), trained on
bytes, without QK-norm or with Qwen 3's per-head RMSNorm of queries and keys
(learned gains ``q_norm``, ``k_norm`` of shape (d_h,), before RoPE), at peak
learning rates from comfortable to too large, with and without the three
mitigations of Wortsman et al.:

- a linear warm-up over ``warmup_frac`` of the steps (without: none);
- decoupled weight decay of the matrices and embeddings, *independent* of the
  peak rate: each step multiplies them by :math:`1 - \lambda\,\eta_t/\eta`
  (:class:`lipattn.models.optim.Adam`'s ``weight_decay = lambda / lr``);
- the z-loss :math:`c\,\overline{(\log Z)^2}` of the readout
  (:func:`lipattn.layers.cross_entropy`'s ``z_loss``).

Everything else is shared: Adam :math:`(0.9, 0.98)`, a constant rate after the
warm-up, batches of ``batch`` windows of ``context`` bytes, float32 weights,
the softmax in float32. Runs with the same seed share their initialisation and
their batches.

Per run, every ``eval_every`` steps on fixed held-out windows: the held-out
bits/byte, the largest attention logit :math:`\max |T_{ij}|` of each layer over
the causal entries, and with QK-norm the bound
:math:`\max_i |g_{q,i}| \max_i |g_{k,i}| \sqrt{d_h}` of each layer, which no logit
can exceed (:func:`gain_bound`). The mitigations can be switched one at a time
(``mitigations`` names them), so the arms of one seed are paired interventions.

A run *fails* (:func:`failures`) when it diverges (a forward or backward pass
overflows or produces a non-finite value, caught as :class:`FloatingPointError`
before any NaN exists; the run stops there), *spikes* (its held-out bits/byte
rises more than ``spike`` above its running minimum at some evaluation) or is
*stuck* (it ends at or above ``stuck`` times the held-out unigram entropy while
the same seed and arm at the sweep's smallest rate ends below that line).

For a few runs, the exact local Lipschitz constant of the stack of blocks
(:meth:`lipattn.models.decoder.Decoder.local_lipschitz`) on held-out windows at
checkpoints.

Run ``python -m lipattn.book.stability --help``; the book's results are
``data/stability.json`` (arguments and git commit recorded in it), and
``data/stability_long.json`` (:data:`LONG`), a check of the budget with four
times the steps at two rates and two arms.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

import numpy as np

from .._validate import (
    as_bool,
    as_choice,
    as_count,
    as_counts,
    as_float_in,
    as_positive_float,
    as_seed,
)
from ..layers import CausalLM, Sequential, attention_logits, cross_entropy
from ..models import Llama, random_state_dict
from ..models.blocks import Layout, build_block, build_final
from ..models.training import train_stack
from ._check import as_result
from .bytelm import _git_commit, heldout_bits, heldout_windows
from .corpus import stdlib_corpus, unigram_entropy

__all__ = ["build", "gain_bound", "max_logits", "mitigation_set", "arm_name", "train_run",
           "failures", "late_slope", "summarise", "read_results", "summary", "main", "DATA",
           "LONG", "MITIGATIONS", "ARMS", "SPIKE", "STUCK", "BIG_LOGIT"]

DATA = Path(__file__).resolve().parent / "data" / "stability.json"
LONG = DATA.parent / "stability_long.json"
"""A check of the budget: rates 0.01 and 0.3, no mitigation and all three, 3 seeds,
2560 steps (four times :data:`DATA`'s), no constants."""
LN2 = math.log(2.0)


class _Diverged(Exception):
    pass


def build(qk_norm: bool = False, n_layer: int = 2, d: int = 64, n_head: int = 4, *,
          seed: int = 0) -> tuple[Llama, CausalLM]:
    """A fresh float32 byte-level Llama-layout decoder (Llama's init, std 0.02; QK-norm
    gains 1) and its trainable :class:`~lipattn.layers.CausalLM` (tied readout, no
    position embedding), sharing its arrays; ``qk_norm``: Qwen 3's per-head
    RMSNorm of queries and keys with learned gains. The attention computes its
    softmax in float32 (``keep_float32``, for training)."""
    qk_norm = as_bool(qk_norm, "qk_norm")
    n_layer, n_head = as_count(n_layer, "n_layer", 1, 16), as_count(n_head, "n_head", 1)
    d = as_count(d, "d", 2, 1024)
    if d % n_head or (d // n_head) % 2:
        raise ValueError(f"n_head must divide d = {d} into even heads; got n_head = {n_head}")
    sd = random_state_dict("llama", n_layer, d, n_head, vocab=256, seed=as_seed(seed))
    dh = d // n_head
    lay = Layout("qwen3" if qk_norm else "llama", "llama", d, n_layer, n_head, n_head, dh,
                 sd["layers.0.mlp.gate_proj.weight"].shape[0], 256, 1e-6, "silu",
                 qk_norm=qk_norm, rope_theta=10000.0)
    if qk_norm:
        for i in range(n_layer):
            sd[f"layers.{i}.self_attn.q_norm.weight"] = np.ones(dh)
            sd[f"layers.{i}.self_attn.k_norm.weight"] = np.ones(dh)
    sd = {k: v.astype(np.float32) for k, v in sd.items()}
    get = lambda name, shape: sd[name]  # noqa: E731
    blocks = [build_block(lay, get, i) for i in range(n_layer)]
    m = Llama(blocks, build_final(lay, get), n_head=n_head, n_kv_head=n_head,
              dtype=np.float32)
    m.embed_tokens, m.rope_theta, m.eps = sd["embed_tokens.weight"], 10000.0, 1e-6
    m.embed_scale, m.model_type = None, lay.model_type
    for b in m.blocks:
        b.attn.keep_float32 = True
    return m, CausalLM(m.embed_tokens, None, Sequential(list(m.blocks) + [m.final]))


def gain_bound(model: Llama) -> np.ndarray:
    r"""Per layer, :math:`\max_i |g_{q,i}|\,\max_i |g_{k,i}|\,\sqrt{d_h}`: a bound on
    every attention logit of a Qwen-3-style layer, shape (n_layer,) (exact, float64).

    The RMS-normalised head :math:`\hat q = q/\sqrt{\overline{q^2} + \epsilon}` has
    :math:`\|\hat q\|_2 < \sqrt{d_h}`; the gain gives :math:`\|g \odot \hat q\|_2 \le
    \max|g|\,\sqrt{d_h}`, RoPE is a rotation, and Cauchy--Schwarz bounds
    :math:`|\langle q, k\rangle|/\sqrt{d_h}` by the product. ValueError for a
    model without QK-norm.
    """
    if not isinstance(model, Llama) or model.blocks[0].attn.q_norm is None:
        raise ValueError("model must be a Llama-layout decoder with QK-norm "
                         "(build(qk_norm=True))")
    out = []
    for b in model.blocks:
        a = b.attn
        gq = np.abs(a.q_norm.g.astype(np.float64)).max()
        gk = np.abs(a.k_norm.g.astype(np.float64)).max()
        s = 1.0 / math.sqrt(a.head_dim) if a.scale is None else a.scale
        out.append(gq * gk * a.head_dim * s)
    return np.array(out)


def max_logits(model: Llama, windows: np.ndarray) -> np.ndarray:
    r"""The largest attention logit :math:`\max |T_{ij}|` (causal entries, every head
    and window) of each layer, shape (n_layer,), for token ids ``windows`` of shape
    (count, N); exact for the float32 forward pass (training's)."""
    if not isinstance(model, Llama):
        raise TypeError(f"model must be a Llama (as build returns); got "
                        f"{type(model).__name__}")
    t = np.asarray(windows)
    if t.ndim != 2 or not np.issubdtype(t.dtype, np.integer) or t.size == 0 \
            or t.min() < 0 or t.max() >= model.embed_tokens.shape[0]:
        raise ValueError(f"windows must be a non-empty (count, N) array of byte ids; got "
                         f"shape {t.shape}")
    X = model.embed_tokens[t]
    N = t.shape[1]
    causal = np.tril(np.ones((N, N), bool))
    out = []
    for b in model.blocks:
        _, st = b.attn.forward(b.norm_1.forward(X)[0])
        T = attention_logits(st.core.Q, st.core.K, scale=st.core.scale)
        out.append(float(np.abs(T[..., causal]).max()))
        X = b.forward(X)[0]
    return np.array(out)


MITIGATIONS = ("warmup", "decay", "zloss")
ARMS = ("none", "warmup", "decay", "zloss", "all")


def mitigation_set(mitigations) -> tuple[str, ...]:
    """The mitigations switched on, in :data:`MITIGATIONS`' order: ``True`` for all
    three, ``False`` for none, or a list, tuple or set of their names (no repeats)."""
    if isinstance(mitigations, (bool, np.bool_)):
        return MITIGATIONS if mitigations else ()
    if not isinstance(mitigations, (list, tuple, set, frozenset)):
        raise TypeError(f"mitigations must be a bool or a collection of names from "
                        f"{MITIGATIONS}; got {type(mitigations).__name__}")
    names = [as_choice(m, "mitigations", MITIGATIONS) for m in mitigations]
    if len(set(names)) != len(names):
        raise ValueError(f"mitigations must not repeat a name; got {list(mitigations)!r}")
    return tuple(m for m in MITIGATIONS if m in names)


def arm_name(mitigations) -> str:
    """The name of a mitigation arm: ``"none"``, ``"all"`` or the names joined by
    ``"+"`` (``"warmup"``, ``"decay+zloss"``, ...); the argument as for
    :func:`mitigation_set`."""
    m = mitigation_set(mitigations)
    return "none" if not m else "all" if m == MITIGATIONS else "+".join(m)


def train_run(*, qk_norm: bool, lr: float, seed: int, mitigations, steps: int = 300,
              n_layer: int = 2, d: int = 64, n_head: int = 4, context: int = 64,
              batch: int = 16, eval_every: int = 20, eval_windows: int = 16,
              warmup_frac: float = 0.1, decay: float = 1e-3, z_loss: float = 1e-4,
              keep_at: tuple = (), const_windows: int = 0,
              corpus: tuple | None = None) -> dict:
    r"""Train one run (see the module docstring) and return its record.

    Parameters
    ----------
    qk_norm : bool
        Qwen 3's QK-norm with learned gains.
    mitigations : bool or collection of str
        The mitigations switched on: names from :data:`MITIGATIONS` (``"warmup"``,
        ``"decay"``, ``"zloss"``), or ``True`` for all three, ``False`` for none
        (:func:`mitigation_set`).
    lr : float
        Peak learning rate, in (0, 1].
    seed : int
        Initialisation and batches (shared by the four arms of one seed).
    steps, n_layer, d, n_head, context, batch : int
        Budget and model (defaults: the book's sweep).
    eval_every, eval_windows : int
        Held-out evaluation period and its number of windows (fixed, evenly spaced).
    warmup_frac, decay, z_loss : float
        The mitigations' settings (each used only when switched on): warm-up length as a
        fraction of ``steps``; independent weight decay :math:`\lambda` per step at the
        peak rate; z-loss coefficient.
    keep_at : tuple of int
        Evaluation steps at which the exact local constant of the blocks
        (``final_norm=False``, relative tolerance 1e-5) is measured on
        ``const_windows`` held-out windows; they must be multiples of ``eval_every``
        (or 0 or ``steps``).
    corpus : (bytes, bytes), optional
        ``(train, heldout)`` text (default :func:`stdlib_corpus`).

    Returns
    -------
    dict
        ``eval_steps``, ``heldout_bits``, ``train_bits`` (mean of the steps since the
        last evaluation), ``max_logit`` (per evaluation, per layer), ``gain_bound``
        (per evaluation, per layer; empty without QK-norm), ``diverged_at`` (the
        last evaluation step before an overflow or a non-finite loss, or None),
        ``const`` (step -> constants), and the settings: ``mitigations`` is the list of
        the mitigations switched on and ``arm`` its name (:func:`arm_name`).
    """
    qk_norm, mit = as_bool(qk_norm, "qk_norm"), mitigation_set(mitigations)
    lr = as_float_in(lr, "lr", 0.0, 1.0, lo_open=True)
    seed = as_seed(seed)
    steps = as_count(steps, "steps", 1, 10**6)
    context = as_count(context, "context", 1, 4096)
    batch = as_count(batch, "batch", 1, 4096)
    eval_every = as_count(eval_every, "eval_every", 1, 10**6)
    eval_windows = as_count(eval_windows, "eval_windows", 1, 4096)
    const_windows = as_count(const_windows, "const_windows", 0, 4096)
    warmup_frac = as_float_in(warmup_frac, "warmup_frac", 0.0, 1.0)
    decay = as_float_in(decay, "decay", 0.0, 1.0)
    z_loss = as_float_in(z_loss, "z_loss", 0.0, 1e3)
    keep_at = () if isinstance(keep_at, (tuple, list)) and not keep_at else tuple(
        as_counts(keep_at, "keep_at", 0, steps))
    if corpus is not None and not (isinstance(corpus, tuple) and len(corpus) == 2 and all(
            isinstance(c, bytes) and len(c) > context + 1 for c in corpus)):
        raise TypeError(f"corpus must be None or (train, heldout) bytes, each longer than "
                        f"context + 1 = {context + 1}; got {type(corpus).__name__}")
    train, heldout = stdlib_corpus() if corpus is None else corpus
    m, lm = build(qk_norm, n_layer, d, n_head, seed=seed)
    tr = np.frombuffer(train, np.uint8)
    win = heldout_windows(heldout, context, eval_windows)
    cwin = heldout_windows(heldout, context, const_windows)[:, :-1] if const_windows else None
    rng = np.random.default_rng(seed)
    warmup = round(warmup_frac * steps) if "warmup" in mit else 0
    wd = decay / lr if "decay" in mit else 0.0
    zc = z_loss if "zloss" in mit else 0.0
    rec = {"qk_norm": qk_norm, "lr": lr, "seed": seed, "mitigations": list(mit),
           "arm": arm_name(mit),
           "eval_steps": [], "heldout_bits": [], "max_logit": [], "gain_bound": [],
           "train_bits": [], "diverged_at": None, "const": {}}

    def batches(t: int):
        s = rng.integers(0, tr.size - context - 1, batch)
        w = tr[s[:, None] + np.arange(context + 1)].astype(np.int64)
        return w[:, :-1], w[:, 1:]

    def evaluate(t: int) -> None:
        rec["eval_steps"].append(t)
        rec["heldout_bits"].append(heldout_bits(lm, win))
        rec["max_logit"].append(max_logits(m, win[:, :-1]).tolist())
        if qk_norm:
            rec["gain_bound"].append(gain_bound(m).tolist())
        if t in keep_at and cwin is not None:
            mm = copy.deepcopy(m)
            rec["const"][str(t)] = [mm.local_lipschitz(mm.embed(w), tol=1e-5) for w in cwin]

    acc: list[float] = []

    def callback(t: int, loss: float) -> None:
        if not math.isfinite(loss):
            raise _Diverged
        acc.append(loss / LN2)
        if (t + 1) % eval_every == 0 or t + 1 == steps:
            rec["train_bits"].append(float(np.mean(acc)))
            acc.clear()
            evaluate(t + 1)

    loss = lambda Y, y: cross_entropy(Y, y, z_loss=zc)  # noqa: E731
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        try:
            evaluate(0)
            train_stack(lm, batches, loss, steps=steps, lr=lr, warmup=warmup,
                        weight_decay=wd, callback=callback)
        except (FloatingPointError, _Diverged):
            rec["diverged_at"] = (rec["eval_steps"][-1] if rec["eval_steps"] else 0)
    return rec


SPIKE = 1.0
"""Default spike threshold: held-out bits/byte above the run's running minimum."""
STUCK = 0.9
"""Default "stuck" threshold, as a fraction of the held-out unigram entropy."""


def _arm_order(arm: str) -> tuple:
    return (ARMS.index(arm), "") if arm in ARMS else (len(ARMS), arm)


def _cells(runs: list[dict]) -> dict[tuple, list[dict]]:
    cells: dict[tuple, list[dict]] = {}
    for r in runs:
        cells.setdefault((r["qk_norm"], r["arm"], r["lr"]), []).append(r)
    keys = sorted(cells, key=lambda k: (k[0], _arm_order(k[1]), k[2]))
    return {k: sorted(cells[k], key=lambda r: r["seed"]) for k in keys}


def _final(r: dict) -> float:
    return math.inf if r["diverged_at"] is not None else r["heldout_bits"][-1]


def _rise(r: dict) -> float:
    """The largest rise of the held-out bits/byte above its running minimum."""
    h = np.asarray(r["heldout_bits"], float)
    return float(np.max(h - np.minimum.accumulate(h)))


def _check_runs(runs) -> list[dict]:
    if not isinstance(runs, list) or not runs or not all(
            isinstance(r, dict) and {"qk_norm", "lr", "arm", "seed", "heldout_bits",
                                     "diverged_at"} <= set(r) for r in runs):
        raise TypeError("runs must be a non-empty list of train_run records")
    return runs


def failures(runs: list[dict], unigram_bits: float, spike: float = SPIKE,
             stuck: float = STUCK) -> list[dict]:
    r"""Per run (in ``runs``' order), which failure tests it meets, each read from
    its own record and its seed's:

    - ``diverged``: a forward or backward pass overflowed or gave a non-finite
      value (``diverged_at`` is set);
    - ``spiked``: at some evaluation the held-out bits/byte is more than ``spike``
      above its running minimum (a loss that rose, not one that is slow to fall);
    - ``stuck``: the final held-out bits/byte is at least ``stuck`` times
      ``unigram_bits`` (the held-out text's unigram entropy: such a model has
      learned little beyond byte frequencies), while the run with the same seed,
      QK-norm setting and mitigation arm at the sweep's smallest learning rate
      ends below that line (so the budget suffices at a comfortable rate);
    - ``failed``: any of the three; and ``rise``, the largest rise itself.
    """
    runs = _check_runs(runs)
    H = as_positive_float(unigram_bits, "unigram_bits")
    spike = as_positive_float(spike, "spike")
    stuck = as_float_in(stuck, "stuck", 0.0, 2.0, lo_open=True)
    lo = min(r["lr"] for r in runs)
    ref = {(r["qk_norm"], r["arm"], r["seed"]): _final(r) for r in runs if r["lr"] == lo}
    out = []
    for r in runs:
        div = r["diverged_at"] is not None
        rise = _rise(r)
        ok_ref = ref.get((r["qk_norm"], r["arm"], r["seed"]), math.inf) < stuck * H
        stk = not div and r["lr"] != lo and _final(r) >= stuck * H and ok_ref
        out.append({"diverged": div, "spiked": rise > spike, "stuck": stk,
                    "failed": div or rise > spike or stk, "rise": rise})
    return out


def late_slope(run: dict, frac: float = 0.5) -> float:
    r"""How fast a run's held-out loss still falls at its end, in bits/byte per
    100 steps: minus the least-squares slope of its held-out bits/byte against
    the step over the evaluations at steps at or after ``(1 - frac)`` times its
    last evaluation step (positive: still descending; exact for the stored
    values).

    Parameters
    ----------
    run : dict
        A :func:`train_run` record (``eval_steps``, ``heldout_bits``).
    frac : float
        The final fraction of the run's steps that is fitted, in (0, 1].

    Returns
    -------
    float

    Raises
    ------
    TypeError
        If ``run`` is not such a record.
    ValueError
        If its steps and values are not finite or differ in length, or fewer
        than two distinct evaluation steps fall in that final fraction. A
        diverged run's record ends at its last evaluation, and so does the fit.
    """
    if not isinstance(run, dict) or not {"eval_steps", "heldout_bits"} <= set(run):
        raise TypeError(f"run must be a train_run record (a dict with eval_steps and "
                        f"heldout_bits); got {type(run).__name__}")
    frac = as_float_in(frac, "frac", 0.0, 1.0, lo_open=True)
    try:
        t = np.asarray(run["eval_steps"], float)
        h = np.asarray(run["heldout_bits"], float)
    except (TypeError, ValueError):
        t = h = np.zeros((0, 0))
    if t.ndim != 1 or t.shape != h.shape or t.size < 2 or not np.isfinite(t).all() \
            or not np.isfinite(h).all():
        raise ValueError(f"run must have finite eval_steps and heldout_bits of one "
                         f"length, at least 2; got shapes {t.shape} and {h.shape}")
    late = t >= (1.0 - frac) * t.max()
    if np.unique(t[late]).size < 2:
        raise ValueError(f"frac = {frac:g} leaves fewer than two evaluation steps "
                         f"to fit; got {np.unique(t[late]).size}")
    return float(-100.0 * np.polyfit(t[late], h[late], 1)[0])


def summarise(runs: list[dict], unigram_bits: float, spike: float = SPIKE,
              stuck: float = STUCK) -> list[dict]:
    """Per cell (qk_norm, mitigation arm, lr), sorted: the number of runs, how many
    diverged, spiked, were stuck and failed (any of these; :func:`failures`, with
    its thresholds), and the 10 %, 50 % and 90 % quantiles over seeds of the final
    and the best held-out bits/byte (a diverged run's final counts as +inf), of the
    largest rise above the running minimum, of the largest attention logit of any
    layer at the end and of its peak over training, and with QK-norm of the final
    gain bound (:func:`gain_bound`, largest layer)."""
    runs = _check_runs(runs)
    F = failures(runs, unigram_bits, spike, stuck)
    fails = {id(r): f for r, f in zip(runs, F, strict=True)}
    q = lambda a: [float(np.quantile(a, p)) for p in (0.1, 0.5, 0.9)]  # noqa: E731
    out = []
    for (qk, arm, lr), rs in _cells(runs).items():
        f = [fails[id(r)] for r in rs]
        row = {"qk_norm": qk, "arm": arm, "lr": lr, "runs": len(rs),
               **{k: sum(x[k] for x in f)
                  for k in ("diverged", "spiked", "stuck", "failed")},
               "final_bits_q": q([_final(r) for r in rs]),
               "best_bits_q": q([min(r["heldout_bits"]) for r in rs]),
               "rise_q": q([x["rise"] for x in f]),
               "final_logit_q": q([max(r["max_logit"][-1]) for r in rs]),
               "peak_logit_q": q([max(max(x) for x in r["max_logit"]) for r in rs])}
        if qk:
            row["final_bound_q"] = q([max(r["gain_bound"][-1]) for r in rs])
        out.append(row)
    return out


def read_results(path: str | Path | None = None) -> dict:
    """The shipped sweep (default :data:`DATA`), as :func:`main` wrote it: ``args``,
    ``git_commit``, ``model``, ``mitigations``, ``unigram_bits`` (the held-out text's
    unigram entropy), ``wall_s``, ``runs`` and ``cells``."""
    if path is not None and (isinstance(path, bool) or not isinstance(path, (str, Path))
                             or not Path(path).is_file()):
        raise ValueError(f"path must be None or the path of an existing JSON file; "
                         f"got {path!r}")
    res = json.loads(Path(DATA if path is None else path).read_text())
    return as_result(res, "path", ("args", "git_commit", "runs", "cells", "unigram_bits"),
                     producer="python -m lipattn.book.stability")


BIG_LOGIT = 1e4
"""Wortsman et al.'s line: in their sweeps every run with logits above it diverged."""


def _key(arm: str) -> str:
    return arm.replace("+", "_")


def summary(result: dict, spike: float = SPIKE, stuck: float = STUCK) -> dict:
    r"""The page's numbers from :func:`read_results`'s dictionary (floats, for glue).

    The sweep's rates are indexed ``i = 0, 1, ...`` from the smallest; ``t`` is
    ``plain`` (no QK-norm) or ``qk``; ``a`` a mitigation arm (:func:`arm_name`,
    ``+`` written ``_``); the failure tests are :func:`failures`' with ``spike``
    and ``stuck``.

    - ``n_runs``, ``n_seeds``, ``n_lrs``, ``n_arms``, ``lr{i}``, ``lr_lo``,
      ``lr_hi``, ``steps``, ``eval_every``; ``unigram`` (held-out unigram entropy),
      ``spike``, ``stuck``, ``stuck_bits`` (``stuck * unigram``);
    - per cell ``{t}_{a}_{k}{i}`` for ``k`` in ``failed``, ``spiked``, ``stuck``,
      ``diverged`` (counts of runs), ``bits`` (median final held-out bits/byte),
      ``best`` (median of each run's lowest), ``logit`` (median final largest
      attention logit, any layer), ``peak`` (median of its peak over training);
      and ``qk_{a}_bound{i}``, the median final gain bound;
    - ``{t}_failed`` / ``{t}_runs``: failed runs over the whole arm of QK-norm off
      or on; ``failed``: all failed runs; ``diverged``: all diverged runs;
    - paired by seed: ``qkwins{i}`` / ``qkpairs{i}``: pairs (every arm) at rate i
      where QK-norm ends with fewer held-out bits/byte; ``qkfix{i}`` /
      ``qkbreak{i}``: pairs where the run without QK-norm fails and the one with it
      does not, and the reverse; ``{t}_{m}_fix{i}``, ``{t}_{m}_break{i}``,
      ``{t}_{m}_wins{i}``: the same for each mitigation arm ``m`` against ``none``
      (wins: fewer final bits/byte), and ``{t}_{m}_dbits{i}``, the median paired
      difference of the final bits/byte (``m`` minus ``none``);
    - ``rise_lo_max``, ``rise_lo_med``: the largest and the median rise above the
      running minimum over the runs at the smallest rate (the evaluations' noise,
      against which ``spike`` is set); ``lo_bits_max``: the largest final
      bits/byte at the smallest rate;
    - ``big_runs`` / ``big_failed``: runs whose largest logit ever exceeds
      :data:`BIG_LOGIT`, and how many of them failed; ``small_runs`` /
      ``small_failed`` the same for the others; ``qk_big``: QK-norm runs above it;
    - ``bound_ok`` (1 if every recorded logit of every QK-norm run is at most its
      bound), ``bound_ratio`` (the largest logit-to-bound ratio), ``qk_bound_0``
      (the bound at initialisation);
    - ``{t}_sens_{a}``: Wortsman et al.'s learning-rate sensitivity,
      :math:`\mathbb E_{\eta}[\min(L(\eta), L_0)] - \min_\eta L(\eta)` over the
      sweep's rates, L the final held-out bits/byte and L_0 the initial one,
      median over seeds;
    - ``const_runs``: constant runs per cell; for each rate i with constant runs,
      ``{t}_{a}_const0_{i}`` and ``{t}_{a}_const_{i}``, the exact constant of the
      blocks at the first and the last checkpoint (median over windows, then over
      the runs).
    """
    res = as_result(result, "result", ("args", "runs", "cells", "unigram_bits"),
                    producer="lipattn.book.stability.read_results")
    runs = _check_runs(res["runs"])
    H = as_positive_float(res["unigram_bits"], "result['unigram_bits']")
    F = failures(runs, H, spike, stuck)
    spike, stuck = float(spike), float(stuck)
    fail = {id(r): f for r, f in zip(runs, F, strict=True)}
    cells = _cells(runs)
    lrs = sorted({r["lr"] for r in runs})
    arms = sorted({r["arm"] for r in runs}, key=_arm_order)
    seeds = sorted({r["seed"] for r in runs})
    med = lambda a: float(np.median(a))  # noqa: E731
    out = {"n_runs": len(runs), "n_seeds": len(seeds), "n_lrs": len(lrs),
           "n_arms": len(arms), "lr_lo": lrs[0], "lr_hi": lrs[-1],
           "steps": max(r["eval_steps"][-1] for r in runs),
           "eval_every": runs[0]["eval_steps"][1] - runs[0]["eval_steps"][0],
           "unigram": H, "spike": spike, "stuck": stuck, "stuck_bits": stuck * H,
           "failed": sum(f["failed"] for f in F), "diverged": sum(f["diverged"] for f in F)}
    tags = (("plain", False), ("qk", True))
    for i, lr in enumerate(lrs):
        out[f"lr{i}"] = lr
    for t, qk in tags:
        rs = [r for r in runs if r["qk_norm"] == qk]
        out[f"{t}_runs"] = len(rs)
        out[f"{t}_failed"] = sum(fail[id(r)]["failed"] for r in rs)
        for a in arms:
            for i, lr in enumerate(lrs):
                c = cells.get((qk, a, lr), [])
                if not c:
                    continue
                k = f"{t}_{_key(a)}"
                for name in ("failed", "spiked", "stuck", "diverged"):
                    out[f"{k}_{name}{i}"] = sum(fail[id(r)][name] for r in c)
                out[f"{k}_bits{i}"] = med([_final(r) for r in c])
                out[f"{k}_best{i}"] = med([min(r["heldout_bits"]) for r in c])
                out[f"{k}_logit{i}"] = med([max(r["max_logit"][-1]) for r in c])
                out[f"{k}_peak{i}"] = med([max(max(x) for x in r["max_logit"]) for r in c])
                if qk:
                    out[f"{k}_bound{i}"] = med([max(r["gain_bound"][-1]) for r in c])
            sens = []
            for sd in seeds:
                L = np.array([_final(r) for lr in lrs for r in cells.get((qk, a, lr), [])
                              if r["seed"] == sd])
                L0 = [r["heldout_bits"][0] for r in cells.get((qk, a, lrs[0]), [])
                      if r["seed"] == sd]
                if L.size == len(lrs) and L0:
                    sens.append(float(np.mean(np.minimum(L, L0[0])) - L.min()))
            if sens:
                out[f"{t}_sens_{_key(a)}"] = med(sens)

    def paired(qa, aa, qb, ab, lr):
        A = {r["seed"]: r for r in cells.get((qa, aa, lr), [])}
        B = {r["seed"]: r for r in cells.get((qb, ab, lr), [])}
        return [(A[sd], B[sd]) for sd in seeds if sd in A and sd in B]

    def diff(a, b):
        fa, fb = _final(a), _final(b)
        return 0.0 if fa == fb else fb - fa

    for i, lr in enumerate(lrs):
        P = [p for a in arms for p in paired(False, a, True, a, lr)]
        out[f"qkpairs{i}"] = len(P)
        out[f"qkwins{i}"] = sum(_final(b) < _final(a) for a, b in P)
        out[f"qkfix{i}"] = sum(fail[id(a)]["failed"] and not fail[id(b)]["failed"]
                               for a, b in P)
        out[f"qkbreak{i}"] = sum(fail[id(b)]["failed"] and not fail[id(a)]["failed"]
                                 for a, b in P)
        for t, qk in tags:
            for m in arms:
                P = paired(qk, "none", qk, m, lr)
                if m == "none" or not P:
                    continue
                k = f"{t}_{_key(m)}"
                out[f"{k}_fix{i}"] = sum(fail[id(a)]["failed"] and not fail[id(b)]["failed"]
                                         for a, b in P)
                out[f"{k}_break{i}"] = sum(fail[id(b)]["failed"]
                                           and not fail[id(a)]["failed"] for a, b in P)
                out[f"{k}_wins{i}"] = sum(_final(b) < _final(a) for a, b in P)
                out[f"{k}_dbits{i}"] = med([diff(a, b) for a, b in P])
    lo = [(r, fail[id(r)]) for r in runs if r["lr"] == lrs[0]]
    out["rise_lo_max"] = max(f["rise"] for _, f in lo)
    out["rise_lo_med"] = med([f["rise"] for _, f in lo])
    out["lo_bits_max"] = max(_final(r) for r, _ in lo)
    peak = {id(r): max(max(x) for x in r["max_logit"]) for r in runs}
    big = [r for r in runs if peak[id(r)] > BIG_LOGIT]
    small = [r for r in runs if peak[id(r)] <= BIG_LOGIT]
    out["big_runs"], out["small_runs"] = len(big), len(small)
    out["big_failed"] = sum(fail[id(r)]["failed"] for r in big)
    out["small_failed"] = sum(fail[id(r)]["failed"] for r in small)
    out["qk_big"] = sum(r["qk_norm"] for r in big)
    qkr = [r for r in runs if r["qk_norm"]]
    ratios = [lg / b for r in qkr for L, B in zip(r["max_logit"], r["gain_bound"], strict=True)
              for lg, b in zip(L, B, strict=True)]
    out["bound_ok"] = float(all(x <= 1 + 1e-5 for x in ratios)) if ratios else 0.0
    out["bound_ratio"] = max(ratios) if ratios else math.nan
    if qkr:
        out["qk_bound_0"] = max(qkr[0]["gain_bound"][0])
    cr = [r for r in runs if r["const"]]
    for (qk, a, lr), c in cells.items():
        c = [r for r in c if r["const"]]
        if not c:
            continue
        i, k = lrs.index(lr), f"{'qk' if qk else 'plain'}_{_key(a)}"
        last = str(max(int(x) for x in c[0]["const"]))
        out[f"{k}_const0_{i}"] = med([np.median(r["const"]["0"]) for r in c])
        out[f"{k}_const_{i}"] = med([np.median(r["const"][last]) for r in c])
        out["const_runs"] = len(c)
    out["const_total"] = len(cr)
    return {k: float(v) for k, v in out.items()}


def _round(x, digits: int = 5):
    """Floats rounded to ``digits`` significant digits, recursively (for a small JSON)."""
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v, digits) for v in x]
    return x


def _one(kw: dict) -> dict:
    t0 = time.process_time()
    rec = train_run(**kw)
    rec["cpu_s"] = time.process_time() - t0
    rec = _round(rec)
    print(f"qk={kw['qk_norm']:d} arm={rec['arm']} lr={kw['lr']:g} seed={kw['seed']}: "
          f"{rec['heldout_bits'][-1]:.3f} bits/byte, max logit {max(rec['max_logit'][-1]):.1f}, "
          f"diverged {rec['diverged_at']}, {rec['cpu_s']:.1f} s", flush=True)
    return rec


def _arm_set(name: str) -> tuple[str, ...]:
    return () if name == "none" else MITIGATIONS if name == "all" else tuple(
        mitigation_set(name.split("+")))


def main(argv: list[str] | None = None) -> dict:
    """The command line; writes and returns the results dictionary."""
    ap = argparse.ArgumentParser(prog="python -m lipattn.book.stability", description=__doc__)
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-2, 3e-1, 1.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=640)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--arms", nargs="+", default=list(ARMS),
                    help="mitigation arms: none, all, or names joined by + "
                         "(warmup, decay, zloss)")
    ap.add_argument("--const-runs", type=int, default=2,
                    help="seeds whose local constants are measured")
    ap.add_argument("--const-arms", nargs="*", default=["none", "all"],
                    help="mitigation arms of the constant runs")
    ap.add_argument("--const-lrs", type=float, nargs="*", default=None,
                    help="learning rates of the constant runs (default: first two)")
    ap.add_argument("--const-windows", type=int, default=3)
    ap.add_argument("--checkpoints", type=int, default=4,
                    help="evenly spaced checkpoints of the constants (besides step 0)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    commit = _git_commit()
    corpus = stdlib_corpus()
    keep = tuple(round(a.steps * k / a.checkpoints) for k in range(a.checkpoints + 1))
    clrs = a.lrs[:2] if a.const_lrs is None else a.const_lrs
    arms = [arm_name(_arm_set(x)) for x in a.arms]
    specs = []
    for seed in range(a.seeds):
        for lr in a.lrs:
            for qk in (False, True):
                for arm in arms:
                    const = arm in a.const_arms and seed < a.const_runs and lr in clrs
                    specs.append(dict(qk_norm=qk, lr=lr, seed=seed,
                                      mitigations=_arm_set(arm), steps=a.steps,
                                      eval_every=a.eval_every, corpus=corpus,
                                      keep_at=keep if const else (),
                                      const_windows=a.const_windows if const else 0))
    t0 = time.time()
    partial = None if a.out is None else Path(a.out).with_suffix(".partial.jsonl")
    runs = []

    def keep(rec: dict) -> None:       # each run as it ends, so a stopped sweep survives
        runs.append(rec)
        if partial is not None:
            with open(partial, "a") as f:
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    if a.jobs > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(a.jobs) as pool:
            for rec in pool.imap(_one, specs, chunksize=1):
                keep(rec)
    else:
        for s in specs:
            keep(_one(s))
    args = {k: str(v) for k, v in vars(a).items()}
    if a.out is not None:              # the file's name, not this machine's path
        args["out"] = Path(a.out).name
    result = {"args": args, "git_commit": commit,
              "model": {"layout": "llama", "n_layer": 2, "d": 64, "n_head": 4, "context": 64,
                        "batch": 16, "vocab": 256},
              "mitigations": {"warmup_frac": 0.1, "decay": 1e-3, "z_loss": 1e-4},
              "unigram_bits": unigram_entropy(corpus[1]),
              "wall_s": time.time() - t0, "runs": runs,
              "cells": summarise(runs, unigram_entropy(corpus[1]))}
    if a.out is not None:
        Path(a.out).write_text(json.dumps(result, separators=(",", ":")) + "\n")
    return result


if __name__ == "__main__":
    main()
