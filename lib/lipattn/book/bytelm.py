r"""The book's byte-level language model: a GPT-2-layout decoder trained on real text.

Vocabulary 256 (token = UTF-8 byte, no tokenizer), trained in float32 numpy on
:func:`lipattn.book.corpus.stdlib_corpus`'s training part through
:mod:`lipattn.layers` (:class:`~lipattn.layers.CausalLM` around
:class:`~lipattn.models.GPT2`'s blocks) and :func:`lipattn.models.training.train_stack`,
then written as a Hugging Face ``GPT2LMHeadModel`` checkpoint
(:meth:`~lipattn.models.GPT2.save_pretrained`). Losses are reported in bits per
byte; the held-out loss is the mean over fixed, evenly spaced windows of the
held-out text, which the model never trains on.

Run ``python -m lipattn.book.bytelm --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from ..layers import CausalLM, Sequential, cross_entropy
from ..models import GPT2, random_state_dict
from ..models.training import train_stack
from .corpus import LICENCE, SOURCE, stdlib_corpus, unigram_entropy

__all__ = ["build", "heldout_windows", "heldout_bits", "main"]

LN2 = math.log(2.0)


def build(n_layer: int = 4, d: int = 128, n_head: int = 4, context: int = 128, *,
          seed: int = 0) -> tuple[GPT2, CausalLM]:
    """A freshly initialised float32 byte-level GPT-2 (GPT-2's init, std 0.02) and its
    trainable :class:`~lipattn.layers.CausalLM` (which shares its arrays)."""
    sd = random_state_dict("gpt2", n_layer, d, n_head, vocab=256, n_pos=context, seed=seed)
    m = GPT2.from_state_dict({k: v.astype(np.float32) for k, v in sd.items()}, n_head=n_head,
                             dtype=np.float32)
    return m, CausalLM(m.wte, m.wpe, Sequential(list(m.blocks) + [m.final]))


def heldout_windows(text: bytes, context: int, count: int) -> np.ndarray:
    """``count`` evenly spaced windows of ``context + 1`` bytes, shape (count, context + 1)."""
    a = np.frombuffer(text, np.uint8)
    starts = np.linspace(0, a.size - context - 1, count).astype(np.int64)
    return a[starts[:, None] + np.arange(context + 1)].astype(np.int64)


def heldout_bits(lm: CausalLM, windows: np.ndarray, batch: int = 16) -> float:
    """Mean next-byte cross-entropy in bits per byte over the windows (count, N + 1)."""
    tot = 0.0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch]
        tot += cross_entropy(lm.forward(w[:, :-1])[0], w[:, 1:])[0] * len(w)
    return tot / len(windows) / LN2


def main(argv: list[str] | None = None) -> dict:
    """Train, evaluate on held-out text every ``--eval-every`` steps, write the checkpoint.

    With ``--out DIR``: ``DIR/config.json``, ``DIR/model.safetensors``,
    ``DIR/heldout.txt`` (the first ``--heldout-bytes`` of the held-out text) and
    ``DIR/training.json`` (arguments, per-step training bits/byte, the held-out
    curve, s/step). Returns the same dictionary as ``training.json``.
    """
    ap = argparse.ArgumentParser(prog="python -m lipattn.book.bytelm", description=__doc__)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None, help="checkpoint directory")
    ap.add_argument("--heldout-bytes", type=int, default=32768,
                    help="bytes of held-out text written to OUT/heldout.txt")
    a = ap.parse_args(argv)
    train, heldout = stdlib_corpus()
    H_uni = unigram_entropy(heldout)
    print(f"corpus: {SOURCE} ({LICENCE}); train {len(train)} B, held-out {len(heldout)} B, "
          f"held-out unigram entropy {H_uni:.4f} bits/byte (target <= {0.7 * H_uni:.4f})")
    m, lm = build(a.layers, a.d, a.heads, a.context, seed=a.seed)
    tr = np.frombuffer(train, np.uint8)
    rng = np.random.default_rng(a.seed)
    win = heldout_windows(heldout, a.context, a.eval_windows)
    N = a.context

    def batches(t: int):
        s = rng.integers(0, tr.size - N - 1, a.batch)
        w = tr[s[:, None] + np.arange(N + 1)].astype(np.int64)
        return w[:, :-1], w[:, 1:]

    curve = [(0, heldout_bits(lm, win))]
    print(f"step 0: held-out {curve[0][1]:.4f} bits/byte")
    t0, train_time = time.perf_counter(), [0.0]

    def callback(t: int, loss: float) -> None:
        if (t + 1) % a.eval_every == 0 or t + 1 == a.steps:
            train_time[0] += time.perf_counter() - t0_[0]
            curve.append((t + 1, heldout_bits(lm, win)))
            print(f"step {t + 1}: train {loss / LN2:.4f}, held-out {curve[-1][1]:.4f} bits/byte, "
                  f"{train_time[0] / (t + 1):.3f} s/step", flush=True)
            t0_[0] = time.perf_counter()

    t0_ = [t0]
    losses = train_stack(lm, batches, cross_entropy, steps=a.steps, lr=a.lr, warmup=a.warmup,
                         callback=callback)
    s_step = train_time[0] / a.steps
    result = {"args": {k: str(v) for k, v in vars(a).items()}, "unigram_bits": H_uni,
              "train_bits": (losses / LN2).tolist(), "heldout_curve": curve,
              "s_per_step": s_step, "tokens_per_s": a.batch * N / s_step}
    if a.out is not None:
        m.save_pretrained(a.out)
        (Path(a.out) / "heldout.txt").write_bytes(heldout[: a.heldout_bytes])
        (Path(a.out) / "training.json").write_text(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
