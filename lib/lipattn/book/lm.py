r"""Chapter 8's measurements: exact constants of the book's trained byte-level GPT-2.

Everything here composes the models' own exact constants
(:mod:`lipattn.models.decoder`: Golub–Kahan–Lanczos on the closed-form
Jacobian-vector products, a certified residual) and Chapter 7's bounds
(:func:`lipattn.book.viz.real.head_constants`: Theorem 7.1's two forms); no
constant or bound is re-implemented. A *window* is ``N`` consecutive bytes of
held-out text (:func:`window_tokens`); its hidden states are
``model.embed(tokens)`` (token plus position embeddings), and every constant is
taken with respect to them, Frobenius norms on both sides.

- :func:`window_constants`: one window's block, branch (attention and MLP
  sublayer) and head constants, Theorem 7.1's head bounds, the stack's exact
  constant (with and without the final LayerNorm) and the product of the block
  constants, the energy per position of the stack's most sensitive input
  direction, the constants of the window's prefixes, and per layer the largest
  absolute attention logit and each head's attention mass on position 0;
- :func:`attention_stats`: the last two alone (one forward pass);
- :func:`measure`: :func:`window_constants` over many windows, as arrays;
- :func:`trajectory`: block and stack constants and attention logits of the
  intermediate checkpoints of a training run;
- :func:`precompute` / ``python -m lipattn.book.lm``: both, written to the JSON
  file the chapter reads (:data:`MEASUREMENTS`), with the SHA-256 of the
  weights it was computed from.

Exact means: up to the relative tolerance ``tol`` (Lanczos's certified
residual; a float32 model raises it to at least 1e-5). The checkpoint is read in
float64 (:func:`lipattn.models.load`'s default), so the constants do not
depend on the machine's BLAS kernel beyond rounding.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import as_bool, as_choice, as_count, as_counts, as_float_in, as_seed, as_tol
from ..layers.attention import attention_logits
from ..models import load
from ..models.decoder import Decoder
from ._check import as_dir, as_result, as_tokens

__all__ = ["DATA", "MEASUREMENTS", "NAME", "PREFIXES", "checkpoint_dir", "weights_sha256",
           "window_tokens", "attention_stats", "window_constants", "measure", "run_steps",
           "trajectory", "cached_trajectory", "precompute", "read_measurements",
           "constants_summary", "uniform_first_mass", "direction_summary",
           "trajectory_summary", "scale_alignment", "n_parameters",
           "recipe", "loss_summary", "main"]

#: The directory of the book's shipped checkpoints.
DATA = Path(__file__).resolve().parent / "data"
#: File name of the precomputed measurements, next to the checkpoint.
MEASUREMENTS = "measurements.json"
#: The shipped checkpoint's directory name under :data:`DATA`.
NAME = "bytelm-stdlib"
#: Prefix lengths at which :func:`window_constants` measures the stack.
PREFIXES = (1, 2, 4, 8, 16, 32, 64, 128)
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_dir(name: str = NAME, *, weights: bool = True) -> Path:
    """The shipped checkpoint directory ``lipattn/book/data/<name>``, which must hold
    ``config.json`` (with ``weights``, the default) or :data:`MEASUREMENTS` (without);
    raises FileNotFoundError naming the path otherwise."""
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"name must be a directory name under {DATA}; got {name!r}")
    weights = as_bool(weights, "weights")
    path = DATA / name
    if not weights:
        if not (path / MEASUREMENTS).is_file():
            raise FileNotFoundError(f"no measurements at {path / MEASUREMENTS}; they are "
                                    f"written by python -m lipattn.book.lm {path}")
        return path
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no checkpoint at {path} (expected {path / 'config.json'}); "
                                "the byte-level model is written by python -m "
                                "lipattn.book.bytelm --out DIR")
    return path


def weights_sha256(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of ``path/model.safetensors``: which weights a measurement belongs to."""
    f = as_dir(path, "path") / "model.safetensors"
    if not f.is_file():
        raise ValueError(f"path must be a checkpoint directory; {f} does not exist")
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_model(model: Any) -> Decoder:
    if not isinstance(model, Decoder) or getattr(model, "model_type", "gpt2") != "gpt2" \
            or not hasattr(model, "embed"):
        raise TypeError("model must be a GPT-2 model from lipattn.models.load (or "
                        f"lipattn.models.GPT2); got {type(model).__name__}")
    return model


def window_tokens(text: bytes, N: int, count: int) -> np.ndarray:
    """``count`` evenly spaced windows of ``N`` bytes of ``text``, shape (count, N), int64.

    Window k starts at ``floor(k (len(text) - N) / (count - 1))`` (one window at 0
    if ``count == 1``); windows may overlap if the text is short.
    """
    if not isinstance(text, (bytes, bytearray)):
        raise TypeError(f"text must be bytes; got {type(text).__name__}")
    N, count = as_count(N, "N", maximum=1 << 20), as_count(count, "count", maximum=1 << 20)
    if len(text) < N:
        raise ValueError(f"text must have at least N = {N} bytes; got {len(text)}")
    a = np.frombuffer(bytes(text), np.uint8)
    starts = np.linspace(0, a.size - N, count).astype(np.int64)
    return a[starts[:, None] + np.arange(N)].astype(np.int64)


def _tokens(model: Decoder, tokens: Any) -> np.ndarray:
    t = np.asarray(tokens)
    n_pos = model.wpe.shape[0]
    if t.ndim != 1 or not 1 <= t.size <= n_pos:
        raise ValueError(f"tokens must be a 1-D array of 1 to {n_pos} token ids (the model's "
                         f"context); got shape {t.shape}")
    return as_tokens(t[None], "tokens", model.wte.shape[0], t.size)[0]


def _windows(windows: Any, vocab: int = 1 << 31) -> np.ndarray:
    """``windows`` as a (W, N) int array of token ids in [0, vocab) (W, N >= 1), or raise
    naming it; without ``vocab`` (no model yet) each model checks its own ids later."""
    w = np.asarray(windows) if not isinstance(windows, (str, bytes)) and windows is not None \
        else windows
    n = w.shape[1] if isinstance(w, np.ndarray) and w.ndim == 2 else 1
    if isinstance(w, np.ndarray) and w.ndim == 2 and n == 0:
        raise ValueError(f"windows must have shape (W, N) with W, N >= 1; got shape {w.shape}")
    return as_tokens(w, "windows", vocab, n).astype(np.int64)


def _pairs(checkpoints: Any) -> list:
    """``checkpoints`` as a list of (step, model or directory) pairs, or raise naming it."""
    if not isinstance(checkpoints, (list, tuple)) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in checkpoints):
        raise TypeError("checkpoints must be a list of (step, model or directory) pairs; got "
                        f"{type(checkpoints).__name__}")
    return [(as_count(s, "checkpoints' step", minimum=0), m) for s, m in checkpoints]


def attention_stats(model: Any, tokens: Any) -> dict:
    """Per layer: the largest absolute attention logit and the attention mass on position 0.

    Parameters
    ----------
    model : GPT2
    tokens : array_like of int, shape (N,)

    Returns
    -------
    dict
        ``max_logit`` (L,): :math:`\\max_{h, j \\le i} |T^{(h)}_{ij}|` over the allowed
        (causal) entries, the logits as :func:`lipattn.layers.attention.attention_logits`
        computes them from the layer's own queries and keys; ``first_mass``
        (L, heads): :math:`\\frac{1}{N-1}\\sum_{i \\ge 1} P^{(h)}_{i0}`, the mean
        attention of queries 1..N-1 on position 0 (query 0 sees only position 0;
        NaN-free: for N = 1 it is 1).
    """
    model = _check_model(model)
    t = _tokens(model, tokens)
    H = model.embed(t)
    N = t.size
    allowed = np.tril(np.ones((N, N), bool))
    max_logit, first = [], []
    for i in range(model.n_layer):
        block = model.blocks[i]
        X = block.norm_1.forward(H)[0]
        st = block.attn.forward(X)[1]
        T = attention_logits(st.core.Q, st.core.K, scale=st.core.scale,
                             softcap=block.attn.softcap)
        max_logit.append(float(np.abs(T[:, allowed]).max()))
        P = st.core.P
        first.append(P[:, 1:, 0].mean(axis=1) if N > 1 else np.ones(P.shape[0]))
        H = block.forward(H)[0]
    return {"max_logit": np.array(max_logit), "first_mass": np.array(first)}


def window_constants(model: Any, tokens: Any, *, tol: float = 1e-6, seed: int = 0,
                     prefixes: Any = PREFIXES) -> dict:
    r"""Exact local constants of one window, and the bounds they are compared with.

    Parameters
    ----------
    model : GPT2
        E.g. ``lipattn.models.load(path)``.
    tokens : array_like of int, shape (N,)
        Byte ids, ``N`` at most the model's context.
    tol : float, default 1e-6
        Relative tolerance of every constant (Lanczos's certified residual).
    seed : int, default 0
        Lanczos's start.
    prefixes : sequence of int
        Prefix lengths k at which the stack's constant at ``H[:k]`` is measured
        (those above N are skipped).

    Returns
    -------
    dict of numpy arrays and floats
        ``block`` (L,): block l at the stream entering it; ``attention``, ``mlp``
        (L,): the branches without the residual (``sublayer_lipschitz``);
        ``heads`` (L, h): each head through its rows of W_O, with LayerNorm
        (``head_lipschitz``); ``attn_exact``, ``head_sum``, ``head_sqrt`` (L,):
        attention alone at its input LN_1(x) and Theorem 7.1's two bounds on it
        (:func:`lipattn.book.viz.real.head_constants`); ``stack``, ``stack_final``:
        the L blocks, without and with the final LayerNorm; ``product``: the
        product of ``block``; ``energy`` (N,): the squared norm per position of the
        stack's most sensitive input direction (sums to 1); ``block_energy``
        (L, N): the same for block l's own most sensitive direction, at the
        stream entering it; ``prefix_k``, ``prefix`` : the stack's constant at ``H[:k]``;
        ``max_logit`` (L,), ``first_mass`` (L, h): :func:`attention_stats`;
        ``products``: Lanczos products spent on the stack.
    """
    from .viz.real import head_constants  # the viz package imports this module

    model = _check_model(model)
    t = _tokens(model, tokens)
    tol, seed = as_tol(tol), as_seed(seed)
    ks = [k for k in as_counts(prefixes, "prefixes", maximum=1 << 20) if k <= t.size]
    H = model.embed(t)
    info = model.local_lipschitz_info(H, tol=tol, seed=seed)
    out: dict[str, Any] = {"stack": info.value, "products": info.products,
                           "energy": np.sum(info.input_direction ** 2, axis=1)}
    out["stack_final"] = model.local_lipschitz(H, final_norm=True, tol=tol, seed=seed)
    keys = ("block", "attention", "mlp", "attn_exact", "head_sum", "head_sqrt",
            "block_energy")
    rows: dict[str, list] = {k: [] for k in keys}
    heads = []
    X = H
    for i in range(model.n_layer):
        b = model.local_lipschitz_info(X, start=i, stop=i + 1, tol=tol, seed=seed)
        rows["block"].append(b.value)
        rows["block_energy"].append(np.sum(b.input_direction ** 2, axis=1))
        for branch in ("attention", "mlp"):
            rows[branch].append(model.sublayer_lipschitz(X, i, branch=branch, tol=tol,
                                                         seed=seed))
        heads.append(model.head_lipschitz(X, i, tol=tol, seed=seed))
        blk = model.blocks[i]
        hc = head_constants(blk.attn, blk.norm_1.forward(X)[0], tol=tol)
        rows["attn_exact"].append(hc["exact"])
        rows["head_sum"].append(hc["sum"])
        rows["head_sqrt"].append(hc["sqrt_form"])
        X = model.forward(X, start=i, stop=i + 1)
    out.update({k: np.array(v) for k, v in rows.items()})
    out["heads"] = np.array(heads)
    out["product"] = float(np.prod(out["block"]))
    out["prefix_k"] = np.array(ks)
    out["prefix"] = np.array([info.value if k == t.size else
                              model.local_lipschitz(H[:k], tol=tol, seed=seed) for k in ks])
    out.update(attention_stats(model, t))
    return out


def measure(model: Any, windows: Any, *, tol: float = 1e-6, seed: int = 0,
            progress: bool = False) -> dict:
    """:func:`window_constants` of every window, stacked: each key gets a leading
    axis of length ``len(windows)``; ``tokens`` (W, N) is added."""
    model = _check_model(model)
    w = _windows(windows, model.wte.shape[0])
    tol, seed, progress = as_tol(tol), as_seed(seed), as_bool(progress, "progress")
    runs = []
    for k, tok in enumerate(w):
        runs.append(window_constants(model, tok, tol=tol, seed=seed))
        if progress:
            print(f"window {k + 1}/{len(w)}: stack {runs[-1]['stack']:.4g}", flush=True)
    out = {key: np.array([r[key] for r in runs]) for key in runs[0]}
    out["tokens"] = w.astype(np.int64)
    return out


def run_steps(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """The ``step-XXXXXX`` checkpoint directories of a training run, sorted by step."""
    run = as_dir(run_dir, "run_dir")
    out = []
    for p in run.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "config.json").is_file() and (p / "model.safetensors").is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def trajectory(checkpoints: Any, windows: Any, *, tol: float = 1e-6, seed: int = 0,
               progress: bool = False) -> dict:
    """Block and stack constants and attention logits of each checkpoint, on fixed windows.

    Parameters
    ----------
    checkpoints : sequence of (step, model)
        ``model`` a GPT2 or a checkpoint directory (read by :func:`lipattn.models.load`).
    windows : array_like of int, shape (W, N)

    Returns
    -------
    dict
        ``steps`` (S,); ``block`` (S, W, L) the block constants at the stream
        entering each block; ``stack`` (S, W); ``product`` (S, W); ``max_logit``
        (S, W, L) and ``first_mass`` (S, W, L, h) as in :func:`attention_stats`.
    """
    checkpoints, w = _pairs(checkpoints), _windows(windows)
    tol, seed, progress = as_tol(tol), as_seed(seed), as_bool(progress, "progress")
    steps, block, stack, logit, first = [], [], [], [], []
    for step, m in checkpoints:
        model = _check_model(load(m) if isinstance(m, (str, os.PathLike)) else m)
        b_s, s_s, l_s, f_s = [], [], [], []
        for tok in w:
            t = _tokens(model, tok)
            H = model.embed(t)
            X, bl = H, []
            for i in range(model.n_layer):
                bl.append(model.local_lipschitz(X, start=i, stop=i + 1, tol=tol, seed=seed))
                X = model.forward(X, start=i, stop=i + 1)
            b_s.append(bl)
            s_s.append(model.local_lipschitz(H, tol=tol, seed=seed))
            a = attention_stats(model, t)
            l_s.append(a["max_logit"])
            f_s.append(a["first_mass"])
        steps.append(int(step))
        block.append(b_s), stack.append(s_s), logit.append(l_s), first.append(f_s)
        if progress:
            print(f"step {step}: median stack {np.median(s_s):.4g}", flush=True)
    if not steps:
        raise ValueError("checkpoints must hold at least one (step, model) pair; got none")
    block = np.array(block)
    return {"steps": np.array(steps), "block": block, "stack": np.array(stack),
            "product": np.prod(block, axis=2), "max_logit": np.array(logit),
            "first_mass": np.array(first)}


#: Significant digits kept in the JSON (the constants' tol is 1e-6 at best).
DIGITS = 7


def _round(a: np.ndarray) -> list:
    if a.dtype.kind in "iub":
        return a.tolist()
    flat = [float(f"{x:.{DIGITS}g}") for x in a.ravel().tolist()]
    return np.array(flat).reshape(a.shape).tolist()


def _jsonable(d: dict) -> dict:
    return {k: (_round(v) if isinstance(v, np.ndarray) else
                _jsonable(v) if isinstance(v, dict) else v) for k, v in d.items()}


def cached_trajectory(checkpoints: Any, windows: Any, *, tol: float = 1e-6,
                      cache: str | os.PathLike | None = None, progress: bool = False) -> dict:
    """:func:`trajectory` one checkpoint at a time, each kept in ``cache`` (a directory,
    or None for no cache) under its step, the SHA-256 of its weights and a hash of
    the windows and ``tol``, so that a re-run measures only new checkpoints.
    ``checkpoints``: (step, checkpoint directory) pairs."""
    checkpoints, wt = _pairs(checkpoints), _windows(windows)
    tol, progress = as_tol(tol), as_bool(progress, "progress")
    cache = None if cache is None else as_dir(cache, "cache", exists=False)
    key = hashlib.sha256(np.ascontiguousarray(wt, dtype=np.int64).tobytes()
                         + repr(float(tol)).encode()).hexdigest()[:16]
    parts = []
    for step, ck in checkpoints:
        f = None if cache is None else \
            Path(cache) / f"{int(step):06d}-{weights_sha256(ck)[:16]}-{key}.json"
        if f is not None and f.is_file():
            parts.append(_arrays(json.loads(f.read_text())))
            continue
        one = trajectory([(step, ck)], wt, tol=tol, progress=progress)
        if f is not None:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(_jsonable(one)))
        parts.append(one)
    if not parts:
        raise ValueError("checkpoints must hold at least one (step, directory) pair; got none")
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def precompute(path: str | os.PathLike, *, run_dir: str | os.PathLike | None = None,
               windows: int = 32, trajectory_windows: int = 8, N: int | None = None,
               tol: float = 1e-6, cache: str | os.PathLike | None = None,
               progress: bool = False) -> dict:
    """What the chapter reads: :func:`measure` on ``windows`` held-out windows of the
    checkpoint at ``path`` (its ``heldout.txt``), and :func:`trajectory` of the run's
    ``step-XXXXXX`` checkpoints (plus the final one at ``path``, at the step its
    ``training.json`` names) on the first ``trajectory_windows`` of them. ``N``
    defaults to the model's context. ``cache``: a directory where each step's
    trajectory is kept (keyed by the step's weights and the windows), so that a
    re-run measures only new checkpoints. Returns a JSON-able dict with ``sha256``
    of the weights, the arguments and the seconds each part took."""
    path = as_dir(path, "path")
    run_dir = None if run_dir is None else as_dir(run_dir, "run_dir")
    cache = None if cache is None else as_dir(cache, "cache", exists=False)
    tol, progress = as_tol(tol), as_bool(progress, "progress")
    windows = as_count(windows, "windows", maximum=4096)
    trajectory_windows = as_count(trajectory_windows, "trajectory_windows", maximum=windows)
    model = load(path)
    N = model.wpe.shape[0] if N is None else as_count(N, "N", maximum=model.wpe.shape[0])
    text = (path / "heldout.txt").read_bytes()
    w = window_tokens(text, N, windows)
    t0 = time.perf_counter()
    res = {"sha256": weights_sha256(path), "N": N, "tol": tol, "windows": windows,
           "measure": _jsonable(measure(model, w, tol=tol, progress=progress))}
    res["measure_seconds"] = time.perf_counter() - t0
    if run_dir is not None:
        t0 = time.perf_counter()
        cks: list[tuple[int, Path]] = list(run_steps(run_dir))
        train = path / "training.json"
        if train.is_file():
            final_step = int(json.loads(train.read_text())["args"]["steps"])
            cks = [(s, p) for s, p in cks if s != final_step] + [(final_step, path)]
        res["trajectory"] = _jsonable(cached_trajectory(cks, w[:trajectory_windows], tol=tol,
                                                        cache=cache, progress=progress))
        res["trajectory_seconds"] = time.perf_counter() - t0
    return res


def read_measurements(path: str | os.PathLike, *, check: bool = True) -> dict:
    """The JSON :func:`precompute` wrote at ``path/measurements.json``, lists as arrays;
    with ``check`` (default) compared with the weights in ``path`` (their SHA-256):
    a ValueError if they differ."""
    path, check = as_dir(path, "path"), as_bool(check, "check")
    if not (path / MEASUREMENTS).is_file():
        raise ValueError(f"path must hold {MEASUREMENTS}; {path / MEASUREMENTS} does not exist")
    data = json.loads((path / MEASUREMENTS).read_text())
    if not check:
        return _arrays(data)
    sha = weights_sha256(path)
    if data.get("sha256") != sha:
        raise ValueError(f"{path / MEASUREMENTS} was computed from other weights (sha256 "
                         f"{data.get('sha256')}); the checkpoint's is {sha}. Re-run "
                         f"python -m lipattn.book.lm {path}")
    return _arrays(data)


def _arrays(d: dict) -> dict:
    return {k: (np.array(v) if isinstance(v, list) else
                _arrays(v) if isinstance(v, dict) else v) for k, v in d.items()}


def n_parameters(model: Any) -> int:
    """The number of parameters of a GPT-2 model: embeddings (tied read-out counted
    once), every block's arrays and the final norm's."""
    model = _check_model(model)
    size = lambda x: int(np.prod(x.shape))  # noqa: E731 - LazyTensor has no .size
    return (size(model.wte) + size(model.wpe)
            + sum(size(p) for b in model.blocks for p in b.params.values())
            + sum(size(p) for p in model.final.params.values()))


def recipe(args: dict, lang: str = "en") -> str:
    """The learning-rate schedule and regularisers of ``training.json``'s ``args``
    (as :mod:`lipattn.book.bytelm` records them, strings), in words.

    ``lang`` is ``"en"`` or ``"zh"`` (the Chinese edition's words for the same
    choices, joined with full-width commas)."""
    args = as_result(args, "args", ("decay",), producer="training.json's 'args'")
    zh = as_choice(lang, "lang", ("en", "zh")) == "zh"
    num = lambda k: None if args.get(k, "None") in ("None", None) else float(args[k])  # noqa: E731
    if args.get("decay") == "cosine":
        lo = num("min_lr")
        if zh:
            parts = ["余弦衰减到" + (f" {lo:g}" if lo else "峰值的十分之一")]
        else:
            parts = ["a cosine decay to " + (f"{lo:g}" if lo else "a tenth of it")]
    else:
        parts = ["此后学习率保持不变" if zh else "then a constant learning rate"]
    if num("weight_decay"):
        wd = f"{num('weight_decay'):g}"
        parts.append(f"解耦权重衰减 {wd}" if zh else f"decoupled weight decay {wd}")
    if num("clip"):
        clip = f"{num('clip'):g}"
        parts.append(f"梯度范数裁剪到 {clip}" if zh else f"gradient clipping at norm {clip}")
    return ("，" if zh else ", ").join(parts)


def loss_summary(train: dict, *, flat_tol: float = 0.02) -> dict[str, float]:
    """The held-out curve of ``training.json`` (as :mod:`lipattn.book.bytelm` writes
    it) in numbers: how far the loss still fell at the end of training.

    ``heldout_curve`` is a list of (step, bits/byte) pairs on fixed windows.
    Returns ``loss_steps`` (the last step), ``loss_T`` (the last value),
    ``loss_best`` and ``loss_best_step``; ``loss_drop{q}`` and
    ``loss_drop{q}_pct`` for q = 20, 40 (the fall, in bits/byte and in % of the
    value then, from the last evaluation at or before ``(1 - q/100)`` of the steps
    to the end; negative when it rose); ``flat_step``, the first evaluation step
    from which every later value is within ``flat_tol`` (relative) of the last;
    ``train_T`` (mean training bits/byte over the last 5 % of the steps),
    ``train_drop20`` (its fall from the 5 % of the steps before 80 % of them) and
    ``gap_T`` = ``loss_T - train_T``. Exact arithmetic on the recorded numbers."""
    train = as_result(train, "train", ("heldout_curve", "train_bits"),
                      producer="lipattn.book.bytelm.train")
    tol = as_float_in(flat_tol, "flat_tol", 0.0, 1.0, lo_open=True, hi_open=True)
    curve = np.asarray(train["heldout_curve"], dtype=float)
    if curve.ndim != 2 or curve.shape[1] != 2 or len(curve) < 2 \
            or not np.all(np.isfinite(curve)) or np.any(np.diff(curve[:, 0]) <= 0) \
            or np.any(curve[:, 1] <= 0):
        raise ValueError("train['heldout_curve'] must be >= 2 finite (step, bits) pairs "
                         f"with increasing steps and positive bits; got shape {curve.shape}")
    bits = np.asarray(train["train_bits"], dtype=float)
    if bits.ndim != 1 or bits.size == 0 or not np.all(np.isfinite(bits)):
        raise ValueError("train['train_bits'] must be a non-empty list of finite numbers")
    steps, h = curve[:, 0], curve[:, 1]
    T, last = steps[-1], h[-1]
    out = {"loss_steps": T, "loss_T": last, "loss_best": h.min(),
           "loss_best_step": steps[np.argmin(h)]}
    for q in (20, 40):
        then = h[np.searchsorted(steps, (1 - q / 100) * T, side="right") - 1]
        out[f"loss_drop{q}"] = then - last
        out[f"loss_drop{q}_pct"] = 100 * (then - last) / then
    off = np.abs(h - last) > tol * last
    out["flat_step"] = steps[0] if not off.any() else steps[np.flatnonzero(off)[-1] + 1]
    k = max(1, round(0.05 * bits.size))
    out["train_T"] = bits[-k:].mean()
    cut = max(k, round(0.8 * bits.size))
    out["train_drop20"] = bits[cut - k:cut].mean() - out["train_T"]
    out["gap_T"] = last - out["train_T"]
    return {k: float(v) for k, v in out.items()}


# --------------------------------------------------------------------------
# the statistics the chapter quotes (pure functions of measure's arrays)
# --------------------------------------------------------------------------
def _q(a: np.ndarray) -> np.ndarray:
    return np.quantile(a, [0.1, 0.5, 0.9], axis=0)


def constants_summary(meas: dict) -> dict[str, float]:
    """Quantiles and ratios of :func:`measure`'s constants, by name.

    Per layer l (0-based) and map ``block``, ``attention``, ``mlp``, ``head``
    (the largest head): ``{map}{l}_lo``, ``_med``, ``_hi`` (10 %, 50 %, 90 %
    quantiles over windows); the same for ``stack``, ``stack_final``,
    ``product``; ``prod_ratio_{med,min,max}`` (product / stack);
    ``top_block`` (0-based index of the largest median block constant),
    ``top_block_med``, ``top_block_count`` (windows where it is the largest);
    ``res_ratio_med`` (:math:`(1 + a)(1 + m)` / block); ``final_ratio_med``;
    ``hs_{med,min}``, ``hr_{med,min}`` (Theorem 7.1's two bounds / exact);
    ``pref1_med``, ``pref_last_med``, ``pref1_share_med`` (percent),
    ``pref_slope_{med,lo,hi}`` (log-log slope of the prefix constant from k = 8
    to the longest prefix).
    """
    meas = as_result(meas, "meas", ("block", "attention", "mlp", "heads", "stack", "stack_final",
                                    "product", "head_sum", "head_sqrt", "attn_exact", "prefix",
                                    "prefix_k"), producer="measure")
    out: dict[str, float] = {}
    rows = {"block": meas["block"], "attention": meas["attention"], "mlp": meas["mlp"],
            "head": np.asarray(meas["heads"]).max(axis=2)}
    for key, arr in rows.items():
        lo, mid, hi = _q(np.asarray(arr))
        for i in range(lo.size):
            out[f"{key}{i}_lo"], out[f"{key}{i}_med"], out[f"{key}{i}_hi"] = lo[i], mid[i], hi[i]
    for key in ("stack", "stack_final", "product"):
        out[f"{key}_lo"], out[f"{key}_med"], out[f"{key}_hi"] = _q(np.asarray(meas[key]))
    ratio = np.asarray(meas["product"]) / np.asarray(meas["stack"])
    out.update(prod_ratio_med=np.median(ratio), prod_ratio_min=ratio.min(),
               prod_ratio_max=ratio.max())
    block = np.asarray(meas["block"])
    med = np.median(block, axis=0)
    top = int(np.argmax(med))
    out.update(top_block=top, top_block_med=med[top],
               top_block_count=int(np.sum(np.argmax(block, axis=1) == top)))
    res = (1 + np.asarray(meas["attention"])) * (1 + np.asarray(meas["mlp"]))
    out["res_ratio_med"] = np.median(res / block)
    out["final_ratio_med"] = np.median(np.asarray(meas["stack_final"]) /
                                       np.asarray(meas["stack"]))
    hs = np.asarray(meas["head_sum"]) / np.asarray(meas["attn_exact"])
    hr = np.asarray(meas["head_sqrt"]) / np.asarray(meas["attn_exact"])
    out.update(hs_med=np.median(hs), hs_min=hs.min(), hr_med=np.median(hr), hr_min=hr.min())
    P, k = np.asarray(meas["prefix"]), np.asarray(meas["prefix_k"])[0]
    out.update(pref1_med=np.median(P[:, 0]), pref_last_med=np.median(P[:, -1]),
               pref1_share_med=100 * np.median(P[:, 0] / P[:, -1]))
    if 8 in k and k[-1] > 8:
        i8 = list(k).index(8)
        slope = np.log(P[:, -1] / P[:, i8]) / np.log(k[-1] / k[i8])
        out.update(pref_slope_med=np.median(slope), pref_slope_lo=slope.min(),
                   pref_slope_hi=slope.max())
    return {k_: float(v) for k_, v in out.items()}


def uniform_first_mass(N: int) -> float:
    r"""The mean over queries 1..N-1 (counted from 0) of the mass on position 0
    under uniform causal attention: :math:`\frac{1}{N-1}\sum_{i=1}^{N-1}
    \frac1{i+1}` (N >= 2)."""
    N = as_count(N, "N", minimum=2, maximum=1 << 30)
    return float(np.mean(1.0 / np.arange(2, N + 1)))


def direction_summary(meas: dict) -> dict[str, Any]:
    """Where the stack's most sensitive direction sits, and the attention on position 0.

    Percentages of the direction's energy: ``e0_{med,lo,hi}_pct`` (position 0,
    quantiles 50/10/90 %), ``e0_uniform_pct`` (100/N), ``e0_argmax_count``
    (windows where position 0 holds the largest share), ``e0_above_uniform``,
    ``early_med_pct``/``late_med_pct`` (first/last 8 positions),
    ``early_gt_late``, ``top_share_med_pct`` (the largest position's share),
    ``top3_share_med_pct`` (the three largest together), ``b0_e0_med_pct`` (position 0 in
    block 1's own direction). Attention: ``fm_uniform``
    (:func:`uniform_first_mass`), ``fm_max`` (largest per-head median mass on
    position 0), ``fm_top`` ((layer, head), 0-based), ``fm_top_break`` (windows
    where that head puts less than half on position 0), ``fm_n_sink`` (heads
    whose median is above 1/2), ``fm_n_above`` (above 3 times uniform),
    ``fm_n_heads``, ``rho_e0_fm`` (Spearman rank correlation over windows of
    position 0's energy and the mean first-token mass). ``top_bytes``: up to
    three (byte, windows, frequency among all bytes) for the bytes found most
    often at the largest-share position.
    """
    meas = as_result(meas, "meas", ("energy", "tokens", "block_energy", "first_mass"),
                     producer="measure")
    En, tok = np.asarray(meas["energy"]), np.asarray(meas["tokens"])
    W, N = tok.shape
    e0 = En[:, 0]
    early, late = En[:, :8].sum(axis=1), En[:, -8:].sum(axis=1)
    top_pos = En.argmax(axis=1)
    out: dict[str, Any] = {
        "e0_med_pct": 100 * np.median(e0), "e0_lo_pct": 100 * np.quantile(e0, 0.1),
        "e0_hi_pct": 100 * np.quantile(e0, 0.9), "e0_uniform_pct": 100 / N,
        "e0_argmax_count": int(np.sum(top_pos == 0)),
        "e0_above_uniform": int(np.sum(e0 > 1 / N)),
        "early_med_pct": 100 * np.median(early), "late_med_pct": 100 * np.median(late),
        "early_gt_late": int(np.sum(early > late)),
        "top_share_med_pct": 100 * np.median(En.max(axis=1)),
        "top3_share_med_pct": 100 * np.median(np.sort(En, axis=1)[:, -3:].sum(axis=1)),
        "b0_e0_med_pct": 100 * np.median(np.asarray(meas["block_energy"])[:, 0, 0])}
    FM = np.asarray(meas["first_mass"])
    head_med = np.median(FM, axis=0)
    uni = uniform_first_mass(N)
    lay, hd = np.unravel_index(np.argmax(head_med), head_med.shape)
    rank = lambda x: np.argsort(np.argsort(x, kind="stable"), kind="stable")  # noqa: E731
    out.update(fm_uniform=uni, fm_max=head_med.max(), fm_top=(int(lay), int(hd)),
               fm_top_break=int(np.sum(FM[:, lay, hd] < 0.5)),
               fm_n_sink=int(np.sum(head_med > 0.5)),
               fm_n_above=int(np.sum(head_med > 3 * uni)), fm_n_heads=int(head_med.size),
               rho_e0_fm=float(np.corrcoef(rank(e0), rank(FM.mean(axis=(1, 2))))[0, 1]))
    vals, counts = np.unique(tok[np.arange(W), top_pos], return_counts=True)
    order = np.argsort(-counts, kind="stable")[:3]
    out["top_bytes"] = [(int(vals[i]), int(counts[i]), float(np.mean(tok == vals[i])))
                        for i in order]
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v)
            for k, v in out.items()}


def scale_alignment(model: Any, meas: dict) -> dict[str, float]:
    r"""Whether the most sensitive direction sits where LayerNorm amplifies most.

    Block 1's first LayerNorm has, at token i, a Jacobian of norm at most
    :math:`\max_k|g_k|/s_i` with :math:`s_i = (\mathrm{var}(h_i) + \varepsilon)^{1/2}`
    (Chapter 7), so tokens whose embedded state has a small spread are
    amplified most. Returns ``scale_match`` (windows whose largest-energy
    position is the position of smallest :math:`s_i`), ``scale_rho_med``
    (median over windows of the Spearman correlation over positions of the
    energy and :math:`1/s_i`) and ``scale_ratio_med`` (median over windows of
    the largest :math:`1/s_i` over the median :math:`1/s_i`).
    """
    model = _check_model(model)
    meas = as_result(meas, "meas", ("energy", "tokens"), producer="measure")
    En, tok = np.asarray(meas["energy"]), np.asarray(meas["tokens"])
    rank = lambda x: np.argsort(np.argsort(x, kind="stable"), kind="stable")  # noqa: E731
    match, rho, ratio = 0, [], []
    for e, t in zip(En, tok, strict=True):
        H = model.embed(_tokens(model, t))
        inv = 1 / np.sqrt(H.var(axis=1) + model.eps)
        match += int(np.argmax(e) == np.argmax(inv))
        rho.append(np.corrcoef(rank(e), rank(inv))[0, 1])
        ratio.append(inv.max() / np.median(inv))
    return {"scale_match": float(match), "scale_rho_med": float(np.median(rho)),
            "scale_ratio_med": float(np.median(ratio))}


def trajectory_summary(traj: dict) -> dict[str, float]:
    """Medians over windows of :func:`trajectory`'s arrays, at the first and last
    checkpoint and at their peak: per layer l (0-based) ``tr_b{l}_0``/``_T``
    (block constant), ``tr_l{l}_0``/``_T``/``_peak``/``_peak_step`` (largest
    absolute logit); ``tr_st_0``/``_T``/``_peak``/``_peak_step`` (stack);
    ``tr_logit_max`` (the largest median logit of any layer and checkpoint);
    ``tr_logit_up`` (layers whose last median logit exceeds their first)."""
    traj = as_result(traj, "traj", ("steps", "block", "max_logit", "stack"),
                     producer="trajectory")
    steps = np.asarray(traj["steps"])
    blk = np.median(np.asarray(traj["block"]), axis=1)
    lg = np.median(np.asarray(traj["max_logit"]), axis=1)
    st = np.median(np.asarray(traj["stack"]), axis=1)
    out: dict[str, float] = {}
    for i in range(blk.shape[1]):
        out.update({f"tr_b{i}_0": blk[0, i], f"tr_b{i}_T": blk[-1, i],
                    f"tr_l{i}_0": lg[0, i], f"tr_l{i}_T": lg[-1, i],
                    f"tr_l{i}_peak": lg[:, i].max(),
                    f"tr_l{i}_peak_step": steps[np.argmax(lg[:, i])]})
    out.update(tr_st_0=st[0], tr_st_T=st[-1], tr_st_peak=st.max(),
               tr_st_peak_step=steps[np.argmax(st)], tr_logit_max=lg.max(),
               tr_logit_up=int(np.sum(lg[-1] > lg[0])))
    return {k: float(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> dict:
    """``python -m lipattn.book.lm CHECKPOINT [--run RUN_DIR]``: write the measurements
    (default ``CHECKPOINT/measurements.json``) and return them. The parts that need
    only the final checkpoint and are added to that file afterwards are
    :mod:`lipattn.book.lmprobe`'s: ``python -m lipattn.book.lmprobe CHECKPOINT``."""
    ap = argparse.ArgumentParser(prog="python -m lipattn.book.lm", description=__doc__)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--run", type=Path, default=None, help="directory of step-XXXXXX checkpoints")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--trajectory-windows", type=int, default=8)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--out", type=Path, default=None, help="default CHECKPOINT/measurements.json")
    ap.add_argument("--cache", type=Path, default=None, help="per-step trajectory cache")
    a = ap.parse_args(argv)
    res = precompute(a.checkpoint, run_dir=a.run, windows=a.windows,
                     trajectory_windows=a.trajectory_windows, tol=a.tol, cache=a.cache,
                     progress=True)
    out = a.out if a.out is not None else a.checkpoint / MEASUREMENTS
    out.write_text(json.dumps(res, separators=(",", ":")) + "\n")
    print(f"wrote {out}")
    return res


if __name__ == "__main__":
    main()
