r"""The Jacobian of self-attention and its exact local Lipschitz constant.

Dot-product self-attention (as in :mod:`lipattn.attention`), tokens as rows:

.. math::

    A = \frac{W_Q W_K^\top}{\sqrt{d_k}}, \quad S = X A X^\top, \quad
    P = \operatorname{softmax}_{\text{rows}}(S), \quad f(X) = P X W_V .

Its differential at ``X`` in the direction ``E`` (both ``(N, d)``) is

.. math::

    Df(X)[E] = P E W_V + \dot P X W_V, \qquad
    \dot P_{i,:} = (J_i\, \dot S_{i,:}^\top)^\top, \quad
    \dot S = E A X^\top + X A E^\top ,

with :math:`J_i = \operatorname{diag}(p_i) - p_i p_i^\top` the softmax
Jacobian of row i. Because :math:`J_i \mathbf 1 = 0`,
:math:`J_i X = J_i (X - \mathbf 1 c^\top)` for every :math:`c`: only the
*centred* tokens enter the second term.

Every function takes ``mask=None | "causal" | bool (N, N)`` (True = may
attend, :func:`lipattn.attention.as_mask`): masked logits are
:math:`-\infty`, their probabilities exactly 0, and the formulas above hold
unchanged. The jvp and vjp are those of
:class:`lipattn.layers.MultiHeadAttention` with one head and no output
projection; for query biases (they change the Jacobian; key and value biases
do not), several heads, grouped-query attention or RoPE, use that layer with
:func:`lipattn.layers.layer_lipschitz`, or :mod:`lipattn.models`.

What is exact and what is estimated
-----------------------------------
- :func:`attention_jvp` and :func:`attention_vjp` are the closed forms, exact up
  to rounding, in :math:`O(N^2 d_k + N d (d_k + d_v))` operations each; they
  never form the Jacobian.
- :func:`attention_jacobian` forms the dense ``(N d_v, N d)`` Jacobian from an
  entrywise formula (row-major ``vec`` on both sides), independently of the
  jvp code.
- :func:`local_lipschitz` is the exact local constant
  :math:`\|Df(X)\|_2` (Frobenius norm on inputs and outputs): a dense SVD, or
  Golub–Kahan–Lanczos bidiagonalisation (:func:`lipattn.lanczos.golub_kahan_norm`,
  :func:`lipattn.jacobian_norm`) on the matrix-free operator, converged to a
  certified relative residual tolerance or a ``ConvergenceError``, never an
  unconverged value (see :mod:`lipattn.lanczos` for what is certified). The
  tests compare it with dense SVDs on every small shape, with
  ``scipy.sparse.linalg.svds`` and with power iteration.
- :func:`sublayer_constants` gives these constants (with the bounds of
  :mod:`lipattn.bounds`) for every attention sublayer of a model.

The upper bounds, and the audited formula that is not one, are in
:mod:`lipattn.bounds`; L2 self-attention (Kim, Papamakarios & Mnih 2021), with
the same tools, in :mod:`lipattn.l2attention`; the chapter's adversarial
inputs in :mod:`lipattn.adversarial`.

``vec`` is row-major throughout: ``E.reshape(-1)``.
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator

from ._validate import (
    as_choice,
    as_positive_float,
    as_real_array,
    safe_norm,
)
from .attention import _balanced, _check_2d, _check_direction, _finite_logits, _masked
from .bounds import card_bound, local_lipschitz_bound
from .lanczos import (
    JacobianOperator,
    LipschitzEstimate,
    _check_tol,
    _golub_kahan,
    golub_kahan_norm,
    jacobian_norm,
)
from .layers.attention import MultiHeadAttention
from .softmax import softmax

__all__ = [
    "attention_jacobian",
    "attention_jvp",
    "attention_vjp",
    "attention_operator",
    "golub_kahan_norm",
    "jacobian_norm",
    "LipschitzEstimate",
    "local_lipschitz",
    "local_lipschitz_info",
    "SublayerConstants",
    "sublayer_constants",
]

#: ``method="auto"`` uses the dense SVD when ``N * max(d, d_v)`` is at most this.
DENSE_MAX_SIDE = 96


# --------------------------------------------------------------------------
# the shared pieces
# --------------------------------------------------------------------------
def _layer(W_Q: np.ndarray, W_K: np.ndarray, W_V: np.ndarray, mask) -> MultiHeadAttention:
    """The single head as a :class:`lipattn.layers.MultiHeadAttention` (no W_O, no biases)."""
    return MultiHeadAttention(W_Q, W_K, W_V, None, n_head=1, mask=mask)


def _state(X, W_Q, W_K, W_V, mask):
    """The layer and its forward state at X, from the balanced arguments
    (:func:`lipattn.attention._balanced`): the same Jacobian, without overflow or
    underflow in the products of very large or very small X, W_Q and W_K."""
    _finite_logits(X, W_Q, W_K)  # logits beyond float64: a clear error naming X, W_Q, W_K
    Xb, W_Qb, W_Kb, _ = _balanced(X, W_Q, W_K)
    layer = _layer(W_Qb, W_Kb, W_V, mask)
    _, st = layer.forward(Xb)
    return layer, st

# --------------------------------------------------------------------------
# dot-product attention: Jacobian, jvp, vjp
# --------------------------------------------------------------------------
def attention_jvp(X: Any, E: Any, W_Q: Any, W_K: Any, W_V: Any, *,
                  mask: Any = None) -> np.ndarray:
    r"""The Jacobian-vector product :math:`Df(X)[E]`, in closed form.

    Parameters
    ----------
    X : array_like, shape (N, d)
    E : array_like, shape (N, d)
        The input perturbation.
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    mask : None, "causal" or bool array (N, N)
        True = query i may attend to key j (:func:`lipattn.attention.as_mask`).

    Returns
    -------
    ndarray, shape (N, d_v)
        :math:`P E W_V + \dot P X W_V` with :math:`\dot P` as in the module
        docstring; :math:`O(N^2 d + N d^2)` operations.
    """
    X, W_Q, W_K, W_V, mask = _check_2d(X, W_Q, W_K, W_V, mask)
    E = _check_direction(E, "E", X.shape)
    layer, st = _state(X, W_Q, W_K, W_V, mask)
    return layer.jvp(st, E)


def attention_vjp(X: Any, G: Any, W_Q: Any, W_K: Any, W_V: Any, *,
                  mask: Any = None) -> np.ndarray:
    r"""The vector-Jacobian product :math:`Df(X)^\top[G]`, in closed form.

    Parameters
    ----------
    X : array_like, shape (N, d)
    G : array_like, shape (N, d_v)
        An output cotangent.
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    mask : None, "causal" or bool array (N, N)
        As in :func:`attention_jvp`.

    Returns
    -------
    ndarray, shape (N, d)
        :math:`P^\top G W_V^\top + \bar S X A^\top + \bar S^\top X A` with
        :math:`\bar S_{i,:} = J_i (G W_V^\top X^\top)_{i,:}`, so that
        :math:`\langle Df(X)[E], G\rangle = \langle E, Df(X)^\top[G]\rangle`.
    """
    X, W_Q, W_K, W_V, mask = _check_2d(X, W_Q, W_K, W_V, mask)
    G = _check_direction(G, "G", (X.shape[0], W_V.shape[1]))
    layer, st = _state(X, W_Q, W_K, W_V, mask)
    return layer.vjp(st, G)


def attention_jacobian(X: Any, W_Q: Any, W_K: Any, W_V: Any, *, mask: Any = None) -> np.ndarray:
    r"""The dense Jacobian of :math:`\operatorname{vec} f` w.r.t. :math:`\operatorname{vec} X`.

    Built entry by entry (not from the jvp): with :math:`V = XW_V`,
    :math:`m_i = \sum_j P_{ij} v_j` and :math:`T_{ij} = P_{ij}(v_j - m_i)`
    (the rows of :math:`J_i X W_V`), the block of output token i and input
    token j is

    .. math::

        \frac{\partial f_i}{\partial x_j} = P_{ij} W_V^\top
        + T_{ij}\,(A^\top x_i)^\top + \delta_{ij} \sum_k T_{ik}\,(A x_k)^\top .

    With a mask, P has exact zeros at the masked entries and the formula is
    unchanged (:math:`J_i` vanishes on their rows and columns).

    Parameters
    ----------
    X : array_like, shape (N, d)
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    mask : None, "causal" or bool array (N, N)
        As in :func:`attention_jvp`.

    Returns
    -------
    ndarray, shape (N * d_v, N * d)
        Row-major ``vec`` on both sides: entry ``(i * d_v + a, j * d + b)`` is
        :math:`\partial f_{ia} / \partial x_{jb}`. Memory :math:`O((Nd)^2)`.
    """
    X, W_Q, W_K, W_V, mask = _check_2d(X, W_Q, W_K, W_V, mask)
    P = softmax(_masked(_finite_logits(X, W_Q, W_K), mask), axis=-1)
    X, W_Q, W_K, _ = _balanced(X, W_Q, W_K)  # the same Jacobian (see _state)
    A = (W_Q @ W_K.T) / math.sqrt(W_Q.shape[1])
    N, d = X.shape
    dv = W_V.shape[1]
    V = X @ W_V
    m = P @ V
    T = P[:, :, None] * (V[None, :, :] - m[:, None, :])     # (N, N, dv)
    J = np.einsum("ija,ib->iajb", T, X @ A)
    J += np.einsum("ij,ba->iajb", P, W_V)
    diag = np.einsum("ika,kb->iab", T, X @ A.T)                  # (N, dv, d)
    J[np.arange(N), :, np.arange(N), :] += diag
    return J.reshape(N * dv, N * d)


def attention_operator(X: Any, W_Q: Any, W_K: Any, W_V: Any, *,
                       mask: Any = None) -> LinearOperator:
    r"""The Jacobian :math:`Df(X)` as a matrix-free ``LinearOperator``.

    Parameters
    ----------
    X : array_like, shape (N, d)
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    mask : None, "causal" or bool array (N, N)
        As in :func:`attention_jvp`.

    Returns
    -------
    LinearOperator, shape (N * d_v, N * d)
        ``matvec`` is :func:`attention_jvp` and ``rmatvec`` is
        :func:`attention_vjp` on row-major ``vec``'s; the softmax and the
        products :math:`XW_Q`, :math:`XW_K`, :math:`XW_V` are computed once.
        Its attribute ``products`` counts the jvp's and vjp's applied.
    """
    X, W_Q, W_K, W_V, mask = _check_2d(X, W_Q, W_K, W_V, mask)
    layer, st = _state(X, W_Q, W_K, W_V, mask)
    N, d = X.shape
    dv = W_V.shape[1]
    return JacobianOperator(lambda E: layer.jvp(st, E), lambda G: layer.vjp(st, G),
                            (N, d), (N, dv))


# --------------------------------------------------------------------------
# exact local constants
# --------------------------------------------------------------------------
def _check_method(method: Any) -> str:
    if method not in ("auto", "dense", "lanczos"):
        raise ValueError(f"method must be 'auto', 'dense' or 'lanczos'; got {method!r}")
    return method


def _exact_norm(dense_fn, op_fn, side: int, method: str, tol: float) -> LipschitzEstimate:
    """Dense SVD or Golub-Kahan-Lanczos (which raises rather than return unconverged)."""
    if method == "auto":
        method = "dense" if side <= DENSE_MAX_SIDE else "lanczos"
    if method == "dense":
        return LipschitzEstimate(float(np.linalg.norm(dense_fn(), 2)), "dense", 0)
    return _golub_kahan(op_fn(), tol, 0, None)


def local_lipschitz_info(X: Any, W_Q: Any, W_K: Any, W_V: Any, *, method: str = "auto",
                         tol: float = 1e-10, mask: Any = None) -> LipschitzEstimate:
    """:func:`local_lipschitz` with the method used and the number of products."""
    X, W_Q, W_K, W_V, mask = _check_2d(X, W_Q, W_K, W_V, mask)
    method = _check_method(method)
    tol = _check_tol(tol)
    side = X.shape[0] * max(X.shape[1], W_V.shape[1])
    if method == "auto":
        method = "dense" if side <= DENSE_MAX_SIDE else "lanczos"
    if method == "dense":
        J = attention_jacobian(X, W_Q, W_K, W_V, mask=mask)
        return LipschitzEstimate(float(np.linalg.norm(J, 2)), "dense", 0)
    layer, st = _state(X, W_Q, W_K, W_V, mask)
    return jacobian_norm(lambda E: layer.jvp(st, E), lambda G: layer.vjp(st, G), X.shape,
                         out_shape=(X.shape[0], W_V.shape[1]), tol=tol)


def local_lipschitz(X: Any, W_Q: Any, W_K: Any, W_V: Any, *, method: str = "auto",
                    tol: float = 1e-10, mask: Any = None) -> float:
    r"""The exact local Lipschitz constant :math:`\|Df(X)\|_2` of self-attention at X.

    Frobenius (ℓ2 of ``vec``) norms on inputs and outputs; by the mean-value
    theorem this is the Lipschitz constant on small enough balls around X.

    Parameters
    ----------
    X : array_like, shape (N, d)
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    method : {"auto", "dense", "lanczos"}
        ``"dense"``: SVD of :func:`attention_jacobian`, :math:`O((Nd)^3)` time
        and :math:`O((Nd)^2)` memory. ``"lanczos"``: :func:`golub_kahan_norm`
        on :func:`attention_operator`, a few dozen products of
        :math:`O(N^2 d + N d^2)` each. ``"auto"``: dense when
        ``N * max(d, d_v) <= 96`` (measured crossover on 2 cores: about 100).
    tol : float
        Relative tolerance of the Lanczos path, in [1e-14, 1): the value is
        exact up to that relative residual (:mod:`lipattn.lanczos`), or a
        :class:`lipattn.lanczos.ConvergenceError` is raised; never an
        unconverged value.
    mask : None, "causal" or bool array (N, N)
        As in :func:`attention_jvp`.

    Returns
    -------
    float
    """
    return local_lipschitz_info(X, W_Q, W_K, W_V, method=method, tol=tol, mask=mask).value


# --------------------------------------------------------------------------
# the attention sublayers of a Transformer (lipattn.transformer)
# --------------------------------------------------------------------------
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

    Layer l's sublayer maps its input H (:func:`lipattn.transformer.attention_inputs`:
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
        A :mod:`lipattn.transformer` model without run axes.
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
    from .transformer import attention_inputs, check_params

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
    from .layers import layer_lipschitz

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
