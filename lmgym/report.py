"""``lmgym view``: a run's learning curve, config and episodes as one self-contained HTML file.

Reads what ``learn`` and ``lmgym train`` write to a run directory: ``metrics.csv``,
``episodes.jsonl`` (``lmgym.agents.recording``), ``config.json`` and ``summary.json``. The page
needs no server and no network: the data is embedded as JSON (escaped so that no model text can
close the script element), and the page builds its DOM with ``textContent`` only.
"""

from __future__ import annotations

import csv
import functools
import http.server
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).with_name("report.html")
REPORT_FILE = "report.html"
CURVES: dict[str, list[str]] = {
    "success": ["env/success", "eval/success"],
    "return": ["env/return"],
    "tool-call rate": ["env/tool_rate", "eval/tool_rate"],
    "KL to the reference": ["objective/kl"],
    "entropy": ["policy/entropy"],
    "learning rate": ["optim/learning_rate"],
    "error mix (greedy, held-out)": ["eval/error/"],
    "PPO diagnostics": ["policy/clipfrac", "policy/approx_kl", "value/explained_variance", "advantages/raw_std"],
}
"""The learning-curve panels and the ``metrics.csv`` columns each one draws (a key ending in
``/`` draws every column under it)."""

NEGATIVE, NEUTRAL, POSITIVE = (202, 0, 32), (247, 247, 247), (5, 113, 176)  # ColorBrewer RdBu ends


def diverging_color(value: float | None, scale: float) -> str | None:
    """A token's colour for its advantage: white at 0, blue for positive, red for negative,
    saturated at ``|value| >= scale``; ``None`` when the value is unknown.

    Example:
        >>> diverging_color(0.0, 1.0), diverging_color(5.0, 1.0), diverging_color(-1.0, 1.0)
        ('#f7f7f7', '#0571b0', '#ca0020')
    """
    if value is None or not math.isfinite(value):
        return None
    t = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    end = POSITIVE if t > 0 else NEGATIVE
    rgb = (round(n + abs(t) * (e - n)) for n, e in zip(NEUTRAL, end))
    return "#" + "".join(f"{c:02x}" for c in rgb)


def color_scale(episodes: Iterable[dict[str, Any]], quantile: float = 0.95) -> float:
    """The advantage that saturates the colours: the 95th percentile of ``|adv|`` over every
    action token (robust to a few outliers); 1.0 when there are none.

    Example:
        >>> color_scale([{"adv": [0.5, -2.0, None]}, {"adv": None}], quantile=1.0)
        2.0
    """
    values = sorted(abs(a) for e in episodes for a in (e.get("adv") or []) if a is not None)
    if not values or values[-1] == 0:
        return 1.0
    return values[min(len(values) - 1, int(quantile * len(values)))] or values[-1]


def read_jsonl(path: str | os.PathLike) -> tuple[list[dict[str, Any]], int]:
    """The objects of a JSONL file and how many lines were skipped: a half-written last line (a
    run still going, or a line cut inside a UTF-8 character), a line that is not a JSON object,
    binary junk. Non-finite numbers become ``None``."""
    out, skipped = [], 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                skipped += 1
                continue
            if isinstance(obj, dict):
                out.append(finite(obj))
            else:
                skipped += 1
    return out, skipped


def finite(data: Any) -> Any:
    """``data`` with every non-finite float replaced by ``None`` (JSON has no NaN).

    Example:
        >>> finite({"a": [1.0, float("nan")], "b": float("inf")})
        {'a': [1.0, None], 'b': None}
    """
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {str(k): finite(v) for k, v in data.items()}
    if isinstance(data, list):
        return [finite(v) for v in data]
    return data


def read_metrics(path: str | os.PathLike) -> dict[str, list[list[float]]]:
    """``metrics.csv`` as ``{column: [[step, value], ...]}``, empty and non-finite cells left out;
    ``ValueError`` when it has no ``step`` column."""
    series: dict[str, list[list[float]]] = {}
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        if "step" not in (reader.fieldnames or []):
            raise ValueError("it has no step column")
        for row in reader:
            try:
                step = float(row["step"])
            except (TypeError, ValueError):
                continue
            for key, cell in row.items():
                try:
                    value = float(cell)
                except (TypeError, ValueError):
                    continue
                if key is not None and key != "step" and math.isfinite(value) and math.isfinite(step):
                    series.setdefault(key, []).append([step, value])
    return series


def shown_episode(e: dict[str, Any], scale: float) -> dict[str, Any]:
    """An episode as the page shows it (``colors`` from its advantages); ``ValueError`` when it
    lacks what the page needs."""
    text, mask = e.get("text"), e.get("mask")
    if not isinstance(text, list) or not isinstance(mask, list) or len(text) != len(mask):
        raise ValueError("not an episode")
    adv = e.get("adv") or [None] * sum(bool(m) for m in mask)
    if not isinstance(adv, list):
        raise ValueError("not an episode")
    return {**e, "colors": [diverging_color(a if isinstance(a, (int, float)) else None, scale) for a in adv]}


def report_data(
    episodes: Sequence[dict[str, Any]],
    metrics: dict[str, list[list[float]]] | None = None,
    config: dict[str, Any] | None = None,
    summary: dict[str, Any] | None = None,
    title: str = "lmgym run",
) -> dict[str, Any]:
    """What the page shows; each episode gets ``colors`` (one per action token) from its advantages."""
    episodes = [e for e in episodes if isinstance(e.get("adv") or [], list)]
    scale = color_scale(episodes)
    shown, skipped = [], []
    for e in episodes:
        try:
            shown.append(shown_episode(e, scale))
        except (ValueError, TypeError):
            skipped.append(e)
    metrics = metrics or {}
    curves = {
        name: {
            k: metrics[k] for k in metrics if any(k == key or key.endswith("/") and k.startswith(key) for key in keys)
        }
        for name, keys in CURVES.items()
    }
    return {
        "title": title,
        "scale": scale,
        "summary": summary or {},
        "config": config or {},
        "curves": {name: lines for name, lines in curves.items() if lines},
        "episodes": shown,
        "skipped": [f"{len(skipped)} records that are not episodes"] if skipped else [],
    }


def script_json(data: Any) -> str:
    """JSON safe inside ``<script>``: ``<``, ``>`` and ``&`` escaped, so ``</script>`` or
    ``<!--`` in a completion cannot end the element.

    Example:
        >>> script_json({"text": "</script><b>"})
        '{"text": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}'
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def render_html(data: dict[str, Any]) -> str:
    return TEMPLATE.read_text(encoding="utf-8").replace("/*LMGYM_DATA*/null", script_json(data))


def write_html(path: str | os.PathLike, data: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(data), encoding="utf-8")
    return path


def build_report(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> tuple[Path, list[str]]:
    """Writes ``RUN_DIR/report.html`` (or ``out``) from what the run directory holds; returns
    the path and what was skipped (unreadable files, broken lines), which the page also names."""
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"no run directory at {str(run)!r}")
    target = Path(out) if out is not None else run / REPORT_FILE
    if target.is_dir():
        raise FileNotFoundError(f"--out {str(target)!r} is a directory: name the report file")
    files = {name: run / name for name in ("metrics.csv", "episodes.jsonl", "config.json", "summary.json")}
    if not files["metrics.csv"].is_file() and not files["episodes.jsonl"].is_file():
        raise FileNotFoundError(f"{str(run)!r} has neither metrics.csv nor episodes.jsonl: is it a run directory?")
    skipped: list[str] = []

    def load(name: str) -> Any:
        if not files[name].is_file():
            return None
        try:
            data = finite(json.loads(files[name].read_bytes().decode("utf-8")))
            if isinstance(data, dict):
                return data
        except (UnicodeDecodeError, ValueError, RecursionError):
            pass
        skipped.append(f"{name} (not a JSON object)")
        return None

    episodes: list[dict[str, Any]] = []
    if files["episodes.jsonl"].is_file():
        episodes, bad = read_jsonl(files["episodes.jsonl"])
        if bad:
            skipped.append(f"{bad} unreadable lines of episodes.jsonl")
    metrics: dict[str, list[list[float]]] = {}
    if files["metrics.csv"].is_file():
        try:
            metrics = read_metrics(files["metrics.csv"])
        except (ValueError, csv.Error) as e:
            skipped.append(f"metrics.csv ({e})")
    summary = load("summary.json") or {}
    for phase in ("before", "after"):
        if not isinstance(summary.get(phase), dict):
            summary.pop(phase, None)
    data = report_data(episodes, metrics, load("config.json"), summary, title=f"lmgym run: {run.resolve().name}")
    data["skipped"] = skipped + data["skipped"]
    return write_html(target, data), data["skipped"]


def serve(path: str | os.PathLike, port: int = 8000) -> None:
    """Serves the report's directory on 127.0.0.1 (standard library only) until interrupted."""
    path = Path(path)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(path.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving http://127.0.0.1:{server.server_address[1]}/{path.name} (Ctrl-C stops)", flush=True)
        server.serve_forever()
