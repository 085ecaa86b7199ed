"""The Python tool's supervisor: runs the sandboxed command and leaves no descendant alive.

``PythonTool`` passes this file's source to ``python -I -S -c`` (no site: a quarter of the
start-up time) on the host side of the sandbox (outside bubblewrap, so the code never sees it),
with one argument, a dict (``marshal``, in hex: no import needed to read it): ``timeout``
(wall-clock seconds), ``argv`` (the command: ``bwrap ... python -I -c <loader>`` or
``python -I -c <loader>``), ``status_fd`` (a pipe the host owns), ``cgroups``
(``cgroup.procs`` files to join first, possibly none), ``limits`` (``{"RLIMIT_AS": bytes,
...}``, set on itself first, so the command inherits them) and ``user`` (``[uid, gid]`` to run the command as, or
``null``) and ``prestart``. Its stdin is the host's go pipe: the host writes to it when
``main.py`` is in place (the go) or closes it to discard the sandbox (nothing runs). With
``prestart`` the command (the loader, ``sandbox_loader.py``) starts at once and waits for the go
on its stdin; without it (a root host at the rlimits level, where the code's user, ``nobody``,
is shared by every call and could reach a waiting interpreter) the supervisor waits for the go
before it forks. Setting the limits here rather than in a ``preexec_fn`` keeps ``PythonTool.run``
safe to call from several threads at once.

The supervisor cannot be reached from the code: the status pipe is never inherited, the
supervisor is not dumpable (no ``ptrace``, no ``/proc/<pid>/fd`` for a process without
``CAP_SYS_PTRACE``), and with ``user`` the code runs as another user (``nobody``) that can
neither signal nor trace it. Under bubblewrap the code is in another PID namespace and cannot
name it at all.

The supervisor makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so every
descendant that leaves its process group or session (``setsid`` after a double fork) is
re-parented to it rather than to init. It runs the command in a process group of its own, waits
for it at most ``timeout`` seconds from the go (less when the host dies: the host's end of the
status pipe closing ends the wait), then kills that group and, wave after wave, every process
that was re-parented to it, until it has no child left. Last, it writes one JSON line to the
status pipe: ``{"exit": code}``, ``{"signal": number}``, ``{"timed_out": true}`` or
``{"error": text}``.

Standard library only: it must run on the bare interpreter.
"""

import _signal as signal  # the C module: ``signal`` would import enum, a tenth of the start-up
import ctypes
import marshal
import os
import resource
import sys
import time

PR_SET_DUMPABLE, PR_SET_KEEPCAPS, PR_SET_CHILD_SUBREAPER = 4, 8, 36  # <linux/prctl.h>
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 38, 47, 2
CAP_DAC_READ_SEARCH, CAPABILITY_VERSION_3 = 2, 0x20080522  # <linux/capability.h>
SWEEP_SECONDS = 5.0
STALE = "the waiting sandbox ended before the call"
LIBC = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg: int = 0) -> None:
    if LIBC.prctl(option, arg, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def become(uid: int, gid: int) -> None:
    """Root only, in the child before exec: become ``uid``/``gid`` with one capability kept,
    ``CAP_DAC_READ_SEARCH`` (read access to the interpreter wherever it is installed, e.g. under
    ``/root``), and no way back (``no_new_privs``)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    prctl(PR_SET_KEEPCAPS, 1)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    bit = 1 << CAP_DAC_READ_SEARCH
    data = (Data * 2)(Data(bit, bit, bit), Data(0, 0, 0))
    if LIBC.capset(ctypes.byref(Header(CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "raising the ambient capability failed")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def children() -> list:
    """The supervisor's live children, read from ``/proc``."""
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
    """Kills the command's process group, then every descendant re-parented to the supervisor."""
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
        time.sleep(0.001)


def set_oom_score_adj(value: int) -> None:
    """Best effort: lowering it needs ``CAP_SYS_RESOURCE``, which a container may not grant."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


def run_child(config: dict, stdin: int) -> None:
    """In the forked child: ``stdin`` as its stdin, its own process group, the most killable
    under memory pressure, another user if asked, then the command. Never returns."""
    try:
        os.dup2(stdin, 0)
        os.setpgid(0, 0)
        prctl(PR_SET_DUMPABLE, 1)  # its own /proc files again (exec would reset it anyway)
        set_oom_score_adj(1000)
        if config.get("user"):
            become(*config["user"])
        os.execv(config["argv"][0], config["argv"])
    except BaseException as e:
        os.write(2, f"sandbox: could not start the code: {e}\n".encode())
    finally:
        os._exit(127)


def main() -> None:
    config = marshal.loads(bytes.fromhex(sys.argv[1]))
    status_fd = int(config["status_fd"])
    os.set_inheritable(status_fd, False)  # the code never holds the status pipe
    try:
        for name, value in config.get("limits", {}).items():
            resource.setrlimit(getattr(resource, name), (value, value))
        for procs in config.get("cgroups", []):
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        set_oom_score_adj(-1000)  # an out-of-memory kill in the cgroup takes the code, not the supervisor
        prctl(PR_SET_DUMPABLE, 0)  # no ptrace and no /proc/<pid>/fd of the supervisor
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError as e:
        report(status_fd, "error", f"the sandbox could not start: {e}")
        sys.exit(1)
    prestart = bool(config.get("prestart"))
    if not prestart and not os.read(0, 1):  # discarded before the go: nothing ran
        return
    go_read, go_write = os.pipe()  # the command's stdin: closed at the go
    pid = os.fork()
    if pid == 0:
        os.close(go_write)
        run_child(config, go_read)
    os.close(go_read)
    try:
        os.setpgid(pid, pid)  # also here, so the group exists whichever side runs first
    except OSError:
        pass
    if prestart and not os.read(0, 1):  # the host discarded this sandbox (or is gone): run nothing
        sweep(pid)
        return
    if os.waitpid(pid, os.WNOHANG)[0]:  # the waiting command died (killed from outside)
        sweep(pid)
        report(status_fd, "error", STALE)
        return
    os.close(go_write)
    result = wait(pid, status_fd, float(config["timeout"]))
    sweep(pid)
    if result is not None:  # None: the host is gone (killed), nobody to tell
        report(status_fd, *result)


def wait(pid: int, status_fd: int, seconds: float) -> "tuple[str, int | bool] | None":
    """Waits for the command at most ``seconds``: ``("exit", code)``, ``("signal", number)`` or
    ``("timed_out", True)``; ``None`` as soon as the host is gone (its end of the status pipe
    closed, as a ``kill -9`` of the trainer closes it), so the code does not outlive it."""
    import select

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a child's exit wakes the poll
    poller = select.poll()
    poller.register(wake_read, select.POLLIN)
    poller.register(status_fd, 0)  # POLLERR once no one can read it
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return ("signal", os.WTERMSIG(status)) if os.WIFSIGNALED(status) else ("exit", os.WEXITSTATUS(status))
        left = deadline - time.monotonic()
        if left <= 0:
            return ("timed_out", True)
        for fd, _ in poller.poll(max(1, int(left * 1000))):
            if fd == status_fd:
                return None
            os.read(wake_read, 512)


def report(status_fd: int, key: str, value: "int | str") -> None:
    """Writes the status line: ``{"exit": 0}``, ``{"timed_out": true}``, ``{"error": "..."}``."""
    if isinstance(value, str):
        import json  # only on the rare error paths: json is a third of the supervisor's start-up

        line = json.dumps({key: value})
    else:
        line = '{"%s": %s}' % (key, "true" if value is True else int(value))  # noqa: UP031
    os.write(status_fd, line.encode() + b"\n")


if __name__ == "__main__":
    main()
    os._exit(0)  # nothing to flush or finalize: skip the interpreter's shutdown
