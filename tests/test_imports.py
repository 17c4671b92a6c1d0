"""What ``import privfedstat`` loads: the heavy optional libraries only where they are used.

A structural check (which modules are in ``sys.modules``), not a timing one; the timings are in
``benchmarks/RESULTS.md`` ("Import time"). Each check runs in a fresh interpreter, since the test session
itself has imported most of them.
"""

import json
import subprocess
import sys
from pathlib import Path

import privfedstat
import privfedstat._version

#: libraries the import path does not need: loaded by the functions that use them
LAZY = ("sklearn", "torch", "flwr", "statsmodels", "matplotlib", "dask", "distributed", "opacus", "pandas",
        "formulaic", "scipy.stats", "scipy.optimize", "scipy.special", "scipy.linalg", "scipy.sparse")


def _loaded_after(code: str) -> list[str]:
    """The modules of ``LAZY`` in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {LAZY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_privfedstat_loads_no_heavy_optional_library():
    """A module-level import of one of these puts it back on every ``import privfedstat``: import it inside the
    functions that use it (docs/architecture.md, conventions)."""
    assert _loaded_after("import privfedstat") == []


def test_the_public_names_load_on_first_use():
    """``NotFittedError`` (with scikit-learn's base), ``plan_study`` and ``simulations`` come on first access."""
    assert "sklearn" in _loaded_after("import privfedstat; privfedstat.NotFittedError")
    assert "pandas" in _loaded_after("from privfedstat import plan_study")
    assert "pandas" in _loaded_after("import privfedstat; privfedstat.simulations")


def test_every_public_name_is_importable():
    for name in privfedstat.__all__:
        assert getattr(privfedstat, name) is not None, name
        assert name in dir(privfedstat), name


def test_the_version_has_one_definition():
    """``privfedstat/_version.py``: the package and the build (pyproject.toml) read it."""
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion = \"" not in pyproject
    assert 'version = { attr = "privfedstat._version.__version__" }' in pyproject
    assert privfedstat.__version__ == privfedstat._version.__version__
