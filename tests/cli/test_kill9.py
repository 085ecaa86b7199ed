"""``kill -9`` of the process that runs lmgym leaves nothing behind: within 10 s no process it
started is alive, whichever kind of child it had: the Python tool's sandbox running code, a text
world's JVM, the actors and daemons of the local Ray cluster it started."""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import alive

from lmgym.processes import descendants

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SANDBOX = """
import threading
from lmgym.tools import PythonTool
tool = PythonTool(timeout=300)
threading.Thread(target=tool, args=("while True: pass",), daemon=True).start()
"""
JVM = """
import gymnasium as gym, lmgym
env = gym.make("lmgym/ScienceWorld-v0")
env.reset(seed=0)
"""
RAY = """
import gymnasium as gym, lmgym
from lmgym.vector.remote import RayVectorEnv, init_local_ray
init_local_ray()
envs = RayVectorEnv([lambda: gym.make("lmgym/Echo-v0")] * 2, envs_per_actor=1)
envs.reset(seed=0)
"""


@pytest.mark.parametrize("kind", ["sandbox", "jvm", "ray"])
def test_kill_9_leaves_no_process_behind(kind, tmp_path):
    if kind == "jvm" and (shutil.which("java") is None or importlib.util.find_spec("scienceworld") is None):
        pytest.skip("ScienceWorld's JVM needs java and pip install 'lmgym[scienceworld]'")
    if kind == "ray" and importlib.util.find_spec("ray") is None:
        pytest.skip("pip install 'lmgym[ray]'")
    script = {"sandbox": SANDBOX, "jvm": JVM, "ray": RAY}[
        kind
    ] + "\nprint('ready', flush=True)\nimport time\ntime.sleep(600)\n"
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert run.stdout.readline().strip() == "ready"
        time.sleep(1)  # the sandbox's code is running
        started = descendants(run.pid)
        assert started  # there is something to leave behind
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in started):
        time.sleep(0.2)
    left = {p: Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:120] for p in started if alive(p)}
    assert not left, f"alive 10 s after kill -9: {left}"
