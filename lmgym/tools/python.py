"""A Python tool: runs model-written code in a sandboxed subprocess.

Two isolation levels. ``PythonTool(isolation="auto")`` (the default) takes ``"bwrap"`` when
bubblewrap works on this machine and ``"rlimits"`` otherwise; every result says which one ran
(``PythonResult.isolation``, and ``info["tool_info"]["isolation"]`` in an env step).

Both levels:
    - the code's stdout and stderr come back through pipes the host owns, read both at once
      (never files the code could replace, delete or link elsewhere); at most ``output_limit``
      bytes (16 KiB) of each are kept, the rest is drained and counted;
    - ``python -I`` (no user site, no ``PYTHON*`` variables) on ``main.py``, written as UTF-8,
      in a fresh scratch directory that is the working directory and ``HOME``, deleted afterwards
      without recursion (``remove_tree``); an emptied environment (``PATH``, ``HOME``,
      ``TMPDIR``, ``LANG`` only);
    - a supervisor (``lmgym/tools/sandbox_supervisor.py``) on the host side, outside bwrap: a
      child subreaper that runs the code in its own process group, kills it at ``timeout``
      (wall clock), then kills every descendant, including those that called ``setsid`` after
      a double fork, before ``run`` returns; the host kills the whole session if the
      supervisor overruns. The code cannot reach it: its status pipe is never inherited, it is
      not dumpable (no ``ptrace``, no ``/proc/<pid>/fd``), and when the host is root the code
      runs as ``nobody``. What it reports is validated (``parse_status``);
    - a cgroup per call where one can be made (``lmgym.tools.cgroup``): all its memory (tmpfs,
      ``memfd``, every process) within ``memory_mb``, its processes and threads within
      ``max_processes``, and whatever is left in it killed at the end;
    - rlimits: address space (``memory_mb``), CPU seconds, processes (without a cgroup), open
      files, size of written files, no core dumps; any exit status becomes a plain message
      (``killed by signal 40``).

``"bwrap"`` (bubblewrap, the Debian package ``bubblewrap``) adds namespaces:
    - the filesystem is an empty root with read-only binds of ``/usr``, ``/lib*``, ``/bin``,
      ``/sbin``, the Python installation and its virtual environment; the scratch directory
      is the only writable host path, ``/tmp`` and ``/dev/shm`` are private tmpfs of
      ``memory_mb / 4`` each; the home directory, the project, ``/etc`` and everything else of
      the host are absent;
    - a new PID namespace with its own ``/proc``: host processes (and their environments) are
      invisible, and everything in it dies with the call;
    - no network (a new network namespace with only loopback), new IPC and UTS namespaces;
    - the code runs as ``nobody`` in a new user namespace with every capability dropped, and
      cannot create a nested one (``--disable-userns``).

A warm pool (``pool_size``, 1 by default) keeps sandboxes started ahead of need: scratch
directory, cgroup and supervisor, and where no other call can reach it (under bwrap, or for a
non-root host) the interpreter too, running the loader (``sandbox_loader.py``) that waits for the
go and then runs ``main.py`` as ``python -I main.py`` would. Each runs one call and is destroyed;
a pooled sandbox found dead or touched is discarded and the call runs in a fresh one.

What ``"rlimits"`` does NOT isolate:
    - the filesystem: the code can read whatever its user can (as root's ``nobody`` it keeps
      ``CAP_DAC_READ_SEARCH`` to reach the interpreter, so it reads every file) and write
      wherever that user can;
    - for a non-root host, other processes of the same user: it can read
      ``/proc/<pid>/environ`` of the host process (its secrets), signal it and its supervisor
      (the call then reports a failure); for a root host, calls running at the same time share
      ``nobody`` and can reach each other (a waiting pooled sandbox cannot be reached: only its
      root supervisor waits); without a cgroup, code that kills its own supervisor
      first can leave detached descendants running;
    - the network, and nested user namespaces.

What neither level isolates: the kernel (bubblewrap is not a VM: a kernel bug is an escape),
CPU and memory contention with the host within the limits, timing side channels, and disk
space in the scratch directory up to the file-size limit per file. Run untrusted code at scale
inside a VM or gVisor-style sandbox as well.
"""

from __future__ import annotations

import functools
import json
import marshal
import math
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
from typing import Any

from lmgym.tools.cgroup import CallGroup

ISOLATION = ("auto", "bwrap", "rlimits")
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


class PythonTool:
    """Runs Python code in a sandboxed subprocess; the tool's name (its tag) is ``python``.

    Args:
        timeout: wall-clock seconds before the code and all its descendants are killed.
        memory_mb: memory limit. Each process's address space (``RLIMIT_AS``); and, where a
            cgroup can be made, all the memory of the call together (tmpfs, ``memfd``, page cache).
        cpu_seconds: CPU-time limit (``RLIMIT_CPU``); defaults to ``timeout`` rounded up.
        max_processes: processes and threads the code may run at once (a cgroup's ``pids.max``
            where one can be made, else ``RLIMIT_NPROC``).
        output_limit: bytes kept of stdout and of stderr.
        max_file_mb: the largest file the code may write (``RLIMIT_FSIZE``).
        max_open_files: files the code may hold open at once (``RLIMIT_NOFILE``).
        isolation: ``"auto"`` (bwrap when it works here, else rlimits), ``"bwrap"`` (an error
            if bubblewrap is missing or cannot run) or ``"rlimits"``; see the module docs for
            what each level guarantees.
        pool_size: sandboxes kept started and waiting for code (0: none, every call starts its
            own). The pool fills after the first call (or at ``warm()``) and refills in the
            background; each pooled sandbox runs exactly one call and is destroyed, so no state
            passes from one call to the next. ``close()`` discards the waiting ones.

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
        max_open_files: int = 64,
        pool_size: int = 1,
    ):
        if isolation not in ISOLATION:
            raise ValueError(f"isolation must be one of {ISOLATION}, got {isolation!r}")
        if not timeout > 0 or not math.isfinite(timeout):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        for name, value in [
            ("memory_mb", memory_mb),
            ("max_processes", max_processes),
            ("output_limit", output_limit),
            ("max_file_mb", max_file_mb),
            ("max_open_files", max_open_files),
        ]:
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if pool_size < 0:
            raise ValueError(f"pool_size must be 0 or more, got {pool_size}")
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.cpu_seconds = cpu_seconds or int(timeout) + 1
        self.max_processes = max_processes
        self.output_limit = output_limit
        self.max_file_mb = max_file_mb
        self.max_open_files = max_open_files
        problem = bwrap_problem() if isolation != "rlimits" else None
        if isolation == "bwrap" and problem:
            raise RuntimeError(f"isolation='bwrap' is not available here: {problem}")
        self.isolation = "bwrap" if isolation != "rlimits" and not problem else "rlimits"
        self.pool_size = pool_size
        self._sandbox_pool: SandboxPool | None = None

    def __call__(self, code: str) -> str:
        return self.run(code).text

    def limits(self, nproc: bool) -> dict[str, int]:
        """The rlimits the supervisor sets on itself before it starts the code (who inherits them)."""
        mb = 1024 * 1024
        limits = {
            "RLIMIT_AS": self.memory_mb * mb,
            "RLIMIT_CPU": self.cpu_seconds,
            "RLIMIT_FSIZE": self.max_file_mb * mb,
            "RLIMIT_NOFILE": self.max_open_files,
            "RLIMIT_CORE": 0,
        }
        if nproc:  # else the cgroup counts them, for every user, root included
            limits["RLIMIT_NPROC"] = self.max_processes
        return limits

    def command(self, scratch: str, prestart: bool = False) -> list[str]:
        """The command the supervisor runs in ``scratch``: the loader (``sandbox_loader.py``, which
        runs ``main.py`` at the go; ``prestart``: it says when it is ready) on ``python -I``,
        inside bwrap at that level."""
        code = [interpreter(), "-I", "-c", LOADER, *(["ready"] if prestart else [])]
        tmpfs_bytes = self.memory_mb * 1024 * 1024 // 4
        return bwrap_prefix(scratch, tmpfs_bytes) + code if self.isolation == "bwrap" else code

    def run(self, code: str) -> PythonResult:
        """Runs ``code``; whatever the code does, returns a result (never raises for it)."""
        pool = self._pool() if self.pool_size else None
        try:
            sandbox = pool.take() if pool else None
            if sandbox is not None:
                result = sandbox.run(code)
                if result.error != STALE:
                    result.pooled = True
                    return result
            try:
                return self.start_sandbox().run(code)
            except OSError as e:  # the sandbox could not start (no fork, no pipe): the tool failed
                return PythonResult("", "", None, False, False, self.isolation, error=f"the sandbox failed: {e}")
        finally:
            if pool:
                pool.fill()  # after the call: the refill does not compete with it

    def warm(self) -> None:
        """Starts the pool's sandboxes now (they are otherwise started after the first call) and
        waits until they are ready."""
        if self.pool_size:
            self._pool().fill(wait=True)

    def close(self) -> None:
        """Stops the pool: its waiting sandboxes are discarded (also done when the tool is
        garbage-collected, and at exit)."""
        if self._sandbox_pool is not None:
            self._sandbox_pool.close()
            self._sandbox_pool = None

    def _pool(self) -> SandboxPool:
        if self._sandbox_pool is None or self._sandbox_pool.pid != os.getpid():  # new, or forked
            self._sandbox_pool = SandboxPool(self.start_sandbox, self.pool_size)
        return self._sandbox_pool

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sandbox_pool": None}

    def start_sandbox(self) -> Sandbox:
        """A sandbox started and waiting for code: its scratch directory, its cgroup, the
        supervisor and (inside bwrap at that level) the loader's interpreter."""
        scratch = tempfile.mkdtemp(prefix="lmgym-python-")
        user = [NOBODY, NOBODY] if self.isolation == "rlimits" and os.geteuid() == 0 else None
        overhead = 3 if self.isolation == "bwrap" else 1  # the supervisor (and bwrap's two processes)
        group = CallGroup.create((self.memory_mb + SUPERVISOR_MB) * 1024 * 1024, self.max_processes + overhead)
        status_read, status_write = os.pipe()
        prestart = user is None  # a shared user (nobody) never waits as a process: see the supervisor
        config = {
            "argv": self.command(scratch, prestart),
            "status_fd": status_write,
            "cgroups": group.procs_files if group else [],
            "limits": self.limits(nproc=group is None),
            "user": user,
            "prestart": prestart,
        }
        env = {"PATH": os.defpath, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
        try:
            proc = subprocess.Popen(
                [interpreter(), "-I", "-S", "-c", SUPERVISOR, marshal.dumps({**config, "timeout": self.timeout}).hex()],
                cwd=scratch,
                env=env,
                stdin=subprocess.PIPE,  # the go
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_write,),
                start_new_session=True,  # its own session and process group
            )
        except OSError:
            os.close(status_read)
            if group:
                group.remove()
            remove_tree(scratch)
            raise
        finally:
            os.close(status_write)
        sandbox = Sandbox(self, proc, scratch, group, status_read, user)
        if prestart and not sandbox.wait_ready(READY_SECONDS):
            sandbox.close()
            raise OSError(f"the sandbox's interpreter was not ready within {READY_SECONDS} s")
        return sandbox


class Sandbox:
    """One sandbox, started and waiting for its one call (``PythonTool.start_sandbox``)."""

    def __init__(
        self,
        tool: PythonTool,
        proc: subprocess.Popen,
        scratch: str,
        group: CallGroup | None,
        status_read: int,
        user: list[int] | None,
    ):
        self.proc, self.scratch, self.group, self.status_read, self.user = proc, scratch, group, status_read, user
        self.timeout, self.output_limit, self.isolation = tool.timeout, tool.output_limit, tool.isolation
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
