"""Sphinx configuration of privfedstat's documentation site (``make docs``; offline, warnings are errors)."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

import privfedstat  # noqa: E402

project = "privfedstat"
author = "privfedstat developers"
copyright = "privfedstat developers"
release = version = privfedstat.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.json"]

# MyST: the markdown pages (docs/guide, docs/algorithms, ...) are plain CommonMark with a few extensions
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "myst.xref_missing", "misc.highlighting_failure"]

# API reference: one page per public name of privfedstat.__all__ (api/index.rst), numpydoc docstrings
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"inherited-members": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()
numpydoc_xref_param_type = False

# Executed examples (examples/plot_*.py: small, on data that ships with statsmodels or scikit-learn)
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples" / "gallery"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "show_memory": False,
    "min_reported_time": 1,
}

html_theme = "furo"
html_title = f"privfedstat {release}"
html_static_path: list[str] = []
