"""Every example runs on its own: the scripts of examples/ (each run by a test of its own) and the executed gallery
of the documentation site (examples/gallery/plot_*.py, run here as sphinx-gallery runs them: as __main__)."""

import runpy
import warnings
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TESTS = Path(__file__).resolve().parent


def test_every_script_in_examples_is_run_by_a_test():
    tested = "\n".join(p.read_text() for p in TESTS.rglob("test_*.py"))
    for script in EXAMPLES.glob("*.py"):
        assert f'"{script.name}"' in tested, f"examples/{script.name} is run by no test"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in (EXAMPLES / "gallery").glob("plot_*.py")))
def test_gallery_example_runs_alone_without_nan_standard_errors(script, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no silent overflow or NaN arithmetic
        namespace = runpy.run_path(str(EXAMPLES / "gallery" / script), run_name="__main__")
    plt.close("all")
    fits = [v for v in namespace.values() if hasattr(v, "coef_") and hasattr(v, "bse_")]
    assert all(np.all(np.isfinite(f.bse_)) for f in fits)
