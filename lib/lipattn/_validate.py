"""Input validation shared by every public function of :mod:`lipattn`.

Every public function calls one of these helpers first, so a bad argument
fails early with a message that names the argument and the expected form,
for example::

    ValueError: z must be a finite real array with at least one element on
    its last axis; got shape (0,)
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = [
    "as_real_array",
    "as_positive_float",
    "as_int_at_least",
    "as_bool",
    "check_unmasked",
]


def as_real_array(
    value: Any,
    name: str,
    *,
    min_ndim: int = 1,
    ndim: int | None = None,
    last_axis_min: int = 1,
    allow_masked: bool = False,
) -> np.ndarray:
    """Return ``value`` as a finite float64 array, or raise.

    Parameters
    ----------
    value : array_like
        The candidate array. Booleans, strings, objects and complex numbers
        are rejected with ``TypeError``.
    name : str
        The argument's name, used in the error message.
    min_ndim : int
        Smallest accepted number of axes.
    ndim : int, optional
        Exact number of axes, if the function needs one.
    last_axis_min : int
        Smallest accepted length of the last axis; every other axis must be
        non-empty too.
    allow_masked : bool
        Also accept ``-inf`` entries (masked logits); ``NaN`` and ``+inf``
        are still rejected. Whether a masked slice keeps a finite entry is
        the caller's check (it knows the axis), see :func:`check_unmasked`.

    Returns
    -------
    ndarray of float64
        A finite array (a copy only where a conversion was needed), with
        ``-inf`` entries if ``allow_masked``.
    """
    expected = (f"{name} must be a real array of finite or -inf (masked) entries"
                if allow_masked else f"{name} must be a finite real array")
    if ndim is not None:
        expected += f" with {ndim} axes"
    else:
        expected += f" with at least {min_ndim} axis" + ("es" if min_ndim > 1 else "")
    if last_axis_min > 0:
        expected += f" and at least {last_axis_min} element(s) on its last axis"
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{expected}; got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{expected}; could not convert: {exc}") from None
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{expected}; got dtype {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{expected}; got shape {arr.shape}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{expected}; got shape {arr.shape}")
    if arr.ndim and (
        arr.shape[-1] < last_axis_min or any(s == 0 for s in arr.shape[:-1])
    ):
        raise ValueError(f"{expected}; got shape {arr.shape}")
    arr = arr.astype(np.float64, copy=False)
    if allow_masked:
        if np.any(np.isnan(arr) | (arr == np.inf)):
            raise ValueError(f"{expected}; got NaN or +inf entries")
    elif not np.all(np.isfinite(arr)):
        raise ValueError(f"{expected}; got NaN or infinite entries")
    return arr


def check_unmasked(arr: np.ndarray, name: str, axis: int = -1) -> np.ndarray:
    """Raise unless every slice of ``arr`` along ``axis`` has a finite entry.

    For masked logits (``-inf`` = masked): a slice with every entry masked
    has no softmax. Returns ``arr`` unchanged.
    """
    bad = ~np.any(np.isfinite(arr), axis=axis)
    if np.any(bad):
        raise ValueError(
            f"{name} must have at least one finite (unmasked) entry along axis {axis}; "
            f"got {int(np.sum(bad))} slice(s) with every entry -inf"
        )
    return arr


def as_positive_float(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float that is > 0 (or >= 0), or raise."""
    kind = "non-negative" if allow_zero else "positive"
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a finite {kind} real number; got {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite {kind} real number; got {value!r}")
    return v


def as_int_at_least(value: Any, name: str, minimum: int) -> int:
    """Return ``value`` as an ``int`` that is at least ``minimum``, or raise."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer >= {minimum}; got {type(value).__name__}")
    v = int(value)
    if v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {v}")
    return v


def as_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a ``bool`` (numpy bools included), or raise."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__}")
    return bool(value)
