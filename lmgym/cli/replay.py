"""``lmgym train --replay RUN``'s parts: what a run recorded to be replayed, and where two runs
first differ (``lmgym.cli.train.replay_run`` trains the replay between them).

A run records the command it was given (``RunSpec``, its episodes as the run picked them) under
``provenance.spec``; the replay trains that spec into a new directory, then compares the two
runs: ``metrics.csv`` row by row (timing columns aside), ``episodes.jsonl`` record by record,
and the final weights by hash. It prints ``replay: identical`` or the first update at which they
differ, and what differs there.
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

from lmgym.cli.errors import RunError, UsageError

PROVENANCE_KEYS = ("python", "lmgym", "torch", "transformers", "commit", "machine", "threads", "device")


def recorded(run: Path) -> dict[str, Any]:
    """``RUN/summary.json``'s provenance, checked to hold a replayable spec."""
    from lmgym.storage import DataError, load_json

    try:
        provenance = load_json(run / "summary.json", max_bytes=2**24).get("provenance") or {}
    except (DataError, OSError, AttributeError) as e:
        raise UsageError(f"--replay {str(run)!r}: no run's summary.json there ({e})") from e
    if not isinstance(provenance.get("spec"), dict):
        raise UsageError(f"--replay {str(run)!r}: its summary.json records no command (an older lmgym's run)")
    return provenance


def changed(provenance: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between a run's setting (its ``provenance``) and this one's, in words."""
    return [f"{k} {provenance.get(k)} -> {now.get(k)}" for k in PROVENANCE_KEYS if provenance.get(k) != now.get(k)]


class ReplayDiffers(RunError):
    said = "replay differs"


def metric_rows(run: Path) -> list[dict[str, str]]:
    try:
        with open(run / "metrics.csv", newline="") as f:
            return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]
    except FileNotFoundError:
        return []


def episode_lines(run: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    except FileNotFoundError:
        return []


def weights(run: Path) -> dict[str, str]:
    model = run / "model"
    files = sorted(p for p in model.rglob("*") if p.suffix in (".safetensors", ".bin", ".pt")) if model.is_dir() else []
    return {str(p.relative_to(model)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def first_difference(a: Path, b: Path) -> str | None:
    """Where runs ``a`` and ``b`` first differ, in words, or ``None`` when they do not: the
    earliest update among the metrics and the episode records, then the weights."""
    found: list[tuple[int, str]] = []
    rows_a, rows_b = metric_rows(a), metric_rows(b)
    for x, y in zip(rows_a, rows_b):
        if x != y:
            column = next(k for k in dict.fromkeys([*x, *y]) if x.get(k) != y.get(k))
            step = int(float(x.get("step") or 0))
            found.append((step, f"metrics.csv {column}: {x.get(column)} against {y.get(column)}"))
            break
    else:
        if len(rows_a) != len(rows_b):
            found.append((min(len(rows_a), len(rows_b)), f"metrics.csv has {len(rows_a)} rows against {len(rows_b)}"))
    lines_a, lines_b = episode_lines(a), episode_lines(b)
    for x, y in zip(lines_a, lines_b):
        if x != y:
            found.append(
                (int(x.get("update", 0)), f"episodes.jsonl: the {x.get('kind', '')} episode of seed {x.get('seed')}")
            )
            break
    else:
        if len(lines_a) != len(lines_b):
            found.append((10**9, f"episodes.jsonl has {len(lines_a)} records against {len(lines_b)}"))
    if found:
        update, what = min(found)
        return f"first at update {update}: {what}" if update < 10**9 else what
    if weights(a) != weights(b):
        return "the final weights (same metrics and episodes)"
    return None


__all__ = ["ReplayDiffers", "changed", "first_difference", "recorded"]
