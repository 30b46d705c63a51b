r"""Train small encoders on sequence reversal with Adam, many runs at once.

The task: a sequence of ``n_tokens`` tokens drawn uniformly from a vocabulary
of ``vocab``; the target at position :math:`i` is the input token at position
:math:`N - 1 - i`. The model embeds tokens and positions, runs a
:mod:`lipattn.models.encoder` encoder and reads out logits with an
unembedding matrix; the loss is the mean cross-entropy over positions and
sequences. Chance level is :math:`\ln(\text{vocab})`.

*Runs are a leading axis.* :func:`train_reversal` trains ``R`` models of one
variant in one vectorised loop: every array carries a leading run axis, and
each run has its own seed, learning rate and warm-up length. Runs with the same
seed share their initialisation and their batches, so a grid over learning
rates and warm-up is a paired comparison. Everything is float32.

Adam (:cite:t:`kingma2015adam`) with :math:`(\beta_1, \beta_2) = (0.9, 0.98)`
and :math:`\epsilon = 10^{-9}` as in :cite:t:`vaswani2017attention`, and a
learning rate that rises linearly over ``warmup`` steps and then stays
constant (``warmup = 0``: constant from the first step).

The encoder is a stack of :mod:`lipattn.layers` (:func:`lipattn.models.encoder.as_layers`),
trained through the layers' ``backward``. :func:`train_stack` trains any such
stack -- a GPT-2- or Llama-layout :class:`~lipattn.layers.Sequential` too -- with
the same Adam (:mod:`lipattn.models.optim`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._blas import single_threaded
from .._validate import as_choice, as_count, as_float_in, as_seed
from ..softmax import softmax
from .encoder import (
    MATRICES,
    PARAM_NAMES,
    SETTINGS,
    VARIANTS,
    _attn_logits,
    _model,
    _run,
    _run_backward,
    _settings,
    init_params,
    stack_params,
)
from .optim import Adam, adam_step

__all__ = ["TrainResult", "init_model", "reversal_batch", "train_reversal",
           "train_model", "model_forward", "train_stack"]


@dataclass
class TrainResult:
    r"""The outcome of :func:`train_reversal` for R runs of ``steps`` steps.

    Attributes
    ----------
    variant : str
    lr, warmup, seed : ndarray, shape (R,)
        Each run's peak learning rate, warm-up length and seed.
    loss : ndarray, shape (R, steps)
        Training loss (mean cross-entropy, nats) of the batch at each step,
        before that step's update.
    diversity : ndarray, shape (R, steps)
        Token diversity of the encoder's output (:func:`lipattn.models.encoder.token_diversity`),
        mean over the batch, at each step before the update.
    grad_norm : ndarray, shape (R, layers, 6)
        Frobenius norms of the gradients of the six weight matrices
        (:data:`lipattn.models.encoder.MATRICES`) at step 0.
    grad_total : ndarray, shape (R, steps)
        Euclidean norm of the whole gradient (every parameter: encoder, embeddings,
        read-out) at each step, before that step's update. Exact for the float32
        gradient the update used.
    update : ndarray, shape (R, min(record, steps), layers, 6)
        Relative size :math:`\|\Delta W\|_F/\|W\|_F` of the first ``record``
        Adam updates of each weight matrix.
    model : dict
        The final parameters: ``"blocks"`` (encoder params with the run axis
        and a batch axis), ``"embed"`` (R, vocab, d), ``"pos"`` (R, n_tokens, d),
        ``"unembed"`` (R, d, vocab). :meth:`run` extracts one run.
    max_logit : ndarray, shape (R, len(logit_steps), layers)
        The largest attention logit (over the batch, the heads, the queries and
        the keys) of each layer at the steps ``logit_steps``, before that step's
        update; exact for the float32 forward pass the step used.
    logit_steps : ndarray of int, shape (n,)
        The steps at which ``max_logit`` was recorded (every ``logit_every``-th).
    snapshots : dict
        Step t -> the parameters after t updates, laid out as ``model``, for
        every t in ``keep_at``.
    """

    variant: str
    lr: np.ndarray
    warmup: np.ndarray
    seed: np.ndarray
    loss: np.ndarray
    diversity: np.ndarray
    grad_norm: np.ndarray
    update: np.ndarray
    model: dict[str, Any]
    grad_total: np.ndarray | None = None
    max_logit: np.ndarray | None = None
    logit_steps: np.ndarray | None = None
    snapshots: dict[int, dict[str, Any]] | None = None

    def run(self, i: int, at: int | None = None) -> dict[str, Any]:
        """Run ``i``'s trained model, without run axes: ``{"blocks", "embed",
        "pos", "unembed", "variant"}``; ``blocks`` is a params list for
        :func:`lipattn.models.encoder.forward`. ``at``: a step of ``snapshots``
        (default None: the final model)."""
        R = self.lr.size
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -R <= i < R:
            raise ValueError(f"i must be an int in [-{R}, {R - 1}]; got {i!r}")
        if at is None:
            model = self.model
        elif at in (self.snapshots or {}):
            model = self.snapshots[at]
        else:
            raise ValueError(f"at must be None or one of the snapshot steps "
                             f"{sorted(self.snapshots or {})}; got {at!r}")
        blocks = [{k: v if k in SETTINGS else
                   v[i].reshape(v.shape[-2:] if k.startswith("W_") else (-1,))
                   for k, v in p.items()} for p in model["blocks"]]
        return {"blocks": blocks, "embed": model["embed"][i],
                "pos": model["pos"][i], "unembed": model["unembed"][i],
                "variant": self.variant}


def train_stack(stack: Any, batches: Callable, loss: Callable, *, steps: int, lr: float,
                warmup: int = 0, betas: tuple[float, float] = (0.9, 0.98),
                callback: Callable[[int, float], None] | None = None,
                schedule: str = "constant", min_lr: float = 0.0, weight_decay: float = 0.0,
                clip: float | None = None, optimizer: list | None = None) -> np.ndarray:
    r"""Train any stack of :mod:`lipattn.layers` (the book's encoder from
    :func:`lipattn.models.encoder.as_layers`, a GPT-2- or Llama-layout
    :class:`~lipattn.layers.Sequential`, ...) with :class:`Adam`, through the
    layers' ``backward``.

    Parameters
    ----------
    stack : layer
        With ``forward``, ``backward`` and ``params`` (updated in place).
    batches : callable
        ``batches(t) -> (X, target)`` for step ``t``; X of shape (..., N, d).
    loss : callable
        ``loss(Y, target) -> (value, dY)``: the loss at the stack's output Y and
        its gradient :math:`\partial\ell/\partial Y`.
    steps : int
    lr, warmup, betas, schedule, min_lr, weight_decay, clip
        As in :class:`Adam` (the cosine decays over these ``steps``). The defaults
        give plain Adam with a linear warm-up, bit for bit as before they existed.
    callback : callable, optional
        ``callback(t, loss_t)`` after step ``t``'s update (e.g. a held-out
        evaluation every k steps, or saving a checkpoint).
    optimizer : list, optional
        If given (an empty list), the :class:`Adam` instance is appended to it before
        the first step, so a callback can read its ``rate`` and ``grad_norm``.

    Returns
    -------
    losses : ndarray, shape (steps,)
        The loss of each step's batch, before that step's update.
    """
    for m in ("forward", "backward"):
        if not callable(getattr(stack, m, None)):
            raise TypeError(f"stack must be a layer with forward, backward and params; got "
                            f"{type(stack).__name__} without {m}")
    if not callable(batches) or not callable(loss) or not (callback is None
                                                          or callable(callback)):
        raise TypeError("batches, loss and callback must be callables (see the docstring)")
    if optimizer is not None and not isinstance(optimizer, list):
        raise TypeError(f"optimizer must be None or a list; got {type(optimizer).__name__}")
    steps = as_count(steps, "steps", 1)
    opt = Adam(stack.params, lr, warmup=warmup, betas=betas, schedule=schedule, steps=steps,
               min_lr=min_lr, weight_decay=weight_decay, clip=clip)
    if optimizer is not None:
        optimizer.append(opt)
    losses = np.zeros(steps)
    for t in range(steps):
        X, target = batches(t)
        Y, state = stack.forward(X)
        losses[t], dY = loss(Y, target)
        opt.step(stack.backward(state, dY)[1])
        if callback is not None:
            callback(t, float(losses[t]))
    return losses


def reversal_batch(rng: np.random.Generator, batch: int, n_tokens: int, vocab: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """A batch of the reversal task.

    Returns
    -------
    tokens, targets : ndarray of int, shape (batch, n_tokens)
        ``targets[:, i] == tokens[:, n_tokens - 1 - i]``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator; got {type(rng).__name__}")
    batch = as_count(batch, "batch", 1)
    n_tokens = as_count(n_tokens, "n_tokens", 1)
    vocab = as_count(vocab, "vocab", 2)
    if batch * n_tokens > 10**8:
        raise ValueError(f"batch * n_tokens must be at most 1e8 (memory); got {batch} * {n_tokens}")
    tokens = rng.integers(0, vocab, size=(batch, n_tokens))
    return tokens, tokens[:, ::-1]


def init_model(layers: int, d: int, vocab: int, n_tokens: int, *, heads: int = 1,
               seed: int = 0, qk_norm: bool = False) -> dict[str, Any]:
    r"""A fresh model: encoder (:func:`~lipattn.models.encoder.init_params`), token and
    position embeddings with i.i.d. :math:`N(0, 1/2)` entries (so their sum has
    unit variance), and a Xavier-uniform unembedding (d, vocab).

    ``layers``, ``d``, ``heads``, ``seed`` (an int >= 0) and ``qk_norm`` as in
    :func:`~lipattn.models.encoder.init_params`; ``vocab >= 2``, ``n_tokens >= 1``,
    with at most 1e8 embedding entries."""
    vocab = as_count(vocab, "vocab", 2)
    n_tokens = as_count(n_tokens, "n_tokens", 1)
    seed = as_seed(seed)
    d = as_count(d, "d", 2)
    if (vocab + n_tokens) * d > 10**8:
        raise ValueError(f"(vocab + n_tokens) * d must be at most 1e8 (memory); got "
                         f"vocab = {vocab}, n_tokens = {n_tokens}, d = {d}")
    rng = np.random.default_rng([seed, 1])
    a = math.sqrt(6.0 / (d + vocab))
    return {"blocks": init_params(layers, d, heads=heads, seed=seed, qk_norm=qk_norm),
            "embed": rng.normal(0, math.sqrt(0.5), (vocab, d)),
            "pos": rng.normal(0, math.sqrt(0.5), (n_tokens, d)),
            "unembed": rng.uniform(-a, a, (d, vocab))}


def model_forward(model: dict[str, Any], tokens: Any) -> np.ndarray:
    """Logits of one trained model (from :meth:`TrainResult.run`).

    Parameters
    ----------
    model : dict
    tokens : array_like of int, shape (..., n_tokens)

    Returns
    -------
    logits : ndarray, shape (..., n_tokens, vocab)
    """
    from .encoder import forward
    keys = ("blocks", "embed", "pos", "unembed", "variant")
    if not isinstance(model, dict) or any(k not in model for k in keys):
        raise TypeError(f"model must be a dict with keys {keys} (from TrainResult.run); got "
                        f"{type(model).__name__}")
    if isinstance(tokens, (str, bytes)) or tokens is None:
        raise TypeError(f"tokens must be an int array; got {type(tokens).__name__}")
    tokens = np.asarray(tokens)
    vocab, n = model["embed"].shape[0], model["pos"].shape[0]
    if not np.issubdtype(tokens.dtype, np.integer) or tokens.ndim < 1 or tokens.size == 0 \
            or tokens.shape[-1] != n or tokens.min() < 0 or tokens.max() >= vocab:
        raise ValueError(f"tokens must be ints in [0, {vocab}) with last axis {n}; "
                         f"got shape {tokens.shape}")
    X = model["embed"][tokens] + model["pos"]
    return forward(model["blocks"], X, variant=model["variant"]) @ model["unembed"]


def _as_runs(name: str, value: Any, R: int) -> np.ndarray:
    """``value`` (a real number or a sequence of R of them) as a float array of shape (R,)."""
    kind = np.dtype("U") if isinstance(value, (str, bytes)) else np.asarray(value).dtype
    if kind == np.dtype(bool) or not (np.issubdtype(kind, np.integer)
                                      or np.issubdtype(kind, np.floating)):
        raise TypeError(f"{name} must be a real number or a sequence of {R} real numbers; "
                        f"got {type(value).__name__ if np.ndim(value) == 0 else kind}")
    arr = np.atleast_1d(np.asarray(value, dtype=float))
    if arr.ndim != 1 or arr.size not in (1, R):
        raise ValueError(f"{name} must be a number or a sequence of {R} numbers; "
                         f"got shape {arr.shape}")
    return np.broadcast_to(arr, (R,)).copy()


@single_threaded
def train_reversal(variant: str, lr: Any, warmup: Any, seed: Any, *, layers: int = 6,
                   d: int = 32, heads: int = 1, vocab: int = 16, n_tokens: int = 8,
                   batch: int = 32, steps: int = 300, betas: tuple[float, float] = (0.9, 0.98),
                   record: int = 5, step_hook: Callable | None = None,
                   qk_norm: bool = False, logit_every: int = 10,
                   keep_at: tuple[int, ...] = ()) -> TrainResult:
    """Train R models of one variant on reversal, vectorised over runs.

    Parameters
    ----------
    variant : {"post", "pre"}
    lr : float or sequence of float
        Peak learning rate of each run, in (0, 1] (not bool or str).
    warmup : int or sequence of int
        Linear warm-up length in steps of each run (0: none).
    seed : int or sequence of int
        Seed of each run's initialisation and batches (ints >= 0). ``R`` is the longest
        of ``lr``, ``warmup``, ``seed``; length-1 values are repeated.
    layers, d, heads, vocab, n_tokens, batch, steps : int
    betas : (float, float)
        Adam's decay rates, each in [0, 1).
    record : int
        How many first updates to record in ``update`` (at most ``steps`` are).
    step_hook : callable, optional
        An intervention: ``step_hook(t, step)`` is called at every step ``t``
        (from 0) after Adam has computed its update and before it is applied.
        ``step`` maps each parameter's key (``("embed",)``, ``("pos",)``,
        ``("unembed",)``, ``("blocks", layer, name)``) to a writable float32 view
        of that update, with the run axis first: shape (R, vocab, d) for
        ``("embed",)``, (R, 1, d, d) for ``W_Q`` (the encoder's parameters carry a
        batch axis of length 1); the hook may change it in place (scale it, zero it) and returns
        None. Adam's moments are not touched. Default None: no call, and results
        bit-identical to a run without this argument.
    qk_norm : bool, default False
        Normalise every head's queries and keys (:mod:`lipattn.models.encoder`).
    logit_every : int, default 10
        Record each layer's largest attention logit at steps 0, logit_every, ...
        (read-only: the training is the same for every value).
    keep_at : tuple of int, default ()
        Steps t in [0, steps] after whose t-th update to keep a copy of the
        parameters (``snapshots``).

    Returns
    -------
    TrainResult
    """
    as_choice(variant, "variant", VARIANTS)
    for name, v, lo in (("layers", layers, 1), ("d", d, 2), ("vocab", vocab, 2),
                        ("n_tokens", n_tokens, 2), ("batch", batch, 1), ("steps", steps, 1),
                        ("record", record, 0), ("heads", heads, 1)):
        as_count(v, name, lo)
    record = min(record, steps)  # no rows of zeros for updates that never happen
    R = max(np.size(lr), np.size(warmup), np.size(seed))
    if R > 10**4:
        raise ValueError(f"lr, warmup, seed must give at most 1e4 runs; got {R}")
    lrs, warm, seeds = (_as_runs(n, v, R) for n, v in
                        (("lr", lr), ("warmup", warmup), ("seed", seed)))
    if np.any(lrs <= 0) or np.any(lrs > 1) or not np.all(np.isfinite(lrs)):
        raise ValueError(f"lr must be in (0, 1] (Adam moves every entry by about lr per "
                         f"step); got {lr!r}")
    if not np.all(np.isfinite(warm)) or np.any(warm < 0) or np.any(warm != np.round(warm)) \
            or np.any(warm > 10**8):
        raise ValueError(f"warmup must be integers in [0, 1e8]; got {warmup!r}")
    if not np.all(np.isfinite(seeds)) or np.any(seeds < 0) or np.any(seeds != np.round(seeds)) \
            or np.any(seeds >= 2**63):
        raise ValueError(f"seed must be non-negative integers; got {seed!r}")
    logit_every = as_count(logit_every, "logit_every", 1)
    if not isinstance(qk_norm, (bool, np.bool_)):
        raise TypeError(f"qk_norm must be a bool; got {type(qk_norm).__name__}")
    if not isinstance(keep_at, (tuple, list)) or not all(
            isinstance(t, (int, np.integer)) and not isinstance(t, bool) and 0 <= t <= steps
            for t in keep_at):
        raise ValueError(f"keep_at must be a tuple of ints in [0, steps = {steps}]; "
                         f"got {keep_at!r}")
    if step_hook is not None and not callable(step_hook):
        raise TypeError(f"step_hook must be callable or None; got {type(step_hook).__name__}")
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"betas must be a pair (beta_1, beta_2) of reals in [0, 1); got {betas!r}")
    b1, b2 = (as_float_in(b, f"betas[{i}]", 0.0, 1.0, hi_open=True)
              for i, b in enumerate(betas))
    if layers * batch * n_tokens * max(d, n_tokens) * R > 10**9:
        raise ValueError("layers * batch * n_tokens * max(d, n_tokens) * runs must be at "
                         "most 1e9 (memory of the activations)")
    f32 = np.float32

    models = [init_model(layers, d, vocab, n_tokens, heads=heads, seed=int(s), qk_norm=qk_norm)
              for s in seeds]
    blocks = stack_params([m["blocks"] for m in models], batch_axes=1)
    init = {("blocks", l_, k): blocks[l_][k] for l_ in range(layers) for k in PARAM_NAMES}
    for k in ("embed", "pos", "unembed"):
        init[(k,)] = np.stack([m[k] for m in models])
    # All parameters of a run live in one row of a flat float32 buffer, so
    # that Adam is a handful of array operations; theta[key] are views into it.
    sizes = {k: v[0].size for k, v in init.items()}
    offsets = np.cumsum([0, *sizes.values()])
    flat = np.zeros((R, int(offsets[-1])), dtype=f32)
    gflat = np.zeros_like(flat)
    theta, gview = {}, {}
    for (key, v), a, b in zip(init.items(), offsets[:-1], offsets[1:], strict=True):
        flat[:, a:b] = v.reshape(R, -1)
        theta[key] = flat[:, a:b].reshape(v.shape)
        gview[key] = gflat[:, a:b].reshape(v.shape)
    m1, m2 = np.zeros_like(flat), np.zeros_like(flat)
    mat_slices = [[slice(offsets[i], offsets[i + 1]) for i, key in enumerate(init)
                   if key[0] == "blocks" and key[1] == l_ and key[2] in MATRICES]
                  for l_ in range(layers)]
    uniq = sorted(set(seeds.astype(int)))
    rngs = {s: np.random.default_rng([s, 2]) for s in uniq}
    runs_of = np.array([uniq.index(int(s)) for s in seeds])
    r_idx = np.arange(R)[:, None, None]
    flags = {"heads": heads} | ({"qk_norm": True} if qk_norm else {})
    params = [flags | {k: theta[("blocks", l_, k)] for k in PARAM_NAMES}
              for l_ in range(layers)]
    # the encoder's layers hold the views theta[...]: Adam's in-place updates of
    # ``flat`` update them
    model, settings = _model(params, variant, copy_transposes=False), _settings(params)

    def copy_model():
        return {"blocks": [flags | {k: theta[("blocks", l_, k)].copy() for k in PARAM_NAMES}
                           for l_ in range(layers)],
                **{k: theta[(k,)].copy() for k in ("embed", "pos", "unembed")}}

    loss = np.zeros((R, steps))
    div = np.zeros((R, steps))
    gnorm = np.zeros((R, layers, len(MATRICES)))
    upd = np.zeros((R, record, layers, len(MATRICES)))
    gtot = np.zeros((R, steps))
    logit_steps = np.arange(0, steps, logit_every)
    max_logit = np.zeros((R, logit_steps.size, layers))
    snapshots = {0: copy_model()} if 0 in keep_at else {}
    for t in range(steps):
        data = [reversal_batch(rngs[s], batch, n_tokens, vocab) for s in uniq]
        tok = np.stack([data[j][0] for j in runs_of])
        tgt = np.stack([data[j][1] for j in runs_of])
        X = theta[("embed",)][r_idx, tok] + theta[("pos",)][:, None]
        out, caches, _ = _run(model, X, variant)
        if t % logit_every == 0:  # read-only: recomputed from the cache
            for l_ in range(layers):
                S = _attn_logits(caches[0][l_][0])
                max_logit[:, t // logit_every, l_] = S.reshape(R, -1).max(axis=1)
        logits = out @ theta[("unembed",)][:, None]
        P = softmax(logits, axis=-1)
        onehot = np.zeros_like(P)
        np.put_along_axis(onehot, tgt[..., None], 1.0, axis=-1)
        picked = np.sum(P * onehot, axis=-1)
        loss[:, t] = -np.mean(np.log(np.maximum(picked, np.finfo(picked.dtype).tiny)), axis=(1, 2))
        c = out - out.mean(axis=-2, keepdims=True)
        div[:, t] = np.mean(np.linalg.norm(c, axis=(-2, -1))
                            / np.linalg.norm(out, axis=(-2, -1)), axis=1)
        dlogits = ((P - onehot) / (batch * n_tokens)).astype(f32)
        gview[("unembed",)][...] = np.swapaxes(out.reshape(R, -1, d), -1, -2) \
            @ dlogits.reshape(R, -1, vocab)
        dout = dlogits @ np.swapaxes(theta[("unembed",)], -1, -2)[:, None]
        grads, dX, _ = _run_backward(model, caches, dout, variant, settings)
        for l_ in range(layers):
            for k in PARAM_NAMES:
                gview[("blocks", l_, k)][...] = grads[l_][k]
        gview[("pos",)][...] = dX.sum(axis=1)
        ge = gview[("embed",)]
        ge[...] = 0.0
        for r in range(R):
            np.add.at(ge[r], tok[r].reshape(-1), dX[r].reshape(-1, d))
        gtot[:, t] = np.linalg.norm(gflat, axis=1)  # read-only: the update is unchanged
        if t == 0:
            for l_ in range(layers):
                for j, sl in enumerate(mat_slices[l_]):
                    gnorm[:, l_, j] = np.linalg.norm(gflat[:, sl], axis=1)
        # Adam with bias correction; one step size per run
        rate = lrs * np.where(warm > 0, np.minimum(1.0, (t + 1) / np.maximum(warm, 1)), 1.0)
        step = adam_step(m1, m2, gflat, t, b1, b2, rate[:, None].astype(f32))
        if step_hook is not None:
            step_hook(t, {key: step[:, a:b].reshape(v.shape) for (key, v), a, b in
                          zip(init.items(), offsets[:-1], offsets[1:], strict=True)})
        if t < record:
            for l_ in range(layers):
                for j, sl in enumerate(mat_slices[l_]):
                    upd[:, t, l_, j] = (np.linalg.norm(step[:, sl], axis=1)
                                        / np.linalg.norm(flat[:, sl], axis=1))
        flat -= step
        if t + 1 in keep_at:
            snapshots[t + 1] = copy_model()
    return TrainResult(variant, lrs, warm.astype(int), seeds.astype(int), loss, div,
                       gnorm, upd, copy_model(), gtot, max_logit, logit_steps, snapshots)


def train_model(variant: str = "pre", *, lr: float = 3e-3, warmup: int = 0, seed: int = 0,
                **kwargs: Any) -> dict[str, Any]:
    """Train one model on reversal and return it (see :meth:`TrainResult.run`).

    Keyword arguments go to :func:`train_reversal` (``layers``, ``d``,
    ``steps``, ...). The returned ``model["blocks"]`` works with
    :func:`lipattn.models.encoder.forward`, and :func:`model_forward` gives logits.
    """
    return train_reversal(variant, lr, warmup, seed, **kwargs).run(0)
