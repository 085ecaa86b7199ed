"""A Python tool: runs model-written code in a limited subprocess.

What it does:
    - runs the code with ``python -I`` (isolated mode: no user site, no ``PYTHON*`` variables)
      in a fresh scratch directory that is deleted afterwards;
    - gives it an emptied environment (only ``PATH``, ``HOME`` and ``TMPDIR``, the latter two
      pointing at the scratch directory, and ``LANG``): no secrets from ``os.environ``;
    - starts it in its own session and process group, and kills the whole group when the call
      ends or times out (wall-clock ``timeout``, default 10 s), so no child it forked outlives
      the call;
    - sets rlimits: address space (``memory_mb``), CPU seconds, number of processes, size of
      files it writes, no core dumps;
    - keeps at most ``output_limit`` bytes (default 16 KiB) of stdout and of stderr, noting
      when it cut them.

What it does NOT isolate (it is not a container or a VM):
    - the filesystem: the code runs as the calling user and can read, and write, whatever that
      user can, outside the scratch directory too;
    - the network: the code can open connections;
    - escapes from the process group: code that calls ``setsid()`` in a forked child can leave
      the group and outlive the call; and as root, ``RLIMIT_NPROC`` does not apply at all;
    - other resources: open file descriptors, disk space outside the file-size limit, kernel
      or interpreter bugs.
Run untrusted code at scale inside a container, VM or gVisor-style sandbox as well.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class PythonResult:
    """What a run produced."""

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    truncated: bool

    @property
    def text(self) -> str:
        """The tool's answer: stdout, then stderr if any, or why the run was stopped."""
        parts = [self.stdout.rstrip("\n")]
        if self.stderr.strip():
            parts.append(self.stderr.rstrip("\n"))
        if self.timed_out:
            parts.append("error: timed out")
        elif self.returncode is not None and self.returncode < 0:
            parts.append(f"error: killed by signal {signal.Signals(-self.returncode).name}")
        return "\n".join(p for p in parts if p)


class PythonTool:
    """Runs Python code in a limited subprocess; the tool's name (its tag) is ``python``.

    Args:
        timeout: wall-clock seconds before the process group is killed.
        memory_mb: address-space limit of the process (``RLIMIT_AS``).
        cpu_seconds: CPU-time limit (``RLIMIT_CPU``); defaults to ``timeout`` rounded up.
        max_processes: ``RLIMIT_NPROC`` (no effect for root; the group kill still holds).
        output_limit: bytes kept of stdout and of stderr.
        max_file_mb: the largest file the code may write (``RLIMIT_FSIZE``).

    Example:
        >>> PythonTool(timeout=5)("print(sum(range(10)))")
        '45'
    """

    name = "python"

    def __init__(
        self,
        timeout: float = 10.0,
        memory_mb: int = 512,
        cpu_seconds: int | None = None,
        max_processes: int = 64,
        output_limit: int = 16 * 1024,
        max_file_mb: int = 16,
    ):
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.cpu_seconds = cpu_seconds or int(timeout) + 1
        self.max_processes = max_processes
        self.output_limit = output_limit
        self.max_file_mb = max_file_mb

    def __call__(self, code: str) -> str:
        return self.run(code).text

    def _limit(self) -> None:  # runs in the child, between fork and exec
        mb = 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (self.memory_mb * mb, self.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.max_processes, self.max_processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.max_file_mb * mb, self.max_file_mb * mb))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def run(self, code: str) -> PythonResult:
        with tempfile.TemporaryDirectory(prefix="lmgym-python-") as scratch:
            root = Path(scratch)
            (root / "main.py").write_text(code)
            env = {"PATH": os.defpath, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
            with open(root / ".stdout", "wb") as out, open(root / ".stderr", "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "main.py"],
                    cwd=scratch,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,  # its own session and process group
                    preexec_fn=self._limit,
                )
                timed_out = False
                try:
                    proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    _kill_group(proc.pid)  # also children left behind by a finished parent
                    proc.wait()
            stdout, cut_out = self._read(root / ".stdout")
            stderr, cut_err = self._read(root / ".stderr")
        return PythonResult(stdout, stderr, None if timed_out else proc.returncode, timed_out, cut_out or cut_err)

    def _read(self, path: Path) -> tuple[str, bool]:
        size = path.stat().st_size
        with open(path, "rb") as f:
            data = f.read(self.output_limit)
        text = data.decode("utf-8", errors="replace")
        if size > self.output_limit:
            text += f"\n[output truncated: {size} bytes, kept the first {self.output_limit}]"
        return text, size > self.output_limit


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
