"""The learning-curve picture: success and reward per update with the greedy evaluations, the
evaluations' error mix, and the PPO diagnostics that say why a curve is flat."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from lmgym.storage import write_aside

DIAGNOSTICS = {
    "policy/entropy": "entropy",
    "objective/kl": "KL to reference",
    "policy/clipfrac": "clip fraction",
    "value/explained_variance": "explained variance",
    "advantages/raw_std": "advantage std (raw)",
}


def plot_learning_curve(metrics_csv: str | os.PathLike, png: str | os.PathLike, title: str = "") -> Path:
    """Draws from ``metrics.csv``: ``env/return`` and ``env/success`` per update with the greedy
    evaluations (``eval/success``, ``eval/tool_rate``); the evaluations' error mix
    (``eval/error/*``, when the env classifies its errors); and the diagnostics (entropy, KL,
    clip fraction, explained variance, advantage scale). Writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))

    def series(key: str, missing: float | None = None) -> tuple[list[float], list[float]]:
        points = []
        for r in rows:
            cell = r.get(key)
            if cell not in (None, ""):
                points.append((float(r["step"]), float(cell)))
            elif missing is not None and r.get("eval/success") not in (None, ""):
                points.append((float(r["step"]), missing))  # an error kind absent from an evaluation: 0
        return [p[0] for p in points], [p[1] for p in points]

    columns = list(rows[0]) if rows else []
    errors = [c for c in dict.fromkeys(k for r in rows for k in r) if c.startswith("eval/error/")]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), dpi=110, sharex=True, height_ratios=(3, 2))
    # wide and pale under the success line: on 0/1-reward envs the two coincide
    top.plot(*series("env/return"), label="mean reward (sampled, training)", color="tab:blue", alpha=0.35, lw=4)
    top.plot(*series("env/success"), label="success (sampled, training)", color="tab:green", alpha=0.8, lw=1.2)
    if any(r.get("eval/success") for r in rows):
        top.plot(*series("eval/success"), "o--", label="success (greedy, held-out seeds)", color="tab:red")
    if any(r.get("eval/tool_rate") for r in rows):
        top.plot(*series("eval/tool_rate"), "s:", label="tool-call rate (greedy)", color="tab:purple", markersize=4)
    for i, key in enumerate(errors):
        top.plot(*series(key, missing=0.0), "x-", lw=0.8, markersize=3, color=f"C{(i + 5) % 10}", label=key[5:])
    top.set_ylim(-0.02, 1.02)
    top.grid(alpha=0.3)
    top.legend(loc="center right", fontsize=7)
    top.set_title(title or "lmgym training")
    for i, (key, label) in enumerate(DIAGNOSTICS.items()):
        if key in columns or any(r.get(key) for r in rows):
            bottom.plot(*series(key), lw=1, color=f"C{i}", label=label)
    bottom.set_xlabel("PPO update")
    bottom.grid(alpha=0.3)
    bottom.legend(loc="upper right", fontsize=7, ncols=2)
    bottom.set_title("diagnostics", fontsize=9)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png")
    plt.close(fig)
    write_aside(png, image.getvalue())  # renamed into place: a link at png is replaced, not written through
    return Path(png)
