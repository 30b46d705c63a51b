r"""The softmax, its Jacobian and the Jacobian's operator norms.

Conventions
-----------
- Softmax acts on the last axis (:func:`softmax` also takes ``axis``); every
  other axis is a batch axis, and batched functions broadcast over it.
- ``temperature`` :math:`\tau > 0` divides the logits:
  :math:`p = \mathrm{softmax}(z / \tau)`.
- The Jacobian is that of :math:`z \mapsto \mathrm{softmax}(z / \tau)` with
  respect to :math:`z`,

  .. math:: J = \frac{1}{\tau}\bigl(\operatorname{diag}(p) - p p^\top\bigr),

  a symmetric positive semidefinite matrix with :math:`J \mathbf 1 = 0`.
- Norms are operator norms of :math:`J` acting on column vectors: ``ord=2``
  is the spectral norm (the largest eigenvalue, as :math:`J` is PSD) and
  ``ord=numpy.inf`` the largest absolute row sum.
- **Masks.** A logit of ``-inf`` is masked (as in causal attention): it gets
  probability exactly 0, and its row and column of :math:`J` are 0, so the
  Jacobian and its norms are those of the unmasked sub-vector (up to
  rounding). ``NaN``, ``+inf`` and a row with every entry masked are
  rejected with a ``ValueError``.
- Reductions over the softmax axis return an ndarray of the remaining shape,
  0-d for a 1-D input; ``float(...)`` turns that into a Python float.

What is exact
-------------
Everything here is exact up to floating-point rounding; nothing is sampled or
estimated.

- :func:`softmax` is computed from scaled differences of the logits, so it
  neither overflows nor warns for any finite logits and temperature (even
  :math:`\pm 10^{300}`), and sums to 1 up to rounding. A probability below
  :math:`e^{-745}` rounds to 0.
- :func:`softmax_jacobian` forms :math:`J` entry by entry; the diagonal uses
  :math:`1 - p_i` computed without cancellation, so it stays relatively
  accurate when :math:`p` is nearly one-hot.
- :func:`softmax_jacobian_norm` with ``ord=numpy.inf`` is the closed form
  :math:`\max_i 2 p_i (1 - p_i) / \tau`. With ``ord=2`` it solves the secular
  equation of the rank-one downdate :math:`\operatorname{diag}(p) - p p^\top`
  to full double precision (relative accuracy, also for near-ties and
  near-one-hot :math:`p`) with :math:`O(n)` work per row: it never forms
  :math:`J`. It agrees with ``numpy.linalg.eigvalsh`` and is thousands of
  times faster at :math:`n = 4096`.
- The one rounding that no method avoids is that of the shifted logits
  :math:`(z - \max z)/\tau`, which perturbs each :math:`p_i` by a relative
  :math:`\varepsilon\,|z_i - \max z|/\tau`; after it, results are accurate to
  a few units in the last place. A Jacobian entry or norm that exceeds the
  float range (possible for :math:`\tau \lesssim 10^{-308}`, as the norm can
  reach :math:`1/(2\tau)`) raises ``OverflowError``
  (:class:`~lipattn._validate.ResultOverflowError`) naming ``temperature``:
  never a silent ``inf``.
- :func:`entropy` is the Shannon entropy in nats, with :math:`0 \log 0 = 0`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ._validate import as_positive_float, as_real_array, check_unmasked, finite_result

__all__ = ["softmax", "softmax_jacobian", "softmax_jacobian_norm", "entropy"]

# exp(-800) is 0.0 in float64 (the smallest subnormal is about exp(-744.4)),
# so clipping scaled logit differences at -800 changes no probability.
_LOG_FLOOR = 800.0
# Safeguard for the secular-equation iteration; it converges in well under
# ten steps on every input we have tried (quadratic, monotone convergence).
_MAX_ITER = 100
_EPS = np.finfo(np.float64).eps


def _check_axis(axis: Any, ndim: int) -> int:
    """Return ``axis`` as a non-negative axis index of an ``ndim``-axis array."""
    expected = f"axis must be an integer in [-{ndim}, {ndim - 1}] for an array with {ndim} axes"
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (numbers.Integral, np.integer)):
        raise TypeError(f"{expected}; got {type(axis).__name__}")
    a = int(axis)
    if not -ndim <= a < ndim:
        raise ValueError(f"{expected}; got {a}")
    return a % ndim


def _check_ord(ord: Any) -> float:
    """Return ``ord`` as 2.0 or inf, or raise ``ValueError`` naming ``ord``."""
    ok = (
        not isinstance(ord, (bool, np.bool_))
        and isinstance(ord, (numbers.Real, np.floating, np.integer))
        and float(ord) in (2.0, np.inf)
    )
    if not ok:
        raise ValueError(f"ord must be 2 or numpy.inf; got {ord!r}")
    return float(ord)


def _shifted_logits(z: np.ndarray, axis: int, tau: float) -> np.ndarray:
    """``d = (z - max z) / tau`` along ``axis``, clipped below near ``-_LOG_FLOOR``.

    Computed without overflow for any finite ``z`` and ``tau > 0``: halving
    first keeps the difference of two finite floats finite, and clipping
    before dividing keeps the quotient bounded. The maximal entries get
    exactly 0, so exact ties stay exact.
    """
    half = 0.5 * z
    half -= half.max(axis=axis, keepdims=True)  # in [-max float, 0]
    floor = -0.5 * _LOG_FLOOR * tau  # a Python float: -inf, not a warning, if tau is huge
    np.maximum(half, floor, out=half)
    half /= tau  # now in [-_LOG_FLOOR / 2, 0] (a little below if floor is -inf)
    half *= 2.0
    return half


def _weights(
    z: np.ndarray, tau: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scaled logits and unnormalised weights along the last axis.

    Returns ``d`` (shape (..., n), max 0), ``w = exp(d)`` (max exactly 1),
    ``top`` (shape (..., 1), index of one maximal entry), ``rest`` (shape
    (...,), the sum of ``w`` without that entry) and ``total`` (shape (...,),
    the sum of ``w``, computed exactly as :func:`softmax` does, so ``p = w /
    total`` is bitwise the softmax and ``1 - p_top = rest / total`` has no
    cancellation).
    """
    d = _shifted_logits(z, -1, tau)
    w = np.exp(d)
    top = np.argmax(d, axis=-1)[..., None]
    w_rest = w.copy()
    np.put_along_axis(w_rest, top, 0.0, axis=-1)
    return d, w, top, w_rest.sum(axis=-1), w.sum(axis=-1)


def _one_minus_p(p: np.ndarray, top: np.ndarray, rest: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``1 - p`` with the maximal entry computed as ``rest / total``.

    Every other entry is at most 1/2, so ``1 - p_i`` has no cancellation.
    """
    q = 1.0 - p
    np.put_along_axis(q, top, (rest / total)[..., None], axis=-1)
    return q


def softmax(z: Any, axis: int = -1, temperature: float = 1.0, *,
            keep_float32: bool = False) -> np.ndarray:
    r"""Softmax of ``z / temperature`` along ``axis``.

    Parameters
    ----------
    z : array_like, shape (..., n, ...)
        Real logits, finite or -inf (masked), at least one axis, no empty
        axis, and at least one finite entry in every slice along ``axis``.
    axis : int, default -1
        The axis the softmax normalises over.
    temperature : float, default 1.0
        Finite :math:`\tau > 0`; the logits are divided by it.
    keep_float32 : bool, default False
        If ``z`` is a float32 array, compute in float32 and return float32
        (the same operations, single-precision rounding: for float32 models,
        about twice as fast as float64 and a cast back). Any other input, or
        False, is computed in float64 exactly as without this argument.

    Returns
    -------
    p : ndarray of float64 (float32 with ``keep_float32`` and float32 ``z``), shape z.shape
        Non-negative, summing to 1 along ``axis`` up to rounding. Exact up to
        rounding for every finite input, including logits of :math:`\pm
        10^{300}` (no overflow, no warning); probabilities below
        :math:`e^{-745}` (float32: about :math:`e^{-103}`) round to 0.

    Raises
    ------
    TypeError, ValueError
        If ``z`` is not a non-empty real array of finite or -inf entries
        with a finite entry in every slice, ``axis`` is not a valid
        axis of ``z`` or ``temperature`` is not a finite positive number.
    """
    if not isinstance(keep_float32, (bool, np.bool_)):
        raise TypeError(f"keep_float32 must be a bool; got {type(keep_float32).__name__}")
    z = as_real_array(z, "z", allow_masked=True, keep_float32=bool(keep_float32))
    tau = as_positive_float(temperature, "temperature")
    ax = _check_axis(axis, z.ndim)
    check_unmasked(z, "z", ax - z.ndim)
    with np.errstate(under="ignore"):  # underflow to 0 is the intended rounding
        w = np.exp(_shifted_logits(z, ax, tau))
        return w / w.sum(axis=ax, keepdims=True)


def softmax_jacobian(z: Any, temperature: float = 1.0) -> np.ndarray:
    r"""Jacobian of :math:`z \mapsto \mathrm{softmax}(z / \tau)`, batched.

    .. math:: J = \frac{1}{\tau}\bigl(\operatorname{diag}(p) - p p^\top\bigr),
       \qquad p = \mathrm{softmax}(z / \tau),

    i.e. ``J[..., i, j] = d p_i / d z_j``.

    Parameters
    ----------
    z : array_like, shape (..., n)
        Real logits, finite or -inf (masked, at least one finite per row);
        the softmax acts on the last axis and the leading
        axes are batch axes.
    temperature : float, default 1.0
        Finite :math:`\tau > 0`.

    Returns
    -------
    J : ndarray of float64, shape (..., n, n)
        Symmetric positive semidefinite with zero row sums, exact up to
        rounding; the diagonal :math:`p_i (1 - p_i)/\tau` is relatively
        accurate even for nearly one-hot :math:`p`.

    Raises
    ------
    TypeError, ValueError
        If ``z`` is not a non-empty real array of finite or -inf entries
        with a finite entry in every row, or ``temperature`` is not
        a finite positive number.
    OverflowError
        If an entry :math:`p_i(1 - p_i)/\tau` exceeds the float64 range (only
        for :math:`\tau \lesssim 10^{-308}`).
    """
    z = check_unmasked(as_real_array(z, "z", allow_masked=True), "z")
    tau = as_positive_float(temperature, "temperature")
    with np.errstate(under="ignore", over="ignore"):  # overflow: checked below
        _, w, top, rest, total = _weights(z, tau)
        p = w / total[..., None]
        jac = -p[..., :, None] * p[..., None, :]
        idx = np.arange(z.shape[-1])
        jac[..., idx, idx] = p * _one_minus_p(p, top, rest, total)
        jac /= tau
        jac += 0.0  # masked rows and columns: -0.0 becomes 0.0
    return finite_result(jac, "temperature (with z)", "Jacobian entries p_i (1 - p_i) / "
                         "temperature")


def _secular_lambda_max(d: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Largest eigenvalue of ``diag(p) - p p^T`` for ``p = softmax(d)``, per row.

    ``d`` has shape (m, n) with n >= 2 and row maxima exactly 0; ``total`` is
    the sum of ``exp(d)`` along each row.

    With ``w = exp(d)`` (top entry 1, second largest ``w_s``) and ``S =
    total``, the eigenvalues of ``diag(p) - p p^T`` are those of ``diag(w) -
    w w^T / S`` divided by ``S``; the largest, ``w_s (1 + x)``, has ``x`` in
    ``(0, (1 - w_s) / w_s)`` solving the secular equation

        (S + w_s Psi(x)) (G - w_s x) = 1,   Psi(x) = sum_{i != top} u_i^2 / (x + b_i),

    with ``u_i = w_i / w_s = exp(d_i - d_s)``, ``b_i = 1 - u_i`` (both from
    ``exp``/``expm1`` of logit differences, so without cancellation) and
    ``G = 1 - w_s = -expm1(d_s)``. Each step replaces ``Psi`` by the
    osculating model ``a + c / x`` at the current ``x`` (Bunch, Nielsen &
    Sorensen 1978); the model lies above ``Psi`` for every ``x > 0``, so after
    the first step the iterates decrease monotonically and quadratically to
    the root, and the model equation is a quadratic with a cancellation-free
    root. If the second pole carries all the weight (n = 2, or all non-top
    ``p`` equal) the model is exact and one step suffices.
    """
    m, n = d.shape
    d_s = np.partition(d, n - 2, axis=-1)[:, n - 2]  # second largest, 0 on a tie
    w_s = np.exp(d_s)
    s = total
    p_top = 1.0 / s  # bitwise the largest entry of softmax(d)
    p_s = w_s / s
    lam = np.zeros(m)
    # A tie for the top (or a gap G = 1 - w_s below half an ulp of 1): the
    # largest eigenvalue lies in [p_s, p_top], an interval of relative width
    # at most eps / 2, so it is p_top up to rounding (exactly so for a tie:
    # e_i - e_j for tied i, j is an eigenvector with eigenvalue p_top).
    tied = w_s == 1.0
    lam[tied] = p_top[tied]
    # All non-top p underflowed to 0: J = 0 up to rounding.
    active = ~tied & (w_s > 0.0)
    if not np.any(active):
        return lam

    da, ds, ws, sa = d[active], d_s[active][:, None], w_s[active], s[active]
    e = da - ds
    e[e > 0.0] = -np.inf  # the (unique) top entry drops out: u = 0, b = 1
    u = np.exp(e)
    b = -np.expm1(e)
    u2 = u * u
    on_pole = b == 0.0  # entries tied with the second largest (u = 1)
    u_rest = np.where(on_pole, 0.0, u).sum(axis=-1)
    big_u = on_pole.sum(axis=-1) + u_rest  # sum of u over non-top entries
    big_u1 = (on_pole.sum(axis=-1) - 1.0) + u_rest  # big_u - 1, without cancellation
    gap = -np.expm1(d_s[active])  # G = 1 - w_s > 0

    # Any x > 0 is a valid start (the first step lands at or above the root).
    x = np.where(ws > 0.5, 0.5 * gap / np.maximum(ws, 0.5), 1.0)
    todo = np.arange(x.size)
    for it in range(_MAX_ITER):
        xt = x[todo][:, None]
        inv = 1.0 / (xt + b[todo])
        t1 = u2[todo] * inv  # u^2 / (x + b)
        t2 = t1 * inv  # u^2 / (x + b)^2
        a = (t2 * b[todo]).sum(axis=-1)  # model constant: Psi(x) - c / x
        c = xt[:, 0] ** 2 * t2.sum(axis=-1)  # model pole weight: -x^2 Psi'(x)
        w_t = ws[todo]
        big_a = sa[todo] + w_t * a
        lin = (big_u1[todo] + a) - w_t * (big_u[todo] + a + c)
        const = c * gap[todo]
        root = np.sqrt(lin * lin + 4.0 * big_a * const)
        pos = lin >= 0.0
        x_new = np.where(
            pos,
            (lin + root) / np.where(pos, 2.0 * big_a, 1.0),
            2.0 * const / np.where(pos, 1.0, root - lin),
        )
        x_old = x[todo]
        x[todo] = x_new
        if it == 0:
            continue
        # Monotone decrease after the first step: stop once it stalls.
        done = x_new >= x_old * (1.0 - 4.0 * _EPS)
        todo = todo[~done]
        if todo.size == 0:
            break

    # lambda = p_s (1 + x), which interlacing places in [p_s, p_top].
    lam[active] = np.clip(p_s[active] * (1.0 + x), p_s[active], p_top[active])
    return lam


def softmax_jacobian_norm(z: Any, ord: float = 2, temperature: float = 1.0) -> np.ndarray:
    r"""Exact operator norm of the softmax Jacobian, batched over leading axes.

    For :math:`J = (\operatorname{diag}(p) - p p^\top)/\tau` with
    :math:`p = \mathrm{softmax}(z/\tau)` (see :func:`softmax_jacobian`):

    - ``ord=2``: :math:`\|J\|_2 = \lambda_{\max}(\operatorname{diag}(p) -
      p p^\top)/\tau`, found from the secular equation of the rank-one
      downdate in :math:`O(n)` per row (one ``numpy.partition`` and a few
      vectorised passes), to full relative precision. It lies in
      :math:`[p_{(2)}, p_{(1)}]/\tau` (the two largest probabilities), equals
      :math:`p_{(1)}/\tau` when the largest probability is tied, and is at
      most :math:`1/(2\tau)`.
    - ``ord=numpy.inf``: :math:`\|J\|_{\infty} = \max_i 2 p_i (1 - p_i)/\tau`,
      since row :math:`i` of :math:`|J|` sums to :math:`p_i(1 - p_i) + p_i
      \sum_{j \ne i} p_j`.

    Parameters
    ----------
    z : array_like, shape (..., n)
        Real logits, finite or -inf (masked, at least one finite per row);
        the softmax acts on the last axis. A masked row has the norm of its
        unmasked sub-vector.
    ord : {2, numpy.inf}, default 2
        Which operator norm.
    temperature : float, default 1.0
        Finite :math:`\tau > 0`.

    Returns
    -------
    norm : ndarray of float64, shape z.shape[:-1]
        A 0-d array for 1-D ``z`` (use ``float(...)`` for a Python float).
        It is 0 when n = 1.

    Raises
    ------
    TypeError, ValueError
        If ``z`` is not a non-empty real array of finite or -inf entries
        with a finite entry in every row, ``ord`` is not 2 or
        ``numpy.inf``, or ``temperature`` is not a finite positive number.
    OverflowError
        If the norm exceeds the float64 range (only for
        :math:`\tau \lesssim 10^{-308}`).
    """
    z = check_unmasked(as_real_array(z, "z", allow_masked=True), "z")
    order = _check_ord(ord)
    tau = as_positive_float(temperature, "temperature")
    n = z.shape[-1]
    batch = z.shape[:-1]
    with np.errstate(under="ignore"):
        d, w, top, rest, total = _weights(z, tau)
        if n == 1:
            return np.zeros(batch)
        if order == np.inf:
            p = w / total[..., None]
            q = _one_minus_p(p, top, rest, total)
            with np.errstate(over="ignore"):  # checked below
                return _norm_result(np.max(2.0 * p * q, axis=-1) / tau)
        lam = _secular_lambda_max(d.reshape(-1, n), total.reshape(-1))
    with np.errstate(over="ignore"):
        return _norm_result(lam.reshape(batch) / tau)


def _norm_result(norm: np.ndarray) -> np.ndarray:
    return np.asarray(finite_result(norm, "temperature (with z)",
                                    "a Jacobian norm (at most 1 / temperature)"))


def entropy(p: Any, axis: int = -1) -> np.ndarray:
    r"""Shannon entropy :math:`-\sum_i p_i \log p_i` in nats, with :math:`0 \log 0 = 0`.

    Parameters
    ----------
    p : array_like, shape (..., n, ...)
        Probability vectors along ``axis``: finite, non-negative, summing to 1
        within 1e-6.
    axis : int, default -1
        The axis holding the probability vectors.

    Returns
    -------
    h : ndarray of float64, shape p.shape without ``axis``
        Between 0 (one-hot) and :math:`\log n` (uniform); 0-d for 1-D ``p``.

    Raises
    ------
    TypeError, ValueError
        If ``p`` is not a finite non-empty real array, has negative entries,
        does not sum to 1 along ``axis`` within 1e-6, or ``axis`` is not a
        valid axis of ``p``.
    """
    p = as_real_array(p, "p")
    ax = _check_axis(axis, p.ndim)
    if np.any(p < 0.0):
        raise ValueError(
            "p must be a probability array (non-negative entries summing to 1 "
            f"along axis {axis}); got a negative entry {float(p.min())!r}"
        )
    total = p.sum(axis=ax)
    if np.any(np.abs(total - 1.0) > 1e-6):
        worst = total.flat[np.argmax(np.abs(total - 1.0))]
        raise ValueError(
            "p must be a probability array (non-negative entries summing to 1 "
            f"along axis {axis} within 1e-6); got a sum of {float(worst)!r}"
        )
    positive = p > 0.0
    with np.errstate(under="ignore"):
        terms = np.where(positive, p * np.log(np.where(positive, p, 1.0)), 0.0)
    return np.asarray(0.0 - terms.sum(axis=ax))  # 0.0 - 0.0 is +0.0, not -0.0
