"""One test per attack on the Python tool, at each isolation level, each bounded in time."""

import os
import time
import uuid
from pathlib import Path

import pytest

import lmgym
from lmgym.tools.python import PythonTool, bwrap_problem

pytestmark = pytest.mark.timeout(60)  # a regression fails instead of hanging


@pytest.fixture(params=["bwrap", "rlimits"])
def level(request):
    if request.param == "bwrap" and bwrap_problem():
        pytest.skip(f"no bwrap level on this machine: {bwrap_problem()}")
    return request.param


def isolated_only(level, what):
    if level == "rlimits":
        pytest.skip(f"the rlimits level does not isolate {what} (documented in lmgym.tools.python)")


def run(level, code, timeout=3):
    start = time.perf_counter()
    result = PythonTool(timeout=timeout, isolation=level).run(code)
    assert time.perf_counter() - start < timeout + 6, "run() overran its timeout"
    assert result.isolation == level
    return result


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
    result = PythonTool(timeout=10, output_limit=1000, isolation=level).run(code)
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
