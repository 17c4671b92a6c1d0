"""The README: short, its quick-start commands exist, every ```python block runs alone and prints what the README
shows (tests/_doc_blocks.py)."""

import contextlib
import io
import re

import pytest
from _doc_blocks import ROOT, blocks, run_block

README = ROOT / "README.md"


def test_readme_is_short_and_its_quick_start_commands_exist():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    makefile = (ROOT / "Makefile").read_text()
    for command in ("make demo", "make test", "make docs"):
        assert command in text and re.search(rf"^{command.split()[1]}:", makefile, re.M), command
    for link in re.findall(r"\]\(((?:docs|benchmarks|examples)/[^)#]*)\)", text):
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(blocks(README))))
def test_readme_block_runs_alone_and_prints_the_readme_output(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    long, code = blocks(README)[index]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_block(code, long, f"README.md block {index + 1}")
    if index == 0:  # the first fit: the README shows its coefficient table as printed
        shown = README.read_text().split("```text\n", 1)[1].split("```", 1)[0]
        rows = [line.split() for line in shown.splitlines() if re.match(r"^(Intercept|rate_marriage|educ) ", line)]
        printed = [line.split() for line in out.getvalue().splitlines() if re.match(r"^(Intercept|rate_marriage|educ) ", line)]
        assert rows and rows == printed, "the README's printed summary is out of date: rerun its block and paste the output"
