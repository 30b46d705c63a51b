r"""Attention with the stabilisers of modern recipes: QK-norm, logit soft-capping, 1/d scaling.

One layer, :class:`StabilisedAttention`, built from the pieces of
:mod:`lipattn.layers`: the norms' forward/jvp/vjp around the attention core
(:func:`~lipattn.layers.attention_core` with its scale and soft-cap, and its
jvp and vjp). Tokens are rows, ``X`` of shape (N, d);
with ``h`` heads of size ``d_h``,

.. math::

    Q = \nu_Q(X W_Q),\quad K = \nu_K(X W_K),\quad V = X W_V, \qquad
    S_i = c_s\, Q_i K_i^\top, \qquad
    T_i = \kappa \tanh(S_i/\kappa), \qquad
    P_i = \operatorname{softmax}_{\text{rows}}(T_i \text{ masked}),

    f(X) = [P_1 V_1, \dots, P_h V_h]\, W_O ,

where

- ``qk_norm`` chooses :math:`\nu`: ``None`` (identity), ``"rms"`` (RMSNorm
  with unit gain) or ``"layer"`` (LayerNorm with unit gain and zero bias),
  over each head's ``d_h`` entries (``qk_norm_over="head"``: Dehghani et al.
  2023; Qwen 3) or over all ``h * d_h`` (``"all"``: OLMo 2's ``q_norm`` and
  ``k_norm`` act on the projection before it is split into heads);
- ``scale`` chooses :math:`c_s`: ``"sqrt"`` is :math:`1/\sqrt{d_h}`, ``"linear"``
  is :math:`1/d_h` (the muP attention scaling);
- ``softcap`` is :math:`\kappa` (``None``: no capping, :math:`T = S`), applied
  after the scaling and before the mask, as in Gemma 2
  (``attn_logit_softcapping = 50``).

With every option off this is :class:`~lipattn.layers.MultiHeadAttention`
without biases. The differential at X in the direction E:
:math:`\dot Q = D\nu_Q[\dot X W_Q]`, :math:`\dot S_i = c_s(\dot Q_i K_i^\top + Q_i \dot K_i^\top)`,
:math:`\dot T = (1 - (T/\kappa)^2) \odot \dot S`, :math:`\dot P_i = J(P_i)[\dot T_i]`
row-wise, :math:`\dot O_i = \dot P_i V_i + P_i \dot V_i`; the vjp is its adjoint.
Products are closed forms, exact up to rounding; :func:`stabilised_lipschitz`
is the exact local constant (Golub–Kahan–Lanczos on them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._validate import (
    as_int_at_least,
    as_positive_float,
    as_real_array,
    as_real_float,
    safe_product,
)
from .attention import as_mask, check_attention_args
from .lanczos import LipschitzEstimate
from .layers import (
    LayerNorm,
    RMSNorm,
    attention_core,
    attention_core_jvp,
    attention_core_vjp,
    attention_logits,
    layer_lipschitz,
)

__all__ = ["StabilisedAttention", "stabilised_lipschitz", "sigma_reparam", "qk_norm_ball_bound",
           "qk_norm_two_sided_lower"]

_NORMS = (None, "rms", "layer")


def _unit_norm(kind: str | None, width: int, eps: float):
    if kind is None:
        return None
    if kind == "rms":
        return RMSNorm(np.ones(width), eps)
    return LayerNorm(np.ones(width), np.zeros(width), eps)


class StabilisedAttention:
    """Multi-head self-attention with QK-norm, soft-capping and 1/d scaling (module docstring).

    Parameters
    ----------
    W_Q, W_K : array_like, shape (d, h * d_h)
    W_V : array_like, shape (d, h * d_v)
    W_O : array_like, shape (h * d_v, d_out), or None (the concatenated heads)
    n_head : int, default 1
    mask : None, "causal" or bool ndarray (N, N)
        True = may attend; validated against N at each forward pass.
    qk_norm : None, "rms" or "layer"
    qk_norm_over : "head" (default) or "all"
    qk_norm_eps : float, default 1e-6
    scale : "sqrt" (default) or "linear"
    softcap : float > 0 or None

    Raises
    ------
    TypeError, ValueError
        Naming the argument: non-finite or mis-shaped weights, heads not
        dividing the widths, an unknown option, a non-positive eps or cap.
    """

    def __init__(self, W_Q: Any, W_K: Any, W_V: Any, W_O: Any = None, *, n_head: int = 1,
                 mask: Any = None, qk_norm: str | None = None, qk_norm_over: str = "head",
                 qk_norm_eps: float = 1e-6, scale: str = "sqrt",
                 softcap: float | None = None) -> None:
        self.W_Q = as_real_array(W_Q, "W_Q", ndim=2)
        d = self.W_Q.shape[0]
        self.W_K = as_real_array(W_K, "W_K", ndim=2)
        self.W_V = as_real_array(W_V, "W_V", ndim=2)
        for name, W in (("W_K", self.W_K), ("W_V", self.W_V)):
            if W.shape[0] != d:
                raise ValueError(f"{name} must have {d} rows (as W_Q); got shape {W.shape}")
        if self.W_K.shape != self.W_Q.shape:
            raise ValueError(f"W_K must have the shape of W_Q, {self.W_Q.shape}; "
                             f"got {self.W_K.shape}")
        if not isinstance(n_head, (int, np.integer)) or isinstance(n_head, bool) or n_head < 1:
            raise TypeError(f"n_head must be a positive int; got {n_head!r}")
        self.n_head = int(n_head)
        for name, W in (("W_Q", self.W_Q), ("W_V", self.W_V)):
            if W.shape[1] % self.n_head:
                raise ValueError(f"n_head = {n_head} must divide the {W.shape[1]} columns "
                                 f"of {name}")
        self.head_dim = self.W_Q.shape[1] // self.n_head
        self.W_O = None if W_O is None else as_real_array(W_O, "W_O", ndim=2)
        if self.W_O is not None and self.W_O.shape[0] != self.W_V.shape[1]:
            raise ValueError(f"W_O must have {self.W_V.shape[1]} rows (the columns of W_V); "
                             f"got shape {self.W_O.shape}")
        if qk_norm not in _NORMS:
            raise ValueError(f"qk_norm must be None, 'rms' or 'layer'; got {qk_norm!r}")
        if qk_norm_over not in ("head", "all"):
            raise ValueError(f"qk_norm_over must be 'head' or 'all'; got {qk_norm_over!r}")
        if scale not in ("sqrt", "linear"):
            raise ValueError(f"scale must be 'sqrt' or 'linear'; got {scale!r}")
        self.qk_norm, self.qk_norm_over, self.scale = qk_norm, qk_norm_over, scale
        self.qk_norm_eps = as_positive_float(qk_norm_eps, "qk_norm_eps")
        self.softcap = None if softcap is None else as_positive_float(softcap, "softcap")
        if mask is not None:  # its type and form now; its size against N at each forward pass
            as_mask(mask, np.shape(mask)[0] if np.ndim(mask) == 2 else 1)
        self.mask = mask
        width = self.head_dim if qk_norm_over == "head" else self.W_Q.shape[1]
        self._norm = _unit_norm(qk_norm, width, self.qk_norm_eps)
        self.c_s = 1.0 / (math.sqrt(self.head_dim) if scale == "sqrt" else self.head_dim)

    # -- helpers --------------------------------------------------------------
    def _split(self, Z: np.ndarray) -> np.ndarray:
        """(N, h * k) -> (h, N, k)."""
        return Z.reshape(Z.shape[0], self.n_head, -1).transpose(1, 0, 2)

    def _merge(self, Z: np.ndarray) -> np.ndarray:
        """(h, N, k) -> (N, h * k)."""
        return Z.transpose(1, 0, 2).reshape(Z.shape[1], -1)

    def _qk(self, Z: np.ndarray):
        """Projection (N, h d_h) -> normalised heads (h, N, d_h) and the norm's state."""
        if self._norm is None:
            return self._split(Z), None
        if self.qk_norm_over == "all":
            Y, st = self._norm.forward(Z)
            return self._split(Y), st
        H = self._split(Z)                     # the norm works on rows: (h N, d_h)
        Y, st = self._norm.forward(H.reshape(-1, H.shape[-1]))
        return Y.reshape(H.shape), st

    def _qk_jvp(self, st, dZ: np.ndarray) -> np.ndarray:
        if self._norm is None:
            return self._split(dZ)
        if self.qk_norm_over == "all":
            return self._split(self._norm.jvp(st, dZ))
        H = self._split(dZ)
        return self._norm.jvp(st, H.reshape(-1, H.shape[-1])).reshape(H.shape)

    def _qk_vjp(self, st, G: np.ndarray) -> np.ndarray:
        """(h, N, d_h) -> (N, h d_h)."""
        if self._norm is None:
            return self._merge(G)
        if self.qk_norm_over == "all":
            return self._norm.vjp(st, self._merge(G))
        return self._merge(self._norm.vjp(st, G.reshape(-1, G.shape[-1])).reshape(G.shape))

    _OVERFLOW = "X and W_Q, W_K give attention logits that overflow; expected logits of finite size"

    def _heads(self, X: Any):
        """X validated -> its mask, the heads Q, K (normalised), V (h, N, k), the norms' states."""
        X = as_real_array(X, "X", ndim=2)
        if X.shape[1] != self.W_Q.shape[0]:
            raise ValueError(f"X must have {self.W_Q.shape[0]} columns (the rows of W_Q); "
                             f"got shape {X.shape}")
        Q, st_q = self._qk(X @ self.W_Q)
        K, st_k = self._qk(X @ self.W_K)
        return as_mask(self.mask, X.shape[0]), Q, K, self._split(X @ self.W_V), st_q, st_k

    # -- the layer protocol ---------------------------------------------------
    def logits(self, X: Any) -> np.ndarray:
        """The capped logits T before masking, shape (h, N, N)."""
        _, Q, K, _, _, _ = self._heads(X)
        return attention_logits(Q, K, scale=self.c_s, softcap=self.softcap,
                                overflow=self._OVERFLOW)

    def forward(self, X: Any):
        """Output (N, d_out) and the state its products reuse.

        The state is ``(core, st_q, st_k)``: ``core`` the
        :class:`~lipattn.layers.CoreState` of the attention core (``core.P``
        the attention matrices, shape (h, N, N)), ``st_q`` and ``st_k`` the
        QK-norms' states (None without QK-norm).
        """
        mask, Q, K, V, st_q, st_k = self._heads(X)
        heads, core = attention_core(Q, K, V, mask=mask, scale=self.c_s, softcap=self.softcap,
                                     overflow=self._OVERFLOW)
        out = self._merge(heads)
        return (out if self.W_O is None else out @ self.W_O), (core, st_q, st_k)

    def jvp(self, state, E: np.ndarray) -> np.ndarray:
        """Df(X)[E], (N, d) -> (N, d_out)."""
        core, st_q, st_k = state
        dQ, dK = self._qk_jvp(st_q, E @ self.W_Q), self._qk_jvp(st_k, E @ self.W_K)
        dO = self._merge(attention_core_jvp(core, dQ, dK, self._split(E @ self.W_V)))
        return dO if self.W_O is None else dO @ self.W_O

    def vjp(self, state, G: np.ndarray) -> np.ndarray:
        """Df(X)^T[G], (N, d_out) -> (N, d)."""
        core, st_q, st_k = state
        dO = self._split(G if self.W_O is None else G @ self.W_O.T)
        dQ, dK, dV = attention_core_vjp(core, dO)
        return (self._qk_vjp(st_q, dQ) @ self.W_Q.T + self._qk_vjp(st_k, dK) @ self.W_K.T
                + self._merge(dV) @ self.W_V.T)


def stabilised_lipschitz(layer: StabilisedAttention, X: Any, *,
                         tol: float = 1e-10) -> LipschitzEstimate:
    r"""The exact local Lipschitz constant :math:`\|Df(X)\|_2` of ``layer`` at X.

    Frobenius norms on inputs and outputs; Golub–Kahan–Lanczos on the
    closed-form jvp and vjp (:func:`lipattn.layers.layer_lipschitz`), exact up
    to the relative tolerance ``tol``, or a
    :class:`~lipattn.lanczos.ConvergenceError`.
    """
    if not isinstance(layer, StabilisedAttention):
        raise TypeError(f"layer must be a StabilisedAttention; got {type(layer).__name__}")
    X = as_real_array(X, "X", ndim=2)
    return layer_lipschitz(layer, X, tol=tol)


def sigma_reparam(W: Any, gamma: float = 1.0) -> np.ndarray:
    r"""sigmaReparam (Zhai et al. 2023): :math:`\hat W = \gamma\, W / \|W\|_2`.

    The spectral norm is computed exactly (an SVD); Zhai et al. estimate it by
    one power-iteration step per training step. ``gamma`` is their learned
    scalar (initialised to 1).

    Raises
    ------
    ValueError
        For a non-finite or zero W, or a non-finite gamma.
    """
    W = as_real_array(W, "W", ndim=2)
    gamma = as_real_float(gamma, "gamma")
    sigma = float(np.linalg.norm(W, 2))
    if sigma == 0.0:
        raise ValueError("W must be non-zero (its spectral norm is 0)")
    return gamma * W / sigma


def qk_norm_ball_bound(R: float, N: int, W_Q: Any, W_K: Any, W_V: Any, eps: float) -> float:
    r"""Upper bound on the local constant of one QK-RMSNorm head on tokens of norm <= R.

    .. math::

        \|W_V\|_2\Bigl(\sqrt N + R\sqrt{N/2}\,\frac{\|W_Q\|_2 + \|W_K\|_2}{\sqrt\varepsilon}\Bigr)

    for unit-gain RMSNorm with epsilon ``eps`` on queries and keys and
    :math:`1/\sqrt{d_h}` scaling, no biases, with or without a mask (the book's
    Chapter 7 proves it). Also for several heads with RMSNorm per head and no
    output projection, with the full ``W_Q``, ``W_K``, ``W_V``. With one norm
    over all h heads (OLMo 2) the second term needs a factor
    :math:`\sqrt h`, which this function does not include. Linear in R:
    QK-norm removes the :math:`R^2` of dot-product attention but not the
    growth.

    Raises ``OverflowError`` (:class:`~lipattn._validate.ResultOverflowError`)
    where the bound exceeds float64.
    """
    R = as_positive_float(R, "R", allow_zero=True)
    eps = as_positive_float(eps, "eps")
    N = as_int_at_least(N, "N", 1)
    W_Q = as_real_array(W_Q, "W_Q", ndim=2)
    _, W_Q, W_K, W_V = check_attention_args(np.zeros((1, W_Q.shape[0])), W_Q, W_K, W_V)
    nQ, nK, nV = (float(np.linalg.norm(W, 2)) for W in (W_Q, W_K, W_V))
    inner = math.sqrt(N) + safe_product(R, math.sqrt(N / 2), nQ + nK, 1 / math.sqrt(eps),
                                        name="R, W_Q, W_K and eps", what="a bound")
    return safe_product(nV, inner, name="R, W_Q, W_K, W_V and eps", what="a bound")


def qk_norm_two_sided_lower(t: float, eps: float) -> float:
    r"""Lower bound on the QK-RMSNorm constant at :math:`t(0, e_1, -e_1)`, identity weights, d = 2.

    :math:`\frac{2t^2}{3\sqrt{2\varepsilon}\sqrt{t^2/2 + \varepsilon}} + \frac13`, at least
    :math:`2t/(3\sqrt\varepsilon)` for every t and asymptotic to it (the book's
    Chapter 7 proves both).

    Computed without squaring t; ``OverflowError`` where the bound exceeds float64.
    """
    t = as_positive_float(t, "t", allow_zero=True)
    eps = as_positive_float(eps, "eps")
    # t / sqrt(t^2/2 + eps) = 1 / sqrt(1/2 + eps/t^2) for t >= 1: no square overflows
    ratio = t / math.hypot(t / math.sqrt(2), math.sqrt(eps))
    return safe_product(2 * t / 3, ratio, 1 / math.sqrt(2 * eps), name="t and eps",
                        what="a lower bound") + 1 / 3
