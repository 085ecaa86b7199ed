"""Metrics to ``metrics.csv`` and, when installed, TensorBoard (through accelerate's tracker)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from lmgym.storage import write_aside, writing


class MetricsLogger:
    """Logs one ``/``-namespaced dict per update to ``DIR/metrics.csv`` and TensorBoard.

    The CSV is rewritten on every log so that a column first seen late (an evaluation metric,
    say) still gets a header; it is small (one row per update).
    """

    def __init__(self, log_dir: str | os.PathLike, config: dict[str, Any] | None = None):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.dir / "metrics.csv"
        if config:  # for lmgym view
            write_aside(self.dir / "config.json", json.dumps(config, indent=2, default=str))
        self.rows: list[dict[str, Any]] = []
        if self.csv_path.exists():  # a resumed run appends to its history
            with open(self.csv_path, newline="") as f:
                self.rows = list(csv.DictReader(f))
        self.tensorboard = None
        try:
            from accelerate.tracking import TensorBoardTracker
            from accelerate.utils import is_tensorboard_available

            if not is_tensorboard_available():  # the tracker would fail at its first log, not here
                raise ImportError("tensorboard")
            self.tensorboard = TensorBoardTracker("tensorboard", str(self.dir))
            if hasattr(self.tensorboard, "start"):  # accelerate >= 1.3 opens the writer lazily
                self.tensorboard.start()
            if config:
                self.tensorboard.store_init_configuration(
                    {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in config.items()}
                )
        except ImportError:
            pass

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **metrics}
        self.rows = [r for r in self.rows if int(float(r["step"])) < step] + [row]
        columns = list(dict.fromkeys(k for r in self.rows for k in r))
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=columns)
        writer.writeheader()
        writer.writerows(self.rows)
        write_aside(self.csv_path, text.getvalue())  # a kill never leaves half a file; a link is replaced
        if self.tensorboard is not None:
            with writing(self.dir / "tensorboard"):
                self.tensorboard.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.finish()
