"""The sandbox a ``PythonTool`` call runs in: its process, pipes, cgroup, scratch directory, and
the warm pool of sandboxes started ahead of need (see ``lmgym.tools.python`` for what each
isolation level guarantees)."""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from lmgym.tools.cgroup import CallGroup


class Limits(NamedTuple):
    """What a ``Sandbox`` needs of its tool: the call's ``timeout`` (s), the bytes kept of each
    output, and the isolation level that runs it."""

    timeout: float
    output_limit: int
    isolation: str


SUPERVISOR = (Path(__file__).parent / "sandbox_supervisor.py").read_text()
LOADER = (Path(__file__).parent / "sandbox_loader.py").read_text()
STALE = "the waiting sandbox ended before the call"
"""A pooled sandbox's status when it died before its call (nothing ran: the call runs in a new one)."""
READY_SECONDS = 30.0
"""Seconds a pooled sandbox's interpreter may take to start."""
HOST_GRACE = 5.0
"""Seconds past ``timeout`` after which the host kills the whole sandbox (the supervisor sweeps
in at most 2 s; this is the backstop)."""
OUTPUT_GRACE = 0.5
"""Seconds the host keeps reading output after the supervisor has exited."""
NOBODY = 65534
"""The user the code runs as when the host is root (``nobody``)."""
SUPERVISOR_MB = 16
"""Memory of the call's cgroup beyond ``memory_mb``: the supervisor's own interpreter."""


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
    pooled: bool = False
    """The call ran in a sandbox the pool had started ahead of it."""

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


class Sandbox:
    """One sandbox, started and waiting for its one call (``PythonTool.start_sandbox``), with its
    tool's ``Limits``."""

    def __init__(
        self,
        limits: Limits,
        proc: subprocess.Popen,
        scratch: str,
        group: CallGroup | None,
        status_read: int,
        user: list[int] | None,
    ):
        self.proc, self.scratch, self.group, self.status_read, self.user = proc, scratch, group, status_read, user
        self.timeout, self.output_limit, self.isolation = limits
        self.closed = False  # no reference to the tool: a pool's waiting sandboxes never keep it alive

    def wait_ready(self, seconds: float) -> bool:
        """Waits for the loader's ready byte (its interpreter is up and waiting for the go)."""
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            return bool(selector.select(timeout=seconds)) and os.read(self.proc.stdout.fileno(), 1) == b"r"

    def waiting(self) -> bool:
        """Still up and untouched: the supervisor runs and nothing was put in its directory."""
        try:
            return self.proc.poll() is None and not os.listdir(self.scratch)
        except OSError:
            return False

    def run(self, code: str) -> PythonResult:
        """Writes ``main.py``, gives the go, reads the outputs and the status; then destroys the
        sandbox. A sandbox runs one call only."""
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        try:
            path = os.path.join(self.scratch, "main.py")  # O_EXCL and O_NOFOLLOW: never through a planted name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(code.encode("utf-8", errors="replace"))  # UTF-8 whatever the locale
            if self.user:  # root host: the code runs as nobody and owns its directory from now on
                os.chown(path, *self.user)
                os.chown(self.scratch, *self.user)
            self.proc.stdin.write(b"g")
            self.proc.stdin.close()
            out, err, status = read_bounded(
                [self.proc.stdout.fileno(), self.proc.stderr.fileno(), self.status_read],
                [self.output_limit, self.output_limit, 4096],
                deadline=time.monotonic() + self.timeout + HOST_GRACE,
            )
        except OSError:  # it died or was tampered with before the go: nothing ran
            return PythonResult("", "", None, False, False, self.isolation, error=STALE)
        finally:
            self.close()
        return self._result(out, err, parse_status(bytes(status.data), self.proc.returncode))

    def _result(self, out: BoundedOutput, err: BoundedOutput, report: dict[str, Any]) -> PythonResult:
        returncode = report.get("exit", -report["signal"] if "signal" in report else None)
        if self.isolation == "bwrap" and returncode is not None and returncode > 128:
            returncode = 128 - returncode  # bwrap exits 128+N when signal N killed the code
        return PythonResult(
            stdout=out.text(self.output_limit),
            stderr=err.text(self.output_limit),
            returncode=returncode,
            timed_out=bool(report.get("timed_out")),
            truncated=out.truncated or err.truncated,
            isolation=self.isolation,
            error=report.get("error"),
        )

    def close(self) -> None:
        """Kills whatever is left of the sandbox and deletes its directory (once; never raises)."""
        if self.closed:
            return
        self.closed = True
        _kill_group(self.proc.pid)  # the backstop: the supervisor normally left nothing
        if self.group:
            self.group.remove()  # and everything still in the cgroup, wherever it went
        self.proc.wait()
        os.close(self.status_read)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        remove_tree(self.scratch)


class SandboxPool:
    """``size`` sandboxes started ahead of need, in background threads. ``take`` hands out a
    waiting one (each runs exactly one call and is destroyed) and starts its replacement."""

    def __init__(self, start: Callable[[], Sandbox], size: int):
        self.start, self.size, self.pid = start, size, os.getpid()
        self.pending: deque[Future] = deque()
        self.lock = threading.Lock()
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="lmgym-sandbox")
        self.close = weakref.finalize(self, _discard, self.pending, self.lock, self.executor)

    def fill(self, wait: bool = False) -> None:
        with self.lock:
            while len(self.pending) < self.size:
                self.pending.append(self.executor.submit(self.start))
            pending = list(self.pending)
        if wait:
            futures.wait(pending)

    def take(self) -> Sandbox | None:
        """A waiting sandbox, or ``None`` when none was started (``fill`` starts its replacements)."""
        with self.lock:
            future = self.pending.popleft() if self.pending else None
        try:
            sandbox = future.result() if future is not None else None
        except OSError:
            return None
        if sandbox is not None and not sandbox.waiting():
            sandbox.close()
            return None
        return sandbox


def _discard(pending: deque[Future], lock: threading.Lock, executor: ThreadPoolExecutor) -> None:
    with lock:
        left = list(pending)
        pending.clear()
    executor.shutdown(wait=False, cancel_futures=True)
    for future in left:
        future.add_done_callback(lambda f: f.cancelled() or f.exception() or f.result().close())


def parse_status(data: bytes, exit_code: int | None) -> dict[str, Any]:
    """The supervisor's status line, checked: exactly one of ``{"exit": int}``,
    ``{"signal": int}``, ``{"timed_out": true}`` or ``{"error": str}``; anything else (nothing,
    garbage, a forged shape) is reported as a failure of the sandbox, never raised.

    Example:
        >>> parse_status(b'{"exit": 0}\\n', 0), parse_status(b'{"signal": 9}', 0)
        ({'exit': 0}, {'signal': 9})
        >>> parse_status(b'{"exit": "0"}', 0)["error"]
        'the sandbox ended without a valid status (exit status 0)'
    """
    try:
        report = json.loads(data.decode("utf-8"))
    except ValueError:
        report = None
    if isinstance(report, dict) and len(report) == 1:
        ((key, value),) = report.items()
        if key in ("exit", "signal") and type(value) is int and 0 <= value < 256:
            return report
        if (key, value) == ("timed_out", True) or (key == "error" and isinstance(value, str)):
            return {key: value[:500] if isinstance(value, str) else value}
    return {"error": f"the sandbox ended without a valid status (exit status {exit_code})"}


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


def interpreter() -> str:
    """The Python that runs the code: this one, as an absolute path without ``..`` (symlinks kept,
    so a virtual environment stays one)."""
    return os.path.abspath(sys.executable)


def _read_only_paths() -> list[str]:
    """What the sandboxed interpreter needs: system libraries, the Python installation and the
    virtual environment it runs from (never the project or the home directory as a whole)."""
    system = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin"]
    python = [
        sys.base_prefix,
        sys.prefix,
        os.path.dirname(interpreter()),
        os.path.dirname(os.path.realpath(sys.executable)),
    ]
    python = [os.path.abspath(p) for p in python] + [os.path.realpath(p) for p in python]
    return [p for p in dict.fromkeys(system + python) if os.path.lexists(p)]


def bwrap_prefix(scratch: str, tmpfs_bytes: int = 128 * 1024 * 1024) -> list[str]:
    """The ``bwrap`` arguments that put a command in the sandbox described in the module docs."""
    args = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns"]
    args += ["--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmpfs_bytes), "--tmpfs", "/tmp"]
    args += ["--size", str(tmpfs_bytes), "--tmpfs", "/dev/shm"]
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
    scratch = tempfile.mkdtemp(prefix="lmgym-python-")
    try:
        probe = subprocess.run(
            [*bwrap_prefix(scratch), interpreter(), "-I", "-c", "pass"], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        return "bwrap did not start within 30 s"
    finally:
        remove_tree(scratch)
    if probe.returncode == 0:
        return None
    said = (probe.stderr or "").strip().splitlines()
    reason = said[-1] if said else f"exit status {probe.returncode}"
    if "namespace" in reason.lower() or "operation not permitted" in reason.lower():
        reason += " (unprivileged user namespaces may be off: sysctl kernel.unprivileged_userns_clone=1)"
    return f"bwrap cannot run {interpreter()} in the sandbox: {reason}"


def remove_tree(path: str, seconds: float = 60.0) -> bool:
    """Deletes a directory the sandboxed code wrote in, whatever it holds (a chain thousands of
    directories deep, unreadable modes, FIFOs, symlinks), without recursion and never following a
    link: every subdirectory is first moved up to the top, so no path grows long. Stops after
    ``seconds``; never raises. True when the directory is gone."""
    deadline = time.monotonic() + seconds
    tag = uuid.uuid4().hex[:8]
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return not os.path.lexists(path)
    pending: list[str | None] = [None]  # None: the top itself
    moved = 0
    try:
        while pending and time.monotonic() < deadline:
            name = pending.pop()
            try:
                if name is not None:
                    os.chmod(name, 0o700, dir_fd=top)  # a mode the code set cannot stop the host
                fd = top if name is None else os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
            except OSError:
                continue
            try:
                for entry in list(os.scandir(fd)):
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            os.unlink(entry.name, dir_fd=fd)
                        elif name is None:
                            pending.append(entry.name)
                        else:
                            moved += 1
                            os.rename(entry.name, f".rm-{tag}-{moved}", src_dir_fd=fd, dst_dir_fd=top)
                            pending.append(f".rm-{tag}-{moved}")
                    except OSError:
                        continue
            finally:
                if fd != top:
                    os.close(fd)
            if name is not None:
                try:
                    os.rmdir(name, dir_fd=top)
                except OSError:
                    pass
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        pass
    return not os.path.lexists(path)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
