"""Benchmark of :mod:`lipattn.scaling`: the saturation statistics cost O(samples * N), not d.

:func:`lipattn.scaling.saturation_stats` samples the logits of a query exactly
from ``||q||^2 ~ chi^2_d`` and ``N`` standard normals, so its time should not
change between ``d = 1`` and ``d = 4096`` and should grow linearly in
``samples``. For contrast, :func:`lipattn.init_gradients.gradient_norms` forms the keys
and values explicitly and costs ``O(samples * N * d)``.

Run with ``python benchmarks/bench_scaling.py``; :func:`main` returns one dict
per timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lipattn.init_gradients import gradient_norms
from lipattn.scaling import saturation_stats


def _best_time(fn: Callable[[], object], repeats: int = 3) -> float:
    """Best wall-clock time of ``repeats`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> list[dict]:
    """Time the scaling module; print one line per case and return them as dicts.

    Returns
    -------
    list of dict
        Keys ``function``, ``d``, ``n_keys``, ``samples``, ``scaled``, ``seconds`` and
        ``ns_per_element`` (seconds per ``samples * n_keys``, or per
        ``samples * n_keys * d`` for ``gradient_norms``, in nanoseconds).
    """
    rows: list[dict] = []
    cases = [
        ("saturation_stats", d, 1024, samples, True)
        for samples in (1_000, 4_000)
        for d in (1, 64, 4096)
    ]
    cases += [("saturation_stats", 4096, 1024, 4_000, False)]
    cases += [("gradient_norms", d, 64, 500, True) for d in (64, 1024)]
    for name, d, n_keys, samples, scaled in cases:
        if name == "saturation_stats":
            fn, repeats, elements = saturation_stats, 3, samples * n_keys
        else:
            fn, repeats, elements = gradient_norms, 1, samples * n_keys * d
        seconds = _best_time(lambda f=fn, a=(d, n_keys, scaled, samples): f(*a), repeats)
        row = {
            "function": name,
            "d": d,
            "n_keys": n_keys,
            "samples": samples,
            "scaled": scaled,
            "seconds": seconds,
            "ns_per_element": 1e9 * seconds / elements,
        }
        rows.append(row)
        print(
            f"{name:>17s}  d={d:5d}  N={n_keys:5d}  samples={samples:5d}  scaled={scaled!s:5s}  "
            f"{1e3 * seconds:9.1f} ms  {row['ns_per_element']:7.1f} ns/element"
        )
    sat = {
        (r["d"], r["samples"]): r["seconds"]
        for r in rows
        if r["function"] == "saturation_stats" and r["scaled"]
    }
    print(
        f"saturation_stats (scaled) time ratio d=4096 / d=1: "
        f"{sat[(4096, 4_000)] / sat[(1, 4_000)]:.2f} (independent of d); "
        f"samples 4000 / 1000: {sat[(4096, 4_000)] / sat[(4096, 1_000)]:.2f} (linear)"
    )
    return rows


if __name__ == "__main__":
    main()
