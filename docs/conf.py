"""The documentation site: Sphinx with MyST (Markdown pages) and the furo theme, as Gymnasium's.

Why Sphinx and not mkdocs: the API reference comes from the docstrings through autodoc, which
reads the Google-style sections the code already has (napoleon), and the pages stay Markdown
(MyST), so GitHub renders them too. ``sphinx-build -W`` makes every warning an error: a broken
link or anchor, a reference to a name that does not exist, an API module or public name without
a docstring (``_ext/api_check.py``), a page missing from the table of contents.
"""

import pathlib
import sys

DOCS = pathlib.Path(__file__).parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "lmgym"
author = "the lmgym developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "cli_reference",
    "api_check",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
html_theme = "furo"
html_title = "lmgym"
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
suppress_warnings = ["myst.header"]  # results pages start at their own level
autodoc_member_order = "bysource"
autodoc_inherit_docstrings = False  # Gymnasium's own docstrings are not in this site's format
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
nitpicky = False  # type hints name torch, gymnasium and transformers classes this site does not document
