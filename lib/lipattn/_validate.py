"""Input validation shared by every public function of :mod:`lipattn`.

Every public function calls one of these helpers first, so a bad argument
fails early with a message that names the argument and the expected form,
for example::

    ValueError: z must be a finite real array with at least one element on
    its last axis; got shape (0,)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "as_real_array",
    "as_positive_float",
    "as_real_float",
    "as_float_in",
    "as_int_at_least",
    "as_count",
    "as_counts",
    "as_seed",
    "as_rng",
    "as_tol",
    "as_step",
    "as_bool",
    "as_choice",
    "safe_norm",
    "scale_of",
    "safe_product",
    "check_unmasked",
    "ResultOverflowError",
    "finite_result",
    "MAX_COUNT",
]

#: Upper bound of :func:`as_count`: counts that size arrays or loops. Beyond it
#: memory or time would explode, so a clear error beats a MemoryError or a hang.
MAX_COUNT = 10**8


class ResultOverflowError(OverflowError, ValueError):
    """The true result exceeds the float64 range (about 1.8e308).

    Raised, naming the caller's arguments, where the mathematics gives a finite
    number too large for float64 -- never a silent ``inf``. An ``OverflowError``,
    and a ``ValueError`` too (an argument that large is out of range).
    """


def finite_result(value: Any, name: str, what: str) -> Any:
    """Return ``value`` if every entry is finite, else raise :class:`ResultOverflowError`.

    For a result computed without intermediate overflow (rescaled by powers of
    two), so that an infinite entry means the true value exceeds float64:
    ``name`` lists the caller's arguments, ``what`` the quantity.
    """
    if not np.all(np.isfinite(value)):
        raise ResultOverflowError(f"{name} must give {what} representable in float64; "
                                  f"it overflows (beyond 1.8e308)")
    return value


def as_real_array(
    value: Any,
    name: str,
    *,
    min_ndim: int = 1,
    ndim: int | None = None,
    last_axis_min: int = 1,
    allow_masked: bool = False,
    keep_float32: bool = False,
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
    keep_float32 : bool
        Return a float32 array as it is (float32, no copy) instead of
        converting it to float64; every other dtype is still converted.

    Returns
    -------
    ndarray of float64 (or float32, see ``keep_float32``)
        A finite array (a copy only where a conversion was needed), with
        ``-inf`` entries if ``allow_masked``.
    """
    expected = (f"{name} must be a real array of finite or -inf (masked) entries"
                if allow_masked else f"{name} must be a finite real array")
    if ndim is not None:
        expected += f" with {ndim} " + ("axes" if ndim != 1 else "axis")
    else:
        expected += f" with at least {min_ndim} " + ("axes" if min_ndim > 1 else "axis")
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
    if not (keep_float32 and arr.dtype == np.float32):
        arr = arr.astype(np.float64, copy=False)
    if allow_masked:
        if not np.all(arr < np.inf):   # one pass: False for NaN and +inf
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


def as_real_float(value: Any, name: str) -> float:
    """Return ``value`` as a finite real ``float`` of any sign, or raise."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a finite real number; got {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be a finite real number; got {value!r}")
    return v


def as_float_in(value: Any, name: str, lo: float, hi: float, *,
                lo_open: bool = False, hi_open: bool = False) -> float:
    """Return ``value`` as a real ``float`` in the interval from ``lo`` to ``hi``, or raise.

    ``lo_open`` / ``hi_open`` exclude the end points, e.g. Adam's betas lie in [0, 1).
    """
    interval = f"{'(' if lo_open else '['}{lo!r}, {hi!r}{')' if hi_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number in {interval}; got {type(value).__name__}")
    v = float(value)
    if not (v > lo if lo_open else v >= lo) or not (v < hi if hi_open else v <= hi):
        raise ValueError(f"{name} must be a real number in {interval}; got {value!r}")
    return v


def as_int_at_least(value: Any, name: str, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` that is at least ``minimum`` (and at most
    ``maximum``, if given), or raise."""
    want = f"an integer >= {minimum}" if maximum is None else \
        f"an integer in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be {want}; got {type(value).__name__}")
    v = int(value)
    if v < minimum or (maximum is not None and v > maximum):
        raise ValueError(f"{name} must be {want}; got {v}")
    return v


def as_count(value: Any, name: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """Return ``value`` as an ``int`` count in [minimum, maximum], or raise.

    For counts that size arrays or loops (tokens, dimensions, layers, samples,
    steps): the default upper bound :data:`MAX_COUNT` turns a request that would
    end in a MemoryError or a hang into a clear error naming the argument.
    Pass a smaller ``maximum`` where the cost grows faster than linearly.
    """
    return as_int_at_least(value, name, minimum, maximum)


def as_counts(value: Any, name: str, minimum: int = 1, maximum: int | None = MAX_COUNT, *,
              allow_scalar: bool = False) -> list[int]:
    """Return ``value``, a non-empty 1-D sequence of integer counts, as a list of ``int``.

    Each entry is checked as :func:`as_int_at_least` does (bools, floats, strings
    and nested sequences are refused, naming ``name[i]``); ``maximum=None`` means
    no upper bound. With ``allow_scalar`` a single integer is the list of one.
    """
    want = f"{name} must be a non-empty sequence of integers >= {minimum}"
    if allow_scalar and isinstance(value, (numbers.Integral, np.integer)) \
            and not isinstance(value, (bool, np.bool_)):
        return [as_int_at_least(value, name, minimum, maximum)]
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ValueError(f"{want}; got an array of shape {value.shape}")
        items = list(value)
    elif isinstance(value, (list, tuple, range)):
        items = list(value)
    else:
        raise TypeError(f"{want}; got {type(value).__name__}")
    if not items:
        raise ValueError(f"{want}; got an empty sequence")
    return [as_int_at_least(v, f"{name}[{i}]", minimum, maximum) for i, v in enumerate(items)]


def as_seed(value: Any, name: str = "seed") -> int:
    """Return ``value`` as a seed for ``np.random.default_rng``: an int >= 0, or raise."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer; got {type(value).__name__}")
    v = int(value)
    if v < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {v}")
    return v


def as_rng(value: Any, name: str = "seed") -> np.random.Generator:
    """``np.random.default_rng(value)`` for a seed (int >= 0) or a Generator, or raise."""
    if isinstance(value, np.random.Generator):
        return value
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer or a numpy Generator; "
                        f"got {type(value).__name__}")
    return np.random.default_rng(as_seed(value, name))


def as_tol(value: Any, name: str = "tol") -> float:
    """Return ``value`` as a relative tolerance in [1e-15, 0.5], or raise.

    Below about 1e-15 a float64 iteration cannot confirm convergence; above 0.5
    a "converged" estimate may be off by a factor of 2, so it is not an estimate.
    """
    return as_float_in(value, name, 1e-15, 0.5)


def as_step(value: Any, name: str, x_scale: float = 1.0) -> float:
    r"""Return a finite-difference step ``h`` as a float, or raise.

    With :math:`s = \max(1, x_{\text{scale}})` (``x_scale`` the size of the entries
    it perturbs), ``h`` must lie in :math:`[10^{-12} s, 0.1 s]`: a smaller step
    loses every digit to rounding (``x + h == x``, or the difference is pure
    noise); a larger one is not a local difference.
    """
    h = as_positive_float(value, name)
    floor = 1e-12 * max(float(x_scale), 1.0)
    if h > 1e11 * floor:
        raise ValueError(f"{name} must be a small step, at most {1e11 * floor:.3g} (0.1 times "
                         f"max(1, largest perturbed entry)); got {value!r}")
    if h < floor:
        raise ValueError(f"{name} must be a step of at least {floor:.3g} (1e-12 times "
                         f"max(1, largest perturbed entry)), or the finite difference is "
                         f"rounding noise; got {value!r}")
    return h


def as_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of the strings ``choices``, or raise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, choices))}; "
                        f"got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; "
                         f"got {value!r}")
    return value


def scale_of(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """The power of two at least ``max |x|`` (over ``axis``), 1 where that is 0.

    Dividing by it is exact (no rounding, barring subnormals), so a routine run on
    ``x / scale_of(x)`` and multiplied back gives bit for bit the result of the
    unscaled run wherever that one neither overflows nor underflows. A float for
    ``axis=None`` without ``keepdims``, else an array.
    """
    m = np.max(np.abs(np.asarray(x, dtype=float)), axis=axis, keepdims=keepdims)
    out = np.where(m > 0, np.ldexp(1.0, np.frexp(m)[1]), 1.0)
    return float(out) if np.ndim(out) == 0 else out


def safe_norm(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> Any:
    r"""Euclidean norm that neither overflows nor underflows for any finite ``x``.

    ``numpy.linalg.norm`` where its result lies in :math:`(10^{-150}, 10^{150})`
    (then no square overflows or loses digits, and ordinary inputs give exactly
    numpy's value); elsewhere computed on ``x`` divided by a power of two near
    its largest entry (as LAPACK's ``dnrm2``). So ``safe_norm(c * x)`` is
    ``c * safe_norm(x)`` up to rounding for every finite ``c * x``; ``inf`` only
    where the norm itself exceeds the float64 range. No validation (internal).
    """
    x = np.asarray(x, dtype=float)
    with np.errstate(over="ignore", under="ignore"):
        r = np.linalg.norm(x, axis=axis, keepdims=keepdims)
    ok = (r > 1e-150) & (r < 1e150)
    if np.all(ok | (r == 0) & ~np.any(x, axis=axis, keepdims=keepdims)):
        return r if np.ndim(r) else float(r)
    m = scale_of(x, axis=axis, keepdims=True)
    with np.errstate(over="ignore"):  # |x/m| <= 1; the product overflows only if the norm does
        scaled = m * np.sqrt(np.sum((x / m) ** 2, axis=axis, keepdims=True))
    if not keepdims:
        scaled = np.squeeze(scaled, axis=axis) if axis is not None else scaled.reshape(())
    out = np.where(ok, r, scaled)
    return out if np.ndim(out) else float(out)


def as_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a ``bool`` (numpy bools included), or raise."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__}")
    return bool(value)


def safe_product(*factors: float, name: str = "the arguments", what: str = "a result") -> float:
    """The product of non-negative finite floats without intermediate overflow or
    underflow; raises :class:`ResultOverflowError` (an ``OverflowError`` and a
    ``ValueError``) naming ``name`` (the caller's arguments) and ``what`` (the
    quantity) if the product itself overflows.

    ``1e200 * 1e200 * 1e-300`` is ``1e100``, not ``inf``. A product below the
    smallest float gives 0 (or a subnormal), which is the correctly rounded value.
    """
    mant, expo = 1.0, 0
    for f in factors:
        m, e = math.frexp(float(f))
        if m == 0.0:
            return 0.0
        mant, e2 = math.frexp(mant * m)
        expo += e + e2
    try:
        return math.ldexp(mant, expo)
    except OverflowError:
        raise ResultOverflowError(f"{name} must give {what} representable in float64; it "
                                  f"overflows (about 2**{expo})") from None
