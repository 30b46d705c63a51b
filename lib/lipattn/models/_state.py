"""Reading a Hugging Face state dict: prefixes, ignored keys, named and shaped parameters."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._validate import as_int_at_least, as_real_array
from .checkpoint import bfloat16_bits_to_float32

__all__ = ["StateDict", "as_numpy"]


def as_numpy(value: Any, name: str) -> Any:
    """``value`` as a numpy array, converting what PyTorch users hold, exactly.

    A tensor (duck-typed: ``detach`` and ``numpy`` methods) on the CPU is
    detached (``requires_grad`` is fine); a bfloat16 tensor goes through
    ``.float()``, exact since bfloat16 is the upper half of a float32; a
    bfloat16 numpy array (``ml_dtypes``) is widened from its bits, exactly.
    A tensor on another device is refused with the fix (``.cpu()``); anything
    else is returned for :func:`numpy.asarray`.
    """
    if isinstance(value, np.ndarray):
        arr = value
    elif callable(getattr(value, "detach", None)) and callable(getattr(value, "numpy", None)):
        device = getattr(value, "device", None)
        kind = getattr(device, "type", device)
        if kind is not None and str(kind) != "cpu":
            raise TypeError(f"{name} is a tensor on {device}; move the state to the CPU "
                            "first: {k: v.detach().cpu() for k, v in model.state_dict().items()}")
        t = value.detach()
        if "bfloat16" in str(getattr(t, "dtype", "")):
            t = t.float()                         # exact: bf16 is a float32's upper 16 bits
        try:
            arr = t.numpy()
        except Exception as exc:                  # e.g. float8 or quantised tensors
            raise TypeError(f"{name} is a tensor of dtype {getattr(t, 'dtype', '?')} that "
                            f"cannot be converted to a numpy array: {exc}") from None
    else:
        return value
    if arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:
        arr = bfloat16_bits_to_float32(arr.view(np.uint16))
    return arr


class StateDict:
    """A validated view of ``state``: keys with ``prefix`` stripped, ``ignore`` dropped.

    :meth:`get` returns a named parameter as a finite array of the model's dtype
    with a checked shape; :meth:`finish` raises on keys that were never read.
    """

    def __init__(self, state: Any, *, prefix: str, ignore: tuple[str, ...], dtype) -> None:
        if not isinstance(state, Mapping):
            raise TypeError("state must be a mapping of parameter names to arrays (a "
                            f"state_dict); got {type(state).__name__}")
        self.dtype = np.dtype(dtype)
        self._items: dict[str, Any] = {}
        for k, v in state.items():
            if not isinstance(k, str):
                raise TypeError(f"state's keys must be parameter names (str); got {k!r}")
            name = k[len(prefix):] if k.startswith(prefix) else k
            if not any(re.fullmatch(p, name) for p in ignore):
                self._items[name] = v
        self._used: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self._items:
            raise ValueError(f"state is missing the parameter {name!r}")
        self._used.add(name)
        value = as_numpy(self._items[name], f"state[{name!r}]")
        arr = as_real_array(value, f"state[{name!r}]", ndim=len(shape))
        if arr.shape != tuple(shape):
            raise ValueError(f"state[{name!r}] must have shape {tuple(shape)}; got shape "
                             f"{arr.shape}")
        return arr.astype(self.dtype, copy=False)

    def shape_of(self, name: str) -> tuple[int, ...]:
        if name not in self._items:
            raise ValueError(f"state is missing the parameter {name!r}")
        return tuple(np.shape(self._items[name]))

    def count_layers(self, pattern: str) -> int:
        """1 + the largest i in keys matching ``pattern`` (a regex with one group)."""
        idx = [int(m.group(1)) for k in self._items if (m := re.match(pattern, k))]
        if not idx:
            raise ValueError(f"state has no layer parameters (keys matching {pattern!r})")
        return max(idx) + 1

    def finish(self) -> None:
        unknown = sorted(set(self._items) - self._used)
        if unknown:
            shown = ", ".join(repr(k) for k in unknown[:6]) + (" ..." if len(unknown) > 6 else "")
            raise ValueError(f"state has {len(unknown)} parameter(s) this model does not use: "
                             f"{shown}")


def check_heads(n_head: Any, d: int, name: str = "n_head") -> int:
    n = as_int_at_least(n_head, name, 1)
    if d % n:
        raise ValueError(f"{name} must divide d_model = {d}; got {name} = {n}")
    return n


def check_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be numpy.float64 or numpy.float32; got {dtype!r}") from None
    if dt not in (np.float64, np.float32):
        raise ValueError(f"dtype must be numpy.float64 or numpy.float32; got {dt}")
    return dt
