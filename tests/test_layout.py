"""The package's shape, as a maintainer reads it: files and functions of a readable size, imports
that run one way, type hints included (no circle, nothing imports the CLI, the agents never import
a concrete env)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parent.parent / "lmgym"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 60
LONGER = {"lmgym.agents.ppo": 600}  # one PPO iteration, whole in one file (DESIGN.md)


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        yield name, path, ast.parse(path.read_text())


def imports(tree, known):
    """The lmgym modules a module imports: at import time, in a function, or for type hints only
    (a type-only import that runs back up the layers is a dependency a reader must follow too)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lmgym"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out |= subs or {node.module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("lmgym")}
    return out & known


def graph():
    mods = list(modules())
    known = {name for name, _, _ in mods}
    return {name: imports(tree, known) - {name} for name, _, tree in mods}


def test_files_and_functions_stay_readable():
    long_files, long_functions = [], []
    for name, path, tree in modules():
        if len(path.read_text().splitlines()) > LONGER.get(name, MAX_FILE_LINES):
            long_files.append(name)
        for node in ast.walk(tree):
            is_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_function and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long_functions.append(f"{name}.{node.name}")
    assert long_files == [] and long_functions == []


def is_package_reexport(importer, imported):
    """A package's ``__init__`` importing its own submodules to re-export their names."""
    return imported.startswith(importer + ".")


def test_no_import_circle():
    g = graph()
    circles = []
    for start in g:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for nxt in g[node]:
                if is_package_reexport(node, nxt) or is_package_reexport(nxt, node):
                    continue
                if nxt == start:
                    circles.append(" -> ".join(path + [nxt]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert circles == []


@pytest.mark.parametrize(
    "layer,forbidden",
    [
        ("lmgym.storage", ("lmgym.",)),
        ("lmgym.spaces", ("lmgym.",)),
        ("lmgym.gguf", ("lmgym.agents", "lmgym.envs", "lmgym.cli", "lmgym.compat", "lmgym.wrappers")),
        ("lmgym.tokenizers", ("lmgym.agents", "lmgym.envs", "lmgym.cli", "lmgym.compat", "lmgym.wrappers")),
        ("lmgym.core", ("lmgym.agents", "lmgym.envs", "lmgym.cli", "lmgym.compat", "lmgym.wrappers")),
        ("lmgym.tools", ("lmgym.agents", "lmgym.envs", "lmgym.cli", "lmgym.compat", "lmgym.wrappers")),
        ("lmgym.agents", ("lmgym.envs", "lmgym.compat", "lmgym.cli")),
        ("lmgym.", ("lmgym.cli",)),
    ],
)
def test_imports_run_down_the_layers(layer, forbidden):
    bad = [
        f"{name} imports {dep}"
        for name, deps in graph().items()
        if name.startswith(layer) and not name.startswith("lmgym.cli")
        for dep in deps
        if dep.startswith(forbidden)
    ]
    assert bad == []
