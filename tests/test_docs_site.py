"""The documentation site builds strict (a warning, a broken link or anchor, an undocumented
public name fails it), its CLI reference comes from the parsers, and the README stays a front door."""

import importlib.util
import pathlib
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).parent.parent
needs_sphinx = pytest.mark.skipif(
    importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None,
    reason="pip install 'lmgym[docs]'",
)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@needs_sphinx
def test_the_site_builds_strict_with_its_references(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "docs", "--no-serve", "--out", str(tmp_path / "html")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cli = (tmp_path / "html" / "reference" / "cli.html").read_text()
    for flag in ("--loss-type", "--clip-range-high", "--dynamic-sampling", "--env-arg", "--json"):
        assert flag in cli, flag  # generated from the parsers: every flag is there
    api = (tmp_path / "html" / "reference" / "api.html").read_text()
    assert "lmgym.agents.config.PPOConfig" in api and "loss_type" in api


@needs_sphinx
def test_a_broken_link_fails_the_build(tmp_path):
    src = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(src)], check=True)
    (src / "getting-started" / "concepts.md").write_text("# Concepts\n\n[gone](../guides/nowhere.md#nothing)\n")
    command = [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(src), str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode != 0 and "nowhere" in result.stderr


def test_the_api_check_names_an_undocumented_public_name(monkeypatch):
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from api_check import undocumented
    finally:
        sys.path.pop(0)
    module = types.ModuleType("lmgym_fake_module", "A module with a docstring.")

    def documented():
        """Says what it does."""

    def bare():
        pass

    module.documented, module.bare, module.__all__ = documented, bare, ["documented", "bare"]
    monkeypatch.setitem(sys.modules, "lmgym_fake_module", module)
    assert undocumented("lmgym_fake_module") == ["lmgym_fake_module.bare"]
    assert undocumented("lmgym.agents.config") == []


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 120 and not any("2026-" in line for line in lines)
    results = [line for line in lines if line.startswith("| ") and "docs/results/" in line]
    assert 1 <= len(results) <= 6


def test_the_env_table_exists_once():
    pages = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
    holding = [p for p in pages if "| `lmgym/Calculator-v0` |" in p.read_text()]
    assert [p.relative_to(ROOT).as_posix() for p in holding] == ["docs/guides/environments.md"]
