"""Every code block of the README and of docs/ runs: Python blocks as scripts (names a block
leaves to the reader, ``PATH`` to a model, bound to a tiny chat model built here), shell blocks
checked line by line (every ``lmgym`` command parses, every script and extra they name exists)."""

import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import tomllib
from helpers import build_chat_model

ROOT = pathlib.Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def blocks(language):
    for page in PAGES:
        for i, (lang, code) in enumerate(BLOCK.findall(page.read_text())):
            if lang == language:
                yield pytest.param(page, code, id=f"{page.relative_to(ROOT)}#{i}")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return build_chat_model("qwen2", tmp_path_factory.mktemp("chat-model"))


@pytest.mark.parametrize("page,code", list(blocks("python")))
def test_python_block_runs(page, code, chat_model, tmp_path):
    prelude = f"PATH = {str(chat_model)!r}\n" if re.search(r"\bPATH\b", code) else ""
    env = {"LMGYM_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=tmp_path, capture_output=True, text=True, timeout=1500, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]


def commands(code):
    """The block's commands, continuation lines joined, comments and prompts dropped."""
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split("  #")[0].strip()
        for part in re.split(r"\s&&\s", line):
            if part and not part.startswith("#"):
                yield part


@pytest.mark.parametrize("page,code", list(blocks("bash")))
def test_shell_block_is_valid(page, code):
    from lmgym.cli import build_parser

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for command in commands(code):
        words = shlex.split(command.replace("$GGUF", "model.gguf"))
        if words[0] == "lmgym":
            build_parser().parse_args(words[1:])  # argparse exits (fails the test) on a bad command
        elif words[0] in ("python", "python3") and words[1].endswith(".py"):
            assert (ROOT / words[1]).is_file(), command
        elif "accelerate" in words and "launch" in words:
            assert (ROOT / next(w for w in words if w.endswith(".py"))).is_file(), command
        for extra in re.findall(r"\.\[([\w,-]+)\]", command) + re.findall(r"lmgym\[([\w,-]+)\]", command):
            assert set(extra.split(",")) <= extras, command
