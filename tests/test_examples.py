"""Every example runs as a user would run it."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted(pathlib.Path(__file__).parent.parent.joinpath("examples").glob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path):
    if "stable_baselines3" in path.read_text():
        pytest.importorskip("stable_baselines3", reason="pip install 'lmgym[sb3]'")
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=1500, cwd=path.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip()
