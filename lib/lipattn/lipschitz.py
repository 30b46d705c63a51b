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
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator

from .attention import _balanced, _check_2d, _check_direction, _finite_logits, _masked
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

