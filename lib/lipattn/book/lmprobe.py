r"""Chapter 8's two follow-ups on the trained byte-level GPT-2: Castin et al.'s
measurement, and interventions on the most sensitive direction.

- :func:`attention_growth`: the exact local constant of each attention layer
  *alone* (no LayerNorm, no residual, causal mask) at its input
  :math:`\mathrm{LN}_1(x)`, on windows of n tokens for several n, and the
  radius :math:`(\frac1n\sum_i\|y_i\|^2)^{1/2}` of that input: the quantity that
  Castin, Ablin and Peyré's code (``gpt_2/compute_gpt.py``) estimates on
  GPT-2 small's ``h[b].attn``, here exact (:func:`lipattn.layers.layer_lipschitz`).
  :func:`growth_summary` gives its log-log slopes in n.
- :func:`byte_interventions`: the stack's exact constant after replacing the
  bytes at the positions that carry most of its most sensitive input direction,
  against replacing as many random other positions, and against replacing the
  first byte; :func:`intervention_summary` gives medians, quantiles and the
  windows that break the pattern.
- :func:`update_measurements` / ``python -m lipattn.book.lmprobe CHECKPOINT
  [--only growth,interventions]``: both, computed from the final checkpoint
  alone and written into the ``measurements.json`` that ``python -m
  lipattn.book.lm`` wrote there, under the keys ``growth``, ``growth_random``
  and ``interventions`` (the rest of the file is kept).

Every constant is exact to the relative tolerance ``tol`` (Lanczos's certified
residual), Frobenius norms on both sides, in the model's float64.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import as_bool, as_count, as_counts, as_seed, as_tol
from ..layers import layer_lipschitz
from . import lm
from ._check import as_dir, as_result

__all__ = ["LENGTHS", "CASTIN_CURVES", "CASTIN_SETUP", "random_init", "attention_growth",
           "growth_summary",
           "byte_interventions", "intervention_summary", "update_measurements", "main"]

#: Window lengths n at which :func:`attention_growth` measures.
LENGTHS = (2, 4, 8, 16, 32, 64, 128)
#: The curves :math:`c\,n^p` that Castin, Ablin and Peyré's plotting scripts
#: draw over their scatter of GPT-2 small's attention constants against n
#: (github.com/vcastin/how-smooth-is-attention, commit 60da456;
#: ``gpt_2/plot_gpt.py`` for the pretrained model on Alice in Wonderland,
#: ``coef`` and ``pow``; ``gpt2_random/plot_gpt_random.py`` for a random
#: initialisation): name -> (layer index ``b`` of ``model.h[b].attn``, c, p).
CASTIN_CURVES = {"pretrained": ((0, 35.3, 0.26), (6, 25.0, 0.51)),
                 "random": ((6, 0.445, 0.25),)}
#: Their measurement's setup (``gpt_2/process_gpt.py``, ``gpt_2/compute_gpt.py``):
#: the lengths n (every even n from the first to the second), windows per n,
#: the power iteration's stopping tolerance on successive estimates of
#: :math:`\|J\|_2^2` and its iteration cap, and the layers ``b`` measured;
#: the AG_NEWS test texts joined (``batch_size`` of its data loader) and the
#: floor below which ``gpt2_random/plot_gpt_random.py`` leaves constants out
#: of its scatter against n (``threshold``).
CASTIN_SETUP = {"n": (2, 98), "per_n": 10, "power_tol": 5e-4, "max_iter": 500,
                "layers": (0, 6), "ag_news_texts": 1000, "random_floor": 0.1}
#: The parts :func:`update_measurements` can compute.
PARTS = ("growth", "interventions")


def _setup(model: Any, windows: Any) -> tuple[Any, np.ndarray]:
    model = lm._check_model(model)
    return model, lm._windows(windows, model.wte.shape[0])


def random_init(model: Any, seed: int = 0) -> Any:
    """A random initialisation of ``model``'s architecture: a GPT2 with its layers,
    width, heads, vocabulary and context, from :func:`lipattn.models.random_state_dict`
    (Hugging Face's GPT-2 initialisation, standard deviation 0.02) with ``seed``."""
    from ..models import GPT2, random_state_dict

    model, _ = _setup(model, [[0]])
    sd = random_state_dict("gpt2", model.n_layer, model.d_model, model.n_head,
                           vocab=model.wte.shape[0], n_pos=model.wpe.shape[0],
                           seed=as_seed(seed))
    return GPT2.from_state_dict(sd, n_head=model.n_head)


def attention_growth(model: Any, windows: Any, *, lengths: Any = LENGTHS,
                     tol: float = 1e-6, seed: int = 0) -> dict:
    r"""Exact constants of each attention layer alone on windows of n tokens.

    For window w, layer l and length n: the spectral norm of the Jacobian of
    :math:`Y \mapsto \mathrm{Attn}_l(Y)` (all heads, :math:`W_O`, causal mask;
    without :math:`\mathrm{LN}_1` and without the residual) at
    :math:`Y = \mathrm{LN}_1(X_l)_{1:n}`, where :math:`X_l` is the stream
    entering block l on the window. By causality (Chapter 8's Proposition
    "Prefixes of a causal stack") this is the layer's input on the window's
    first n bytes read alone, from position 0; so the lengths are nested
    prefixes of each window, not independent texts.

    Parameters
    ----------
    model : GPT2
    windows : array_like of int, shape (W, N)
    lengths : sequence of int
        The n (those above N are skipped).
    tol : float
        Relative tolerance of every constant.
    seed : int
        Lanczos's start.

    Returns
    -------
    dict
        ``lengths`` (K,); ``attn`` (W, L, K): the exact constants; ``radius``
        (W, L, K): :math:`(\frac1n\sum_{i \le n}\|y_i\|^2)^{1/2}`, Castin et
        al.'s "mean radius" of the input.
    """
    model, w = _setup(model, windows)
    tol, seed = as_tol(tol), as_seed(seed)
    ks = [k for k in as_counts(lengths, "lengths", maximum=1 << 20) if k <= w.shape[1]]
    if not ks:
        raise ValueError(f"lengths must contain a length <= N = {w.shape[1]}; got {lengths!r}")
    attn = np.empty((len(w), model.n_layer, len(ks)))
    radius = np.empty_like(attn)
    for a, tok in enumerate(w):
        X = model.embed(tok)
        for i, blk in enumerate(model.blocks):
            Y = blk.norm_1.forward(X)[0]
            for j, k in enumerate(ks):
                attn[a, i, j] = layer_lipschitz(blk.attn, Y[:k], tol=tol, seed=seed).value
                radius[a, i, j] = np.sqrt(np.mean(np.sum(Y[:k] ** 2, axis=1)))
            X = model.forward(X, start=i, stop=i + 1)
    return {"lengths": np.array(ks), "attn": attn, "radius": radius}


def growth_summary(growth: dict, *, lo: int = 8) -> dict[str, float]:
    r"""Log-log slopes in n of :func:`attention_growth`'s constants, by name.

    Per layer l (0-based): ``g{l}_slope_med``, ``_lo``, ``_hi`` (median, min,
    max over windows of :math:`\log(c(n_K)/c(n_{lo}))/\log(n_K/n_{lo})`, from
    length ``lo`` to the longest), ``g{l}_fit`` (least-squares slope of the
    log median constant against log n over all lengths), ``g{l}_above_half``
    (windows whose slope exceeds 1/2), ``g{l}_c{n}`` (median constant at n
    for the shortest and the longest n); ``g_n_lo``, ``g_n_hi``;
    ``g_radius_spread`` (largest over smallest median radius, over layers
    and lengths, per layer, the largest).
    """
    growth = as_result(growth, "growth", ("lengths", "attn", "radius"),
                       producer="attention_growth")
    ks = np.asarray(growth["lengths"])
    A, Rad = np.asarray(growth["attn"], float), np.asarray(growth["radius"], float)
    lo = as_count(lo, "lo")
    if lo not in ks or lo >= ks[-1]:
        raise ValueError(f"lo must be one of the lengths below the longest, {ks.tolist()}; "
                         f"got {lo}")
    i0 = list(ks).index(lo)
    out: dict[str, float] = {"g_n_lo": float(lo), "g_n_hi": float(ks[-1])}
    slope = np.log(A[:, :, -1] / A[:, :, i0]) / np.log(ks[-1] / lo)   # (W, L)
    med = np.median(A, axis=0)                                        # (L, K)
    spread = []
    for i in range(A.shape[1]):
        s = slope[:, i]
        out.update({f"g{i}_slope_med": np.median(s), f"g{i}_slope_lo": s.min(),
                    f"g{i}_slope_hi": s.max(), f"g{i}_above_half": int(np.sum(s > 0.5)),
                    f"g{i}_fit": np.polyfit(np.log(ks), np.log(med[i]), 1)[0],
                    f"g{i}_c_first": med[i, 0], f"g{i}_c_last": med[i, -1]})
        r = np.median(Rad[:, i], axis=0)
        spread.append(r.max() / r.min())
    out["g_radius_spread"] = max(spread)
    return {k: float(v) for k, v in out.items()}


def _replace(tok: np.ndarray, pos: np.ndarray, pool: np.ndarray,
             rng: np.random.Generator) -> np.ndarray:
    """``tok`` with each position in ``pos`` set to a byte of ``pool`` that differs
    from the one it had (drawn uniformly among the pool's entries)."""
    t = tok.copy()
    for p in pos:
        cand = pool[pool != tok[p]]
        t[p] = cand[rng.integers(cand.size)]
    return t


def byte_interventions(model: Any, windows: Any, *, n_pos: int = 3, draws: int = 4,
                       seed: int = 0, tol: float = 1e-6, progress: bool = False) -> dict:
    r"""The stack's exact constant when the bytes that carry its top direction change.

    For each window: the stack's constant :math:`c = \|DF(H)\|_2` at
    ``H = model.embed(tokens)`` and its top right singular vector v; the
    ``n_pos`` positions of largest energy :math:`\|v_i\|^2` (the *top*
    positions). Three interventions, ``draws`` times each: replace the bytes
    at the top positions (arm ``top``), at ``n_pos`` positions drawn uniformly
    among the others (``random``, the control), or at position 0 alone
    (``first``) by bytes drawn from the windows' bytes (each different from the
    byte it replaces), and measure the stack's constant at the new window.

    Parameters
    ----------
    model : GPT2
    windows : array_like of int, shape (W, N)
        ``N > n_pos``.
    n_pos : int, default 3
    draws : int, default 4
    seed : int, default 0
        Seeds the replacement bytes and the control positions; Lanczos's start
        is seed 0 throughout.
    tol : float, default 1e-6
    progress : bool, default False
        Print one line per window.

    Returns
    -------
    dict
        ``base`` (W,): c; ``top_pos`` (W, n_pos), largest energy first;
        ``top_share`` (W,): their share of v's energy; for each arm a in
        ``top``, ``random``, ``first``: ``a`` (W, draws) the constants after
        the replacement, ``a_left`` (W, draws) the share of the new top
        direction's energy on the original top positions, and ``a_tokens``
        (W, draws, N) the replaced windows themselves.
    """
    model, w = _setup(model, windows)
    n_pos, draws = as_count(n_pos, "n_pos", maximum=1 << 20), as_count(draws, "draws",
                                                                       maximum=1 << 20)
    seed, tol, progress = as_seed(seed), as_tol(tol), as_bool(progress, "progress")
    if w.shape[1] <= n_pos:
        raise ValueError(f"windows must have more than n_pos = {n_pos} positions; got "
                         f"shape {w.shape}")
    rng = np.random.default_rng(seed)
    pool = w.ravel()
    if np.unique(pool).size < 2:
        raise ValueError("windows must contain at least two different bytes (the "
                         "replacements differ from the bytes they replace)")
    info = lambda t: model.local_lipschitz_info(model.embed(t), tol=tol)  # noqa: E731
    arms = ("top", "random", "first")
    out: dict[str, Any] = {k: [] for k in ("base", "top_pos", "top_share")}
    out.update({k: [] for a in arms for k in (a, a + "_left", a + "_tokens")})
    for tok in w:
        b = info(tok)
        e = np.sum(b.input_direction ** 2, axis=1)
        top = np.argsort(-e, kind="stable")[:n_pos]
        others = np.setdiff1d(np.arange(tok.size), top)
        out["base"].append(b.value), out["top_pos"].append(top)
        out["top_share"].append(e[top].sum())
        rows: dict[str, list] = {k: [] for a in arms for k in (a, a + "_left", a + "_tokens")}
        for _ in range(draws):
            pos = {"top": top, "random": rng.choice(others, n_pos, replace=False),
                   "first": np.array([0])}
            for a in arms:
                t = _replace(tok, pos[a], pool, rng)
                r = info(t)
                rows[a].append(r.value)
                rows[a + "_tokens"].append(t)
                rows[a + "_left"].append(np.sum(r.input_direction[top] ** 2))
        for k, v in rows.items():
            out[k].append(v)
        if progress:
            print(f"window {len(out['base'])}/{len(w)}: {b.value:.4g}", flush=True)
    return {k: np.array(v) for k, v in out.items()}


def intervention_summary(res: dict) -> dict[str, float]:
    """Medians, quantiles and pattern-breakers of :func:`byte_interventions`, by name.

    Ratios r to the window's own constant, over all (window, draw) pairs, for
    arm a in ``top``, ``random``, ``first``: ``iv_{a}_med``, ``_lo``, ``_hi``
    (50 %, 10 %, 90 % quantiles of r), ``iv_{a}_dev_med`` (median of
    100 |r - 1|, percent), ``iv_{a}_left_med`` (median share, percent, of the new
    top direction's energy on the original top positions). Per window, with
    d_a the median of |r - 1| over its draws: ``iv_break`` (windows where
    d_top <= d_random: replacing the top bytes moves the constant no more than
    the control does), ``iv_top_down`` / ``iv_top_up`` (windows where every top
    draw lowers / raises it), ``iv_stay`` (windows where the new direction keeps
    more than half of its energy on the original top positions in the median
    top draw), ``iv_first_max_dev`` (largest 100 |r - 1| of the first-byte arm);
    ``iv_windows``, ``iv_draws``, ``iv_n_pos``, ``iv_top_share_med`` (percent).
    """
    res = as_result(res, "res", ("base", "top_pos", "top_share", "top", "random", "first",
                                 "top_left", "random_left", "first_left"),
                    producer="byte_interventions")
    base = np.asarray(res["base"], float)[:, None]
    out: dict[str, float] = {}
    dev = {}
    for a in ("top", "random", "first"):
        r = np.asarray(res[a], float) / base
        dev[a] = np.median(np.abs(r - 1), axis=1)
        out.update({f"iv_{a}_med": np.median(r), f"iv_{a}_lo": np.quantile(r, 0.1),
                    f"iv_{a}_hi": np.quantile(r, 0.9),
                    f"iv_{a}_dev_med": 100 * np.median(np.abs(r - 1)),
                    f"iv_{a}_left_med": 100 * np.median(res[a + "_left"])})
    r_top = np.asarray(res["top"], float) / base
    r_first = np.asarray(res["first"], float) / base
    left = np.median(np.asarray(res["top_left"], float), axis=1)
    out.update(iv_break=int(np.sum(dev["top"] <= dev["random"])),
               iv_top_down=int(np.sum(np.all(r_top < 1, axis=1))),
               iv_top_up=int(np.sum(np.all(r_top > 1, axis=1))),
               iv_stay=int(np.sum(left > 0.5)),
               iv_first_max_dev=100 * np.abs(r_first - 1).max(),
               iv_windows=base.shape[0], iv_draws=r_top.shape[1],
               iv_n_pos=np.asarray(res["top_pos"]).shape[1],
               iv_top_share_med=100 * np.median(res["top_share"]))
    return {k: float(v) for k, v in out.items()}


def update_measurements(path: str | os.PathLike, parts: Any = PARTS, *,
                        growth_windows: int = 32, intervention_windows: int = 32,
                        draws: int = 4, random_seeds: int = 3,
                        progress: bool = False) -> dict:
    """Compute ``parts`` (a subset of ``("growth", "interventions")``) from the
    checkpoint at ``path`` alone and write them into ``path/measurements.json``
    (which must exist and belong to these weights), keeping its other keys.

    Both use the file's own windows (``measure.tokens``; the first
    ``growth_windows`` / ``intervention_windows`` of them, ``draws`` per arm)
    and tolerance. Each
    part is stored with the seconds it took (``{part}_seconds``). ``growth``
    also stores ``growth_random``: :func:`attention_growth` of ``random_seeds``
    random initialisations of the same architecture
    (:func:`lipattn.models.random_state_dict`, GPT-2's, seeds 0, 1, ...) on the
    first 8 windows, ``attn`` and ``radius`` of shape (S, W, L, K). Returns the
    whole updated dict, as read back (lists as arrays).
    """
    from ..models import load

    path = as_dir(path, "path")
    if isinstance(parts, str):
        parts = tuple(p for p in parts.split(",") if p)
    if not isinstance(parts, (list, tuple)) or not parts or \
            any(p not in PARTS for p in parts):
        raise ValueError(f"parts must be a non-empty subset of {PARTS}; got {parts!r}")
    gw = as_count(growth_windows, "growth_windows", maximum=4096)
    iw = as_count(intervention_windows, "intervention_windows", maximum=4096)
    n_seeds = as_count(random_seeds, "random_seeds", maximum=64)
    draws = as_count(draws, "draws", maximum=64)
    progress = as_bool(progress, "progress")
    R = lm.read_measurements(path)            # checks the weights' SHA-256
    new: dict[str, Any] = {}
    model, tok, tol = load(path), np.asarray(R["measure"]["tokens"]), float(R["tol"])
    for part in parts:
        t0 = time.perf_counter()
        if part == "growth":
            res = attention_growth(model, tok[:gw], tol=tol)
            rand = [attention_growth(random_init(model, s), tok[:8], tol=tol)
                    for s in range(n_seeds)]
            new["growth_random"] = lm._jsonable(
                {"seeds": np.arange(n_seeds), "lengths": rand[0]["lengths"],
                 **{k: np.array([r[k] for r in rand]) for k in ("attn", "radius")}})
        else:
            res = byte_interventions(model, tok[:iw], draws=draws, tol=tol,
                                     progress=progress)
        new[part] = lm._jsonable(res)
        new[f"{part}_seconds"] = time.perf_counter() - t0
        if progress:
            print(f"{part}: {new[f'{part}_seconds']:.1f} s", flush=True)
    # read again just before writing, so that runs of different parts can overlap
    data = json.loads((path / lm.MEASUREMENTS).read_text())
    data.update(new)
    (path / lm.MEASUREMENTS).write_text(json.dumps(data, separators=(",", ":")) + "\n")
    return lm.read_measurements(path)


def main(argv: list[str] | None = None) -> dict:
    """``python -m lipattn.book.lmprobe CHECKPOINT [--only growth,interventions]``:
    :func:`update_measurements` with its defaults, printing progress."""
    ap = argparse.ArgumentParser(prog="python -m lipattn.book.lmprobe", description=__doc__)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--only", default=",".join(PARTS),
                    help="comma-separated parts (default: all of " + ", ".join(PARTS) + ")")
    a = ap.parse_args(argv)
    return update_measurements(a.checkpoint, a.only, progress=True)


if __name__ == "__main__":
    main()
