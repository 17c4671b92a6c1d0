"""The ```python blocks of the README and of the documentation's markdown pages, and how the tests run them.

Every block runs alone, in a fresh namespace (as a reader would paste it), in a temporary folder. A block
preceded by a ``<!-- long: ... -->`` comment says how the tests reduce it; :data:`REDUCED` holds those
reductions (each must change its block). After a block, every fitted estimator it left has finite
standard errors: no example prints a NaN SE.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?P<mark><!-- long: [^>]*-->\n)?(?P<indent>[ ]*)```python\n(?P<code>.*?)\n[ ]*```", re.S)
#: the reductions of the blocks marked long: (text, replacement) pairs
REDUCED = [("n_reps=100", "n_reps=1"), ("n_jobs=2", "n_jobs=1")]


def blocks(path: Path) -> list[tuple[bool, str]]:
    """(marked long, code) of each python block of ``path``, dedented (blocks inside list items are indented)."""
    return [(m["mark"] is not None, textwrap.dedent(m["code"])) for m in BLOCK.finditer(path.read_text())]


def reduced(code: str) -> str:
    for old, new in REDUCED:
        assert old in code, f"the long block no longer contains {old!r}: update REDUCED"
        code = code.replace(old, new)
    return code


def run_block(code: str, long: bool, name: str) -> dict:
    """Run one block alone; return its namespace after checking the standard errors it left."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace: dict = {"__name__": "docs_block"}
    try:
        exec(compile(reduced(code) if long else code, name, "exec"), namespace)
    finally:
        plt.close("all")
    for key, value in namespace.items():
        bse = getattr(value, "bse_", None) if hasattr(value, "coef_") else None
        if bse is not None:
            assert np.all(np.isfinite(bse)), f"{name}: {key}.bse_ has NaN standard errors: {bse}"
    return namespace
