"""``lmgym compare RUN...``: several runs side by side (the seeds of one ``lmgym train --seeds``,
or any runs): before and after per run with 95% intervals, the mean over runs with its 95%
t-interval, wall time; one learning-curve plot with a band across the runs; ``compare.json``."""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from pathlib import Path
from typing import Any

from lmgym.cli.errors import UsageError
from lmgym.cli.options import add_output_flags, table
from lmgym.storage import write_aside

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
"""Student's t quantile (97.5%) by degrees of freedom: the 95% interval of a mean over a few seeds."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="runs side by side: before/after per run, the mean over them, a plot")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (lmgym train --out)")
    add_output_flags(p, (None, "where compare.json and compare.png go (default: the first run's parent)"))
    p.set_defaults(func=compare_command)


def t_interval(values: list[float]) -> tuple[float, float]:
    """The 95% t-interval of the mean of ``values`` (a point for one value).

    Example:
        >>> [round(x, 3) for x in t_interval([0.4, 0.5, 0.6])]
        [0.252, 0.748]
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def read_run(path: Path) -> dict[str, Any]:
    summary_file = path / "summary.json"
    if not summary_file.is_file():
        raise UsageError(f"{str(path)!r} holds no finished run (no summary.json)")
    summary = json.loads(summary_file.read_text())
    with open(path / "metrics.csv", newline="") as f:
        curve = [(int(r["step"]), float(r["eval/success"])) for r in csv.DictReader(f) if r.get("eval/success")]
    return {
        "run": str(path),
        "seed": summary.get("seed"),
        **{k: summary[k] for k in ("before", "after")},
        "wall_seconds": summary.get("wall_seconds"),
        "curve": curve,
    }


def compare(runs: list[Path], out: Path) -> dict[str, Any]:
    """Reads the runs, writes ``out/compare.json`` and ``out/compare.png``, returns the comparison."""
    rows = [read_run(path) for path in runs]
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "runs": rows,
        "before": {
            "mean": statistics.fmean(r["before"]["success"] for r in rows),
            "t95": list(t_interval([r["before"]["success"] for r in rows])),
        },
        "after": {
            "mean": statistics.fmean(r["after"]["success"] for r in rows),
            "t95": list(t_interval([r["after"]["success"] for r in rows])),
        },
        "interval": "95% Student t-interval of the mean over runs (each run's own: 95% Wilson)",
    }
    write_aside(out / "compare.json", json.dumps(summary, indent=2))
    plot(rows, out / "compare.png")
    return summary


def plot(rows: list[dict[str, Any]], png: Path) -> None:
    """Greedy success per update of each run, and the band from the lowest to the highest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = sorted({s for r in rows for s, _ in r["curve"]})
    by_step = [[dict(r["curve"])[s] for r in rows if s in dict(r["curve"])] for s in steps]
    if steps:
        ax.fill_between(steps, [min(v) for v in by_step], [max(v) for v in by_step], alpha=0.25, label="range")
        ax.plot(steps, [statistics.fmean(v) for v in by_step], label="mean")
    for r in rows:
        ax.plot(*zip(*r["curve"]), lw=0.8, alpha=0.6, label=f"seed {r['seed']}") if r["curve"] else None
    ax.set_xlabel("update")
    ax.set_ylabel("greedy success (held-out)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def printed(summary: dict[str, Any]) -> str:
    def pct(x: float) -> str:
        return f"{x:.1%}"

    def ci(phase: dict[str, Any]) -> str:
        lo, hi = phase.get("success_ci") or phase["t95"]
        return f"{pct(phase.get('success', phase.get('mean', 0)))} ({lo:.1%}-{hi:.1%})"

    rows = [
        [f"seed {r['seed']}", ci(r["before"]), ci(r["after"]), f"{r['wall_seconds'] or 0:.0f}"] for r in summary["runs"]
    ]
    rows.append(["mean (t95)", ci(summary["before"]), ci(summary["after"]), ""])
    return table(["run", "before", "after", "wall s"], rows)


def compare_command(args: argparse.Namespace) -> None:
    runs = [Path(r) for r in args.runs]
    out = Path(args.out) if args.out else runs[0].parent
    print(printed(compare(runs, out)))
    print(f"wrote {out / 'compare.json'} and {out / 'compare.png'}")


__all__ = ["add_parser", "compare", "compare_command", "t_interval"]
