"""A strict API reference: every module the reference documents, and every public name in its
``__all__`` that is a class or a function, has a docstring; the build warns (and ``-W`` fails)
otherwise, naming it."""

from __future__ import annotations

import importlib
import inspect

from sphinx.util import logging

API_MODULES = [
    "lmgym",
    "lmgym.agents",
    "lmgym.agents.config",
    "lmgym.agents.callbacks",
    "lmgym.agents.advantages",
    "lmgym.agents.loss",
    "lmgym.agents.rewards",
    "lmgym.agents.batch",
    "lmgym.vector",
    "lmgym.wrappers",
    "lmgym.tools",
    "lmgym.compat",
]
"""The modules ``docs/reference/api.md`` documents, in its order."""

logger = logging.getLogger(__name__)


def undocumented(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    missing = [] if (module.__doc__ or "").strip() else [module_name]
    for name in getattr(module, "__all__", []):
        value = getattr(module, name)
        if (inspect.isclass(value) or inspect.isfunction(value)) and not (value.__doc__ or "").strip():
            missing.append(f"{module_name}.{name}")
    return missing


def check(app) -> None:  # noqa: ANN001
    page = (app.srcdir / "reference" / "api.md").read_text()
    for module_name in API_MODULES:
        if f"automodule:: {module_name}\n" not in page and f"{{automodule}} {module_name}\n" not in page:
            logger.warning(f"the API reference has no page section for {module_name}")
        for name in undocumented(module_name):
            logger.warning(f"public name without a docstring: {name}")


def setup(app):  # noqa: ANN001, ANN201
    app.connect("builder-inited", check)
    return {"parallel_read_safe": True}
