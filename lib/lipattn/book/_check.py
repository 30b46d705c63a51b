"""Input checks of the book's package that :mod:`lipattn._validate` does not have.

The scalar and array checks are the library's (:mod:`lipattn._validate`); these add
the book's other kinds of argument -- texts, sequences of counts or reals, and the
results that one function hands to the next (a figure's data) -- with the same
kind of message: the argument's name, the expected form, and what came instead.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import MAX_COUNT, as_int_at_least, as_real_array

__all__ = ["as_text", "as_counts", "as_reals", "as_result", "as_tokens", "as_dir"]


def as_text(value: Any, name: str, *, allow_empty: bool = False) -> str:
    """Return ``value`` if it is a ``str`` (non-blank unless ``allow_empty``), or raise."""
    kind = "a string" if allow_empty else "a non-empty string"
    if not isinstance(value, str):
        raise TypeError(f"{name} must be {kind}; got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must be {kind}; got {value!r}")
    return value


def as_counts(value: Any, name: str, minimum: int = 1,
              maximum: int = MAX_COUNT) -> tuple[int, ...]:
    """Return ``value``, a non-empty sequence of integers in [minimum, maximum], as a tuple."""
    want = f"a non-empty sequence of integers in [{minimum}, {maximum}]"
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(
            value, (Sequence, np.ndarray, range)):
        raise TypeError(f"{name} must be {want}; got {type(value).__name__}")
    if len(value) == 0:
        raise ValueError(f"{name} must be {want}; got an empty sequence")
    out = []
    for v in value:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
            raise TypeError(f"{name} must be {want}; got an entry of type {type(v).__name__}")
        out.append(as_int_at_least(v, f"each entry of {name}", minimum, maximum))
    return tuple(out)


def as_reals(value: Any, name: str, *, positive: bool = False,
             maximum: float | None = None) -> np.ndarray:
    """Return ``value``, a non-empty 1-D sequence of finite reals, as a float64 array.

    ``positive`` requires every entry > 0; ``maximum`` bounds the entries above.
    """
    arr = as_real_array(value, name, ndim=1)
    if positive and np.any(arr <= 0):
        raise ValueError(f"{name} must hold positive reals; got {arr.min()!r}")
    if maximum is not None and np.any(arr > maximum):
        raise ValueError(f"{name} must hold reals at most {maximum!r}; got {arr.max()!r}")
    return arr


def as_result(value: Any, name: str, keys: Sequence[str] = (),
              cls: type | None = None, producer: str = "") -> Any:
    """Return ``value`` if it is the result of another function: a mapping with
    ``keys`` or an instance of the dataclass ``cls``, or raise ``TypeError``/``ValueError``."""
    made = f" (as returned by {producer})" if producer else ""
    if cls is not None:
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be a {cls.__name__}{made}; got {type(value).__name__}")
        return value
    if not isinstance(value, Mapping) or dataclasses.is_dataclass(value):
        raise TypeError(f"{name} must be a mapping{made}; got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must be a non-empty mapping{made}; got an empty one")
    missing = [k for k in keys if k not in value]
    if missing:
        raise ValueError(f"{name} must have the keys {list(keys)}{made}; missing {missing}")
    return value


def as_tokens(value: Any, name: str, vocab: int, n_tokens: int) -> np.ndarray:
    """Return ``value`` as an int array of token ids in [0, vocab), shape (B, n_tokens)."""
    want = f"{name} must be an int array of token ids in [0, {vocab}), shape (B, {n_tokens})"
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{want}; got {type(value).__name__}")
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{want}; got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] != n_tokens:
        raise ValueError(f"{want}; got shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= vocab:
        raise ValueError(f"{want}; got ids from {arr.min()} to {arr.max()}")
    return arr


def as_dir(value: Any, name: str, *, exists: bool = True) -> Path:
    """Return ``value`` (a str or path) as a ``Path``; with ``exists`` (default) it must
    name an existing directory, or raise."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a directory (a str or path); got {type(value).__name__}")
    path = Path(value)
    if exists and not path.is_dir():
        raise ValueError(f"{name} must be an existing directory; {str(path)!r} is not one")
    return path
