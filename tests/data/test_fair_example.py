"""Runs examples/fair_logistic.py: glm() defaults on real data next to statsmodels' pooled MLE."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fair_logistic.py"


def _main(argv):
    spec = importlib.util.spec_from_file_location("fair_logistic_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        table = module.main(argv)
    return table, buf.getvalue()


def test_private_default_fit_sits_next_to_the_mle():
    table, text = _main(["--mu", "2", "--seed", "0"])
    assert list(table.index)[0] == "Intercept" and len(table) == 9
    dist = table["private - MLE (SE)"].abs()
    assert dist.max() < 6.0  # measured 4.9 SE at this seed (README; seeds 0-4: 0.7-5.6), intervals 1.6-12x the MLE's
    assert "FedIRLS" in text and "epsilon" in text


def test_without_privacy_the_default_fit_is_the_mle():
    table, _ = _main(["--mu", "inf", "--seed", "1"])
    np.testing.assert_allclose(table["private - MLE (SE)"], 0.0, atol=1e-6)
