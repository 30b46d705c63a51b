r"""Chapter 6's trained models, shipped as a versioned file, and the code that makes them.

A 300-step float32 Adam run is not bit-reproducible across machines: the BLAS
kernel (FMA, blocking) changes the rounding, and the trained weights differ
from one CPU to another. So the book does not retrain at build time. It loads
the weights in :data:`DATA_FILE`, made by :func:`train` with the fixed
:data:`RECIPE` (Chapter 4's runs: Pre-LN without warm-up, Post-LN with 60
warm-up steps, seed 0), and it states only what :func:`statements` checks.
``tests/test_pretrained.py`` retrains on the machine running the tests and
checks that every one of those statements holds for the new weights too.

Regenerate the file (it is small: two 6-layer models with d = 32) with::

    python -m lipattn.book.pretrained            # writes DATA_FILE
    python -m lipattn.book.pretrained --out x.npz

The file stores the float32 parameters exactly, with the recipe, the numpy
version and the BLAS configuration that made them (``meta``). The shipped file
was made with ``OPENBLAS_CORETYPE=Prescott`` (numpy's OpenBLAS, x86-64); on the
machine that made it, retraining under the Prescott or Sandybridge kernel
reproduced it bit for bit, and under Haswell it did not.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import as_count, as_seed
from ..attention import attention_matrix
from ..models.encoder import PARAM_NAMES, attention_inputs
from ..models.encoder_sublayers import SublayerConstants, sublayer_constants
from ..models.training import init_model, model_forward, reversal_batch, train_model
from ._check import as_reals, as_result, as_tokens

__all__ = ["DATA_FILE", "FORMAT", "RECIPE", "SIZES", "train", "save", "load", "init",
           "eval_tokens", "Measurements", "measure", "statements", "main"]

#: The shipped weights.
DATA_FILE = Path(__file__).with_name("data") / "reversal_models.npz"
#: Version of the file layout (bump when the keys change).
FORMAT = 1
#: Sizes of the runs: Chapter 4's ``viz.prenorm.TRAIN`` (a test checks they agree).
SIZES = {"layers": 6, "d": 32, "vocab": 16, "n_tokens": 8, "batch": 16, "steps": 300}
#: Learning rate and warm-up of each variant, and the seed.
RECIPE = {"pre": {"lr": 1e-2, "warmup": 0}, "post": {"lr": 1e-2, "warmup": 60}, "seed": 0}
_VARIANTS = ("pre", "post")


def train(seed: int = RECIPE["seed"]) -> dict[str, dict[str, Any]]:
    """Train both models with :data:`RECIPE` and :data:`SIZES` on this machine.

    Returns
    -------
    dict
        ``{"pre": model, "post": model}``, each as from
        :func:`lipattn.models.training.train_model` (float32 parameters).
    """
    return {v: train_model(v, lr=RECIPE[v]["lr"], warmup=RECIPE[v]["warmup"], seed=seed,
                           **SIZES) for v in _VARIANTS}


def init(seed: int = RECIPE["seed"]) -> dict[str, Any]:
    """The models' common starting point (:func:`lipattn.models.training.init_model`)."""
    return init_model(SIZES["layers"], SIZES["d"], SIZES["vocab"], SIZES["n_tokens"],
                      seed=as_seed(seed))


def _meta() -> dict[str, Any]:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # numpy >= 1.25
    except Exception:  # pragma: no cover - numpy without mode="dicts"
        blas = {}
    return {"format": FORMAT, "recipe": RECIPE, "sizes": SIZES, "numpy": np.__version__,
            "blas": {k: str(v) for k, v in blas.items()},
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}


def save(models: dict[str, dict[str, Any]], path: str | Path = DATA_FILE) -> Path:
    """Write ``{"pre": model, "post": model}`` to an ``.npz`` file (parameters exact)."""
    if not isinstance(models, dict) or set(models) != set(_VARIANTS):
        raise ValueError(f"models must be a dict with keys {_VARIANTS}; got {models!r:.80}")
    arrays = {"meta": np.array(json.dumps(_meta()))}
    for v, m in models.items():
        for k in ("embed", "pos", "unembed"):
            arrays[f"{v}/{k}"] = np.asarray(m[k])
        for i, p in enumerate(m["blocks"]):
            arrays[f"{v}/heads/{i}"] = np.array(p["heads"])
            for k in PARAM_NAMES:
                arrays[f"{v}/blocks/{i}/{k}"] = np.asarray(p[k])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        np.savez_compressed(fh, **arrays)
    return path


def load(path: str | Path = DATA_FILE) -> dict[str, dict[str, Any]]:
    """Read the models written by :func:`save` (default: the shipped :data:`DATA_FILE`).

    Returns
    -------
    dict
        ``{"pre": model, "post": model}`` with the keys of
        :func:`lipattn.models.training.train_model`'s models.
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path; got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must name a file written by save(); got {path}")
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        if meta.get("format") != FORMAT:
            raise ValueError(f"path has format {meta.get('format')!r}; this code reads {FORMAT}")
        out = {}
        for v in _VARIANTS:
            blocks = [{"heads": int(z[f"{v}/heads/{i}"])}
                      | {k: z[f"{v}/blocks/{i}/{k}"] for k in PARAM_NAMES}
                      for i in range(meta["sizes"]["layers"])]
            out[v] = {"blocks": blocks, "variant": v,
                      **{k: z[f"{v}/{k}"] for k in ("embed", "pos", "unembed")}}
    return out


def eval_tokens(batch: int = 16) -> np.ndarray:
    """The fresh evaluation sequences of Chapter 6, shape (batch, n_tokens)."""
    batch = as_count(batch, "batch", maximum=10**5)
    return reversal_batch(np.random.default_rng(7), batch, SIZES["n_tokens"], SIZES["vocab"])[0]


@dataclass(frozen=True)
class Measurements:
    r"""What Chapter 6 measures on the trained models.

    Attributes
    ----------
    accuracy : dict
        Reversal accuracy of each variant on the evaluation tokens.
    const : dict
        ``const[variant, state]`` (state ``"init"`` or ``"trained"``):
        :class:`lipattn.models.encoder_sublayers.SublayerConstants`, shapes (L, B).
    target_weight : dict
        ``target_weight[variant]``, shape (L, B, N): the weight
        :math:`P_{i, N-1-i}` that query i of layer l puts on the token it must copy.
    argmax_ok : dict
        ``argmax_ok[variant]``, shape (L, B, N): whether that token has query i's
        largest weight.
    reversal_layer : dict
        The layer with the largest median target weight (0-based), per variant.
    scaled : dict
        Trained Pre-LN on the first half of the sequences, inputs scaled by
        2, 4 and 8: ``{scale: SublayerConstants}``.
    """

    accuracy: dict[str, float]
    const: dict[tuple[str, str], SublayerConstants]
    target_weight: dict[str, np.ndarray]
    argmax_ok: dict[str, np.ndarray]
    reversal_layer: dict[str, int]
    scaled: dict[float, SublayerConstants]


def measure(models: dict[str, dict[str, Any]], tokens: Any = None,
            scales: tuple[float, ...] = (2.0, 4.0, 8.0)) -> Measurements:
    """Everything Chapter 6 reports about ``models`` (float64, exact constants)."""
    models = as_result(models, "models", _VARIANTS, producer="train or load")
    for v in _VARIANTS:
        as_result(models[v], f"models[{v!r}]", ("blocks", "embed", "pos", "unembed"),
                  producer="train or load")
    tok = eval_tokens() if tokens is None else as_tokens(
        tokens, "tokens", SIZES["vocab"], SIZES["n_tokens"])
    scales = tuple(float(s) for s in as_reals(scales, "scales", positive=True, maximum=1e6))
    start = init()
    N = tok.shape[-1]
    target = np.arange(N)[::-1]
    acc, const, tw, ok, layer = {}, {}, {}, {}, {}
    for v, m in models.items():
        pred = model_forward(m, tok).argmax(axis=-1)
        acc[v] = float(np.mean(pred == tok[:, ::-1]))
        for state, mm in (("init", start), ("trained", m)):
            const[v, state] = sublayer_constants(mm["blocks"], mm["embed"][tok] + mm["pos"],
                                                 variant=v)
        blocks = [{k: x if k == "heads" else np.asarray(x, dtype=float) for k, x in p.items()}
                  for p in m["blocks"]]
        H = attention_inputs(blocks, m["embed"][tok] + m["pos"], variant=v)
        P = np.stack([attention_matrix(h, p["W_Q"], p["W_K"]) for h, p in zip(H, blocks,
                                                                            strict=True)])
        tw[v] = P[..., np.arange(N), target]
        ok[v] = P.argmax(axis=-1) == target
        layer[v] = int(np.argmax(np.median(tw[v], axis=(1, 2))))
    pre = models["pre"]
    half = tok[: max(1, tok.shape[0] // 2)]
    scaled = {s: sublayer_constants(pre["blocks"], pre["embed"][half] + pre["pos"],
                                    variant="pre", input_scale=s) for s in scales}
    return Measurements(acc, const, tw, ok, layer, scaled)


def statements(m: Measurements) -> dict[str, bool]:
    """Chapter 6's qualitative statements about the trained models, each with a margin.

    Every statement the chapter makes about them is one entry; the chapter
    asserts them on the shipped weights, and the tests on weights retrained on
    the machine running them. Layers are picked by measurement
    (:attr:`Measurements.reversal_layer`), not by index. Post-LN is described
    less: its picture moves with the BLAS kernel (which layer reverses, how
    saturated it is), so only what survives retraining is stated.
    """
    m = as_result(m, "m", cls=Measurements, producer="measure")
    c = m.const
    med = {k: np.median(v.exact, axis=1) for k, v in c.items()}
    pre, r_pre = c["pre", "trained"], m.reversal_layer["pre"]
    out = {}
    out["both models reverse (accuracy >= 0.9)"] = min(m.accuracy.values()) >= 0.9
    out["the bound is never below the exact constant"] = all(
        np.all(v.bound >= v.exact * (1 - 1e-12)) for v in [*c.values(), *m.scaled.values()])
    out["at init every layer's median exceeds ||W_V W_O||"] = bool(
        np.all(med["pre", "init"] > c["pre", "init"].value_norm)
        and np.all(med["post", "init"] > c["post", "init"].value_norm))
    out["training raises every Pre-LN median above every init median"] = bool(
        med["pre", "trained"].min() > med["pre", "init"].max())
    for v in _VARIANTS:
        r = m.reversal_layer[v]
        out[f"{v}: some layer's median target weight is at least 0.95"] = bool(
            np.median(m.target_weight[v][r]) >= 0.95)
        out[f"{v}: in it at least 95% of the queries put their top weight on the target"] = \
            bool(np.mean(m.argmax_ok[v][r]) >= 0.95)
    ratio = np.median(pre.exact[r_pre]) / pre.value_norm[r_pre]
    out["pre: there the median exact / ||W_V W_O|| is within 5% of 1"] = bool(
        abs(ratio - 1) < 0.05)
    out["pre: the reversal layer is the first"] = r_pre == 0
    out["pre: no other layer puts a median weight of 0.5 on the target"] = bool(
        np.all(np.delete(np.median(m.target_weight["pre"], axis=(1, 2)), r_pre) < 0.5))
    out["pre: the other layers spread their weight (median top weight < 0.9)"] = bool(
        np.all(np.delete(np.median(pre.top_weight, axis=1), r_pre) < 0.9))
    loose = np.median(pre.bound / pre.exact, axis=1)
    out["pre: the bound is within a median factor 2 in the reversal layer"] = bool(
        loose[r_pre] < 2)
    out["pre: and looser by a factor >= 2 in every other layer"] = bool(
        np.all(np.delete(loose, r_pre) > 2 * loose[r_pre]))
    out["the card formula lies above every exact constant (ratio < 0.5)"] = bool(
        max(np.max(v.exact / v.card) for v in c.values()) < 0.5)
    n = int(np.sum(np.median(pre.card, 1) < np.median(pre.bound, 1)))
    out["in some trained Pre-LN layer the card's median is below the bound's"] = n >= 1
    big = m.scaled[max(m.scaled)]
    half = big.exact.shape[1]
    out["scaled inputs: the exact constant gets closer to the card formula"] = bool(
        np.max(big.exact / big.card) > np.max(pre.exact[:, :half] / pre.card[:, :half]))
    out["scaled inputs: attention saturates more"] = bool(
        np.median(big.top_weight) > np.median(pre.top_weight[:, :half]))
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: retrain with :data:`RECIPE` and write the file."""
    ap = argparse.ArgumentParser(prog="python -m lipattn.book.pretrained", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DATA_FILE, help="output .npz file")
    args = ap.parse_args(argv)
    models = train()
    failed = [k for k, ok in statements(measure(models)).items() if not ok]
    path = save(models, args.out)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    if failed:
        print("warning: on these weights the chapter's statements fail:", *failed, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

