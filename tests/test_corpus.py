import math

import numpy as np
import pytest

from lipattn.book.corpus import stdlib_corpus, unigram_entropy


def test_corpus_is_large_split_and_pinned():
    train, heldout = stdlib_corpus()  # raises if not the book's CPython 3.11.7 text
    assert len(train) + len(heldout) >= 1_000_000 and len(heldout) >= 100_000
    names = lambda t: {ln for ln in t.split(b"\n") if ln.startswith(b"# ==> ")}  # noqa: E731
    assert not names(train) & names(heldout)


def test_unigram_entropy_closed_forms():
    assert unigram_entropy(b"aaaa") == 0.0
    assert math.isclose(unigram_entropy(bytes(range(256)) * 3), 8.0)
    data = np.random.default_rng(0).integers(0, 4, 1000).astype(np.uint8).tobytes()
    p = np.bincount(np.frombuffer(data, np.uint8)) / 1000
    assert math.isclose(unigram_entropy(data), -(p * np.log2(p)).sum())
    with pytest.raises(ValueError, match="data must be non-empty bytes"):
        unigram_entropy(b"")
