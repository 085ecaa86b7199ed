"""``lmgym train --replay RUN``: the run again, from what its ``summary.json`` recorded, and where
the two first differ.

A run records the command it was given (``RunSpec``, its episodes as the run picked them) under
``provenance.spec``; the replay trains that spec into a new directory, then compares the two
runs: ``metrics.csv`` row by row (timing columns aside), ``episodes.jsonl`` record by record,
and the final weights by hash. It prints ``replay: identical`` or the first update at which they
differ, and what differs there.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from lmgym.cli.errors import RunError, UsageError
from lmgym.cli.spec import RunSpec

NOT_REPLAYED = {"out", "resume", "overwrite", "config", "json", "seeds", "replay"}
"""Spec fields a replay does not take from the run: where it writes, and how it was started."""
PROVENANCE_KEYS = ("python", "lmgym", "torch", "transformers", "commit", "machine", "threads", "device")


def spec_record(spec: RunSpec) -> dict[str, Any]:
    """``spec`` as JSON-able data for ``provenance.spec`` (``spec_from_record``'s inverse)."""
    record = {
        f.name: getattr(spec, f.name) for f in dataclasses.fields(RunSpec) if f.name not in NOT_REPLAYED | {"settings"}
    }
    record["settings"] = [[list(path), value] for path, value in spec.settings.items()]
    return json.loads(json.dumps(record, default=str))


def spec_from_record(record: dict[str, Any], out: Path, overwrite: bool) -> RunSpec:
    """The spec ``spec_record`` recorded, writing to ``out``."""
    fields = {f.name for f in dataclasses.fields(RunSpec)} - NOT_REPLAYED - {"settings"}
    given = {k: v for k, v in record.items() if k in fields}
    settings = {tuple(path): value for path, value in record.get("settings", [])}
    return RunSpec(**given, settings=settings, out=out, overwrite=overwrite)


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


def replay(run: Path, out: Path, overwrite: bool) -> None:
    """Trains ``run``'s recorded spec into ``out`` and prints how the two runs compare; a replay
    that differs is a ``RunError`` (exit status 1) naming the first update that differs."""
    from lmgym.cli.outputs import provenance_now
    from lmgym.cli.train import train_one

    provenance = recorded(run)
    if out.resolve() == run.resolve():
        raise UsageError(f"--replay {str(run)!r}: pass another --out (the replay writes a run of its own)")
    now = provenance_now()
    changed = [f"{k} {provenance.get(k)} -> {now.get(k)}" for k in PROVENANCE_KEYS if provenance.get(k) != now.get(k)]
    if changed:
        print(f"replay: not the run's setting ({'; '.join(changed)}): it may differ for that reason alone")
    print(f"replaying {run} into {out}")
    train_one(spec_from_record(provenance["spec"], out, overwrite))
    difference = first_difference(run, out)
    if difference:
        raise ReplayDiffers(difference)
    print(f"replay: identical ({run} and {out}: episodes, metrics and weights)")


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


__all__ = ["first_difference", "replay", "spec_from_record", "spec_record"]
