"""`make bench`: the book's benchmarks (not timed tests).

- every explorer's ``render`` (compute + redraw in place + PNG encode):
  median and p95 over its whole slider grid, and its slowest setting, next to
  a naive redraw measured in the same run (a new figure per frame, saved as a
  tight-bbox PNG, as a plain ``ipywidgets.interact`` would do);
- the library routines' own benchmarks (``bench_*.py`` beside this file).

Targets: median <= 30 ms and p95 <= 60 ms per explorer.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import time
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lipattn.book.widgets import EXPLORERS

MEDIAN_TARGET_MS = 30.0
P95_TARGET_MS = 60.0


def _naive_ms(factory, values: dict, repeats: int) -> float:
    """A plain ``interact``-style redraw: a new figure per frame, built from scratch
    by the explorer's own ``setup`` and ``update``, saved as a tight-bbox PNG."""
    scratch = factory()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fig = Figure(figsize=(scratch.width, scratch.height), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        scratch.setup(fig)
        scratch.update(**(scratch.defaults | values))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def bench_explorers(repeats: int = 3) -> list[dict]:
    """Time ``render`` at every grid point of every registered explorer.

    Every slider position is timed ``repeats`` times in a shuffled order; the
    median and p95 are over all those renders, and the slowest grid point
    (by its median) is named so that extreme settings are visible.
    """
    rng = np.random.default_rng(0)
    rows = []
    for name, factory in EXPLORERS.items():
        ex = factory()
        grid = list(ex.grid())
        ex.render(**grid[0])  # warm-up
        per_point: list[list[float]] = [[] for _ in grid]
        order = np.concatenate([rng.permutation(len(grid)) for _ in range(repeats)])
        for i in order:
            t0 = time.perf_counter()
            ex.render(**grid[i])
            per_point[i].append(time.perf_counter() - t0)
        ms = 1e3 * np.concatenate(per_point)
        worst = int(np.argmax([np.median(t) for t in per_point]))
        row = {
            "explorer": name,
            "frames": len(grid),
            "median_ms": float(np.median(ms)),
            "p95_ms": float(np.percentile(ms, 95)),
            "worst_point": grid[worst],
            "worst_point_ms": 1e3 * float(np.median(per_point[worst])),
            "naive_ms": _naive_ms(factory, grid[0], repeats=5),
        }
        row["ok"] = row["median_ms"] <= MEDIAN_TARGET_MS and row["p95_ms"] <= P95_TARGET_MS
        rows.append(row)
        print(f"explorer {name:22s} render median {row['median_ms']:5.1f} ms  "
              f"p95 {row['p95_ms']:5.1f} ms  | naive redraw {row['naive_ms']:6.1f} ms  "
              f"| {row['frames']} frames  [{'ok' if row['ok'] else 'SLOW'}; targets "
              f"{MEDIAN_TARGET_MS:.0f}/{P95_TARGET_MS:.0f} ms]", flush=True)
        print(f"    slowest setting {row['worst_point']}: median {row['worst_point_ms']:.1f} ms",
              flush=True)
    return rows


def _library_benchmarks() -> list[dict]:
    rows = []
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"--- {path.name}", flush=True)
        rows.extend(module.main())
    return rows


def main() -> int:
    print("--- explorers (render = compute + redraw + PNG encode)", flush=True)
    explorer_rows = bench_explorers()
    library_rows = _library_benchmarks()
    failed = [r["explorer"] for r in explorer_rows if not r["ok"]]
    failed += [r.get("name", "?") for r in library_rows if r.get("ok") is False]
    if failed:
        print(f"targets missed: {failed}")
        return 1
    print("all benchmark targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
