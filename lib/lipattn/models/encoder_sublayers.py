r"""Exact local constants of the attention sublayers of the book's encoder.

Layer l's attention sublayer of a :mod:`lipattn.models.encoder` model maps its input
H (:func:`lipattn.models.encoder.attention_inputs`) to
:math:`\operatorname{softmax}(H W_Q (H W_K)^\top/\sqrt{d_k})\, H W_V W_O + b_O`: the
map of :mod:`lipattn.lipschitz` with value matrix :math:`W_V W_O`, or with several
heads the sum of such maps. :func:`sublayer_constants` gives its exact local
constant (:func:`lipattn.lipschitz.local_lipschitz`, or
:func:`lipattn.layers.layer_lipschitz` on :class:`lipattn.layers.MultiHeadAttention`
for several heads) beside the bounds of :mod:`lipattn.lipschitz` at the encoder's
actual inputs. It is an analysis of a model, so it lives beside the model, not in
the mathematics (which imports neither the models nor the book).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import as_choice, as_positive_float, as_real_array, safe_norm
from ..attention import _finite_logits
from ..bounds import card_bound, local_lipschitz_bound
from ..lanczos import _check_tol
from ..layers import MultiHeadAttention, layer_lipschitz
from ..lipschitz import local_lipschitz
from ..softmax import softmax
from .encoder import attention_inputs, check_params

__all__ = ["SublayerConstants", "sublayer_constants"]


@dataclass(frozen=True)
class SublayerConstants:
    """Local constants of every attention sublayer of a model, on a batch of inputs.

    Attributes
    ----------
    exact, bound, card : ndarray, shape (L, B)
        :func:`local_lipschitz`, :func:`local_lipschitz_bound` and
        :func:`card_bound` (C = 1) of layer l's sublayer at its input for
        sequence b, with value matrix :math:`W_V W_O`. With several heads,
        ``exact`` is the constant of the whole multi-head sublayer and
        ``bound`` and ``card`` are the sums over heads (head i with value
        matrix :math:`W_V^{(i)} W_O^{(i)}`): ``bound`` is still an upper bound
        (triangle inequality), though the sum of the heads' exact constants
        can be far above ``exact``.
    value_norm : ndarray, shape (L,)
        :math:`\\|W_V W_O\\|_2`, the constant of the sublayer if P were frozen
        at a permutation.
    top_weight : ndarray, shape (L, B)
        Mean over queries (and heads) of :math:`\\max_j P_{ij}`: 1 when every
        query puts all its weight on one key, 1/N for uniform attention.
    radius : ndarray, shape (L, B)
        Largest token norm :math:`\\max_i \\|h_i\\|` of the sublayer's input.
    """

    exact: np.ndarray
    bound: np.ndarray
    card: np.ndarray
    value_norm: np.ndarray
    top_weight: np.ndarray
    radius: np.ndarray


def sublayer_constants(params: Any, X: Any, *, variant: str, input_scale: float = 1.0,
                       tol: float = 1e-8) -> SublayerConstants:
    r"""Exact local constants of a model's attention sublayers.

    Layer l's sublayer maps its input H (:func:`lipattn.models.encoder.attention_inputs`:
    after :math:`\mathrm{LN}_1` in Pre-LN, the residual stream in Post-LN) to
    :math:`\operatorname{softmax}(H W_Q (H W_K)^\top/\sqrt{d_k})\, H W_V W_O + b_O`,
    which is the chapter's f with value matrix :math:`W_V W_O` (the bias does not
    change the Jacobian). With h heads it is the sum of h such maps, one per
    head (:class:`lipattn.layers.MultiHeadAttention`, each head at its size
    d/h), and ``exact`` is the constant of the sum. The constant is w.r.t. H,
    not w.r.t. the layer's input. Computed in float64 with the matrix-free
    method.

    Parameters
    ----------
    params : list of dict
        A :mod:`lipattn.models.encoder` model without run axes.
    X : array_like, shape (B, N, d) or (N, d)
        The encoder's inputs (embedded tokens), one sequence per row of the batch.
    variant : {"post", "pre"}
    input_scale : float, default 1
        Measure at ``input_scale * H`` instead of H (> 0): how the constants of
        the trained weights grow along the ray through the actual inputs.
    tol : float
        Relative tolerance of :func:`golub_kahan_norm`, in [1e-15, 0.5].

    Returns
    -------
    SublayerConstants
        All fields at the (scaled) inputs.
    """
    as_choice(variant, "variant", ("post", "pre"))
    check_params(params)
    for i, p in enumerate(params):
        if np.ndim(p["W_Q"]) != 2:
            raise ValueError(f"params[{i}] must hold one model's weights (2-D matrices); "
                             f"got W_Q of shape {np.shape(p['W_Q'])}")
    tol = _check_tol(tol)
    input_scale = as_positive_float(input_scale, "input_scale")
    params = [{k: v if k == "heads" else np.asarray(v, dtype=float) for k, v in p.items()}
              for p in params]
    X = as_real_array(X, "X", min_ndim=2)
    if X.ndim not in (2, 3):
        raise ValueError(f"X must have shape (B, N, d) or (N, d); got shape {X.shape}")
    H_all = attention_inputs(params, X.reshape((-1, *X.shape[-2:])), variant=variant)
    L, B = len(params), H_all[0].shape[0]
    out = {k: np.zeros((L, B)) for k in ("exact", "bound", "card", "top_weight", "radius")}
    value_norm = np.zeros(L)
    for l_, (p, H) in enumerate(zip(params, H_all, strict=True)):
        H = input_scale * H
        if p["heads"] > 1:
            _multi_head_constants(p, H, tol, l_, out, value_norm)
            continue
        W_V = p["W_V"] @ p["W_O"]
        value_norm[l_] = np.linalg.norm(W_V, 2)
        try:
            P = softmax(_finite_logits(H, p["W_Q"], p["W_K"]), axis=-1)
        except ValueError:
            raise ValueError(f"input_scale must keep the attention logits of layer {l_} "
                             f"finite; got {input_scale!r}, at which they overflow "
                             "float64") from None
        out["top_weight"][l_] = P.max(axis=-1).mean(axis=-1)
        out["radius"][l_] = safe_norm(H, axis=-1).max(axis=-1)
        for b, h in enumerate(H):
            out["exact"][l_, b] = local_lipschitz(h, p["W_Q"], p["W_K"], W_V,
                                                  method="lanczos", tol=tol)
            out["bound"][l_, b] = local_lipschitz_bound(h, p["W_Q"], p["W_K"], W_V)
            out["card"][l_, b] = card_bound(h, p["W_Q"], p["W_K"], W_V)
    return SublayerConstants(value_norm=value_norm, **out)


def _multi_head_constants(p: dict, H: np.ndarray, tol: float, l_: int, out: dict,
                          value_norm: np.ndarray) -> None:
    """Fill layer l_'s entries of :func:`sublayer_constants` for ``p["heads"] > 1``."""
    heads = int(p["heads"])
    layer = MultiHeadAttention(p["W_Q"], p["W_K"], p["W_V"], p["W_O"], n_head=heads,
                               b_O=p["b_O"])
    value_norm[l_] = np.linalg.norm(p["W_V"] @ p["W_O"], 2)
    per_head = [layer.head(i) for i in range(heads)]
    for b, h in enumerate(H):
        out["exact"][l_, b] = layer_lipschitz(layer, h, tol=tol).value
        top = 0.0
        for hd in per_head:
            W_V = hd.W_V @ hd.W_O
            out["bound"][l_, b] += local_lipschitz_bound(h, hd.W_Q, hd.W_K, W_V)
            out["card"][l_, b] += card_bound(h, hd.W_Q, hd.W_K, W_V)
            top += softmax(_finite_logits(h, hd.W_Q, hd.W_K), axis=-1).max(axis=-1).mean()
        out["top_weight"][l_, b] = top / heads
        out["radius"][l_, b] = np.linalg.norm(h, axis=-1).max()
