"""Every ```python block of README.md runs as written, in order, in one namespace (as a reader would paste them).

A block preceded by a ``<!-- long: ... -->`` comment says how the tests reduce it; :data:`REDUCED` holds
those reductions (each must change its block), every other block runs unchanged.
"""

import re
import textwrap
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(?P<mark><!-- long: [^>]*-->\n)?(?P<indent>[ ]*)```python\n(?P<code>.*?)\n[ ]*```", re.S)
#: the reductions of the blocks marked long: (text, replacement) pairs
REDUCED = [("n_reps=100", "n_reps=1"), ("n_jobs=2", "n_jobs=1")]


def blocks() -> list[tuple[bool, str]]:
    """(marked long, code) of each python block, dedented (blocks inside list items are indented)."""
    return [(m["mark"] is not None, textwrap.dedent(m["code"])) for m in BLOCK.finditer(README.read_text())]


def reduced(code: str) -> str:
    for old, new in REDUCED:
        assert old in code, f"the long block no longer contains {old!r}: update REDUCED"
        code = code.replace(old, new)
    return code


@pytest.mark.slow
def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    found = blocks()
    assert len(found) >= 8 and sum(long for long, _ in found) == 1
    namespace: dict = {"__name__": "readme"}
    for i, (long, code) in enumerate(found):
        try:
            exec(compile(reduced(code) if long else code, f"README.md block {i + 1}", "exec"), namespace)
        finally:
            plt.close("all")
    assert namespace["fit"] is not None and Path("fig5.csv").exists() and Path("fig5.png").exists()
