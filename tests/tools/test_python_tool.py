"""The sandboxed Python tool: limits hold and the parent is unharmed."""

import os
import time

from lmgym.tools.python import PythonTool


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False


def test_runs_code_in_a_scratch_directory():
    out = PythonTool(timeout=5)("import os; print(os.getcwd().split('/')[-1].startswith('lmgym-python-'))")
    assert out == "True"


def test_infinite_loop_times_out_fast():
    result = PythonTool(timeout=1).run("while True: pass")
    assert result.timed_out and "timed out" in result.text


def test_memory_bomb_is_stopped():
    result = PythonTool(timeout=10, memory_mb=256).run("x = bytearray(2 * 1024**3)\nprint('allocated')")
    assert "MemoryError" in result.stderr and "allocated" not in result.stdout and not result.timed_out


def test_forked_children_do_not_outlive_the_call():
    code = (
        "import os, time\n"
        "for _ in range(8):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "print(os.getpgid(0), flush=True)\n"
        "time.sleep(60)\n"
    )
    result = PythonTool(timeout=2).run(code)
    assert result.timed_out
    pgid = int(result.stdout.split()[-1])
    time.sleep(0.2)
    survivors = [p for p in os.listdir("/proc") if p.isdigit() and alive(p) and _pgid(p) == pgid]
    assert survivors == []


def _pgid(pid):
    try:
        return os.getpgid(int(pid))
    except (ProcessLookupError, PermissionError):
        return None


def test_huge_print_is_truncated():
    result = PythonTool(timeout=10, output_limit=1000).run("print('x' * 10_000_000)")
    assert result.truncated and len(result.stdout) < 1200 and "output truncated" in result.stdout


def test_environment_is_emptied():
    os.environ["LMGYM_TEST_SECRET"] = "hunter2"
    try:
        out = PythonTool(timeout=5)("import os; print(os.environ.get('LMGYM_TEST_SECRET'), sorted(os.environ))")
    finally:
        del os.environ["LMGYM_TEST_SECRET"]
    assert out.startswith("None") and "hunter2" not in out


def test_errors_are_reported():
    assert "ZeroDivisionError" in PythonTool(timeout=5)("1/0")
