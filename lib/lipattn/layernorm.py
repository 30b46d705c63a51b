r"""LayerNorm without affine parameters, its Jacobian and the Jacobian's norm.

For a row :math:`x \in \mathbb R^d` (``d >= 2``), with the centring projection
:math:`C = I - \mathbf 1\mathbf 1^\top/d`, :math:`c = Cx`, the *population*
variance :math:`v = \|c\|^2/d` and :math:`s = \sqrt{v + \varepsilon}`,

.. math::

    \mathrm{LN}(x) = \frac{c}{s}, \qquad
    J(x) = \frac{1}{s}\Bigl(C - \frac{c c^\top}{d\, s^2}\Bigr).

:math:`J` is symmetric with eigenvalues :math:`0` (along :math:`\mathbf 1`),
:math:`\varepsilon/s^3` (along :math:`c`) and :math:`1/s` (on the
:math:`d - 2` directions orthogonal to both), so
:math:`\|J\|_2 = 1/s` for :math:`d \ge 3` and :math:`\|J\|_2 = \varepsilon/s^3`
for :math:`d = 2`. Both are at most :math:`1/\sqrt\varepsilon`, with equality
at constant rows (:math:`c = 0`).

Every function acts on the last axis and broadcasts over the others. Nothing
is estimated: all values are exact up to rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validate import as_positive_float, as_real_array

__all__ = ["layer_norm", "layer_norm_jacobian", "layer_norm_jacobian_norm",
           "layer_norm_lipschitz"]


def _prepare(x: Any, eps: Any) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """Validate; return x, eps, the output rows y = c/s and s, shape (..., 1).

    Computed on rows divided by their largest entry, whose variance is at
    most 1, so that no finite input overflows; ``s = hypot(std, sqrt(eps))``.
    """
    x = as_real_array(x, "x", last_axis_min=2)
    e = as_positive_float(eps, "eps")
    y, s = _ln_scaled(x, e)
    return x, e, y, s


def _ln_scaled(x: np.ndarray, e: float) -> tuple[np.ndarray, np.ndarray]:
    """``(y, s)`` of LayerNorm for finite rows of any size, without validation.

    Computed on rows divided by their largest entry (see :func:`_prepare`);
    keeps the dtype of ``x``.
    """
    scale = np.max(np.abs(x), axis=-1, keepdims=True)
    scale = np.where(scale > 0, scale, 1.0)
    c_s = x / scale
    c_s -= c_s.mean(axis=-1, keepdims=True)
    sd_s = np.sqrt(np.mean(c_s**2, axis=-1, keepdims=True))  # <= 1
    s = np.hypot(scale * sd_s, np.sqrt(e))
    with np.errstate(over="ignore"):  # s/scale = inf only for subnormal rows
        y = c_s / np.hypot(sd_s, np.sqrt(e) / scale)
    return y, s


def _ln(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Fast path for the Transformer: no validation, keeps the dtype.

    Returns ``(y, 1/s)`` with ``1/s`` of shape (..., 1). Rows whose squares
    overflow (entries beyond about 1e154 in float64, 1e19 in float32) take the
    scaled path of :func:`layer_norm`; every other row is computed as
    ``c / sqrt(mean(c * c) + eps)``, bit for bit. A non-finite ``x`` (an
    overflowed residual stream) raises ``ValueError``.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        c = x - x.mean(axis=-1, keepdims=True)
        var = np.mean(c * c, axis=-1, keepdims=True)
    if not np.all(np.isfinite(var)):  # one check per row, not per entry
        if not np.all(np.isfinite(x)):
            raise ValueError("params and X must keep the hidden states finite; they overflow "
                             f"the {x.dtype} range (expected inputs and weights of moderate "
                             "size)")
        y, s = _ln_scaled(x, eps)
        inv_s = (1.0 / s).astype(x.dtype, copy=False)
        return y.astype(x.dtype, copy=False), inv_s
    inv_s = 1.0 / np.sqrt(var + eps)
    return c * inv_s, inv_s


def _ln_plain_bwd(dy: np.ndarray, y: np.ndarray, inv_s: np.ndarray) -> np.ndarray:
    """J^T dy for LayerNorm without affine, y = (x - mean)/s: (dy - mean dy - y mean(dy y))/s.

    The Jacobian is symmetric, so this is also J dy. Shapes broadcast over leading axes;
    ``inv_s`` has a trailing axis of length 1.
    """
    return inv_s * (dy - dy.mean(axis=-1, keepdims=True)
                    - y * np.mean(dy * y, axis=-1, keepdims=True))


def layer_norm(x: Any, eps: float = 1e-5) -> np.ndarray:
    r"""LayerNorm over the last axis, without gain or bias.

    Parameters
    ----------
    x : array_like, shape (..., d)
        Finite rows, ``d >= 2``.
    eps : float, default 1e-5
        :math:`\varepsilon > 0`, added to the population variance.

    Returns
    -------
    y : ndarray of float64, shape (..., d)
        :math:`(x - \bar x)/\sqrt{\operatorname{var} x + \varepsilon}`; each row
        has mean 0 and :math:`\|y\|^2 = d\,v/(v + \varepsilon) < d`.
    """
    return _prepare(x, eps)[2]


def layer_norm_jacobian(x: Any, eps: float = 1e-5) -> np.ndarray:
    r"""The Jacobian :math:`J = (C - cc^\top/(d s^2))/s` of :func:`layer_norm`.

    Parameters
    ----------
    x : array_like, shape (..., d)
    eps : float, default 1e-5

    Returns
    -------
    J : ndarray, shape (..., d, d)
        Symmetric; ``J[..., i, j]`` is :math:`\partial y_i/\partial x_j`.
    """
    x, _, y, s = _prepare(x, eps)
    d = x.shape[-1]
    centre = np.eye(d) - 1.0 / d
    # c c^T / (d s^2) = y y^T / d, with |y_i| < sqrt(d)
    outer = y[..., :, None] * y[..., None, :] / d
    return (centre - outer) / s[..., None]


def layer_norm_jacobian_norm(x: Any, eps: float = 1e-5) -> np.ndarray:
    r"""The spectral norm :math:`\|J(x)\|_2`, exact, in :math:`O(d)` per row.

    From the eigenvalues :math:`\{0, \varepsilon/s^3, 1/s\}`: the norm is
    :math:`1/s` for :math:`d \ge 3` and :math:`\varepsilon/s^3` for
    :math:`d = 2` (which equals :math:`1/s = 1/\sqrt\varepsilon` at a constant
    row).

    Parameters
    ----------
    x : array_like, shape (..., d)
    eps : float, default 1e-5

    Returns
    -------
    norm : ndarray, shape (...)
        At most :math:`1/\sqrt\varepsilon`.
    """
    x, e, _, s = _prepare(x, eps)
    s = s[..., 0]
    if x.shape[-1] >= 3:
        return 1.0 / s
    # eps / s^3 = (1/s) * (sqrt(eps) / s)^2 with sqrt(eps) / s <= 1 (no overflow)
    return (1.0 / s) * (np.sqrt(e) / s) ** 2


def layer_norm_lipschitz(eps: float = 1e-5) -> float:
    r"""The best global Lipschitz constant :math:`1/\sqrt\varepsilon` of LayerNorm.

    Valid for every ``d >= 2`` in the Euclidean norm: the supremum of
    :math:`\|J\|_2` over :math:`\mathbb R^d`, attained at constant rows.
    """
    e = as_positive_float(eps, "eps")
    return 1.0 / float(np.sqrt(e))
