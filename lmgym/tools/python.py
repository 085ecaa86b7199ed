"""A Python tool: runs model-written code in a sandboxed subprocess.

Two isolation levels. ``PythonTool(isolation="auto")`` (the default) takes ``"bwrap"`` when
bubblewrap works on this machine and ``"rlimits"`` otherwise; every result says which one ran
(``PythonResult.isolation``, and ``info["tool_info"]["isolation"]`` in an env step).

Both levels:
    - the code's stdout and stderr come back through pipes the host owns, read both at once
      (never files the code could replace, delete or link elsewhere); at most ``output_limit``
      bytes (16 KiB) of each are kept, the rest is drained and counted;
    - ``python -I`` (no user site, no ``PYTHON*`` variables) in a fresh scratch directory that
      is the working directory and ``HOME`` and is deleted afterwards; an emptied environment
      (``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` only);
    - a supervisor (``lmgym/tools/sandbox_supervisor.py``) that is a child subreaper: it runs the
      code in its own process group, kills it at ``timeout`` (wall clock), then kills every
      descendant, including those that called ``setsid`` after a double fork, before ``run``
      returns; the host kills the whole session if the supervisor overruns;
    - rlimits: address space (``memory_mb``), CPU seconds, processes, size of written files,
      no core dumps; any exit status becomes a plain message (``killed by signal 40``).

``"bwrap"`` (bubblewrap, the Debian package ``bubblewrap``) adds namespaces:
    - the filesystem is an empty root with read-only binds of ``/usr``, ``/lib*``, ``/bin``,
      ``/sbin``, the Python installation and its virtual environment; the scratch directory
      is the only writable host path, ``/tmp`` is private; the home directory, the project,
      ``/etc`` and everything else of the host are absent;
    - a new PID namespace with its own ``/proc``: host processes (and their environments) are
      invisible, and everything in it dies with the call;
    - no network (a new network namespace with only loopback), new IPC and UTS namespaces;
    - the code runs as ``nobody`` in a new user namespace with every capability dropped.

What ``"rlimits"`` does NOT isolate:
    - the filesystem: the code runs as the calling user and can read and write whatever that
      user can, the project and the home directory included;
    - other processes of the same user: it can read ``/proc/<pid>/environ`` of the host
      process (its secrets), signal or ptrace it; code that kills its own supervisor first can
      leave detached descendants running;
    - the network; and for root, ``RLIMIT_NPROC`` does not apply (no fork-bomb limit).

What neither level isolates: the kernel (bubblewrap is not a VM: a kernel bug is an escape),
CPU and memory contention with the host within the limits, timing side channels, and disk
space in the scratch directory up to the file-size limit per file. Run untrusted code at scale
inside a VM or gVisor-style sandbox as well.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ISOLATION = ("auto", "bwrap", "rlimits")
SUPERVISOR = (Path(__file__).parent / "sandbox_supervisor.py").read_text()
HOST_GRACE = 5.0
"""Seconds past ``timeout`` after which the host kills the whole sandbox (the supervisor sweeps
in at most 2 s; this is the backstop)."""
OUTPUT_GRACE = 0.5
"""Seconds the host keeps reading output after the supervisor has exited."""


@dataclass
class PythonResult:
    """What a run produced."""

    stdout: str
    stderr: str
    returncode: int | None
    """The code's exit status; ``-N`` when signal N killed it; ``None`` when it timed out."""
    timed_out: bool
    truncated: bool
    isolation: str = "rlimits"
    error: str | None = None
    """Set when the sandbox itself failed (it did not start, or it ended without a status)."""

    @property
    def text(self) -> str:
        """The tool's answer: stdout, then stderr if any, or why the run was stopped."""
        parts = [self.stdout.rstrip("\n")]
        if self.stderr.strip():
            parts.append(self.stderr.rstrip("\n"))
        if self.timed_out:
            parts.append("error: timed out")
        elif self.error:
            parts.append(f"error: {self.error}")
        elif self.returncode is not None and self.returncode < 0:
            parts.append(f"error: {signal_message(-self.returncode)}")
        return "\n".join(p for p in parts if p)

    @property
    def info(self) -> dict[str, Any]:
        """What an env reports of the run (``info["tool_info"]`` under ``ToolUse``)."""
        return {
            "isolation": self.isolation,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
        }


def signal_message(number: int) -> str:
    """``killed by signal 9 (SIGKILL)``; real-time and unknown signals by number only.

    Example:
        >>> signal_message(40)
        'killed by signal 40'
    """
    try:
        return f"killed by signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"killed by signal {number}"


class PythonTool:
    """Runs Python code in a sandboxed subprocess; the tool's name (its tag) is ``python``.

    Args:
        timeout: wall-clock seconds before the code and all its descendants are killed.
        memory_mb: address-space limit of each process (``RLIMIT_AS``).
        cpu_seconds: CPU-time limit (``RLIMIT_CPU``); defaults to ``timeout`` rounded up.
        max_processes: ``RLIMIT_NPROC`` (no effect for root at the ``rlimits`` level).
        output_limit: bytes kept of stdout and of stderr.
        max_file_mb: the largest file the code may write (``RLIMIT_FSIZE``).
        isolation: ``"auto"`` (bwrap when it works here, else rlimits), ``"bwrap"`` (an error
            if bubblewrap is missing or cannot run) or ``"rlimits"``; see the module docs for
            what each level guarantees.

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
        isolation: str = "auto",
    ):
        if isolation not in ISOLATION:
            raise ValueError(f"isolation must be one of {ISOLATION}, got {isolation!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.cpu_seconds = cpu_seconds or int(timeout) + 1
        self.max_processes = max_processes
        self.output_limit = output_limit
        self.max_file_mb = max_file_mb
        problem = bwrap_problem() if isolation != "rlimits" else None
        if isolation == "bwrap" and problem:
            raise RuntimeError(f"isolation='bwrap' is not available here: {problem}")
        self.isolation = "bwrap" if isolation != "rlimits" and not problem else "rlimits"

    def __call__(self, code: str) -> str:
        return self.run(code).text

    def _limit(self) -> None:  # runs in the child, between fork and exec
        mb = 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (self.memory_mb * mb, self.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.max_processes, self.max_processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.max_file_mb * mb, self.max_file_mb * mb))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def command(self, scratch: str, status_fd: int) -> list[str]:
        """The command line that runs the supervisor (and through it ``main.py``) in ``scratch``."""
        supervisor = [sys.executable, "-I", "-c", SUPERVISOR, str(self.timeout), sys.executable, str(status_fd)]
        return bwrap_prefix(scratch) + supervisor if self.isolation == "bwrap" else supervisor

    def run(self, code: str) -> PythonResult:
        with tempfile.TemporaryDirectory(prefix="lmgym-python-") as scratch:
            (Path(scratch) / "main.py").write_text(code)
            env = {"PATH": os.defpath, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
            status_read, status_write = os.pipe()
            try:
                proc = subprocess.Popen(
                    self.command(scratch, status_write),
                    cwd=scratch,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(status_write,),
                    start_new_session=True,  # its own session and process group
                    preexec_fn=self._limit,
                )
            finally:
                os.close(status_write)
            assert proc.stdout is not None and proc.stderr is not None
            try:
                out, err, status = read_bounded(
                    [proc.stdout.fileno(), proc.stderr.fileno(), status_read],
                    [self.output_limit, self.output_limit, 4096],
                    deadline=time.monotonic() + self.timeout + HOST_GRACE,
                )
            finally:
                _kill_group(proc.pid)  # the backstop: the supervisor normally left nothing
                proc.wait()
                os.close(status_read)
                proc.stdout.close()
                proc.stderr.close()
        return self._result(out, err, status, proc.returncode)

    def _result(self, out: BoundedOutput, err: BoundedOutput, status: BoundedOutput, exit_code: int) -> PythonResult:
        try:
            report = json.loads(bytes(status.data))
        except ValueError:  # no status: the supervisor was killed, or bwrap could not start
            report = {"error": f"the sandbox ended without a status (exit status {exit_code})"}
        returncode = report.get("exit", -report["signal"] if "signal" in report else None)
        return PythonResult(
            stdout=out.text(self.output_limit),
            stderr=err.text(self.output_limit),
            returncode=returncode,
            timed_out=bool(report.get("timed_out")),
            truncated=out.truncated or err.truncated,
            isolation=self.isolation,
            error=report.get("error"),
        )


class BoundedOutput:
    """Keeps the first ``limit`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int):
        self.limit, self.size, self.data = limit, 0, bytearray()

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.size > self.limit

    def text(self, limit: int) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if self.truncated:
            text += f"\n[output truncated: {self.size} bytes, kept the first {limit}]"
        return text


def read_bounded(fds: list[int], limits: list[int], deadline: float) -> list[BoundedOutput]:
    """Reads all ``fds`` at once until each closes, ``OUTPUT_GRACE`` seconds after the last one
    (the status pipe) closes, or at ``deadline``; whatever the other end does, it never blocks
    past the deadline."""
    outputs = {fd: BoundedOutput(limit) for fd, limit in zip(fds, limits)}
    stop_at = deadline
    with selectors.DefaultSelector() as selector:
        for fd in fds:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and (now := time.monotonic()) < stop_at:
            for key, _ in selector.select(timeout=stop_at - now):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if chunk:
                    outputs[key.fd].feed(chunk)
                    continue
                selector.unregister(key.fd)
                if key.fd == fds[-1]:  # the supervisor is done; its descendants are dead
                    stop_at = min(deadline, time.monotonic() + OUTPUT_GRACE)
    return [outputs[fd] for fd in fds]


def _read_only_paths() -> list[str]:
    """What the sandboxed interpreter needs: system libraries, the Python installation and the
    virtual environment it runs from (never the project or the home directory as a whole)."""
    system = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin"]
    python = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    return [p for p in dict.fromkeys(system + python) if os.path.lexists(p)]


def bwrap_prefix(scratch: str) -> list[str]:
    """The ``bwrap`` arguments that put a command in the sandbox described in the module docs."""
    args = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
    args += ["--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in _read_only_paths():
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind", path, path]
    return [*args, "--bind", scratch, scratch, "--chdir", scratch, "--"]


@functools.cache
def bwrap_problem() -> str | None:
    """Why the bwrap level cannot run here, or ``None`` when it can (checked once per process)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    with tempfile.TemporaryDirectory(prefix="lmgym-python-") as scratch:
        try:
            probe = subprocess.run(
                [*bwrap_prefix(scratch), sys.executable, "-I", "-c", "pass"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            return "bwrap did not start within 30 s"
    if probe.returncode != 0:
        lines = (probe.stderr or "").strip().splitlines() or [f"exit status {probe.returncode}"]
        return f"bwrap cannot create the sandbox ({lines[-1]}); unprivileged user namespaces may be off"
    return None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
