"""The documentation site's sources: the API reference lists every public name, every page is in a toctree.

``make docs`` (CI) builds the site with warnings as errors; these checks need no Sphinx.
"""

import re
from pathlib import Path

import pytest

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


#: the pages whose ```python blocks the tests run (each alone; tests/_doc_blocks.py); pages added to
#: docs/guide/ or docs/algorithms/ join this list when their blocks are complete programs
RUN_PAGES = ["getting_started.md", "guide/privacy_budget.md", "guide/inference.md", "guide/formulas.md",
             "guide/planning.md", "guide/estimators.md", "guide/sklearn.md", "guide/networks.md", "guide/papers.md",
             "guide/secure-aggregation.md"]


def _doc_blocks():
    from _doc_blocks import blocks

    return [(page, i) for page in RUN_PAGES for i in range(len(blocks(DOCS / page)))]


def test_every_run_page_has_a_block():
    assert {page for page, _ in _doc_blocks()} == set(RUN_PAGES)


@pytest.mark.slow
@pytest.mark.parametrize(("page", "index"), _doc_blocks())
def test_docs_block_runs_alone_without_nan_standard_errors(page, index, tmp_path, monkeypatch):
    from _doc_blocks import blocks, run_block

    monkeypatch.chdir(tmp_path)
    long, code = blocks(DOCS / page)[index]
    run_block(code, long, f"docs/{page} block {index + 1}")
