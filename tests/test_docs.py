"""The documentation site's sources: the API reference lists every public name, every page is in a toctree.

``make docs`` (CI) builds the site with warnings as errors; these checks need no Sphinx.
"""

import re
from pathlib import Path

import privfedstat

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_api_reference_lists_every_public_name_once():
    text = (DOCS / "api" / "index.rst").read_text()
    listed = re.findall(r"^   (\w+)$", text, re.M)
    assert sorted(listed) == sorted(privfedstat.__all__)


def test_every_page_is_reached_from_the_index():
    index = (DOCS / "index.md").read_text()
    globs = re.findall(r"^:glob:\n\n((?:\S+\n)+)", index, re.M)
    assert any("guide/*" in g for g in globs) and any("algorithms/*" in g for g in globs)
    named = set(re.findall(r"^([a-z_/]+)$", index, re.M))
    for page in DOCS.glob("*.md"):
        assert page.stem == "index" or page.stem in named, f"{page.name} is in no toctree of docs/index.md"
