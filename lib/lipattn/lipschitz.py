r"""The Jacobian of self-attention, its exact local Lipschitz constant, and bounds.

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
- :func:`local_lipschitz_bound` is the chapter's proved upper bound;
  :func:`card_bound` is the widely shared formula that the chapter audits
  (it is *not* a bound).
- L2 self-attention (Kim, Papamakarios & Mnih 2021) has the same tools:
  :func:`l2_self_attention`, :func:`l2_attention_jvp`, :func:`l2_attention_vjp`,
  :func:`l2_local_lipschitz`.

``vec`` is row-major throughout: ``E.reshape(-1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator
from scipy.special import lambertw

from ._validate import (
    ResultOverflowError,
    as_count,
    as_int_at_least,
    as_positive_float,
    as_real_array,
    finite_result,
    safe_norm,
    safe_product,
    scale_of,
)
from .attention import _balanced, _finite_logits, _masked, as_mask, check_attention_args
from .lanczos import (
    JacobianOperator,
    LipschitzEstimate,
    _check_tol,
    _golub_kahan,
    golub_kahan_norm,
    jacobian_norm,
)
from .layers.attention import MultiHeadAttention, softmax_jvp
from .softmax import softmax, softmax_jacobian_norm

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
    "BoundTerms",
    "local_lipschitz_bound",
    "local_lipschitz_bound_terms",
    "ball_lipschitz_bound",
    "card_bound",
    "l2_attention_matrix",
    "l2_self_attention",
    "l2_attention_jvp",
    "l2_attention_vjp",
    "l2_attention_jacobian",
    "l2_attention_operator",
    "l2_local_lipschitz",
    "kim_l2_bound",
    "two_sided_tokens",
    "sink_tokens",
]

#: ``method="auto"`` uses the dense SVD when ``N * max(d, d_v)`` is at most this.
DENSE_MAX_SIDE = 96


# --------------------------------------------------------------------------
# validation and the shared pieces
# --------------------------------------------------------------------------
def _check_2d(X: Any, W_Q: Any, W_K: Any, W_V: Any, mask: Any = None):
    X, W_Q, W_K, W_V = check_attention_args(X, W_Q, W_K, W_V)
    if X.ndim != 2:
        raise ValueError("X must have shape (N, d) with N >= 1 (one sequence); "
                         f"got shape {X.shape}")
    return X, W_Q, W_K, W_V, as_mask(mask, X.shape[0])


def _check_direction(E: Any, name: str, shape: tuple[int, int]) -> np.ndarray:
    E = as_real_array(E, name, ndim=2)
    if E.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got shape {E.shape}")
    return E


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
# the chapter's bound, and the audited formula
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class BoundTerms:
    """The three terms of :func:`local_lipschitz_bound` (each includes ``||W_V||_2``).

    Attributes
    ----------
    values : float
        :math:`\\|W_V\\|_2 \\sqrt{\\|P\\|_1 \\|P\\|_\\infty}` (bounds the
        :math:`P E W_V` term).
    queries : float
        :math:`\\|W_V\\|_2 \\|A\\|_2 \\max_i v_i` (moving the queries).
    keys : float
        :math:`\\|W_V\\|_2 (\\sum_i \\|A^\\top x_i\\|^2 \\|J_i\\|_2 v_i)^{1/2}` (moving the keys).
    total : float
        Their sum.
    """

    values: float
    queries: float
    keys: float
    total: float


def local_lipschitz_bound_terms(X: Any, W_Q: Any, W_K: Any, W_V: Any) -> BoundTerms:
    r"""The terms of the chapter's local bound (see :func:`local_lipschitz_bound`)."""
    X, W_Q, W_K, W_V, _ = _check_2d(X, W_Q, W_K, W_V)
    S = _finite_logits(X, W_Q, W_K)
    P = softmax(S, axis=-1)
    # X = x Xs and A = a As with Xs, As of order 1, so that the squares of the
    # keys term and the variances neither overflow nor underflow.
    x, q, k = scale_of(X), scale_of(W_Q), scale_of(W_K)
    Xs = X / x
    As = ((W_Q / q) @ (W_K / k).T) / math.sqrt(W_Q.shape[1])
    nv = float(np.linalg.norm(W_V, 2))
    na = float(np.linalg.norm(As, 2))
    v = _weighted_variance(P, Xs)
    jn = softmax_jacobian_norm(S)
    p_norm = math.sqrt(float(np.max(P.sum(axis=0))) * float(np.max(P.sum(axis=1))))
    keys = float(safe_norm(safe_norm(Xs @ As, axis=1) * np.sqrt(jn * v)))
    name, what = "X, W_Q, W_K, W_V", "a local bound"
    terms = (nv * p_norm,
             safe_product(nv, na, q, k, x, x, float(np.max(v)), name=name, what=what),
             safe_product(nv, keys, q, k, x, x, name=name, what=what))
    total = math.fsum(terms)
    if not math.isfinite(total):
        raise ResultOverflowError(f"{name} must give {what} representable in float64; "
                                  "it overflows")
    return BoundTerms(*terms, total=total)


def _weighted_variance(P: np.ndarray, X: np.ndarray) -> np.ndarray:
    """v_i = sum_j P_ij ||x_j - m_i||^2 with m_i = sum_j P_ij x_j, in O(N^2 + N^2 d).

    Computed as sum_j P_ij ||y_j||^2 - ||sum_j P_ij y_j||^2 with the tokens
    centred at their mean (y = X - mean), which keeps the cancellation small;
    clipped at 0.
    """
    Y = X - X.mean(axis=0)
    v = P @ np.sum(Y * Y, axis=1) - np.sum((P @ Y) ** 2, axis=1)
    return np.maximum(v, 0.0)


def local_lipschitz_bound(X: Any, W_Q: Any, W_K: Any, W_V: Any) -> float:
    r"""The chapter's proved upper bound on :math:`\|Df(X)\|_2`.

    .. math::

        \|Df(X)\|_2 \le \|W_V\|_2 \Bigl( \sqrt{\|P\|_1\|P\|_\infty}
        + \|A\|_2 \max_i v_i
        + \Bigl(\sum_i \|A^\top x_i\|^2\, \|J_i\|_2\, v_i\Bigr)^{1/2} \Bigr),

    with :math:`v_i = \sum_j P_{ij}\|x_j - m_i\|^2`, :math:`m_i = \sum_j P_{ij} x_j`
    (the spread of the tokens as query i sees them), and
    :math:`\sqrt{\|P\|_1\|P\|_\infty} = \sqrt{\max_j \sum_i P_{ij}} \in [\|P\|_2, \sqrt N]`.
    Quadratic in the scale of X; cost :math:`O(N^2 d + d^3)`.

    Parameters
    ----------
    X : array_like, shape (N, d)
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)

    Returns
    -------
    float
    """
    return local_lipschitz_bound_terms(X, W_Q, W_K, W_V).total


def ball_lipschitz_bound(R: float, N: int, W_Q: Any, W_K: Any, W_V: Any) -> float:
    r"""A bound on :math:`\|Df(X)\|_2` over all X with N tokens of norm at most R.

    .. math::

        \|W_V\|_2 \Bigl(\min\bigl(\sqrt N, e^{a R^2}\bigr) + a R^2
        \bigl(1 + \min\bigl(\sqrt{N/2}, e^{a R^2}\bigr)\bigr)\Bigr),
        \qquad a = \|W_Q W_K^\top\|_2/\sqrt{d_k}.

    Proved in Chapter 6 (``thm-local-bound``): the three terms bound the
    value, query and key pieces of the Jacobian. The key piece is at most
    :math:`\|W_V\|_2\, aR^2 \sqrt{N/2}` (Cauchy-Schwarz over the rows, with
    :math:`\|J_i\|_2 \le \frac12`) and at most
    :math:`\|W_V\|_2\, aR^2 \sqrt{\|P\|_1} \le \|W_V\|_2\, aR^2 e^{aR^2}`
    (Cauchy-Schwarz with the weights :math:`P_{ik}`), so at a fixed radius
    the bound stops growing with N once :math:`N > 2e^{2aR^2}`. Exact
    arithmetic on the norms (two dense 2-norms); the ``min`` is taken in log
    space, so the value is finite whenever it is representable.

    Parameters
    ----------
    R : float
        Radius of every token, > 0.
    N : int
        Number of tokens, >= 1.
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)

    Returns
    -------
    float
        Finite; ``||W_V||_2`` when :math:`W_Q W_K^\top = 0`.

    Raises
    ------
    OverflowError
        (:class:`~lipattn._validate.ResultOverflowError`, also a ``ValueError``)
        if :math:`aR^2` or the bound exceeds the float64 range (the bound is
        then not representable; it is finite only in exact arithmetic).
    """
    R = as_positive_float(R, "R")
    N = as_int_at_least(N, "N", 1)
    W_Q = as_real_array(W_Q, "W_Q", ndim=2)
    _, W_Q, W_K, W_V = check_attention_args(np.zeros((1, W_Q.shape[0])), W_Q, W_K, W_V)
    # a = ||W_Q W_K^T|| / sqrt(d_k) as mantissa * 2**exponent: W_Q W_K^T itself
    # overflows or underflows for large W_Q and small W_K (or R compensating).
    q, k = scale_of(W_Q), scale_of(W_K)
    a_mant = float(np.linalg.norm((W_Q / q) @ (W_K / k).T, 2)) / math.sqrt(W_Q.shape[1])
    nv = float(np.linalg.norm(W_V, 2))
    if a_mant == 0.0 or nv == 0.0:  # a = 0: P is uniform, f(X) = (11^T/N) X W_V
        return nv
    # log(a R^2), finite for any float R and weights
    log_s = math.log(a_mant) + math.log(q) + math.log(k) + 2.0 * math.log(R)
    if log_s > math.log(np.finfo(float).max):
        raise ResultOverflowError(f"R, W_Q and W_K must give a R^2 representable in float64; "
                                  f"a R^2 = exp({log_s:.1f}) overflows, so the ball bound "
                                  "does too")
    s = math.exp(log_s)
    p_term = math.exp(min(0.5 * math.log(N), s))
    key = math.exp(min(0.5 * math.log(N / 2), s))
    with np.errstate(over="ignore"):
        out = nv * (p_term + s * (1.0 + key))
    if not math.isfinite(out):
        raise ResultOverflowError(f"R, W_Q, W_K and W_V must give a ball bound representable "
                                  f"in float64; it overflows (a R^2 = {s:.3g})")
    return out


def card_bound(X: Any, W_Q: Any, W_K: Any, W_V: Any, C: float = 1.0) -> float:
    r"""The widely shared formula, audited by the chapter.

    .. math:: C\|W_V\|_2\bigl(1 + \tfrac{2}{\sqrt{d_k}}\|W_Q\|_2\|W_K\|_2\|X\|_2\bigr)

    Not a bound: the chapter exhibits inputs where the exact constant exceeds it
    for every C. ``||X||_2`` is the spectral norm of the ``(N, d)`` matrix.

    Parameters
    ----------
    X : array_like, shape (N, d)
    W_Q, W_K : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    C : float
        Positive constant.

    Returns
    -------
    float
    """
    X, W_Q, W_K, W_V, _ = _check_2d(X, W_Q, W_K, W_V)
    C = as_positive_float(C, "C")
    nq, nk, nv, nx = (float(np.linalg.norm(W, 2)) for W in (W_Q, W_K, W_V, X))
    name, what = "X, W_Q, W_K, W_V and C", "a card formula"
    inner = 1.0 + safe_product(2.0 / math.sqrt(W_Q.shape[1]), nq, nk, nx, name=name, what=what)
    return safe_product(C, nv, inner, name=name, what=what)


# --------------------------------------------------------------------------
# L2 self-attention (Kim, Papamakarios & Mnih 2021), tied W_K = W_Q
# --------------------------------------------------------------------------
def _check_l2(X: Any, W_Q: Any, W_V: Any):
    X, W_Q, _, W_V = check_attention_args(X, W_Q, W_Q, W_V)
    return X, W_Q, W_V


def _l2_logits(X: np.ndarray, W_Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):  # checked below
        Q = X @ W_Q
        n = np.sum(Q * Q, axis=-1)
        S = -(n[..., :, None] + n[..., None, :] - 2 * Q @ np.swapaxes(Q, -1, -2))
        S = np.minimum(S, 0.0) / math.sqrt(W_Q.shape[1])   # ||q_i - q_j||^2 >= 0
    if not np.all(np.isfinite(S)):
        raise ValueError("X and W_Q give L2 logits that overflow float64; "
                         "expected logits of finite size")
    return S, Q


def l2_attention_matrix(X: Any, W_Q: Any) -> np.ndarray:
    r"""L2 attention weights :math:`P_{ij} \propto \exp(-\|x_i W_Q - x_j W_Q\|^2/\sqrt{d_k})`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)
    W_Q : array_like, shape (d, d_k)

    Returns
    -------
    ndarray, shape (..., N, N)
        Row-stochastic; the diagonal logit is 0, the largest of its row.
    """
    X, W_Q, _ = _check_l2(X, W_Q, W_Q)
    return softmax(_l2_logits(X, W_Q)[0], axis=-1)


def l2_self_attention(X: Any, W_Q: Any, W_V: Any) -> np.ndarray:
    r"""L2 self-attention with tied keys: :math:`f(X) = P X (W_Q W_Q^\top/\sqrt{d_k}) W_V`.

    Parameters
    ----------
    X : array_like, shape (..., N, d)
    W_Q : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)

    Returns
    -------
    ndarray, shape (..., N, d_v)
    """
    X, W_Q, W_V = _check_l2(X, W_Q, W_V)
    st = _l2_state(X, W_Q, W_V)
    with np.errstate(over="ignore", invalid="ignore"):  # checked
        return _l2_finite(st.P @ st.XM, "an output")


@dataclass(frozen=True)
class _L2State:
    P: np.ndarray   # (N, N)
    Q: np.ndarray   # (N, d_k)
    W_Q: np.ndarray
    B: np.ndarray   # (d_k, d_v) = W_Q^T W_V / sqrt(d_k); the value map is W_Q B
    XM: np.ndarray  # (N, d_v) = Q B
    c: float        # 1 / sqrt(d_k)


def _l2_finite(out: np.ndarray, what: str) -> np.ndarray:
    return finite_result(out, "X, W_Q and W_V", f"{what} of L2 attention")


def _l2_state(X, W_Q, W_V) -> _L2State:
    # The value map W_Q W_Q^T W_V is never formed: Q (W_Q^T W_V) has the scale of
    # the output, while W_Q W_Q^T alone overflows (or underflows) for large (small)
    # W_Q that X compensates.
    S, Q = _l2_logits(X, W_Q)
    c = 1 / math.sqrt(W_Q.shape[1])
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        B = (W_Q.T @ W_V) * c
        XM = _l2_finite(Q @ B, "an output")
    return _L2State(softmax(S, axis=-1), Q, W_Q, B, XM, c)


def _l2_jvp(st: _L2State, E: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # checked
        dQ = E @ st.W_Q
        dn = 2 * np.sum(st.Q * dQ, axis=-1)
        dS = -st.c * (dn[:, None] + dn[None, :] - 2 * (dQ @ st.Q.T + st.Q @ dQ.T))
        return _l2_finite(softmax_jvp(st.P, dS) @ st.XM + st.P @ (dQ @ st.B), "a jvp")


def _l2_vjp(st: _L2State, G: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # checked
        Gs = softmax_jvp(st.P, G @ st.XM.T)
        r = Gs.sum(axis=1) + Gs.sum(axis=0)
        gQ = st.c * (2 * (Gs + Gs.T) @ st.Q - 2 * r[:, None] * st.Q)
        return _l2_finite((gQ + st.P.T @ (G @ st.B.T)) @ st.W_Q.T, "a vjp")


def l2_attention_jvp(X: Any, E: Any, W_Q: Any, W_V: Any) -> np.ndarray:
    """Jacobian-vector product of :func:`l2_self_attention`; shapes (N, d) -> (N, d_v)."""
    X, W_Q, W_V = _check_l2(X, W_Q, W_V)
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, d); got shape {X.shape}")
    E = _check_direction(E, "E", X.shape)
    return _l2_jvp(_l2_state(X, W_Q, W_V), E)


def l2_attention_vjp(X: Any, G: Any, W_Q: Any, W_V: Any) -> np.ndarray:
    """Vector-Jacobian product of :func:`l2_self_attention`; shapes (N, d_v) -> (N, d)."""
    X, W_Q, W_V = _check_l2(X, W_Q, W_V)
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, d); got shape {X.shape}")
    G = _check_direction(G, "G", (X.shape[0], W_V.shape[1]))
    return _l2_vjp(_l2_state(X, W_Q, W_V), G)


def l2_attention_operator(X: Any, W_Q: Any, W_V: Any) -> LinearOperator:
    """The Jacobian of :func:`l2_self_attention` as a counting LinearOperator.

    Shape (N d_v, N d); ``matvec`` is the jvp, ``rmatvec`` the vjp.
    """
    X, W_Q, W_V = _check_l2(X, W_Q, W_V)
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, d); got shape {X.shape}")
    st = _l2_state(X, W_Q, W_V)
    N, d = X.shape
    dv = W_V.shape[1]
    return JacobianOperator(lambda E: _l2_jvp(st, E), lambda G: _l2_vjp(st, G), (N, d), (N, dv))


def l2_attention_jacobian(X: Any, W_Q: Any, W_V: Any) -> np.ndarray:
    """Dense Jacobian of :func:`l2_self_attention`, shape (N d_v, N d), from the jvp."""
    op = l2_attention_operator(X, W_Q, W_V)
    return op.matmat(np.eye(op.shape[1]))


def l2_local_lipschitz(X: Any, W_Q: Any, W_V: Any, *, method: str = "auto",
                       tol: float = 1e-10) -> float:
    r"""Exact local Lipschitz constant of L2 self-attention at X (Frobenius norms).

    Parameters
    ----------
    X : array_like, shape (N, d)
    W_Q : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    method : {"auto", "dense", "lanczos"}
        As in :func:`local_lipschitz`.
    tol : float
        Relative tolerance of the Lanczos path, in [1e-15, 0.5].

    Returns
    -------
    float
    """
    X, W_Q, W_V = _check_l2(X, W_Q, W_V)
    if X.ndim != 2:
        raise ValueError(f"X must have shape (N, d); got shape {X.shape}")
    method = _check_method(method)
    tol = _check_tol(tol)
    side = X.shape[0] * max(X.shape[1], W_V.shape[1])
    return _exact_norm(lambda: l2_attention_jacobian(X, W_Q, W_V),
                       lambda: l2_attention_operator(X, W_Q, W_V), side, method, tol).value


def kim_l2_bound(N: int, W_Q: Any, W_V: Any, *, form: str = "exact") -> float:
    r"""The single-head ℓ2 bound for L2 self-attention of Kim et al. (2021).

    .. math::

        \frac{\sqrt N}{\sqrt{d_k}}\,\bigl(4\,\phi^{-1}(N-1) + 1\bigr)\,
        \|W_Q\|_2^2\, \|W_V\|_2 , \qquad \phi(x) = x e^{x+1},

    for :func:`l2_self_attention` (value map :math:`W_Q W_Q^\top W_V/\sqrt{d_k}`),
    growing like :math:`\sqrt N \log N`. A global bound: it does not depend on X.
    The exact inverse is :math:`\phi^{-1}(N-1) = W_0((N-1)/e)` with :math:`W_0`
    the principal Lambert function (:func:`kim_phi_inverse`). The paper's text,
    as its public implementations quote it, replaces it by :math:`W_0(N/e)`,
    which is :math:`\phi^{-1}(N)`: 66 % larger than :math:`\phi^{-1}(N-1)` at N = 2,
    so the printed bound is still a bound, 35 % above the exact form at N = 2
    and under 0.1 % above it at N = 256. For several heads see :func:`kim_l2_mha_bound`.

    Parameters
    ----------
    N : int
        Number of tokens, >= 1.
    W_Q : array_like, shape (d, d_k)
    W_V : array_like, shape (d, d_v)
    form : {"exact", "printed"}
        ``"exact"``: :math:`W_0((N-1)/e)`; ``"printed"``: :math:`W_0(N/e)`.

    Returns
    -------
    float
    """
    N = as_int_at_least(N, "N", 1)
    W_Q = as_real_array(W_Q, "W_Q", ndim=2)
    W_V = as_real_array(W_V, "W_V", ndim=2)
    if W_V.shape[0] != W_Q.shape[0]:
        raise ValueError(f"W_V must have shape (d, d_v) = ({W_Q.shape[0]}, d_v); "
                         f"got shape {W_V.shape}")
    return kim_l2_mha_bound(N, W_Q[None], W_V[None], np.eye(W_V.shape[1]), form=form)


# --------------------------------------------------------------------------
# the chapter's input families
# --------------------------------------------------------------------------
def two_sided_tokens(t: float, N: int = 3, d: int = 2) -> np.ndarray:
    r"""Tokens :math:`t\,(0, u, -u, u, -u, \dots)` with :math:`u = e_1`: one token at
    the origin, the others alternating on a line.

    For ``N = 3, d = 2`` this is ``t * [[0, 0], [1, 0], [-1, 0]]``. The token at
    the origin has uniform attention whatever t is; the others saturate.

    Parameters
    ----------
    t : float
        Scale, >= 0.
    N : int
        Number of tokens, >= 2.
    d : int
        Token dimension, >= 1.

    Returns
    -------
    ndarray, shape (N, d)
    """
    t = as_positive_float(t, "t", allow_zero=True)
    N = as_count(N, "N", 2)
    d = as_count(d, "d", 1)
    if N * d > 10**8:
        raise ValueError(f"N * d must be at most 1e8 (memory); got N = {N}, d = {d}")
    X = np.zeros((N, d))
    X[1:, 0] = t * np.where(np.arange(1, N) % 2 == 1, 1.0, -1.0)
    return X


def sink_tokens(R: float, N: int, u: Any) -> np.ndarray:
    r"""A "sink" input: :math:`x_1 = R u` and :math:`x_j = R u/2` for j >= 2.

    With ``u`` a unit eigenvector of the symmetric part of A for a positive
    eigenvalue :math:`\lambda`, every query prefers token 1 by a logit gap of
    :math:`\lambda R^2/4` (the adversarial input of Castin, Ablin & Peyré 2024).

    Parameters
    ----------
    R : float
        Radius of the sink token, >= 0.
    N : int
        Number of tokens, >= 1.
    u : array_like, shape (d,)
        Direction, non-zero (it is normalised).

    Returns
    -------
    ndarray, shape (N, d)
    """
    R = as_positive_float(R, "R", allow_zero=True)
    N = as_count(N, "N", 1)
    u = as_real_array(u, "u", ndim=1)
    if N * u.size > 10**8:
        raise ValueError(f"N * len(u) must be at most 1e8 (memory); got N = {N}, "
                         f"len(u) = {u.size}")
    if not np.any(u):
        raise ValueError("u must be a non-zero vector; got all zeros")
    m = scale_of(u)
    u = (u / m) / float(safe_norm(u / m))  # scale-invariant: u and c u give one direction
    X = np.tile(0.5 * R * u, (N, 1))
    X[0] = R * u
    return X


# --------------------------------------------------------------------------
# Kim et al.'s L2 bounds: the inverse of phi, and the multi-head form
# --------------------------------------------------------------------------
_KIM_FORMS = ("exact", "printed")


def kim_phi_inverse(y: float) -> float:
    r"""The inverse of :math:`\phi(x) = x e^{x+1}` on :math:`[0, \infty)`: :math:`W_0(y/e)`.

    Exact up to rounding (scipy's principal Lambert function).

    Parameters
    ----------
    y : float
        >= 0.

    Returns
    -------
    float
        The x >= 0 with :math:`\phi(x) = y`.
    """
    y = as_positive_float(y, "y", allow_zero=True)
    return float(lambertw(y / math.e).real)


def kim_l2_mha_bound(N: int, W_Q: Any, W_V: Any, W_O: Any, *, form: str = "exact") -> float:
    r"""Kim et al.'s ℓ2 bound for multi-head L2 self-attention.

    With heads :math:`f^h(X) = P^h X\, W^{Q,h} W^{Q,h\top} W^{V,h}/\sqrt{d_k}`
    (:func:`l2_self_attention` per head) concatenated and multiplied by
    :math:`W^O`,

    .. math::

        \frac{\sqrt N}{\sqrt{d_k}}\bigl(4\,\phi^{-1}(N-1) + 1\bigr)
        \Bigl(\sum_h \|W^{Q,h}\|_2^4\,\|W^{V,h}\|_2^2\Bigr)^{1/2} \|W^O\|_2 .

    It follows from the single-head bound (:func:`kim_l2_bound`): the
    concatenation's squared change is the sum of the heads' squared changes.
    Kim et al. print the head sum as :math:`\sum_h \|W^{Q,h}\|_2^2\|W^{V,h}\|_2^2`;
    with the value map :math:`W^{Q,h}W^{Q,h\top}W^{V,h}` used here the Lipschitz
    constant scales like :math:`\|W^{Q,h}\|^2` (scale :math:`W^{Q,h}` by c and
    X by 1/c), so that form cannot hold for large :math:`W^{Q,h}`; we did not
    read the paper's definitions line by line, and keep the form we can prove
    from the single-head statement.

    Parameters
    ----------
    N : int
        Number of tokens, >= 1.
    W_Q : array_like, shape (H, d, d_k)
    W_V : array_like, shape (H, d, d_v)
    W_O : array_like, shape (H d_v, d_out)
    form : {"exact", "printed"}
        :math:`\phi^{-1}(N-1) = W_0((N-1)/e)`, or the paper's printed :math:`W_0(N/e)`.

    Returns
    -------
    float
        Exact up to rounding for every finite weight (computed from norms split
        into mantissa and power of two: no intermediate overflow or underflow).

    Raises
    ------
    OverflowError
        (:class:`~lipattn._validate.ResultOverflowError`, also a ``ValueError``)
        where the bound exceeds the float64 range.
    """
    N = as_int_at_least(N, "N", 1)
    if form not in _KIM_FORMS:
        raise ValueError(f"form must be one of {_KIM_FORMS}; got {form!r}")
    W_Q = as_real_array(W_Q, "W_Q", ndim=3)
    W_V = as_real_array(W_V, "W_V", ndim=3)
    W_O = as_real_array(W_O, "W_O", ndim=2)
    H, d, d_k = W_Q.shape
    if W_V.shape[:2] != (H, d):
        raise ValueError(f"W_V must have shape (H, d, d_v) = ({H}, {d}, d_v); "
                         f"got shape {W_V.shape}")
    if W_O.shape[0] != H * W_V.shape[2]:
        raise ValueError(f"W_O must have shape (H d_v, d_out) = ({H * W_V.shape[2]}, d_out); "
                         f"got shape {W_O.shape}")
    w0 = kim_phi_inverse(N - 1 if form == "exact" else N)
    # Each norm as mantissa * 2**exponent (norms of matrices divided by powers of two),
    # so that ||W_Q||^4 ||W_V||^2 neither overflows nor underflows: the bound is exact
    # up to rounding for every finite weight, OverflowError where it exceeds float64.
    mq, eq = _norm_parts(W_Q)
    mv, ev = _norm_parts(W_V)
    mo, eo = _norm_parts(W_O[None])
    mant, expo = mq ** 4 * mv ** 2, 4 * eq + 2 * ev
    if not np.any(mant) or mo[0] == 0.0:
        return 0.0
    top = int(np.max(expo[mant > 0]))
    with np.errstate(under="ignore"):  # heads far below the largest round to 0
        total = float(np.sum(np.ldexp(mant, expo - top)))
    heads = math.sqrt(total * 2.0 ** (top % 2))  # (sum of terms)^(1/2) / 2**(top // 2)
    m, e = math.frexp(math.sqrt(N / d_k) * (4 * w0 + 1) * heads * float(mo[0]))
    try:
        return math.ldexp(m, e + top // 2 + int(eo[0]))
    except OverflowError:
        raise ResultOverflowError("W_Q, W_V and W_O must give a bound representable in "
                                  "float64; it overflows") from None


def _norm_parts(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spectral norms of the matrices ``W[h]`` as ``(mantissa, exponent)`` arrays:
    ``||W[h]||_2 = mantissa[h] * 2**exponent[h]``, without overflow or underflow."""
    c = scale_of(W, axis=(-2, -1), keepdims=True)
    return np.linalg.norm(W / c, 2, axis=(-2, -1)), np.frexp(c[..., 0, 0])[1] - 1


__all__ += ["kim_phi_inverse", "kim_l2_mha_bound"]
