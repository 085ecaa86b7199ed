"""A control group for one sandboxed call: all of its memory and all of its processes, counted.

``RLIMIT_AS`` bounds one process's address space, but not memory a process holds outside it
(``memfd_create`` buffers, files in a tmpfs, pipes) nor the sum over many processes, and
``RLIMIT_NPROC`` counts per user, which does not apply to root. A cgroup counts everything its
processes charge (anonymous memory, tmpfs and memfd pages, page cache) against one limit, and
every process and thread against another, whoever they run as.

``CallGroup.create`` makes one under the calling process's own cgroup, on cgroup v1 (the
``memory`` and ``pids`` hierarchies) or v2 (when the parent delegates both controllers). Where
that is not possible (no permission, no controllers), it returns ``None`` and the sandbox falls
back to its per-process limits.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
SWAP_LIMITS = ("memory.swap.max", "memory.memsw.limit_in_bytes")


def _own_paths() -> dict[str, str]:
    """``{controller: path}`` of this process (``""`` names the v2 hierarchy)."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


class CallGroup:
    """The cgroup directories of one call (one per v1 hierarchy, or one v2 directory)."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int) -> CallGroup | None:
        """A new cgroup limited to ``memory_bytes`` and ``max_pids``, or ``None`` where none can be made."""
        name = f"lmgym-{uuid.uuid4().hex[:12]}"
        try:
            own = _own_paths()
        except OSError:
            return None
        if (ROOT / "cgroup.controllers").is_file():  # v2 only
            limits = {"memory.max": memory_bytes, "memory.swap.max": 0, "pids.max": max_pids}
            plan = {ROOT / own.get("", "/").lstrip("/") / name: limits}
        elif "memory" in own and "pids" in own:  # v1
            plan = {
                ROOT / "memory" / own["memory"].lstrip("/") / name: {
                    "memory.limit_in_bytes": memory_bytes,
                    "memory.memsw.limit_in_bytes": memory_bytes,  # memory + swap: no way around it through swap
                },
                ROOT / "pids" / own["pids"].lstrip("/") / name: {"pids.max": max_pids},
            }
        else:
            return None
        group = cls([])
        try:
            for path, limits in plan.items():
                path.mkdir()
                group.dirs.append(path)
                for key, value in limits.items():
                    if key in SWAP_LIMITS and not (path / key).exists():
                        continue  # no swap accounting here: nothing to limit
                    (path / key).write_text(str(value))
        except OSError:
            group.remove()
            return None
        return group

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def remove(self, seconds: float = 2.0) -> None:
        """Kills whatever still runs in the group, then removes it; never raises."""
        deadline = time.monotonic() + seconds
        while self.dirs and time.monotonic() < deadline:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            for d in list(self.dirs):
                try:
                    d.rmdir()
                    self.dirs.remove(d)
                except FileNotFoundError:
                    self.dirs.remove(d)
                except OSError:
                    pass  # still busy: its processes are dying
            if self.dirs:
                time.sleep(0.01)
