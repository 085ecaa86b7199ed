"""The Python tool's supervisor: runs ``main.py`` and leaves no descendant alive.

``PythonTool`` passes this file's source to ``python -I -c`` inside the sandbox (under bwrap the
package is not visible there), with three arguments: the wall-clock timeout in seconds, the
interpreter to run the code with, and the file descriptor of a status pipe the host owns.

The supervisor makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every
descendant that leaves its process group or session (``setsid`` after a double fork) is
re-parented to it rather than to init. It runs the code in a process group of its own, waits for
it at most ``timeout`` seconds, then kills that group and, wave after wave, every process that
was re-parented to it, until it has no child left. Last, it writes one JSON line to the status
pipe: ``{"exit": code}``, ``{"signal": number}`` or ``{"timed_out": true}``.

Standard library only: it must run on the bare interpreter.
"""

import ctypes
import json
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
SWEEP_SECONDS = 5.0


def children() -> list[int]:
    """The supervisor's live children, read from ``/proc`` (its view: the sandbox's PID namespace)."""
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after "(comm)", which may hold spaces
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(name))
    return found


def sweep(group: int) -> None:
    """Kills the code's process group, then every descendant re-parented to the supervisor."""
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < deadline:
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # reap what died
                pass
        except ChildProcessError:
            return  # no child left, alive or zombie
        time.sleep(0.005)


def on_alarm(signum: int, frame: object) -> None:
    raise TimeoutError


def main() -> None:
    timeout, interpreter, status_fd = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    os.set_inheritable(status_fd, False)  # the code never sees the status pipe
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.write(status_fd, b'{"error": "prctl(PR_SET_CHILD_SUBREAPER) failed"}\n')
        sys.exit(1)
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            os.execv(interpreter, [interpreter, "-I", "main.py"])
        finally:
            os._exit(127)
    try:
        os.setpgid(pid, pid)  # also here, so the group exists whichever side runs first
    except OSError:
        pass
    signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        _, status = os.waitpid(pid, 0)
        result = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.WEXITSTATUS(status)}
    except TimeoutError:
        result = {"timed_out": True}
    signal.setitimer(signal.ITIMER_REAL, 0)
    sweep(pid)
    os.write(status_fd, json.dumps(result).encode() + b"\n")


if __name__ == "__main__":
    main()
