r"""Multi-head self-attention with masks, biases, grouped-query heads and RoPE.

Tokens are rows: ``X`` has shape (..., N, d) (leading batch axes allowed).
With ``h`` query heads of size ``d_h`` and ``h_kv`` key/value heads (``h_kv``
divides ``h``; query head ``i`` uses key/value head ``i // (h / h_kv)``, as
Hugging Face's ``repeat_kv``),

.. math::

    Q = X W_Q + b_Q,\quad K = X W_K + b_K,\quad V = X W_V + b_V, \qquad
    S_i = \frac{R(Q_i)\, R(K_{i'})^\top}{\sqrt{d_h}}, \qquad
    P_i = \operatorname{softmax}_{\text{rows}}(S_i \text{ masked}),

    f(X) = [P_1 V_{1'}, \dots, P_h V_{h'}]\, W_O + b_O ,

with :math:`Q_i` the i-th column block of width ``d_h``, :math:`R` the RoPE
rotation (:mod:`lipattn.layers.rope`, optional) and masked logits set to
:math:`-\infty` (probability exactly 0). ``W_O=None`` returns the
concatenated heads (the book's single head :math:`P X W_V`). Options: a
logit factor ``scale`` in place of :math:`1/\sqrt{d_h}`, a soft-cap
:math:`S \mapsto \kappa \tanh(S/\kappa)` before the mask (``softcap``), per-head
norms of queries and keys before RoPE (``q_norm``, ``k_norm``), and llama3 RoPE
frequencies (``rope_scaling``).

Each head is computed at its own size: Q, K, V are (heads, N, d_h) arrays
and every product is a batched matmul (no loop over heads or tokens); a
group of query heads sharing a key/value head is one matmul.

The differential at X in the direction E (biases drop out):
:math:`\dot S_i = (R(\dot Q_i) R(K)^\top + R(Q_i) R(\dot K)^\top)/\sqrt{d_h}`,
:math:`\dot P_i = J(P_i)[\dot S_i]` row-wise (:func:`softmax_jvp`),
:math:`\dot O_i = \dot P_i V + P_i \dot V`, and the vjp is its adjoint.

The core that maps head arrays Q, K, V to the heads' outputs -- scores,
optional logit soft-capping, masked softmax, :math:`P V` -- and its jvp and vjp
with respect to Q, K and V are the functions :func:`attention_core`,
:func:`attention_core_jvp` and :func:`attention_core_vjp`, on batched arrays
(..., heads, N, d_h). They are the one implementation of attention's
derivatives: :class:`MultiHeadAttention` adds the projections, biases, RoPE and
W_O around them, the book's encoder (:mod:`lipattn.models.encoder`) its
projections and weight gradients, and :class:`lipattn.stabilisers.StabilisedAttention`
its QK-norm, scaling and soft-cap.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._validate import as_int_at_least, as_positive_float
from ..attention import as_mask
from ..softmax import softmax
from .base import check_input, linear, linear_t, reduce_to, weight, wgrad
from .rope import LLAMA3_KEYS, rope, rope_tables, rope_transpose

__all__ = ["MultiHeadAttention", "AttentionState", "softmax_jvp", "attention_core",
           "attention_core_jvp", "attention_core_vjp", "attention_logits", "CoreState"]


def softmax_jvp(P: np.ndarray, dS: np.ndarray) -> np.ndarray:
    """Row-wise :math:`J(p) \\dot s = p \\odot (\\dot s - p^\\top \\dot s)` for P = softmax(S).

    Also the vjp (the softmax Jacobian is symmetric). Masked entries (P = 0)
    get 0 whatever ``dS`` holds there.
    """
    return P * (dS - np.sum(P * dS, axis=-1, keepdims=True))


class CoreState(NamedTuple):
    r"""What :func:`attention_core` keeps for its derivatives.

    ``KT``, ``VT`` and ``PT`` are the transposes of the last two axes of
    ``K``, ``V`` and ``P``: views, or contiguous copies when
    ``attention_core(..., copy_transposes=True)``. ``cap_factor`` is the
    derivative :math:`1 - (T/\kappa)^2` of the soft-cap at the logits, shape
    (..., heads, M, N), or None without a soft-cap.
    """

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    P: np.ndarray
    KT: np.ndarray
    VT: np.ndarray
    PT: np.ndarray
    scale: float
    copy_transposes: bool
    cap_factor: np.ndarray | None = None


def _transpose(Z: np.ndarray, copy: bool) -> np.ndarray:
    Z = np.swapaxes(Z, -1, -2)
    return np.ascontiguousarray(Z) if copy else Z


_OVERFLOW = "Q and K give attention logits that overflow; expected logits of finite size"


def _logits(Q: np.ndarray, KT: np.ndarray, scale: float, softcap: float | None,
            overflow: str) -> np.ndarray:
    """T = s Q K^T, soft-capped if ``softcap`` (KT the transpose of K); finite or ValueError."""
    with np.errstate(over="ignore", invalid="ignore"):
        S = (Q @ KT) * scale
    if not np.all(np.isfinite(S)):
        raise ValueError(overflow)
    return S if softcap is None else softcap * np.tanh(S / softcap)


def _options(Q: np.ndarray, scale, softcap) -> tuple[float, float | None]:
    """The scale (default 1/sqrt(d_h)) and the soft-cap (validated)."""
    scale = 1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale
    return scale, None if softcap is None else as_positive_float(softcap, "softcap")


def attention_logits(Q: np.ndarray, K: np.ndarray, *, scale: float | None = None,
                     softcap: float | None = None, overflow: str = _OVERFLOW) -> np.ndarray:
    r"""The logits of :func:`attention_core` before the mask: :math:`T = \kappa
    \tanh(s\, Q K^\top / \kappa)`, or :math:`T = s\, Q K^\top` without a soft-cap.

    Parameters
    ----------
    Q : ndarray, shape (..., heads, M, d_h)
    K : ndarray, shape (..., heads, N, d_h)
    scale, softcap, overflow
        As in :func:`attention_core`.

    Returns
    -------
    T : ndarray, shape (..., heads, M, N)
    """
    scale, softcap = _options(Q, scale, softcap)
    return _logits(Q, np.swapaxes(K, -1, -2), scale, softcap, overflow)


def attention_core(Q: np.ndarray, K: np.ndarray, V: np.ndarray, *, mask=None,
                   scale: float | None = None, softcap: float | None = None,
                   copy_transposes: bool = False, overflow: str = _OVERFLOW,
                   keep_float32: bool = False) -> tuple[np.ndarray, CoreState]:
    r"""Scaled dot-product attention on batched heads: :math:`O = P V`, :math:`P =
    \operatorname{softmax}_{\text{rows}}(\text{mask}(T))`, with logits :math:`T = s\,
    Q K^\top`, or :math:`T = \kappa \tanh(s\, Q K^\top / \kappa)` with a soft-cap
    :math:`\kappa` (Gemma 2's ``attn_logit_softcapping``: after the scaling, before
    the mask).

    No loops: every product is one batched matmul over the leading axes.

    Parameters
    ----------
    Q : ndarray, shape (..., heads, M, d_h)
        Queries (M rows per head; a group of query heads sharing a key head may
        be stacked as one head of M = group * N rows).
    K : ndarray, shape (..., heads, N, d_h)
    V : ndarray, shape (..., heads, N, d_v)
    mask : None or bool ndarray broadcasting to (..., heads, M, N)
        True = may attend; masked logits become -inf (probability exactly 0).
        Not validated here (see :func:`lipattn.attention.as_mask`): every row
        must allow a key.
    scale : float, optional
        The factor s of the logits; default :math:`1/\sqrt{d_h}`.
    softcap : float > 0 or None, default None
        The cap :math:`\kappa` (None: no capping, :math:`T = s\, Q K^\top`).
    copy_transposes : bool, default False
        Keep contiguous copies of the transposes :math:`K^\top, V^\top, P^\top`
        (and copy :math:`\dot K^\top`, :math:`\dot S^\top` in the products):
        faster when the derivatives are taken many times, as by Lanczos; the
        values are the same up to rounding.
    overflow : str
        The message of the ValueError raised when a logit :math:`s\, Q K^\top` is
        not finite (the caller names its own arguments).
    keep_float32 : bool, default False
        Float32 logits: compute the softmax in float32
        (:func:`lipattn.softmax.softmax`'s ``keep_float32``), the fast path for
        training float32 models. Default False: in float64, then rounded to
        float32 (float64 logits are computed the same way either way).

    Returns
    -------
    O : ndarray, shape (..., heads, M, d_v)
    state : CoreState
        For :func:`attention_core_jvp` and :func:`attention_core_vjp`. P has
        the dtype of the logits (float32 only if Q and K are).

    Raises
    ------
    TypeError, ValueError
        For a ``softcap`` that is not a finite positive number (naming it);
        with the message ``overflow`` for logits that are not finite.
    """
    scale, softcap = _options(Q, scale, softcap)
    KT = _transpose(K, copy_transposes)
    T = _logits(Q, KT, scale, softcap, overflow)
    cap_factor = None if softcap is None else 1.0 - (T / softcap) ** 2
    if mask is not None:
        T = np.where(mask, T, -np.inf)
    P = softmax(T, axis=-1, keep_float32=keep_float32).astype(T.dtype, copy=False)
    out = P @ V
    return out, CoreState(Q, K, V, P, KT, _transpose(V, copy_transposes),
                          _transpose(P, copy_transposes), scale, copy_transposes, cap_factor)


def attention_core_jvp(state: CoreState, dQ: np.ndarray, dK: np.ndarray,
                       dV: np.ndarray) -> np.ndarray:
    r"""The differential of :func:`attention_core`: :math:`\dot O = \dot P V + P \dot V`.

    :math:`\dot S = s(\dot Q K^\top + Q \dot K^\top)`, :math:`\dot T = (1 -
    (T/\kappa)^2) \odot \dot S` with a soft-cap (:math:`\dot T = \dot S` without)
    and :math:`\dot P = J(P)[\dot T]` row-wise (:func:`softmax_jvp`; masked
    entries stay 0). Exact up to rounding.

    Parameters
    ----------
    state : CoreState
    dQ, dK, dV : ndarray, the shapes of Q, K, V
        The directions (tangents) of Q, K and V.

    Returns
    -------
    dO : ndarray, shape (..., heads, M, d_v)
    """
    st = state
    dS = dQ @ st.KT
    dS += st.Q @ _transpose(dK, st.copy_transposes)
    dS *= st.scale
    if st.cap_factor is not None:
        dS *= st.cap_factor
    dO = softmax_jvp(st.P, dS) @ st.V
    dO += st.P @ dV
    return dO


def attention_core_vjp(state: CoreState, dO: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The adjoint of :func:`attention_core_jvp`: the gradients at Q, K and V of
    :math:`\langle G, O\rangle` for G = ``dO``.

    :math:`\bar V = P^\top G`, :math:`\bar S = s\, (1 - (T/\kappa)^2) \odot
    J(P)[G V^\top]` (without the factor when there is no soft-cap),
    :math:`\bar Q = \bar S K`, :math:`\bar K = \bar S^\top Q`. Exact up to rounding.

    Parameters
    ----------
    state : CoreState
    dO : ndarray, shape (..., heads, M, d_v)

    Returns
    -------
    dQ, dK, dV : ndarray, the shapes of Q, K and V
        (A K or V broadcast against Q gets the gradient of the broadcast
        shape; the caller sums it.)
    """
    st = state
    dV = st.PT @ dO
    dS = softmax_jvp(st.P, dO @ st.VT)
    if st.cap_factor is not None:
        dS *= st.cap_factor
    dS *= st.scale
    return dS @ st.K, _transpose(dS, st.copy_transposes) @ st.Q, dV


class AttentionState(NamedTuple):
    """What :meth:`MultiHeadAttention.forward` keeps: its input ``X``, the core's
    state, the RoPE tables (or None), the concatenated heads ``A`` (the input of
    W_O) and the states of the head norms (or None)."""

    X: np.ndarray
    core: CoreState
    rot: tuple | None
    A: np.ndarray
    q_norm: object = None
    k_norm: object = None


class MultiHeadAttention:
    """Masked multi-head self-attention (see the module docstring).

    Parameters
    ----------
    W_Q : ndarray, shape (d, h * d_h)
    W_K : ndarray, shape (d, h_kv * d_h)
    W_V : ndarray, shape (d, h_kv * d_v)
    W_O : ndarray, shape (h * d_v, d_out), or None
    n_head, n_kv_head : int
        ``h`` and ``h_kv`` (default ``h``).
    b_Q, b_K, b_V, b_O : ndarray or None
        Biases of the matching widths.
    mask : None, "causal" or bool ndarray (N, N)
        True = may attend (:func:`lipattn.attention.as_mask`, checked against
        N at every forward pass).
    rope_theta : float or None
        RoPE base (even ``d_h``), or None for no rotary embedding.
    q_norm, k_norm : norm layer or None
        Applied to every head's queries (keys), arrays (..., heads, N, d_h), after
        the bias and before RoPE (Qwen 3, Gemma 3); e.g. the book's encoder's
        unit-gain QK-LayerNorm ``LayerNorm(ones(d_h), zeros(d_h), eps)``. Their
        parameters appear in ``params`` and ``backward``'s grads as
        ``q_norm.<name>`` and ``k_norm.<name>``.
    scale : float > 0 or None
        The logits' factor s, default :math:`1/\\sqrt{d_h}` (Gemma 2:
        ``query_pre_attn_scalar ** -0.5``; GPT-2 without ``scale_attn_weights``: 1).
    softcap : float > 0 or None
        The logit soft-cap :math:`\\kappa` of :func:`attention_core` (Gemma 2's
        ``attn_logit_softcapping``), or None.
    rope_scaling : dict or None
        RoPE frequency scaling, ``{"rope_type": "llama3", ...}``
        (:func:`lipattn.layers.rope.rope_inv_freq`), or None.

    The weights may carry leading axes that broadcast against the batch axes of
    X (numpy matmul rules); ``backward``'s grads have the weights' shapes.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: shapes that do not match, head counts that do not
        divide, non-finite weights.
    """

    def __init__(self, W_Q, W_K, W_V, W_O=None, *, n_head: int = 1, n_kv_head: int | None = None,
                 b_Q=None, b_K=None, b_V=None, b_O=None, mask=None,
                 rope_theta: float | None = None, q_norm=None, k_norm=None,
                 scale: float | None = None, softcap: float | None = None,
                 rope_scaling: dict | None = None) -> None:
        self.n_head = h = as_int_at_least(n_head, "n_head", 1)
        self.n_kv_head = h_kv = h if n_kv_head is None else as_int_at_least(n_kv_head,
                                                                            "n_kv_head", 1)
        if h % h_kv:
            raise ValueError(f"n_kv_head must divide n_head = {h}; got n_kv_head = {h_kv}")
        self.W_Q = weight(W_Q, "W_Q", (None, None))
        d, q = self.W_Q.shape[-2:]
        if q % h:
            raise ValueError(f"W_Q must have n_head * d_h columns (n_head = {h}); got shape "
                             f"{self.W_Q.shape}")
        self.head_dim = q // h
        self.W_K = weight(W_K, "W_K", (d, h_kv * self.head_dim))
        self.W_V = weight(W_V, "W_V", (d, None))
        if self.W_V.shape[-1] % h_kv:
            raise ValueError(f"W_V must have n_kv_head * d_v columns (n_kv_head = {h_kv}); got "
                             f"shape {self.W_V.shape}")
        self.value_dim = self.W_V.shape[-1] // h_kv
        self.W_O = None if W_O is None else weight(W_O, "W_O", (h * self.value_dim, None))
        opt = lambda b, name, n: None if b is None else weight(b, name, (n,))  # noqa: E731
        self.b_Q = opt(b_Q, "b_Q", q)
        self.b_K = opt(b_K, "b_K", h_kv * self.head_dim)
        self.b_V = opt(b_V, "b_V", self.W_V.shape[-1])
        if b_O is not None and W_O is None:
            raise ValueError("b_O needs W_O; got b_O with W_O=None")
        self.b_O = opt(b_O, "b_O", None if W_O is None else self.W_O.shape[-1])
        if mask is not None and not isinstance(mask, str):
            mask = np.asarray(mask)
        as_mask(mask, np.shape(mask)[0] if np.ndim(mask) == 2 else 1)   # type and rows
        self.mask = mask
        self.rope_theta = None if rope_theta is None else as_positive_float(rope_theta,
                                                                            "rope_theta")
        if self.rope_theta is not None and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size; got d_h = {self.head_dim}")
        self.scale = None if scale is None else as_positive_float(scale, "scale")
        self.softcap = None if softcap is None else as_positive_float(softcap, "softcap")
        if rope_scaling is not None:
            if self.rope_theta is None:
                raise ValueError("rope_scaling needs rope_theta; got rope_theta=None")
            if not isinstance(rope_scaling, dict) or rope_scaling.get("rope_type") != "llama3":
                raise ValueError("rope_scaling must be None or a dict with rope_type 'llama3'; "
                                 f"got {rope_scaling!r}")
            missing = [k for k in LLAMA3_KEYS if k not in rope_scaling]
            if missing:
                raise ValueError(f"rope_scaling is missing {missing}")
            vals = {k: as_positive_float(rope_scaling[k], f"rope_scaling[{k!r}]")
                    for k in LLAMA3_KEYS}
            if not vals["high_freq_factor"] > vals["low_freq_factor"]:
                raise ValueError("rope_scaling needs high_freq_factor > low_freq_factor; got "
                                 f"{vals['high_freq_factor']} and {vals['low_freq_factor']}")
            rope_scaling = {"rope_type": "llama3", **vals}
        self.rope_scaling = rope_scaling
        for name, norm in (("q_norm", q_norm), ("k_norm", k_norm)):
            if norm is not None and not all(callable(getattr(norm, m, None)) for m in (
                    "forward", "jvp", "vjp", "backward")):
                raise TypeError(f"{name} must be None or a norm layer (forward, jvp, vjp, "
                                f"backward) on head vectors of size {self.head_dim}; got "
                                f"{type(norm).__name__}")
        self.q_norm, self.k_norm = q_norm, k_norm
        #: Keep contiguous transposes for many products (attention_core's
        #: copy_transposes): True for the exact constants (Lanczos), False saves
        #: three copies per forward pass when each is differentiated once.
        self.copy_transposes = True
        #: Float32 weights: compute the softmax in float32 (attention_core's
        #: keep_float32), the fast path for training; False (default): in float64
        #: and rounded, as the exact constants and Chapters 4-6's training have it.
        self.keep_float32 = False
        #: The message of the ValueError for attention logits that overflow.
        self.overflow = ("the hidden states and W_Q, W_K give attention logits that overflow; "
                         "expected logits of finite size")

    @property
    def params(self) -> dict[str, np.ndarray]:
        out = {k: getattr(self, k) for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V",
                                             "b_O") if getattr(self, k) is not None}
        for name in ("q_norm", "k_norm"):
            norm = getattr(self, name)
            if norm is not None:
                out |= {f"{name}.{k}": v for k, v in norm.params.items()}
        return out

    # -- helpers --------------------------------------------------------------
    # Every operand of a batched matmul is a contiguous (..., heads, rows, cols)
    # array: the transposes the products need (K^T, V^T, P^T) are copied once
    # per forward pass (attention_core's copy_transposes) and reused by every
    # jvp and vjp.
    def _split(self, Z: np.ndarray, heads: int) -> np.ndarray:
        """(..., N, heads * k) -> (..., heads, N, k), contiguous if copy_transposes."""
        Z = np.swapaxes(Z.reshape(*Z.shape[:-1], heads, -1), -2, -3)
        return np.ascontiguousarray(Z) if self.copy_transposes else Z

    def _group(self, Z: np.ndarray) -> np.ndarray:
        """Query heads (..., h, N, k) -> (..., h_kv, rep * N, k): the heads sharing a
        key head stacked."""
        return Z.reshape(*Z.shape[:-3], self.n_kv_head, -1, Z.shape[-1])

    def _merge(self, Z: np.ndarray, N: int) -> np.ndarray:
        """(..., h_kv, rep * N, d_v) or (..., h, N, d_v) -> (..., N, h * d_v)."""
        Z = np.swapaxes(Z.reshape(*Z.shape[:-3], -1, N, Z.shape[-1]), -2, -3)
        return Z.reshape(*Z.shape[:-2], -1)

    def _out(self, Z: np.ndarray, bias: bool) -> np.ndarray:
        if self.W_O is None:
            return Z
        Y = linear(Z, self.W_O)
        return Y + self.b_O if bias and self.b_O is not None else Y

    def _mask_array(self, N: int):
        return as_mask(self.mask, N)

    def _heads(self, Z, heads, norm, norm_state, rot, tangent):
        """Split (..., N, heads * k) into heads, then the head norm (its forward,
        or its jvp when ``tangent``), then RoPE; returns (heads, norm state)."""
        Z = self._split(Z, heads)
        if norm is not None:
            if tangent:
                Z = norm.jvp(norm_state, Z)
            else:
                Z, norm_state = norm.forward(Z)
        return (rope(Z, *rot) if rot is not None else Z), norm_state

    def _core_vjp(self, state: AttentionState, G: np.ndarray):
        """The cotangents at the heads of Q, K (before RoPE, after the norms) and V,
        each (..., heads, N, k)."""
        N = G.shape[-2]
        dO = G if self.W_O is None else linear_t(G, self.W_O)
        dO = self._group(self._split(dO, self.n_head))            # (..., h_kv, rep N, d_v)
        dQ, dK, dV = attention_core_vjp(state.core, dO)           # dK, dV summed over the group
        dQ = dQ.reshape(*dQ.shape[:-3], self.n_head, N, -1)
        if state.rot is not None:
            dQ, dK = rope_transpose(dQ, *state.rot), rope_transpose(dK, *state.rot)
        return dQ, dK, dV

    # -- the layer protocol ---------------------------------------------------
    def forward(self, X: np.ndarray):
        check_input(X, self.W_Q.shape[-2], "MultiHeadAttention")
        N = X.shape[-2]
        rot = None
        if self.rope_theta is not None:
            rot = tuple(t.astype(X.dtype, copy=False)
                        for t in rope_tables(N, self.head_dim, self.rope_theta,
                                             self.rope_scaling))
        bias = lambda Z, b: Z if b is None else Z + b  # noqa: E731
        Q, qn = self._heads(bias(linear(X, self.W_Q), self.b_Q), self.n_head, self.q_norm,
                            None, rot, False)
        K, kn = self._heads(bias(linear(X, self.W_K), self.b_K), self.n_kv_head, self.k_norm,
                            None, rot, False)
        V = self._split(bias(linear(X, self.W_V), self.b_V), self.n_kv_head)
        Q = self._group(Q)
        mask = self._mask_array(N)
        if mask is not None:                   # one row block per query head of a group
            mask = np.tile(mask, (Q.shape[-2] // N, 1))
        heads, core = attention_core(Q, K, V, mask=mask, scale=self.scale, softcap=self.softcap,
                                     copy_transposes=self.copy_transposes, overflow=self.overflow,
                                     keep_float32=self.keep_float32)
        A = self._merge(heads, N)
        return self._out(A, True), AttentionState(X, core, rot, A, qn, kn)

    def jvp(self, state: AttentionState, E: np.ndarray) -> np.ndarray:
        N = E.shape[-2]
        dQ = self._heads(linear(E, self.W_Q), self.n_head, self.q_norm, state.q_norm,
                         state.rot, True)[0]
        dK = self._heads(linear(E, self.W_K), self.n_kv_head, self.k_norm, state.k_norm,
                         state.rot, True)[0]
        dV = self._split(linear(E, self.W_V), self.n_kv_head)
        return self._out(self._merge(attention_core_jvp(state.core, self._group(dQ), dK, dV),
                                     N), False)

    def vjp(self, state: AttentionState, G: np.ndarray) -> np.ndarray:
        N = G.shape[-2]
        dQ, dK, dV = self._core_vjp(state, G)
        if self.q_norm is not None:
            dQ = self.q_norm.vjp(state.q_norm, dQ)
        if self.k_norm is not None:
            dK = self.k_norm.vjp(state.k_norm, dK)
        return (linear_t(self._merge(dQ, N), self.W_Q) + linear_t(self._merge(dK, N), self.W_K)
                + linear_t(self._merge(dV, N), self.W_V))

    def backward(self, state: AttentionState, G: np.ndarray):
        N = G.shape[-2]
        grads = {}
        if self.W_O is not None:
            grads["W_O"] = wgrad(state.A, G, self.W_O.shape)
            if self.b_O is not None:
                grads["b_O"] = reduce_to(G, self.b_O.shape)
        dQ, dK, dV = self._core_vjp(state, G)
        for name, norm, st in (("q_norm", self.q_norm, state.q_norm),
                               ("k_norm", self.k_norm, state.k_norm)):
            if norm is not None:
                dZ, g = norm.backward(st, dQ if name == "q_norm" else dK)
                grads |= {f"{name}.{k}": v for k, v in g.items()}
                if name == "q_norm":
                    dQ = dZ
                else:
                    dK = dZ
        dX = 0.0
        for k, dZ in (("Q", dQ), ("K", dK), ("V", dV)):
            dZ = self._merge(dZ, N)
            grads[f"W_{k}"] = wgrad(state.X, dZ, getattr(self, f"W_{k}").shape)
            b = getattr(self, f"b_{k}")
            if b is not None:
                grads[f"b_{k}"] = reduce_to(dZ, b.shape)
            dX = dX + linear_t(dZ, getattr(self, f"W_{k}"))
        return dX, {k: grads[k] for k in self.params}

    def _like(self, W_Q, W_K, W_V, W_O, n_head, n_kv_head, b_Q, b_K, b_V, b_O):
        """A layer with these weights and heads and every other option of this one."""
        return MultiHeadAttention(
            W_Q, W_K, W_V, W_O, n_head=n_head, n_kv_head=n_kv_head, b_Q=b_Q, b_K=b_K,
            b_V=b_V, b_O=b_O, mask=self.mask, rope_theta=self.rope_theta, q_norm=self.q_norm,
            k_norm=self.k_norm, scale=self.scale, softcap=self.softcap,
            rope_scaling=self.rope_scaling)

    def expand_kv(self) -> MultiHeadAttention:
        r"""The same map as a layer with one key/value head per query head.

        Query head i's key and value head :math:`\kappa(i) = \lfloor i\,h_{kv}/h\rfloor`
        is copied into slot i (Hugging Face's ``repeat_kv`` on the weights): the
        columns of ``W_K``, ``W_V`` (and ``b_K``, ``b_V``) of head :math:`\kappa(i)`
        become those of head i, so the result has ``n_kv_head = n_head`` and the same
        output, Jacobian and options for every X. A layer without grouping is
        returned as an equal copy.
        """
        rep = self.n_head // self.n_kv_head
        def rep_cols(Z, w):                      # (..., h_kv * w) -> (..., h * w)
            if Z is None:
                return None
            Z = Z.reshape(*Z.shape[:-1], self.n_kv_head, 1, w)
            Z = np.broadcast_to(Z, (*Z.shape[:-2], rep, w))
            return Z.reshape(*Z.shape[:-3], self.n_head * w)
        dh, dv = self.head_dim, self.value_dim
        return self._like(self.W_Q, rep_cols(self.W_K, dh), rep_cols(self.W_V, dv), self.W_O,
                          self.n_head, self.n_head, self.b_Q, rep_cols(self.b_K, dh),
                          rep_cols(self.b_V, dv), self.b_O)

    def kv_group(self, j: int) -> MultiHeadAttention:
        """The query heads that share key/value head ``j``, with their rows of W_O, no b_O.

        A layer with ``n_head / n_kv_head`` query heads and one key/value head;
        its output, summed over j, plus b_O, is this layer's output.
        """
        j = as_int_at_least(j, "j", 0)
        if j >= self.n_kv_head:
            raise ValueError(f"j must be a key/value head in [0, {self.n_kv_head}); got {j}")
        rep, dh, dv = self.n_head // self.n_kv_head, self.head_dim, self.value_dim
        cols = lambda W, k, w: None if W is None else W[..., k * w:(k + 1) * w]  # noqa: E731
        q = slice(j * rep * dh, (j + 1) * rep * dh)
        return self._like(
            self.W_Q[..., q], cols(self.W_K, j, dh), cols(self.W_V, j, dv),
            None if self.W_O is None else self.W_O[..., j * rep * dv:(j + 1) * rep * dv, :],
            rep, 1, None if self.b_Q is None else self.b_Q[..., q], cols(self.b_K, j, dh),
            cols(self.b_V, j, dv), None)

    def head(self, i: int) -> MultiHeadAttention:
        """Query head ``i`` alone (with its key/value head and its rows of W_O), no b_O.

        Its output, summed over i, plus b_O, is this layer's output.
        """
        dh, dv = self.head_dim, self.value_dim
        j = i // (self.n_head // self.n_kv_head)
        cols = lambda W, k, w: None if W is None else W[..., k * w:(k + 1) * w]  # noqa: E731
        return MultiHeadAttention(
            cols(self.W_Q, i, dh), cols(self.W_K, j, dh), cols(self.W_V, j, dv),
            None if self.W_O is None else self.W_O[..., i * dv:(i + 1) * dv, :],
            n_head=1, n_kv_head=1, b_Q=cols(self.b_Q, i, dh), b_K=cols(self.b_K, j, dh),
            b_V=cols(self.b_V, j, dv), b_O=None, mask=self.mask, rope_theta=self.rope_theta,
            q_norm=self.q_norm, k_norm=self.k_norm, scale=self.scale, softcap=self.softcap,
            rope_scaling=self.rope_scaling)
