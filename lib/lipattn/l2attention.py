r"""L2 self-attention (Kim, Papamakarios & Mnih 2021), its Jacobian and exact local constant.

With tied keys (:math:`W_K = W_Q`) and tokens as rows,

.. math::

    P_{ij} \propto \exp\bigl(-\|x_i W_Q - x_j W_Q\|^2/\sqrt{d_k}\bigr), \qquad
    f(X) = P X\, \frac{W_Q W_Q^\top}{\sqrt{d_k}}\, W_V ,

which, unlike dot-product attention (:mod:`lipattn.lipschitz`), is globally
Lipschitz (Kim et al.'s bounds are :func:`lipattn.bounds.kim_l2_bound` and
:func:`lipattn.bounds.kim_l2_mha_bound`).

What is exact and what is estimated
-----------------------------------
- :func:`l2_attention_jvp` and :func:`l2_attention_vjp` are the closed forms, exact
  up to rounding; :func:`l2_attention_operator` is the matrix-free Jacobian and
  :func:`l2_attention_jacobian` the dense one, from the jvp.
- :func:`l2_local_lipschitz` is the exact local constant (Frobenius norms on inputs
  and outputs), by a dense SVD or by Golub-Kahan-Lanczos converged to a certified
  relative residual (:mod:`lipattn.lanczos`), as :func:`lipattn.lipschitz.local_lipschitz`.
- The value map :math:`W_Q W_Q^\top W_V` is never formed, so large (small) W_Q that
  X compensates neither overflow nor underflow; a result beyond float64 is an error.

``vec`` is row-major throughout: ``E.reshape(-1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator

from ._validate import finite_result
from .attention import _check_direction, check_attention_args
from .lanczos import JacobianOperator, _check_tol
from .layers.attention import softmax_jvp
from .lipschitz import _check_method, _exact_norm
from .softmax import softmax

__all__ = [
    "l2_attention_matrix",
    "l2_self_attention",
    "l2_attention_jvp",
    "l2_attention_vjp",
    "l2_attention_jacobian",
    "l2_attention_operator",
    "l2_local_lipschitz",
]


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
