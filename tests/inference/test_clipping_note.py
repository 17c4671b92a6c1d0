"""The summary's note on a clipping displacement the budget could not resolve: its conclusion first, in words."""

import numpy as np

from privfedstat.inference.clipping_bias import ClippingDisplacement, note, tolerated_bias


def _found(delta_in_se, noise_in_se, resolved):
    se = np.array([0.3, 0.03, 0.01])
    delta, sd = np.asarray(delta_in_se) * se, np.asarray(noise_in_se) * se
    return ClippingDisplacement(delta, np.diag(sd**2), se, np.asarray(resolved), tolerated_bias(0.05), 7.2, 14.4)


def test_an_unresolved_displacement_says_nothing_was_found_and_how_coarse_the_look_was():
    # the README's fair fit at mu = 2: 2.1 +- 3.6 SE, not resolved (the old note led with "up to 2.1 +- 3.6 standard
    # errors", which reads as a measured bias of two standard errors)
    text = note(_found([0.5, -2.1, 1.0], [3.6, 3.0, 2.0], [False] * 3))
    assert text.startswith("no displacement by clipping was found")
    assert "noise is 3.6 standard errors" in text and "below about 11 would go unseen" not in text
    # every number with its unit (new users read "one below about 11" and "the largest measured, 2.1" as bare numbers)
    assert "a displacement below about 11 standard errors would go unseen" in text
    assert "B' = 14.4" in text and "the largest measured, 2.1 standard errors" in text
    # where such a bias comes from and the remedy a user controls (stop 52's new users: dollar incomes, lengths of stay)
    assert "a log or a cap of a heavy-tailed covariate or count" in text


def test_a_resolved_displacement_says_the_intervals_include_it():
    text = note(_found([0.5, -6.0, 1.0], [1.0, 1.0, 1.0], [False, True, False]))
    assert text.startswith("clipping at B moves the estimate by up to 6") and "include" in text


def test_the_clipping_warning_of_a_binary_response_does_not_advise_rescaling_the_response():
    import warnings

    from conftest import simulate

    from privfedstat import ClippingBiasWarning, FedSGD

    data = simulate("logistic", [10] * 30, [0.3, -0.8, 0.6], seed=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FedSGD(mu=1.0, n_iter=50, clip=1.0, random_state=0).fit(data)  # 40% of the gradients clipped at B = 1
    text = next(str(w.message) for w in caught if w.category is ClippingBiasWarning and "clipped at" in str(w.message))
    assert "Rescale the covariates," in text and "response" not in text.split("Rescale")[1]


def test_a_displacement_warning_gives_causes_and_remedies_of_the_family():
    import warnings

    from privfedstat import ClippingBiasWarning
    from privfedstat.families import get_family
    from privfedstat.inference.clipping_bias import warn_displacement

    class Fit:
        method = "FedIRLS"

    found = _found([0.5, -6.0, 1.0], [1.0, 1.0, 1.0], [False, True, False])
    for family, cause, absent in [("logistic", "covariate values far from the rest", "response"),
                                  ("gaussian", "skewed or heavy-tailed response", "covariate values far")]:
        fit = Fit()
        fit.family_ = get_family(family)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warn_displacement(fit, found, ["a", "b", "c"])
        text = str(caught[0].message)
        assert caught[0].category is ClippingBiasWarning and cause in text and absent not in text


def test_the_clipping_warning_offers_the_bootstrap_only_where_the_bootstrap_runs():
    # a Poisson rate with an exposure (mlmRev Mmmec, 9 nations, mu = 2) advised inference='bootstrap', which raises
    # "cannot simulate data with an offset"
    import warnings

    import pandas as pd
    import pytest

    import privfedstat as pfs
    from privfedstat import ClippingBiasWarning

    rng = np.random.default_rng(2)
    x = rng.standard_normal(600)
    exposure = rng.uniform(1.0, 5.0, size=600)
    df = pd.DataFrame({"y": rng.poisson(exposure * np.exp(0.5 + 0.4 * x)), "x": x, "e": exposure,
                       "site": np.repeat(np.arange(6), 100)})

    def clipping_text(**kw):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pfs.glm("y ~ x", df, client="site", family="poisson", mu=8, random_state=0, clip=0.5, **kw)
        return next(str(w.message) for w in caught
                    if w.category is ClippingBiasWarning and "per-sample gradients are clipped" in str(w.message))

    assert "inference='bootstrap'" in clipping_text()
    text = clipping_text(exposure="e")
    assert "bootstrap" not in text and "raise clip" in text
    with pytest.raises(ValueError, match="cannot simulate data with an offset"):
        pfs.glm("y ~ x", df, client="site", family="poisson", mu=8, random_state=0, exposure="e",
                inference="bootstrap")


def test_the_clipped_share_shows_its_noise_below_a_tenth_of_a_percent():
    """A secure fit's private count of clipped rows has a noise sd of a few hundredths of a percent: printed with one
    decimal it read "0.0% (+- 0.0%)", a count without noise."""
    from privfedstat.results.summary import clipped_row

    assert clipped_row(0.0004, 0.00031) == "0.04% of per-sample gradients (+- 0.031%, private count)"
    assert clipped_row(0.014, 0.005) == "1.4% of per-sample gradients (+- 0.5%, private count)"
