"""Run small-matrix code with one BLAS thread.

The Transformer experiments multiply many small matrices. On a shared
two-core machine, OpenBLAS's threads then spend more time waiting for each
other than computing (a tenfold slowdown was measured under load). This
context manager sets numpy's OpenBLAS to one thread and restores the previous
setting afterwards; where numpy's OpenBLAS cannot be found it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import ParamSpec, TypeVar

import numpy as np

__all__ = ["single_threaded_blas", "single_threaded"]

P = ParamSpec("P")
R = TypeVar("R")


@lru_cache(maxsize=1)
def _openblas() -> tuple | None:
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "*openblas*.so*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:  # pragma: no cover - a broken install
            continue
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype = ctypes.c_int
                    put.argtypes = [ctypes.c_int]
                    return get, put
    return None


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Within the block, numpy's OpenBLAS uses one thread."""
    funcs = _openblas()
    if funcs is None:  # pragma: no cover - other BLAS builds
        yield
        return
    get, put = funcs
    before = int(get())
    put(1)
    try:
        yield
    finally:
        put(before)


def single_threaded(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator: run ``func`` inside :func:`single_threaded_blas`."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with single_threaded_blas():
            return func(*args, **kwargs)

    return wrapper
