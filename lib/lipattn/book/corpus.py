r"""The book's real-text corpus: CPython's own standard library sources.

The text is the top-level ``*.py`` modules of the running interpreter's
standard library (``sysconfig.get_paths()["stdlib"]``, no sub-packages), read as
bytes, sorted by file name. They are released under the Python Software
Foundation License Version 2, which allows copying and redistribution with the
licence notice: nobody here wrote them and they may be shipped. The book's
numbers were made with CPython 3.11.7; :data:`SHA256` pins the assembled text,
so another interpreter version is detected, not silently used.

The split is fixed by file name, not by chance: a module is held out iff
``zlib.crc32(name) % 10 == 0`` (about a tenth of the files); the model never
trains on a held-out module. Each file is preceded by a one-line header
``# ==> name <==`` so that a window may cross a file boundary only visibly.
"""

from __future__ import annotations

import hashlib
import sysconfig
import zlib
from pathlib import Path

import numpy as np

from .._validate import as_bool
from ._check import as_dir

__all__ = ["SOURCE", "LICENCE", "SOURCE_ZH", "LICENCE_ZH", "SHA256", "stdlib_corpus",
           "unigram_entropy"]

SOURCE = "CPython 3.11.7 standard library, top-level *.py modules"
LICENCE = "Python Software Foundation License Version 2 (PSF-2.0)"
#: :data:`SOURCE` and :data:`LICENCE` in Chinese, for the Chinese edition's text.
SOURCE_ZH = "CPython 3.11.7 标准库的顶层 *.py 模块"
LICENCE_ZH = "Python 软件基金会许可证第 2 版（PSF-2.0）"
#: SHA-256 of train + held-out text under CPython 3.11.7 (see :func:`stdlib_corpus`).
SHA256 = {"train": "eb96103317b00fcfaf8cfb3ea370690a05abd1a465a22e2885913c257b8486ab",
          "heldout": "7a14121169810b88370447104fb729e7f9b797419ee2712eab1a5f0cb8a3506b"}


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.py") if p.is_file())


def stdlib_corpus(root: str | None = None, *, check: bool = True) -> tuple[bytes, bytes]:
    """The corpus as ``(train, heldout)`` byte strings.

    Parameters
    ----------
    root : str, optional
        The standard-library directory (default: the running interpreter's).
    check : bool, default True
        Compare the SHA-256 of both parts with :data:`SHA256` (the book's
        CPython 3.11.7 text) and raise if they differ.

    Returns
    -------
    train, heldout : bytes
        Concatenated files (each after a ``# ==> name <==`` line); a file is in
        ``heldout`` iff ``zlib.crc32(name) % 10 == 0``.

    Raises
    ------
    ValueError
        No ``*.py`` file under ``root``.
    RuntimeError
        ``check`` and the text is not the book's (another Python version).
    """
    check = as_bool(check, "check")
    base = Path(sysconfig.get_paths()["stdlib"]) if root is None else as_dir(root, "root")
    files = _files(base)
    if not files:
        raise ValueError(f"root must be a directory with *.py files; got {str(base)!r}")
    parts: dict[str, list[bytes]] = {"train": [], "heldout": []}
    for p in files:
        part = "heldout" if zlib.crc32(p.name.encode()) % 10 == 0 else "train"
        parts[part].append(f"# ==> {p.name} <==\n".encode() + p.read_bytes())
    out = {k: b"".join(v) for k, v in parts.items()}
    if check and all(SHA256.values()):
        for k, text in out.items():
            h = hashlib.sha256(text).hexdigest()
            if h != SHA256[k]:
                raise RuntimeError(f"the {k} text under {str(base)!r} has SHA-256 {h}, not the "
                                   f"book's {SHA256[k]} ({SOURCE}); pass check=False to use it")
    return out["train"], out["heldout"]


def unigram_entropy(data: bytes) -> float:
    r"""Empirical unigram entropy of the bytes, :math:`-\sum_b p_b \log_2 p_b`, in bits per byte.

    Exact for the byte frequencies of ``data`` (non-empty bytes).
    """
    if not isinstance(data, (bytes, bytearray)) or len(data) == 0:
        raise ValueError(f"data must be non-empty bytes; got {type(data).__name__} of length "
                         f"{len(data) if hasattr(data, '__len__') else 'n/a'}")
    counts = np.bincount(np.frombuffer(bytes(data), dtype=np.uint8), minlength=256)
    p = counts[counts > 0] / len(data)
    return float(-(p * np.log2(p)).sum())
