r"""Upper bounds on the local Lipschitz constant of self-attention, and a formula that is not one.

For dot-product self-attention :math:`f(X) = \operatorname{softmax}(X A X^\top) X W_V`
with :math:`A = W_Q W_K^\top/\sqrt{d_k}` (:mod:`lipattn.attention`, tokens as rows),
whose exact local constant :math:`\|Df(X)\|_2` (Frobenius norms on inputs and
outputs) is :func:`lipattn.lipschitz.local_lipschitz`:

- :func:`local_lipschitz_bound` (with its three terms,
  :func:`local_lipschitz_bound_terms`) is Chapter 6's proved upper bound at X,
  quadratic in the scale of X;
- :func:`ball_lipschitz_bound` bounds the constant over every input of N tokens
  of norm at most R, and stops growing with N at a fixed radius;
- :func:`card_bound` is the widely shared formula that the chapter audits: it is
  *not* a bound (the chapter exhibits inputs, :mod:`lipattn.adversarial`, where the
  exact constant exceeds it for every C).

For L2 self-attention (:mod:`lipattn.l2attention`), :func:`kim_l2_bound` and
:func:`kim_l2_mha_bound` are the global bounds of Kim, Papamakarios & Mnih
(2021), single-head and multi-head, with the exact inverse of
:math:`\phi(x) = x e^{x+1}` (:func:`kim_phi_inverse`) or the paper's printed form.

What is exact: every bound is computed from norms and the attention weights in
closed form, exact up to rounding; the products are split into mantissa and power
of two where they could overflow or underflow, and a bound beyond the float64 range
raises :class:`~lipattn._validate.ResultOverflowError` (an ``OverflowError``) rather
than return inf. The tests check every bound against the exact constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import lambertw

from ._validate import (
    ResultOverflowError,
    as_int_at_least,
    as_positive_float,
    as_real_array,
    safe_norm,
    safe_product,
    scale_of,
)
from .attention import _check_2d, _finite_logits, check_attention_args
from .softmax import softmax, softmax_jacobian_norm

__all__ = [
    "BoundTerms",
    "local_lipschitz_bound",
    "local_lipschitz_bound_terms",
    "ball_lipschitz_bound",
    "card_bound",
    "kim_l2_bound",
    "kim_phi_inverse",
    "kim_l2_mha_bound",
]


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
