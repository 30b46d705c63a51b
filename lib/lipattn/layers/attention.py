r"""Multi-head self-attention with masks, biases, grouped-query heads and RoPE.

Tokens are rows: ``X`` has shape (N, d). With ``h`` query heads of size
``d_h`` and ``h_kv`` key/value heads (``h_kv`` divides ``h``; query head
``i`` uses key/value head ``i // (h / h_kv)``, as Hugging Face's
``repeat_kv``),

.. math::

    Q = X W_Q + b_Q,\quad K = X W_K + b_K,\quad V = X W_V + b_V, \qquad
    S_i = \frac{R(Q_i)\, R(K_{i'})^\top}{\sqrt{d_h}}, \qquad
    P_i = \operatorname{softmax}_{\text{rows}}(S_i \text{ masked}),

    f(X) = [P_1 V_{1'}, \dots, P_h V_{h'}]\, W_O + b_O ,

with :math:`Q_i` the i-th column block of width ``d_h``, :math:`R` the RoPE
rotation (:mod:`lipattn.layers.rope`, optional) and masked logits set to
:math:`-\infty` (probability exactly 0). ``W_O=None`` returns the
concatenated heads (the book's single head :math:`P X W_V`).

Each head is computed at its own size: Q, K, V are (heads, N, d_h) arrays
and every product is a batched matmul (no loop over heads or tokens); a
group of query heads sharing a key/value head is one matmul.

The differential at X in the direction E (biases drop out):
:math:`\dot S_i = (R(\dot Q_i) R(K)^\top + R(Q_i) R(\dot K)^\top)/\sqrt{d_h}`,
:math:`\dot P_i = J(P_i)[\dot S_i]` row-wise (:func:`softmax_jvp`),
:math:`\dot O_i = \dot P_i V + P_i \dot V`, and the vjp is its adjoint.
"""

from __future__ import annotations

import math

import numpy as np

from ..softmax import softmax
from .rope import rope, rope_tables, rope_transpose

__all__ = ["MultiHeadAttention", "softmax_jvp"]


def softmax_jvp(P: np.ndarray, dS: np.ndarray) -> np.ndarray:
    """Row-wise :math:`J(p) \\dot s = p \\odot (\\dot s - p^\\top \\dot s)` for P = softmax(S).

    Also the vjp (the softmax Jacobian is symmetric). Masked entries (P = 0)
    get 0 whatever ``dS`` holds there.
    """
    return P * (dS - np.sum(P * dS, axis=-1, keepdims=True))


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
        Already validated (:func:`lipattn.attention.as_mask`); True = may attend.
    rope_theta : float or None
        RoPE base (even ``d_h``), or None for no rotary embedding.

    The caller validates shapes; :mod:`lipattn.models` and
    :mod:`lipattn.lipschitz` do.
    """

    def __init__(self, W_Q, W_K, W_V, W_O=None, *, n_head: int = 1, n_kv_head: int | None = None,
                 b_Q=None, b_K=None, b_V=None, b_O=None, mask=None,
                 rope_theta: float | None = None) -> None:
        self.W_Q, self.W_K, self.W_V, self.W_O = W_Q, W_K, W_V, W_O
        self.b_Q, self.b_K, self.b_V, self.b_O = b_Q, b_K, b_V, b_O
        self.n_head = n_head
        self.n_kv_head = n_head if n_kv_head is None else n_kv_head
        self.head_dim = W_Q.shape[1] // n_head
        self.value_dim = W_V.shape[1] // self.n_kv_head
        self.mask, self.rope_theta = mask, rope_theta

    # -- helpers --------------------------------------------------------------
    # numpy hands a batched matmul to BLAS only when every operand's slices have
    # unit stride along their rows, so the transposes the products need are
    # stored as contiguous copies (computed once per forward pass).
    def _split(self, Z: np.ndarray, heads: int) -> np.ndarray:
        """(N, heads * k) -> (heads, N, k), contiguous."""
        N = Z.shape[0]
        return np.ascontiguousarray(Z.reshape(N, heads, -1).transpose(1, 0, 2))

    def _group(self, Z: np.ndarray) -> np.ndarray:
        """Query heads (h, N, k) -> (h_kv, rep * N, k): the heads sharing a key head stacked."""
        return Z.reshape(self.n_kv_head, -1, Z.shape[-1])

    def _merge(self, Z: np.ndarray, N: int) -> np.ndarray:
        """(h_kv, rep * N, d_v) or (h, N, d_v) -> (N, h * d_v)."""
        return Z.reshape(-1, N, Z.shape[-1]).transpose(1, 0, 2).reshape(N, -1)

    def _out(self, Z: np.ndarray, bias: bool) -> np.ndarray:
        if self.W_O is None:
            return Z
        Y = Z @ self.W_O
        return Y + self.b_O if bias and self.b_O is not None else Y

    def _mask_array(self, N: int):
        if self.mask is None:
            return None
        if isinstance(self.mask, str):
            return np.tri(N, dtype=bool)
        return self.mask

    def _project(self, X, W, b, heads, rot):
        Z = X @ W
        if b is not None:
            Z = Z + b
        Z = self._split(Z, heads)
        return rope(Z, *rot) if rot is not None else Z

    # -- the layer protocol ---------------------------------------------------
    def forward(self, X: np.ndarray):
        N = X.shape[0]
        rot = None
        if self.rope_theta is not None:
            rot = tuple(t.astype(X.dtype, copy=False)
                        for t in rope_tables(N, self.head_dim, self.rope_theta))
        Q = self._group(self._project(X, self.W_Q, self.b_Q, self.n_head, rot))
        K = self._project(X, self.W_K, self.b_K, self.n_kv_head, rot)
        V = self._project(X, self.W_V, self.b_V, self.n_kv_head, None)
        KT = np.ascontiguousarray(K.transpose(0, 2, 1))
        with np.errstate(over="ignore", invalid="ignore"):
            S = (Q @ KT) * (1.0 / math.sqrt(self.head_dim))
        if not np.all(np.isfinite(S)):
            raise ValueError("the hidden states and W_Q, W_K give attention logits that "
                             "overflow; expected logits of finite size")
        mask = self._mask_array(N)
        if mask is not None:
            S = np.where(np.tile(mask, (S.shape[1] // N, 1)), S, -np.inf)
        P = softmax(S, axis=-1).astype(X.dtype, copy=False)
        heads = self._merge(P @ V, N)
        state = (Q, K, KT, V, np.ascontiguousarray(V.transpose(0, 2, 1)), P,
                 np.ascontiguousarray(P.transpose(0, 2, 1)), rot)
        return self._out(heads, True), state

    def jvp(self, state, E: np.ndarray) -> np.ndarray:
        Q, _, KT, V, _, P, _, rot = state
        N = E.shape[0]
        dQ = self._group(self._project(E, self.W_Q, None, self.n_head, rot))
        dK = self._project(E, self.W_K, None, self.n_kv_head, rot)
        dV = self._split(E @ self.W_V, self.n_kv_head)
        dS = dQ @ KT
        dS += Q @ np.ascontiguousarray(dK.transpose(0, 2, 1))
        dS *= 1.0 / math.sqrt(self.head_dim)
        dO = softmax_jvp(P, dS) @ V
        dO += P @ dV
        return self._out(self._merge(dO, N), False)

    def vjp(self, state, G: np.ndarray) -> np.ndarray:
        Q, K, _, _, VT, P, PT, rot = state
        N = G.shape[0]
        dO = G @ self.W_O.T if self.W_O is not None else G
        dO = self._group(self._split(dO, self.n_head))            # (h_kv, rep N, d_v)
        dV = PT @ dO                                               # summed over the group
        dS = softmax_jvp(P, dO @ VT)
        dS *= 1.0 / math.sqrt(self.head_dim)
        dQ = (dS @ K).reshape(self.n_head, N, -1)
        dK = np.ascontiguousarray(dS.transpose(0, 2, 1)) @ Q
        if rot is not None:
            dQ, dK = rope_transpose(dQ, *rot), rope_transpose(dK, *rot)
        return (self._merge(dQ, N) @ self.W_Q.T + self._merge(dK, N) @ self.W_K.T
                + self._merge(dV, N) @ self.W_V.T)

    def head(self, i: int) -> MultiHeadAttention:
        """Query head ``i`` alone (with its key/value head and its rows of W_O), no b_O.

        Its output, summed over i, plus b_O, is this layer's output.
        """
        dh, dv = self.head_dim, self.value_dim
        j = i // (self.n_head // self.n_kv_head)
        cols = lambda W, k, w: None if W is None else W[..., k * w:(k + 1) * w]  # noqa: E731
        return MultiHeadAttention(
            cols(self.W_Q, i, dh), cols(self.W_K, j, dh), cols(self.W_V, j, dv),
            None if self.W_O is None else self.W_O[i * dv:(i + 1) * dv],
            n_head=1, n_kv_head=1, b_Q=cols(self.b_Q, i, dh), b_K=cols(self.b_K, j, dh),
            b_V=cols(self.b_V, j, dv), b_O=None, mask=self.mask, rope_theta=self.rope_theta)
