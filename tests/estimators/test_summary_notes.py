"""Summary notes name coefficients as the table does, never by position."""

import dataclasses

import numpy as np
import pandas as pd

import privfedstat as pfs


def test_withheld_coefficients_are_named_in_the_summary():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.standard_normal(400), "z": rng.standard_normal(400), "site": np.arange(400) % 4})
    df["y"] = (rng.random(400) < 1 / (1 + np.exp(-df["x"]))).astype(float)
    fit = pfs.glm("y ~ x + z", df, client="site", family="logistic", mu=float("inf"))
    # the note the inference writes when it withholds standard errors (it knows positions, not names)
    note = ("standard errors withheld (NaN) for coefficient(s) [0, 2] (original order): more than 25% of their "
            "variance lies along directions whose released curvature was below the floor (not identified)")
    fit.inference_ = dataclasses.replace(fit.inference_, notes=[note])
    shown = fit.summary().notes
    assert "coefficient(s) Intercept, z: more than 25%" in shown[-1] and "original order" not in shown[-1]
