"""`make bench`: the book's benchmarks (not timed tests).

- every explorer's ``render`` (compute + redraw in place + PNG encode):
  median and p95 over its whole slider grid, and its slowest setting, next to
  a naive redraw measured in the same run (a new figure per frame, saved as a
  tight-bbox PNG, as a plain ``ipywidgets.interact`` would do);
- the library routines' own benchmarks (``bench_*.py`` beside this file).

Targets: median <= 30 ms and p95 <= 60 ms per explorer, and a median at most
0.15x the naive redraw. Every time is taken twice: wall clock
(``time.perf_counter``), which the targets are about, and this process's CPU
time (``time.process_time``), which a loaded machine does not inflate; the
``x naive`` ratios compare the two renderings in the same run.
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

from lipattn.book.explorers import EXPLORERS

MEDIAN_TARGET_MS = 30.0
P95_TARGET_MS = 60.0
NAIVE_RATIO_TARGET = 0.15


def _clocks() -> np.ndarray:
    return np.array([time.perf_counter(), time.process_time()])


def _naive_ms(factory, values: dict, repeats: int) -> np.ndarray:
    """A plain ``interact``-style redraw: a new figure per frame, built from scratch
    by the explorer's own ``setup`` and ``update``, saved as a tight-bbox PNG.

    Returns the median (wall, CPU) milliseconds."""
    scratch = factory()
    times = []
    for _ in range(repeats):
        t0 = _clocks()
        fig = Figure(figsize=(scratch.width, scratch.height), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        scratch.setup(fig)
        scratch.update(**(scratch.defaults | values))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        times.append(_clocks() - t0)
    return 1e3 * np.median(times, axis=0)


def bench_explorers(repeats: int = 3, names: list[str] | None = None) -> list[dict]:
    """Time ``render`` at every grid point of every registered explorer.

    Every slider position is timed ``repeats`` times in a shuffled order; the
    median and p95 are over all those renders, and the slowest grid point
    (by its median) is named so that extreme settings are visible.
    """
    rng = np.random.default_rng(0)
    rows = []
    for name, factory in EXPLORERS.items():
        if names is not None and name not in names:
            continue
        ex = factory()
        grid = list(ex.grid())
        ex.render(**grid[0])  # warm-up
        per_point: list[list[np.ndarray]] = [[] for _ in grid]
        order = np.concatenate([rng.permutation(len(grid)) for _ in range(repeats)])
        for i in order:
            t0 = _clocks()
            ex.render(**grid[i])
            per_point[i].append(_clocks() - t0)
        ms = 1e3 * np.concatenate([np.array(t) for t in per_point])  # (renders, [wall, cpu])
        worst = int(np.argmax([np.median(np.array(t)[:, 0]) for t in per_point]))
        median, p95 = np.median(ms, axis=0), np.percentile(ms, 95, axis=0)
        naive = _naive_ms(factory, grid[0], repeats=5)
        row = {
            "explorer": name,
            "frames": len(grid),
            "median_ms": float(median[0]),
            "p95_ms": float(p95[0]),
            "cpu_median_ms": float(median[1]),
            "cpu_p95_ms": float(p95[1]),
            "worst_point": grid[worst],
            "worst_point_ms": 1e3 * float(np.median(np.array(per_point[worst])[:, 0])),
            "naive_ms": float(naive[0]),
            "cpu_naive_ms": float(naive[1]),
        }
        row["x_naive"] = row["median_ms"] / row["naive_ms"]
        row["cpu_x_naive"] = row["cpu_median_ms"] / row["cpu_naive_ms"]
        row["ok"] = (row["median_ms"] <= MEDIAN_TARGET_MS and row["p95_ms"] <= P95_TARGET_MS
                     and row["x_naive"] <= NAIVE_RATIO_TARGET)
        rows.append(row)
        print(f"explorer {name:20s} wall median {row['median_ms']:5.1f} p95 {row['p95_ms']:5.1f} "
              f"ms x{row['x_naive']:.2f} | cpu median {row['cpu_median_ms']:5.1f} p95 "
              f"{row['cpu_p95_ms']:5.1f} ms x{row['cpu_x_naive']:.2f} | naive "
              f"{row['naive_ms']:5.0f} ms (cpu {row['cpu_naive_ms']:3.0f}) | "
              f"{row['frames']} frames "
              f"[{'ok' if row['ok'] else 'SLOW'}; targets {MEDIAN_TARGET_MS:.0f}/"
              f"{P95_TARGET_MS:.0f} ms, x{NAIVE_RATIO_TARGET}]", flush=True)
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


def main(argv: list[str]) -> int:
    """``run.py [--explorers] [NAME ...]``: only the named explorers, if any;
    ``--explorers`` skips the library benchmarks."""
    names = [a for a in argv if not a.startswith("--")] or None
    print("--- explorers (render = compute + redraw + PNG encode)", flush=True)
    explorer_rows = bench_explorers(names=names)
    library_rows = [] if "--explorers" in argv else _library_benchmarks()
    failed = [r["explorer"] for r in explorer_rows if not r["ok"]]
    failed += [r.get("name", "?") for r in library_rows if r.get("ok") is False]
    if failed:
        print(f"targets missed: {failed}")
        return 1
    print("all benchmark targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
