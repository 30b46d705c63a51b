"""Benchmark of :mod:`lipattn.collapse`: float64 against mpmath trajectories.

The signature figure of Chapter 3 runs an 8-layer stack (N = d = 8) in mpmath
with 600 digits. The cost of the mpmath path grows with ``dps`` (multiplication
of ``dps``-digit numbers and ``exp``) and with ``N^2 d`` per layer. Target:
the chapter's setting stays under 2 s, so the page executes in well under a
minute.

Run with ``python benchmarks/bench_collapse.py``; :func:`main` returns one dict
per timing.
"""

from __future__ import annotations

import time

import numpy as np

from lipattn.collapse import random_weights, trajectory

TARGET_S = 2.0


def main() -> list[dict]:
    """Time :func:`lipattn.collapse.trajectory` in float64 and at several ``dps``.

    Returns
    -------
    list of dict
        Keys ``name``, ``dps``, ``n``, ``d``, ``layers``, ``seconds`` and ``ok``
        (only the chapter's setting, dps = 600, has a target).
    """
    rows = []
    n = d = layers = 8
    X = np.random.default_rng(0).standard_normal((n, d)) + 1.0
    W = random_weights(d, 1.0, layers, seed=0)
    for dps in (None, 100, 300, 600):
        start = time.perf_counter()
        trajectory(X, *W, layers, dps=dps, log10=True)
        seconds = time.perf_counter() - start
        ok = seconds <= TARGET_S if dps == 600 else None
        rows.append({"name": f"trajectory dps={dps}", "dps": dps, "n": n, "d": d,
                     "layers": layers, "seconds": seconds, "ok": ok})
        flag = "" if ok is None else ("  [ok]" if ok else f"  [SLOW; target {TARGET_S} s]")
        print(f"trajectory  N={n} d={d} L={layers}  dps={dps!s:>4s}  "
              f"{1e3 * seconds:8.1f} ms{flag}")
    return rows


if __name__ == "__main__":
    main()
