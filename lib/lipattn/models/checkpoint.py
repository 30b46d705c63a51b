r"""Reading Hugging Face checkpoints lazily: safetensors files, shards, exact bfloat16.

A ``.safetensors`` file is an 8-byte little-endian header length :math:`n`, a
JSON header of :math:`n` bytes (``name -> {"dtype", "shape", "data_offsets"}``,
plus an optional ``"__metadata__"``), then the raw little-endian tensors.
:class:`Checkpoint` reads the headers of ``model.safetensors`` or of every shard
listed in ``model.safetensors.index.json`` (``save_pretrained``'s layout) and
maps each name to a :class:`LazyTensor`: a ``numpy.memmap`` of its bytes, read
from disk only when it is converted. So a checkpoint larger than memory can be
opened and used one block at a time.

Conversions are exact: F64, F32 and F16 are widened by numpy; BF16 (the upper
16 bits of a float32) is widened by shifting its ``uint16`` view into a
``uint32`` and viewing that as float32, which is exact by construction.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Checkpoint", "LazyTensor", "bfloat16_bits_to_float32", "read_header",
           "write_safetensors"]

#: safetensors dtype -> numpy dtype of the stored bits (BF16: its uint16 bit pattern).
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
           "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
_FLOAT = ("F64", "F32", "F16", "BF16")
_MAX_HEADER = 100 * 2**20


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 numbers given as their uint16 bit patterns (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray], *,
                      metadata: dict[str, str] | None = None) -> None:
    """Write float32 tensors as a safetensors file (the layout :func:`read_header` reads).

    Parameters
    ----------
    path : path
    tensors : dict of str -> array_like
        Finite real arrays, stored as little-endian F32 in the order given (C order).
    metadata : dict of str -> str, optional
        The header's ``"__metadata__"`` (``save_pretrained`` writes ``{"format": "pt"}``).

    The header is padded with spaces to a multiple of 8 bytes, as the
    ``safetensors`` package does.
    """
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": dict(metadata)}
    arrays, offset = [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4")
        if not np.isfinite(a).all():
            raise ValueError(f"tensors[{name!r}] must be finite")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        arrays.append(a)
        offset += a.nbytes
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for a in arrays:
            f.write(a.tobytes())


def read_header(path: str | os.PathLike) -> tuple[dict[str, dict], int]:
    """The tensors' entries of a safetensors file's header and the offset of its data.

    Raises
    ------
    ValueError
        Naming the file: not a safetensors file (short, a header that is not a
        JSON object, entries without dtype/shape/data_offsets, data past the end).
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path} is not a safetensors file: {size} bytes")
        n = int.from_bytes(head, "little")
        if not 0 < n <= min(_MAX_HEADER, size - 8):
            raise ValueError(f"{path} is not a safetensors file: header length {n} for a file "
                             f"of {size} bytes")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is not a safetensors file: its header is not JSON "
                             f"({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file: its header is not a JSON object")
    header.pop("__metadata__", None)
    data = 8 + n
    for name, e in header.items():
        ok = (isinstance(e, dict) and isinstance(e.get("dtype"), str)
              and isinstance(e.get("shape"), list) and isinstance(e.get("data_offsets"), list)
              and len(e["data_offsets"]) == 2)
        if not ok:
            raise ValueError(f"{path}: tensor {name!r} has no dtype, shape and data_offsets")
        start, end = e["data_offsets"]
        if not 0 <= start <= end <= size - data:
            raise ValueError(f"{path}: tensor {name!r} lies past the end of the file")
    return header, data


class LazyTensor:
    """One tensor of a safetensors file, read from disk only when converted.

    Attributes
    ----------
    shape : tuple of int
    stored : str
        The safetensors dtype ("BF16", "F32", ...).
    name, path : str
    """

    def __init__(self, path: Path, name: str, entry: dict, data_offset: int) -> None:
        self.path, self.name = path, name
        self.stored = entry["dtype"]
        self.shape = tuple(int(s) for s in entry["shape"])
        self._start = data_offset + entry["data_offsets"][0]
        self._nbytes = entry["data_offsets"][1] - entry["data_offsets"][0]
        if self.stored in _DTYPES:
            item = np.dtype(_DTYPES[self.stored]).itemsize
            want = int(np.prod(self.shape, dtype=np.int64)) * item
            if want != self._nbytes:
                raise ValueError(f"{path}: tensor {name!r} of shape {self.shape} and dtype "
                                 f"{self.stored} needs {want} bytes; the header gives "
                                 f"{self._nbytes}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _bits(self) -> np.ndarray:
        if self.stored not in _DTYPES:
            raise TypeError(f"{self.path}: tensor {self.name!r} has dtype {self.stored}, which "
                            f"lipattn cannot read (it reads {', '.join(_FLOAT)})")
        dt = np.dtype(_DTYPES[self.stored])
        if self._nbytes == 0:
            return np.zeros(self.shape, dt)
        return np.memmap(self.path, dtype=dt, mode="r", offset=self._start,
                         shape=self.shape)

    def read(self, dtype=np.float64, index: Any = ...) -> np.ndarray:
        """The tensor (or ``tensor[index]``) converted exactly to ``dtype`` (float64/float32).

        F64 read as float32 is the only rounding conversion and is refused.
        """
        if self.stored not in _FLOAT:
            raise TypeError(f"{self.path}: tensor {self.name!r} has dtype {self.stored}; "
                            f"weights must be one of {', '.join(_FLOAT)}")
        dtype = np.dtype(dtype)
        if self.stored == "F64" and dtype != np.float64:
            raise ValueError(f"{self.path}: tensor {self.name!r} is float64; read it with "
                             "dtype=numpy.float64 (float32 would round it)")
        bits = self._bits()[index]
        if self.stored == "BF16":
            return bfloat16_bits_to_float32(bits).astype(dtype, copy=False)
        return np.array(bits, dtype=dtype)

    def __getitem__(self, index: Any) -> np.ndarray:
        """``tensor[index]`` in float64 (only those entries are read)."""
        return self.read(np.float64, index)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.read(np.float64 if dtype is None else dtype)

    def __repr__(self) -> str:
        return f"LazyTensor({self.name!r}, shape={self.shape}, stored={self.stored})"


class Checkpoint:
    """The tensors of a ``save_pretrained`` directory, by name, read lazily.

    Parameters
    ----------
    path : str or path-like
        A directory with ``model.safetensors`` or ``model.safetensors.index.json``
        (whose ``weight_map`` names each tensor's shard).

    Attributes
    ----------
    tensors : dict of str to LazyTensor
    files : list of Path

    Raises
    ------
    FileNotFoundError
        No ``model.safetensors`` or index (a ``pytorch_model.bin`` is named as
        unsupported); a shard that the index lists is missing.
    ValueError
        A malformed file or index, a tensor in two shards, an index naming a
        tensor its shard does not hold.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        root = Path(path)
        index, single = root / "model.safetensors.index.json", root / "model.safetensors"
        if single.is_file():
            self.files = [single]
            weight_map = None
        elif index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"{index} must be a JSON object with a 'weight_map' of tensor "
                                 "names to shard files") from None
            self.files = [root / f for f in sorted(set(weight_map.values()))]
            for f in self.files:
                if not f.is_file():
                    raise FileNotFoundError(f"{index} lists the shard {f.name}, which is "
                                            f"missing from {root}")
        else:
            other = [p for p in ("pytorch_model.bin", "model.bin", "tf_model.h5")
                     if (root / p).exists()] if root.is_dir() else []
            hint = (f" ({', '.join(other)} found: save it with safe_serialization, the "
                    "default of save_pretrained)") if other else ""
            raise FileNotFoundError(f"{root} must hold model.safetensors or "
                                    f"model.safetensors.index.json{hint}")
        self.tensors: dict[str, LazyTensor] = {}
        for f in self.files:
            header, data = read_header(f)
            for name, entry in header.items():
                if name in self.tensors:
                    raise ValueError(f"tensor {name!r} is in both {self.tensors[name].path.name} "
                                     f"and {f.name}")
                self.tensors[name] = LazyTensor(f, name, entry, data)
        if weight_map is not None:
            for name, f in weight_map.items():
                if name not in self.tensors or self.tensors[name].path.name != f:
                    raise ValueError(f"{index} puts {name!r} in {f}, which does not hold it")
