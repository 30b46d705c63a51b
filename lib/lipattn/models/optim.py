r"""Adam and its learning-rate schedules, for any dict of parameter arrays.

Adam (:cite:t:`kingma2015adam`) with bias correction, in place on the arrays
it is given (float32 or float64, any leading run axes); a learning rate that
rises linearly over ``warmup`` steps, then stays constant or follows a cosine
decay to a floor; optional decoupled weight decay (AdamW, on arrays with at
least two axes) and global gradient-norm clipping; and RAdam's variance
rectification (:cite:t:`liu2020variance`) as a per-step factor. The trainers
of :mod:`lipattn.models.training` use these.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validate import as_choice, as_count, as_float_in, as_positive_float

__all__ = ["adam_step", "Adam", "radam_rectification", "learning_rate", "SCHEDULES"]


def adam_step(m1: np.ndarray, m2: np.ndarray, g: np.ndarray, t: int, b1: float, b2: float,
              rate: Any) -> np.ndarray:
    r"""One Adam step (:cite:t:`kingma2015adam`) with bias correction, for the
    gradient ``g`` at step ``t`` (from 0); updates the moments ``m1``, ``m2`` in place.

    :math:`m_1 \leftarrow \beta_1 m_1 + (1 - \beta_1) g`, :math:`m_2 \leftarrow
    \beta_2 m_2 + (1 - \beta_2) g^2`, and the step is :math:`\text{rate} \cdot
    \hat m_1/(\sqrt{\hat m_2} + 10^{-9})` with :math:`\hat m_i = m_i/(1 - \beta_i^{t+1})`
    (:math:`\epsilon = 10^{-9}` in the arrays' dtype). ``rate`` broadcasts against
    ``g`` (one rate per run for :func:`train_reversal`). Not validated (the callers
    validate). Returns the step, to be subtracted from the parameters.
    """
    m1 *= b1
    m1 += (1 - b1) * g
    m2 *= b2
    m2 += (1 - b2) * g * g
    step = (m1 / (1 - b1 ** (t + 1))) / (np.sqrt(m2 / (1 - b2 ** (t + 1))) + m2.dtype.type(1e-9))
    step *= rate
    return step


def radam_rectification(steps: int, beta2: float = 0.98) -> np.ndarray:
    r"""RAdam's variance rectification :math:`r_t` (:cite:t:`liu2020variance`) for
    Adam's steps ``0, ..., steps - 1``: multiplying :func:`adam_step`'s step ``t``
    by ``r[t]`` gives RAdam's adaptive step.

    With :math:`\rho_\infty = 2/(1 - \beta_2) - 1` and, at step :math:`k = t + 1`,
    :math:`\rho_k = \rho_\infty - 2k\beta_2^k/(1 - \beta_2^k)`,
    :math:`r_t = \sqrt{(\rho_k - 4)(\rho_k - 2)\rho_\infty / ((\rho_\infty - 4)
    (\rho_\infty - 2)\rho_k)}` where :math:`\rho_k > 4`, and :math:`r_t = 0`
    elsewhere: where the variance of the adaptive step is undefined, this
    version takes no step (rather than the un-adapted momentum step of the
    paper's Algorithm 2; ``torch.optim.RAdam`` switches at :math:`\rho_k > 5`
    instead of 4). Exact in float64; :math:`r_t \to 1` as :math:`t \to \infty`.

    Parameters
    ----------
    steps : int
        At least 1.
    beta2 : float, default 0.98
        Adam's second-moment decay, in (0, 1), with :math:`\rho_\infty > 4`
        (:math:`\beta_2 > 3/5`).

    Returns
    -------
    r : ndarray, shape (steps,), entries in [0, 1]
    """
    steps = as_count(steps, "steps", 1)
    beta2 = as_float_in(beta2, "beta2", 0.0, 1.0, lo_open=True, hi_open=True)
    rho_inf = 2.0 / (1.0 - beta2) - 1.0
    if rho_inf <= 4.0:
        raise ValueError(f"beta2 must exceed 3/5, so that the rectification is ever defined "
                         f"(rho_inf = 2/(1 - beta2) - 1 > 4); got {beta2!r}")
    k = np.arange(1, steps + 1, dtype=float)
    pk = beta2 ** k
    rho = rho_inf - 2.0 * k * pk / (1.0 - pk)
    ok = rho > 4.0
    r = np.zeros(steps)
    r[ok] = np.sqrt((rho[ok] - 4.0) * (rho[ok] - 2.0) * rho_inf
                    / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho[ok]))
    return r


SCHEDULES = ("constant", "cosine")


def learning_rate(t: int, lr: float, warmup: int = 0, *, schedule: str = "constant",
                  steps: int | None = None, min_lr: float = 0.0) -> float:
    r"""The learning rate of step ``t`` (from 0): a linear warm-up, then constant or
    a cosine decay to ``min_lr``.

    .. math::

        \eta_t = \eta \frac{t + 1}{w} \quad (t < w), \qquad
        \eta_t = \eta_{\min} + (\eta - \eta_{\min})\,\frac{1 + \cos(\pi u_t)}{2},
        \quad u_t = \min\Bigl(1, \frac{t - w}{\max(1, T - 1 - w)}\Bigr) \quad (t \ge w)

    for ``schedule="cosine"`` (peak :math:`\eta` at step :math:`w`, the floor
    :math:`\eta_{\min}` at the last step :math:`T - 1`), and :math:`\eta_t = \eta`
    for :math:`t \ge w` with ``"constant"`` (``warmup = 0``: no warm-up). The
    constant schedule is the expression :class:`Adam` has always used (bit for bit).
    Exact in float64. ``t``, ``warmup`` are ints >= 0, ``lr`` in (0, 1], ``min_lr`` in
    [0, lr], ``steps`` an int >= 1 (needed by ``"cosine"``); else a ValueError or
    TypeError naming the argument.
    """
    t = as_count(t, "t", 0)
    lr = as_float_in(lr, "lr", 0.0, 1.0, lo_open=True)
    warmup = as_count(warmup, "warmup", 0)
    as_choice(schedule, "schedule", SCHEDULES)
    min_lr = as_float_in(min_lr, "min_lr", 0.0, lr)
    if steps is None and schedule == "cosine":
        raise ValueError("steps must be the run's number of steps for schedule='cosine'; "
                         "got None")
    steps = None if steps is None else as_count(steps, "steps", 1)
    if t < warmup:
        return lr * ((t + 1) / warmup)
    if schedule == "constant":
        return lr * (min(1.0, (t + 1) / warmup) if warmup else 1.0)
    u = min(1.0, (t - warmup) / max(1, steps - 1 - warmup))
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * u))


class Adam:
    """Adam on a dict of parameter arrays, updated in place (e.g. a layer's ``params``),
    with an optional cosine schedule, decoupled weight decay (AdamW) and gradient clipping.

    Parameters
    ----------
    params : dict of str -> ndarray
        The arrays themselves (a layer's ``params``: updating them updates the layer).
    lr : float
        Peak learning rate, in (0, 1].
    warmup : int, default 0
        Linear warm-up length in steps (0: constant from the first step).
    betas : (float, float), default (0.9, 0.98)
    schedule : {"constant", "cosine"}, default "constant"
        The rate after the warm-up (:func:`learning_rate`): constant, or a
        cosine decay from ``lr`` to ``min_lr`` over the remaining ``steps``.
    steps : int, optional
        The number of steps of the run; needed by ``"cosine"``.
    min_lr : float, default 0.0
        The cosine's floor, in [0, lr].
    weight_decay : float, default 0.0
        Decoupled weight decay :math:`\\lambda` (AdamW, Loshchilov & Hutter 2019):
        before each Adam step, every decayed array is multiplied by :math:`1 -
        \\eta_t \\lambda` (:math:`\\eta_t` the step's rate, as PyTorch's ``AdamW``).
        Decayed are the arrays with at least two axes -- weight matrices and
        embeddings -- and not vectors (biases, norms' gains and biases), GPT-2's
        convention as nanoGPT has it. In [0, 1/lr].
    clip : float or None, default None
        Global-norm clipping: when the Euclidean norm of all gradients together
        exceeds ``clip``, every gradient is scaled by ``clip / norm`` before the step.

    :meth:`step` applies one update of the :func:`adam_step` rule for a dict of
    gradients with the same keys and shapes; after it, ``grad_norm`` is the
    gradient's global norm before clipping (float64) and ``rate`` the step's rate.
    With the defaults the updates are bit-identical to plain Adam with warm-up.
    """

    def __init__(self, params: dict[str, np.ndarray], lr: float, *, warmup: int = 0,
                 betas: tuple[float, float] = (0.9, 0.98), schedule: str = "constant",
                 steps: int | None = None, min_lr: float = 0.0, weight_decay: float = 0.0,
                 clip: float | None = None) -> None:
        if not isinstance(params, dict) or not params or not all(
                isinstance(v, np.ndarray) and np.issubdtype(v.dtype, np.floating)
                for v in params.values()):
            raise TypeError("params must be a non-empty dict of float arrays (a layer's "
                            f"params); got {type(params).__name__}")
        self.params = params
        self.lr = as_float_in(lr, "lr", 0.0, 1.0, lo_open=True)
        self.warmup = as_count(warmup, "warmup", 0)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair (beta_1, beta_2) of reals in [0, 1); got "
                            f"{betas!r}")
        self.b1, self.b2 = (as_float_in(b, f"betas[{i}]", 0.0, 1.0, hi_open=True)
                            for i, b in enumerate(betas))
        self.schedule = as_choice(schedule, "schedule", SCHEDULES)
        if steps is None and self.schedule == "cosine":
            raise ValueError("steps must be the run's number of steps for schedule='cosine'; "
                             "got None")
        self.steps = None if steps is None else as_count(steps, "steps", 1)
        self.min_lr = as_float_in(min_lr, "min_lr", 0.0, self.lr)
        self.weight_decay = as_float_in(weight_decay, "weight_decay", 0.0, 1.0 / self.lr)
        self.clip = None if clip is None else as_positive_float(clip, "clip")
        self.m1 = {k: np.zeros_like(v) for k, v in params.items()}
        self.m2 = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0
        self.grad_norm = math.nan
        self.rate = math.nan

    def step(self, grads: dict[str, np.ndarray]) -> None:
        if set(grads) != set(self.params):
            raise ValueError(f"grads must have the keys of params; missing "
                             f"{sorted(set(self.params) - set(grads))}, extra "
                             f"{sorted(set(grads) - set(self.params))}")
        for k, p in self.params.items():
            if np.shape(grads[k]) != p.shape:
                raise ValueError(f"grads[{k!r}] must have the parameter's shape {p.shape}; "
                                 f"got {np.shape(grads[k])}")
        t = self.t
        rate = self.rate = learning_rate(t, self.lr, self.warmup, schedule=self.schedule,
                                         steps=self.steps, min_lr=self.min_lr)
        self.grad_norm = math.sqrt(sum(float(np.vdot(g, g).real) for g in
                                       (np.asarray(g, np.float64) for g in grads.values())))
        scale = None
        if self.clip is not None and self.grad_norm > self.clip:
            scale = self.clip / self.grad_norm
        for k, p in self.params.items():
            g = grads[k].astype(p.dtype, copy=False)
            if scale is not None:
                g = g * p.dtype.type(scale)
            if self.weight_decay and p.ndim >= 2:
                p *= p.dtype.type(1.0 - rate * self.weight_decay)
            p -= adam_step(self.m1[k], self.m2[k], g, t, self.b1, self.b2, p.dtype.type(rate))
        self.t += 1
