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

import marshal
import math
import os
import subprocess
import tempfile
from typing import Any

from lmgym.tools.cgroup import CallGroup
from lmgym.tools.sandbox import (
    LOADER,
    NOBODY,
    READY_SECONDS,
    STALE,
    SUPERVISOR,
    SUPERVISOR_MB,
    Limits,
    PythonResult,
    Sandbox,
    SandboxPool,
    bwrap_prefix,
    bwrap_problem,
    interpreter,
    parse_status,
    remove_tree,
    signal_message,
)

ISOLATION = ("auto", "bwrap", "rlimits")


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
    description = "Python: write <python>CODE</python> and what it prints comes back as <result>OUTPUT</result>"

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
        sandbox = Sandbox(
            Limits(self.timeout, self.output_limit, self.isolation), proc, scratch, group, status_read, user
        )
        if prestart and not sandbox.wait_ready(READY_SECONDS):
            sandbox.close()
            raise OSError(f"the sandbox's interpreter was not ready within {READY_SECONDS} s")
        return sandbox


__all__ = ["ISOLATION", "PythonResult", "PythonTool", "bwrap_problem", "parse_status", "remove_tree", "signal_message"]
