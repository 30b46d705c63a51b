"""Tests of :mod:`lipattn.book.pretrained`: the shipped weights load and round-trip, the recipe
is Chapter 4's, and retraining on this machine reproduces every statement Chapter 6
makes about the trained models (whatever BLAS kernel this machine runs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lipattn.book import pretrained
from lipattn.book.viz import prenorm
from lipattn.models import training
from lipattn.models.encoder import PARAM_NAMES


def test_recipe_is_chapter_4s():
    assert pretrained.SIZES == prenorm.TRAIN
    assert pretrained.RECIPE["seed"] in prenorm.TRAIN_SEEDS


def test_shipped_file_loads_and_round_trips(tmp_path):
    models = pretrained.load()
    assert set(models) == {"pre", "post"}
    for v, m in models.items():
        assert m["variant"] == v and len(m["blocks"]) == pretrained.SIZES["layers"]
        assert all(p["W_Q"].dtype == np.float32 for p in m["blocks"])
        tok = pretrained.eval_tokens(4)
        assert training.model_forward(m, tok).shape == (4, pretrained.SIZES["n_tokens"],
                                                        pretrained.SIZES["vocab"])
    path = pretrained.save(models, tmp_path / "m.npz")
    again = pretrained.load(path)
    for v in models:
        for p, q in zip(models[v]["blocks"], again[v]["blocks"], strict=True):
            assert p["heads"] == q["heads"]
            for k in PARAM_NAMES:
                assert np.array_equal(p[k], q[k])
        for k in ("embed", "pos", "unembed"):
            assert np.array_equal(models[v][k], again[v][k])
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
    assert meta["recipe"] == json.loads(json.dumps(pretrained.RECIPE))


def test_shipped_weights_differ_from_their_start():
    """The file holds trained weights, not an initialisation."""
    start, m = pretrained.init(), pretrained.load()["pre"]
    assert not np.allclose(start["embed"], m["embed"])


def test_retraining_reproduces_every_statement():
    """Retrain on this machine (its own BLAS kernel) and check each of Chapter 6's
    statements about the trained models on the new weights."""
    checks = pretrained.statements(pretrained.measure(pretrained.train()))
    assert len(checks) >= 15
    failed = [k for k, ok in checks.items() if not ok]
    assert not failed, failed


def test_statements_can_fail():
    """On untrained weights the reversal statements are false."""
    start = pretrained.init()
    untrained = {v: start | {"variant": v} for v in ("pre", "post")}
    checks = pretrained.statements(pretrained.measure(untrained))
    assert not checks["both models reverse (accuracy >= 0.9)"]
    assert not checks["pre: some layer's median target weight is at least 0.95"]


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="path"):
        pretrained.load(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="models"):
        pretrained.save({"pre": {}}, tmp_path / "x.npz")
