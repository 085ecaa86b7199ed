"""One test per attack on the Python tool, at each isolation level, each bounded in time; every
level-parametrized attack also runs in a sandbox taken from a warm pool ("bwrap+pool",
"rlimits+pool")."""

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import lmgym
from lmgym.tools.cgroup import CallGroup
from lmgym.tools.python import PythonTool, bwrap_problem

pytestmark = pytest.mark.timeout(300)  # a regression fails instead of hanging


@pytest.fixture(params=["bwrap", "rlimits", "bwrap+pool", "rlimits+pool"])
def level(request):
    if request.param.startswith("bwrap") and bwrap_problem():
        pytest.skip(f"no bwrap level on this machine: {bwrap_problem()}")
    return request.param


def isolation(level):
    return level.split("+")[0]


def make_tool(level, **kwargs):
    """A tool at that level; "+pool": its call runs in a sandbox the pool started ahead of it."""
    pooled = level.endswith("+pool")
    tool = PythonTool(isolation=isolation(level), pool_size=int(pooled), **kwargs)
    tool.warm()
    return tool


def run_with(level, code, **kwargs):
    tool = make_tool(level, **kwargs)
    try:
        result = tool.run(code)
    finally:
        tool.close()
    assert result.isolation == isolation(level) and result.pooled == level.endswith("+pool")
    return result


def isolated_only(level, what):
    if isolation(level) == "rlimits":
        pytest.skip(f"the rlimits level does not isolate {what} (documented in lmgym.tools.python)")


def run(level, code, timeout=3):
    return run_with(level, code, timeout=timeout)


def test_auto_picks_the_strongest_level():
    assert PythonTool().isolation == ("rlimits" if bwrap_problem() else "bwrap")


def test_bad_isolation_is_refused():
    with pytest.raises(ValueError, match="isolation must be one of"):
        PythonTool(isolation="docker")


def test_a_fifo_in_the_scratch_dir_cannot_hang_the_host(level):
    code = "import os\nprint(os.getcwd(), flush=True)\nfor n in ('.stdout', '.stderr', 'out'): os.mkfifo(n)\n"
    result = run(level, code)
    scratch = result.stdout.split()[0]
    assert result.returncode == 0 and not Path(scratch).exists()


def test_deleting_the_scratch_dir_does_not_raise_in_the_host(level):
    code = "import os, shutil\nprint(os.getcwd(), flush=True)\nshutil.rmtree(os.getcwd(), ignore_errors=True)\n"
    result = run(level, code)
    assert result.returncode == 0 and not Path(result.stdout.strip()).exists()


def test_a_symlink_cannot_redirect_what_the_host_reads(level):
    code = "import os\nfor n in ('.stdout', '.stderr'): os.symlink('/etc/passwd', n)\nprint('ok')\n"
    result = run(level, code)
    assert result.text == "ok" and "root:" not in result.text


def test_a_real_time_signal_is_reported_by_number(level):
    result = run(level, "import os\nos.kill(os.getpid(), 40)\n")
    assert result.returncode == -40 and result.text == "error: killed by signal 40"
    assert "SIGKILL" in run(level, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n").text


def test_output_floods_are_bounded_on_both_streams(level):
    code = "import sys\nsys.stdout.write('x' * 10**7)\nsys.stderr.write('y' * 10**7)\n"
    result = run_with(level, code, timeout=10, output_limit=1000)
    assert result.truncated and "10000000 bytes" in result.stdout and "10000000 bytes" in result.stderr
    assert len(result.stdout) < 1100 and len(result.stderr) < 1100


def test_a_setsid_grandchild_dies_with_the_call(level):
    marker = f"lmgym-escape-{uuid.uuid4().hex}"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', '{marker}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
        "print('parent done')\n"
    )
    result = run(level, code)
    assert result.stdout == "parent done\n"
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in _cmdline(pid)]


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_the_host_environment_cannot_be_read(level, monkeypatch):
    isolated_only(level, "other processes of the same user")
    monkeypatch.setenv("LMGYM_HOST_SECRET", "hunter2")
    code = (
        "import os\n"
        f"for pid in (os.getppid(), {os.getpid()}, 1, 2):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ').read())\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
    )
    result = run(level, code)
    assert "hunter2" not in result.text and "LMGYM_HOST_SECRET" not in result.text


def test_code_cannot_write_outside_the_scratch_dir(level, tmp_path):
    isolated_only(level, "the filesystem")
    target = tmp_path / "pwned"
    result = run(level, f"open({str(target)!r}, 'w').write('x')\nopen('/tmp/pwned', 'w').write('x')")
    assert not target.exists() and result.returncode != 0


def test_code_cannot_read_the_project_or_home(level):
    isolated_only(level, "the filesystem")
    readme = Path(lmgym.__file__).resolve().parents[1] / "README.md"
    code = f"import os\nprint(open({str(readme)!r}).read()[:40])\n"
    result = run(level, code)
    assert "lmgym" not in result.stdout and "FileNotFoundError" in result.stderr
    home = run(level, f"import os\nprint(os.listdir({os.path.expanduser('~')!r}))")
    assert ".bashrc" not in home.stdout and ".cache" not in home.stdout


def test_no_network(level):
    isolated_only(level, "the network")
    code = "import socket\nprint([i for i in socket.if_nameindex()])"
    assert run(level, code).stdout.strip() == "[(1, 'lo')]"


# ------------------------------------------------------------------ round 2: the supervisor
def test_the_code_cannot_forge_the_status_through_proc(level):
    code = (
        "import os\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try:\n"
        "        fds = os.listdir(f'/proc/{pid}/fd')\n"
        "    except OSError:\n"
        "        continue\n"
        "    for fd in fds:\n"
        "        try:\n"
        "            with open(f'/proc/{pid}/fd/{fd}', 'w') as f:\n"
        '                f.write(\'{"error": "FORGED"}\\n\')\n'
        "        except OSError:\n"
        "            pass\n"
        "print('done')\n"
    )
    result = run(level, code)
    assert result.error is None and result.returncode == 0 and not result.timed_out


def test_the_code_cannot_find_signal_or_trace_its_supervisor(level):
    if isolation(level) == "rlimits" and os.geteuid() != 0:
        pytest.skip("the rlimits level runs the code as the calling user, who can signal the supervisor (documented)")
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for p in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try:\n"
        "        cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if b'PR_SET_CHILD_SUBREAPER' in cmd:\n"
        "        pid = int(p)\n"
        "        print('traced' if libc.ptrace(16, pid, 0, 0) == 0 else 'no trace')\n"
        "        try:\n"
        "            os.kill(pid, 9)\n"
        "            print('signalled')\n"
        "        except OSError:\n"
        "            print('no signal')\n"
    )
    result = run(level, code)
    assert "traced" not in result.stdout and "signalled" not in result.stdout
    assert result.error is None and result.returncode == 0
    if isolation(level) == "rlimits":
        assert "no trace\nno signal" in result.stdout  # visible there, but out of reach


def test_a_malformed_status_is_a_tool_failure():
    from lmgym.tools.python import parse_status

    for data in [b"", b"garbage", b"[1]", b'{"signal": "9"}', b'{"exit": 0, "error": "x"}', b'{"exit": 1e9}', b"\xff"]:
        assert "valid status" in parse_status(data, 1)["error"], data
    assert parse_status(b'{"timed_out": true}\n', -9) == {"timed_out": True}


def test_a_deep_directory_chain_is_cleaned_up(level):
    code = "import os\nprint(os.getcwd(), flush=True)\n"
    code += "for _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nopen('f', 'w')\n"
    result = run(level, code, timeout=8)
    assert result.returncode == 0 and not Path(result.stdout.split()[0]).exists()


def test_remove_tree_survives_modes_links_and_depth(tmp_path):
    from lmgym.tools.python import remove_tree

    top = tmp_path / "scratch"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(1500):  # deeper than PATH_MAX allows to name
        os.mkdir("dir", dir_fd=fd)
        fd, parent = os.open("dir", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    (top / "link").symlink_to(tmp_path / "keep")
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "file").write_text("x")
    locked = top / "locked"
    (locked / "inner").mkdir(parents=True)
    locked.chmod(0)
    assert remove_tree(str(top)) and not top.exists()
    assert (tmp_path / "keep" / "file").read_text() == "x"  # a link is removed, never followed


def test_code_is_written_as_utf8_whatever_the_locale(tmp_path):
    script = (
        "from lmgym.tools.python import PythonTool\nprint(PythonTool(timeout=5).run(\"print('na\\u00efve')\").text)"
    )
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "utf-8"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "naïve", out.stderr


# ------------------------------------------------------------------ round 2: limits that hold
def cgroup_only(level):
    if CallGroup.create(64 << 20, 8) is None:
        pytest.skip("no cgroup can be made here: only RLIMIT_AS bounds memory (documented)")


def test_memory_outside_the_address_space_counts(level):
    cgroup_only(level)
    code = (
        "import os\n"
        "total = 0\n"
        "for i in range(64):\n"
        "    fd = os.memfd_create(f'm{i}')\n"
        "    os.write(fd, b'x' * (16 << 20))\n"
        "    total += 16\n"
        "    print(total, flush=True)\n"
    )
    result = run_with(level, code, timeout=10, memory_mb=512)
    reached = int(result.stdout.split()[-1]) if result.stdout.split() else 0
    assert reached <= 512 and result.returncode != 0


def test_tmpfs_is_bounded_under_bwrap():
    if bwrap_problem():
        pytest.skip(f"no bwrap level on this machine: {bwrap_problem()}")
    code = (
        "total = 0\n"
        "try:\n"
        "    for i in range(100):\n"
        "        with open(f'/dev/shm/f{i}', 'wb') as f:\n"
        "            f.write(b'x' * (8 << 20))\n"
        "        total += 8\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "print(total)\n"
    )
    result = PythonTool(timeout=10, memory_mb=512, isolation="bwrap").run(code)
    assert "refused 28" in result.stdout and int(result.stdout.split()[-1]) <= 128  # ENOSPC at memory_mb / 4


def test_max_processes_holds_as_root_too(level):
    if isolation(level) == "bwrap" or os.geteuid() == 0:
        cgroup_only(level)  # root: only a cgroup (or dropping to nobody) counts its processes
    code = (
        "import os, time\n"
        "n = 1\n"
        "for i in range(150):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(3)\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        break\n"
        "    n += 1\n"
        "print(n)\n"
    )
    result = run_with(level, code, timeout=5, max_processes=32)
    assert result.returncode == 0 and int(result.stdout) <= 32


def test_no_nested_user_namespace_under_bwrap():
    if bwrap_problem():
        pytest.skip(f"no bwrap level on this machine: {bwrap_problem()}")
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.unshare(0x10000000), ctypes.get_errno())"
    )
    result = PythonTool(timeout=5, isolation="bwrap").run(code)
    assert result.stdout.split()[0] == "-1"  # CLONE_NEWUSER refused


def test_an_interpreter_path_with_dotdot_still_gets_bwrap(monkeypatch):
    if bwrap_problem():
        pytest.skip(f"no bwrap level on this machine: {bwrap_problem()}")
    exe = Path(sys.executable)
    monkeypatch.setattr(sys, "executable", str(exe.parent / ".." / exe.parent.name / exe.name))
    bwrap_problem.cache_clear()
    try:
        tool = PythonTool(timeout=5, isolation="auto")
        assert tool.isolation == "bwrap" and tool.run("print(6 * 7)").text == "42"
    finally:
        bwrap_problem.cache_clear()


def test_a_refused_bwrap_says_the_real_reason(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text(
        '#!/bin/sh\necho "bwrap: Can\'t find source path /nowhere: No such file or directory" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    bwrap_problem.cache_clear()
    try:
        problem = bwrap_problem()
        assert "Can't find source path /nowhere" in problem and "namespaces" not in problem
        with pytest.raises(RuntimeError, match="source path"):
            PythonTool(isolation="bwrap")
    finally:
        bwrap_problem.cache_clear()


# ------------------------------------------------------------------ the warm pool
@pytest.fixture(params=["bwrap", "rlimits"])
def base_level(request):
    if request.param == "bwrap" and bwrap_problem():
        pytest.skip(f"no bwrap level on this machine: {bwrap_problem()}")
    return request.param


def test_a_call_cannot_reach_the_sandbox_waiting_in_the_pool(base_level):
    if base_level == "rlimits" and os.geteuid() != 0:
        pytest.skip("the rlimits level runs the code as the calling user, who can reach the pool (documented)")
    tool = PythonTool(timeout=5, isolation=base_level, pool_size=2)
    tool.warm()
    attack = (
        "import ctypes, glob, os, signal\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for p in [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (os.getpid(), os.getppid())]:\n"
        "    try:\n"
        "        cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if b'_lmgym_loader' in cmd or b'PR_SET_CHILD_SUBREAPER' in cmd:\n"
        "        print('found')\n"
        "        print('traced' if libc.ptrace(16, int(p), 0, 0) == 0 else 'no trace')\n"
        "        for what in ('cwd', 'mem', 'environ'):\n"
        "            try:\n"
        "                os.listdir(f'/proc/{p}/cwd') if what == 'cwd' else open(f'/proc/{p}/{what}', 'rb').read(1)\n"
        "                print('read', what)\n"
        "            except OSError:\n"
        "                pass\n"
        # a dir its own user owns is not the waiting sandbox's: a killed run's leftover scratch dir,
        # or a call running beside it (documented: calls at the same time share nobody)
        "for d in glob.glob('/tmp/lmgym-python-*'):\n"
        "    if d != os.getcwd() and os.stat(d).st_uid != os.getuid():\n"
        "        try:\n"
        "            open(os.path.join(d, 'main.py'), 'w').write('print(666)')\n"
        "            print('planted')\n"
        "        except OSError:\n"
        "            pass\n"
    )
    try:
        first = tool.run(attack)
        assert first.pooled and first.returncode == 0, first.text
        assert not {"traced", "read", "planted"} & set(first.stdout.split()), first.stdout
        # rlimits: visible (its supervisor too), but out of reach; bwrap: another PID namespace
        assert ("found" in first.stdout) == (base_level == "rlimits")
        second = tool.run("print(6 * 7)")
        assert second.text == "42" and second.pooled
    finally:
        tool.close()


def test_a_killed_waiting_sandbox_is_replaced_not_reported(base_level):
    tool = PythonTool(timeout=5, isolation=base_level, pool_size=1)
    tool.warm()
    waiting = tool._sandbox_pool.pending[0].result()
    os.killpg(waiting.proc.pid, 9)  # as anything outside could
    waiting.proc.wait()
    result = tool.run("print(6 * 7)")
    assert result.text == "42" and not result.pooled  # it ran in a fresh sandbox
    tool.close()


def test_no_state_passes_between_pooled_calls(base_level):
    tool = PythonTool(timeout=5, isolation=base_level, pool_size=1)
    tool.warm()
    write = "import os\nopen('left', 'w').write('x')\nos.environ['LEFT'] = '1'\nprint(os.getcwd())"
    look = "import os, sys\nprint(os.getcwd(), sorted(os.listdir('.')), 'LEFT' in os.environ, 'left' in sys.modules)"
    try:
        first, second = tool.run(write), tool.run(look)
        assert first.pooled and second.pooled
        cwd, rest = second.stdout.split(" ", 1)
        assert cwd != first.stdout.strip() and rest.strip() == "['main.py'] False False"
        assert not Path(first.stdout.strip()).exists()
    finally:
        tool.close()


def test_closing_the_tool_discards_its_waiting_sandboxes(base_level):
    tool = PythonTool(timeout=5, isolation=base_level, pool_size=2)
    tool.warm()
    sandboxes = [f.result() for f in tool._sandbox_pool.pending]
    tool.close()
    for sandbox in sandboxes:
        assert sandbox.proc.wait(timeout=10) is not None and not Path(sandbox.scratch).exists()


def test_a_pooled_call_prints_what_a_fresh_one_prints(base_level):
    codes = ["print(1)\nraise ValueError('x')", "x = (", "import sys\nsys.exit(f'{3}')", "print(__name__, __doc__)"]
    fresh, pooled = PythonTool(timeout=5, isolation=base_level, pool_size=0), make_tool(f"{base_level}+pool", timeout=5)
    for code in codes:
        a, b = fresh.run(code), pooled.run(code)
        assert (a.stdout, a.returncode) == (b.stdout, b.returncode) and b.pooled, (a, b)
        assert re.sub(r"lmgym-python-\w+", "S", a.stderr) == re.sub(r"lmgym-python-\w+", "S", b.stderr)
    pooled.close()
