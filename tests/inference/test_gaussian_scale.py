"""A Gaussian fit's private residual variance: a release at or below 0 never zeroes the sampling covariance."""

import warnings

import numpy as np
import pandas as pd
import pytest

import privfedstat as pfs
from privfedstat import PrivacyNoiseWarning


def _low_noise(sites: int = 30, rows: int = 30) -> pd.DataFrame:
    """y = 1 + x + 0.1 e: a residual variance far below the clipping bound squared, 30 small sites."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(sites * rows)
    return pd.DataFrame({"y": 1.0 + x + 0.1 * rng.standard_normal(x.size), "x": x,
                         "site": np.repeat(np.arange(sites), rows)})


def test_an_unresolved_scale_is_raised_to_one_noise_sd_with_a_note_and_a_warning():
    from privfedstat.inference.covariance import floored_scale

    notes = []
    with pytest.warns(PrivacyNoiseWarning, match="residual variance .* not resolved"):
        assert floored_scale(-0.03, 0.1, 0.1, notes) == (0.1, 0.1)
    assert "raised to it" in notes[0] and "-0.03" in notes[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert floored_scale(0.5, 0.1, 0.1, notes) == (0.5, 0.1)  # resolved: unchanged, silent
    assert len(notes) == 1


def test_a_low_noise_gaussian_on_small_sites_keeps_a_positive_sampling_variance():
    # the released scale's noise sd (sqrt(m) B^2 / (mu N)) is of the order of the residual variance here: before the
    # floor, seeds 1 and 4 released a value below 0 and the intervals were privacy noise only (the summary
    # printed a negative Scale, the PrivacyNoiseWarning "up to inf times the sampling standard error")
    df = _low_noise()
    floored = 0
    for seed in range(6):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = pfs.glm("y ~ x", df, client="site", mu=8, random_state=seed)
        inf = fit.inference_
        assert np.all(np.diag(inf.cov_sampling) > 0) and inf.dispersion[0] > 0
        assert all("inf times" not in str(w.message) for w in caught)
        scale_row = next(line for line in str(fit.summary()).splitlines() if line.startswith("Scale"))
        assert float(scale_row.split()[1]) > 0
        hit = any("residual variance" in n and "raised to it" in n for n in inf.notes)
        assert hit == any(w.category is PrivacyNoiseWarning and "not resolved" in str(w.message) for w in caught)
        floored += hit
    assert floored >= 1  # the design exercises the floor
