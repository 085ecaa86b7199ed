"""``lmgym view``: a run's learning curve, config and episodes as one self-contained HTML file.

Reads what ``learn`` and ``lmgym train`` write to a run directory: ``metrics.csv``,
``episodes.jsonl`` (``lmgym.agents.recording``), ``config.json`` and ``summary.json``. The page
needs no server and no network: the data is embedded as JSON (escaped so that no model text can
close the script element), and the page builds its DOM with ``textContent`` only.
"""

from __future__ import annotations

import csv
import http.server
import json
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lmgym.rescore import read_rescores
from lmgym.storage import write_aside

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

MAX_EPISODES = 1000
"""Episodes a report holds at most: the newest update's, and a sample across the others."""
MAX_LINE_BYTES = 8 << 20
"""An ``episodes.jsonl`` line longer than this is skipped unread."""
UPDATE = re.compile(rb'^\s*\{\s*"update"\s*:\s*(-?\d+)')

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


def read_jsonl(path: str | os.PathLike, limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The objects of a JSONL file and how many lines were skipped: a half-written last line (a
    run still going, or a line cut inside a UTF-8 character), a line that is not a JSON object,
    binary junk, a line over ``MAX_LINE_BYTES``. Non-finite numbers become ``None``. With
    ``limit``, at most that many objects (``choose_lines``); the rest are counted as left out
    by ``read_episodes``."""
    episodes, skipped, _ = read_episodes(path, limit)
    return episodes, skipped


def read_episodes(path: str | os.PathLike, limit: int | None = None) -> tuple[list[dict[str, Any]], int, int]:
    """``(episodes, unreadable lines, episodes left out)``: a first pass reads only each line's
    ``update`` (memory stays bounded whatever the file's size), a second parses the lines that
    ``choose_lines`` keeps."""
    lines: list[tuple[int, int, int | None, int]] = []  # (offset, length, update, line number) of each candidate
    skipped = 0
    with open(path, "rb") as f:
        offset = 0
        for number, raw in enumerate(f):
            if len(raw) > MAX_LINE_BYTES:
                skipped += 1
            elif raw.strip():
                found = UPDATE.match(raw)
                lines.append((offset, len(raw), int(found.group(1)) if found else None, number))
            offset += len(raw)
        keep = choose_lines([line[2] for line in lines], limit) if limit is not None else range(len(lines))
        out = []
        for k in keep:
            f.seek(lines[k][0])
            try:
                obj = json.loads(f.read(lines[k][1]).decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                skipped += 1
                continue
            if isinstance(obj, dict):
                out.append({**finite(obj), "line": lines[k][3]})
            else:
                skipped += 1
    return out, skipped, len(lines) - len(keep)


def choose_lines(updates: Sequence[int | None], limit: int) -> list[int]:
    """Which of the lines (their ``update``, in file order) a bounded report keeps: all of them
    when they are at most ``limit``; else the newest update's (up to half the limit) and an equal
    share of the lines of updates spread evenly across the run, in file order.

    Example:
        >>> choose_lines([0, 0, 1, 1, 2, 2, 3, 3], 4)   # the newest update, and updates 0 and 2
        [0, 4, 6, 7]
    """
    if len(updates) <= limit:
        return list(range(len(updates)))
    counts = Counter(updates)
    order = sorted(counts, key=lambda u: -1 if u is None else u)
    newest = order.pop()
    keep_newest = min(counts[newest], max(1, limit // 2))
    room = limit - keep_newest
    n = min(room, len(order))  # how many of the other updates are sampled, evenly spaced
    chosen = {order[round(i * (len(order) - 1) / max(1, n - 1))] for i in range(n)}
    quota = {u: room // len(chosen) for u in chosen} | {newest: keep_newest}
    out: list[int] = []
    taken: Counter[int | None] = Counter()
    for i, u in enumerate(updates):
        if taken[u] < quota.get(u, 0):
            taken[u] += 1
            out.append(i)
    return out


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
    write_aside(path, render_html(data))
    return path


def rescore_totals(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Success and mean return of a rescore's rows (``lmgym rescore``), for the page's header."""
    rows = list(rows)
    return {
        "episodes": len(rows),
        "success": sum(bool(r["success"]) for r in rows) / len(rows),
        "return": sum(float(r["return"]) for r in rows) / len(rows),
    }


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
        episodes, bad, left_out = read_episodes(files["episodes.jsonl"], MAX_EPISODES)
        if bad:
            skipped.append(f"{bad} unreadable lines of episodes.jsonl")
        if left_out:
            skipped.append(
                f"{left_out} of {left_out + len(episodes) + bad} episodes of episodes.jsonl left out (the report "
                f"holds at most {MAX_EPISODES}: the newest update's and a sample across the run)"
            )
    metrics: dict[str, list[list[float]]] = {}
    if files["metrics.csv"].is_file():
        try:
            metrics = read_metrics(files["metrics.csv"])
        except (ValueError, csv.Error) as e:
            skipped.append(f"metrics.csv ({e})")
    rescores = read_rescores(run)
    for episode in episodes:
        line = episode["line"]
        episode["rescored"] = [{"by": name, **rows[line]} for name, rows in rescores.items() if line in rows]
    summary = load("summary.json") or {}
    summary["rescored"] = {name: rescore_totals(rows.values()) for name, rows in rescores.items() if rows}
    for phase in ("before", "after"):
        if not isinstance(summary.get(phase), dict):
            summary.pop(phase, None)
    data = report_data(episodes, metrics, load("config.json"), summary, title=f"lmgym run: {run.resolve().name}")
    data["skipped"] = skipped + data["skipped"]
    return write_html(target, data), data["skipped"]


class ReportServer(http.server.ThreadingHTTPServer):
    """Serves one report from memory on 127.0.0.1: ``/`` and ``/NAME`` answer the page, every
    other path 404, and a request whose ``Host`` is not this server's (DNS rebinding) 421. Nothing
    on disk is served: no directory, no other file of the run, no link."""

    def __init__(self, path: str | os.PathLike, port: int = 8000):
        self.page, self.name = Path(path).read_bytes(), Path(path).name
        super().__init__(("127.0.0.1", port), ReportHandler)
        port = self.server_address[1]
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"} | ({"127.0.0.1", "localhost"} if port == 80 else set())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{self.name}"


class ReportHandler(http.server.BaseHTTPRequestHandler):
    server: ReportServer

    def do_GET(self) -> None:
        self.answer(body=True)

    def do_HEAD(self) -> None:
        self.answer(body=False)

    def answer(self, body: bool) -> None:
        server = self.server
        if self.headers.get("Host", "").lower() not in server.hosts:
            status, page, kind = 421, b"unknown host\n", "text/plain; charset=utf-8"
        elif self.path.split("?", 1)[0] in ("/", f"/{server.name}"):
            status, page, kind = 200, server.page, "text/html; charset=utf-8"
        else:
            status, page, kind = 404, b"not found: this server serves one report\n", "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(page)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:",
        )
        self.end_headers()
        if body:
            self.wfile.write(page)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the standard library's name)
        pass


def serve(path: str | os.PathLike, port: int = 8000) -> None:
    """Serves the report alone, from memory, on 127.0.0.1 (``ReportServer``) until interrupted."""
    with ReportServer(path, port) as server:
        print(f"serving {server.url} (Ctrl-C stops)", flush=True)
        server.serve_forever()
