"""The learning-curve picture: reward and success per update, evaluation points marked."""

from __future__ import annotations

import csv
import os
from pathlib import Path


def plot_learning_curve(metrics_csv: str | os.PathLike, png: str | os.PathLike, title: str = "") -> Path:
    """Draws ``env/return`` and ``env/success`` per update from ``metrics.csv``, with the
    greedy evaluations (``eval/success``) as marked points, and writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))

    def series(key: str) -> tuple[list[float], list[float]]:
        points = [(float(r["step"]), float(r[key])) for r in rows if r.get(key) not in (None, "")]
        return [p[0] for p in points], [p[1] for p in points]

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    # wide and pale under the success line: on 0/1-reward envs the two coincide
    ax.plot(*series("env/return"), label="mean reward (sampled, training)", color="tab:blue", alpha=0.35, lw=4)
    ax.plot(*series("env/success"), label="success (sampled, training)", color="tab:green", alpha=0.8, lw=1.2)
    if any("eval/success" in r for r in rows):
        ax.plot(*series("eval/success"), "o--", label="success (greedy, held-out seeds)", color="tab:red")
    if any("eval/tool_rate" in r for r in rows):
        ax.plot(*series("eval/tool_rate"), "s:", label="tool-call rate (greedy)", color="tab:purple", markersize=4)
    ax.set_xlabel("PPO update")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title or "lmgym training")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    return Path(png)
