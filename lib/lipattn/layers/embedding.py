r"""A causal language model around any stack: token and position embeddings, tied readout.

:class:`CausalLM` maps token ids ``t`` of shape (..., N) to logits

.. math::

    Z = f(E[t] + P_{0..N-1})\, E^\top, \qquad E \in \mathbb{R}^{V \times d},\;
    P \in \mathbb{R}^{n_{pos} \times d},

where ``f`` is the body (e.g. GPT-2's blocks and ``ln_f``) and the unembedding
is tied to the token embedding ``E`` (GPT-2's ``lm_head``). It follows the layer
protocol of :mod:`lipattn.layers.base` (``forward``, ``backward``, ``params``),
except that its input is integer ids, so ``backward`` returns ``None`` for the
input gradient: :func:`lipattn.models.training.train_stack` trains it unchanged, with
:func:`cross_entropy` as the loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CausalLM", "cross_entropy"]


class CausalLM:
    """Embeddings, a body and the tied readout, trained as one layer.

    Parameters
    ----------
    wte : ndarray, shape (V, d)
        Token embedding, also the readout (used in place, not copied).
    wpe : ndarray, shape (n_pos, d), or None
        Learned position embedding; None for a body that encodes positions itself
        (RoPE, the Llama layout), which then takes any length N >= 1.
    body : layer
        Maps (..., N, d) to (..., N, d), with ``forward``, ``backward``, ``params``.

    ``params`` are ``wte``, ``wpe`` (unless None) and ``body.<name>`` for the body's own.
    """

    def __init__(self, wte: np.ndarray, wpe: np.ndarray | None, body: Any) -> None:
        for name, a in (("wte", wte), ("wpe", wte if wpe is None else wpe)):
            if not (isinstance(a, np.ndarray) and a.ndim == 2
                    and np.issubdtype(a.dtype, np.floating)):
                raise TypeError(f"{name} must be a 2-D float ndarray; got "
                                f"{type(a).__name__} {getattr(a, 'shape', '')}")
        if wpe is not None and (wpe.shape[1] != wte.shape[1] or wpe.dtype != wte.dtype):
            raise ValueError(f"wpe must have shape (n_pos, {wte.shape[1]}) and dtype {wte.dtype} "
                             f"to match wte; got {wpe.shape}, {wpe.dtype}")
        self.wte, self.wpe, self.body = wte, wpe, body

    @property
    def params(self) -> dict[str, np.ndarray]:
        pos = {} if self.wpe is None else {"wpe": self.wpe}
        return {"wte": self.wte, **pos,
                **{f"body.{k}": v for k, v in self.body.params.items()}}

    def _tokens(self, tokens: Any) -> np.ndarray:
        t = np.asarray(tokens)
        if t.dtype == bool or not np.issubdtype(t.dtype, np.integer) or t.ndim < 1:
            raise TypeError(f"tokens must be an integer array of shape (..., N); got dtype "
                            f"{t.dtype}, shape {t.shape}")
        V = self.wte.shape[0]
        n_pos = 1 << 62 if self.wpe is None else self.wpe.shape[0]
        if not 1 <= t.shape[-1] <= n_pos:
            raise ValueError(f"tokens must have 1 <= N <= n_pos = {n_pos} on the last axis; got "
                             f"shape {t.shape}")
        if t.min() < 0 or t.max() >= V:
            raise ValueError(f"tokens must be ids in [0, {V}); got range [{t.min()}, {t.max()}]")
        return t

    def forward(self, tokens: Any) -> tuple[np.ndarray, tuple]:
        """Logits, shape (..., N, V), for ids of shape (..., N); and the state for backward."""
        t = self._tokens(tokens)
        X = self.wte[t] if self.wpe is None else self.wte[t] + self.wpe[: t.shape[-1]]
        H, state = self.body.forward(X)
        return H @ self.wte.T, (t, H, state)

    def backward(self, state: tuple, G: np.ndarray) -> tuple[None, dict[str, np.ndarray]]:
        """Gradients of <G, logits> for every parameter (None: ids have no gradient).

        ``G`` has the logits' shape (..., N, V).
        """
        t, H, body_state = state
        d = self.wte.shape[1]
        G = G.astype(self.wte.dtype, copy=False)
        g_wte = G.reshape(-1, G.shape[-1]).T @ H.reshape(-1, d)  # readout: Z = H E^T
        dX, grads = self.body.backward(body_state, G @ self.wte)
        np.add.at(g_wte, t.reshape(-1), dX.reshape(-1, d))  # embedding rows
        pos = {}
        if self.wpe is not None:
            pos["wpe"] = np.zeros_like(self.wpe)
            pos["wpe"][: t.shape[-1]] = dX.reshape(-1, t.shape[-1], d).sum(axis=0)
        return None, {"wte": g_wte, **pos, **{f"body.{k}": v for k, v in grads.items()}}


def cross_entropy(logits: np.ndarray, targets: np.ndarray, *, z_loss: float = 0.0
                  ) -> tuple[float, np.ndarray]:
    r"""Mean next-token cross-entropy in nats (plus an optional z-loss), and its gradient
    with respect to the logits.

    Parameters
    ----------
    logits : ndarray, shape (..., V)
    targets : ndarray of int, shape (...)
        Ids in [0, V).
    z_loss : float, default 0.0
        The coefficient :math:`c \ge 0` of the z-loss (:cite:t:`wortsman2024small`,
        after PaLM): the term :math:`\frac{c}{M} \sum_i (\log
        Z_i)^2`, :math:`Z_i = \sum_v e^{z_{iv}}`, which pulls the log-partition of the
        readout towards 0. 0 (default): plain cross-entropy, bit for bit.

    Returns
    -------
    loss : float
        :math:`\frac1M \sum_i \bigl(\log Z_i - z_{i y_i} + c (\log Z_i)^2\bigr)` over
        the M positions (computed stably with the row maximum subtracted;
        accumulated in float64).
    dlogits : ndarray, shape (..., V)
        :math:`\bigl((1 + 2c \log Z_i)\,\mathrm{softmax}(z_i) - e_{y_i}\bigr)/M`,
        in the logits' dtype.
    """
    if isinstance(z_loss, bool) or not isinstance(z_loss, (int, float, np.floating,
                                                           np.integer)) \
            or not np.isfinite(z_loss) or z_loss < 0:
        raise ValueError(f"z_loss must be a finite real >= 0; got {z_loss!r}")
    mx = logits.max(axis=-1, keepdims=True)
    z = logits - mx
    e = np.exp(z)
    s = e.sum(axis=-1, keepdims=True)
    y = np.asarray(targets)[..., None]
    if y.shape[:-1] != logits.shape[:-1]:
        raise ValueError(f"targets must have shape {logits.shape[:-1]}; got {y.shape[:-1]}")
    M = y.size
    loss = float((np.log(s) - np.take_along_axis(z, y, axis=-1)).astype(np.float64).sum() / M)
    dz = e / s
    if z_loss:
        log_z = np.log(s.astype(np.float64)) + mx                    # (..., 1)
        loss += float(z_loss * (log_z ** 2).sum() / M)
        dz = dz * (1.0 + 2.0 * z_loss * log_z).astype(dz.dtype)
    np.put_along_axis(dz, y, np.take_along_axis(dz, y, axis=-1) - 1, axis=-1)
    return loss, dz / dz.dtype.type(M)
