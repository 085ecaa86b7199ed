"""Processes lmgym starts that must not outlive it, even by ``kill -9``: a reaper process waits
for the end of a pipe only this process holds, then kills their trees.

Ray's own processes notice a dead driver only after tens of seconds (its dashboard and
runtime-env agents), and so may the processes other engines start; a local Ray cluster lmgym
starts and the vLLM engine's processes are given to ``fate_share``.
"""

from __future__ import annotations

import os
from typing import Any

REAPER = """
import os, signal, sys
roots = {int(p): s for p, s in (a.split(":") for a in sys.argv[1:])}
sys.stdin.buffer.read()  # EOF: the process that started them is gone (or closed us)
def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()
parents = {}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            fields = stat(entry)
            parents[int(entry)] = (int(fields[1]), fields[19])
        except (OSError, IndexError, ValueError):
            pass
alive = {p for p, s in roots.items() if p in parents and parents[p][1] == s}  # the same processes, not reused pids
found, frontier = set(alive), set(alive)
while frontier:
    frontier = {p for p, (parent, _) in parents.items() if parent in frontier} - found
    found |= frontier
for pid in found:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""
"""Kills the process trees it is given (``pid:starttime`` each) once its stdin ends: a process
that ``fate_share`` started beside this one, holding the only write end of that pipe."""
REAPERS: list[Any] = []


def descendants(pid: int) -> set[int]:
    """The live descendants of ``pid``, from /proc's parent links (empty where there is no /proc)."""
    parents = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def fate_share(pids: set[int]) -> None:
    """``pids`` (and whatever they start) die with this process, even by ``kill -9``: a reaper
    process waits for the end of a pipe only this process holds, then kills their trees."""
    import subprocess
    import sys

    roots = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                roots.append(f"{pid}:{f.read().rsplit(')', 1)[1].split()[19]}")
        except (OSError, IndexError):
            pass
    if roots:
        REAPERS.append(
            subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", REAPER, *roots], stdin=subprocess.PIPE, start_new_session=True
            )
        )


__all__ = ["descendants", "fate_share"]
