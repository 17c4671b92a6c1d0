"""The summary's Rounds line: the fit's rounds, then the setup's (the private column scaling, the clip search).

At mu = inf an OLS fit of 2 iterations with ``scaling="private"`` used to read "Rounds 50": the column
scaling's 42 rounds counted as the fit's.
"""

import re

import numpy as np
import pytest

from privfedstat import FedIRLS

INF = float("inf")


@pytest.fixture(scope="module")
def ols():
    rng = np.random.default_rng(0)
    n = 400
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    return X, X @ [1.0, 2.0] + rng.normal(size=n), np.repeat(np.arange(8), n // 8)


def _rounds_line(fit) -> str:
    return next(line for line in str(fit.summary()).splitlines() if line.startswith("Rounds"))


def test_the_column_scalings_rounds_are_shown_apart(ols):
    X, y, clients = ols
    plain = FedIRLS(mu=INF, family="gaussian").fit(X, y, clients=clients)
    scaled = FedIRLS(mu=INF, family="gaussian", scaling="private").fit(X, y, clients=clients)
    np.testing.assert_allclose(scaled.coef_, plain.coef_, rtol=1e-8)
    assert plain.communication_.setup == () and plain.communication_.setup_rounds == 0
    comm = scaled.communication_
    (stage, n_setup), = comm.setup
    assert stage == "the column scaling" and n_setup == comm.setup_rounds > 0
    # the same fit after its setup: as many rounds as the unscaled one, which has no setup
    assert comm.rounds - n_setup == plain.communication_.rounds
    fitted = plain.communication_.rounds
    assert re.fullmatch(rf"Rounds +{fitted}; {plain.communication_.floats_per_client} floats sent per client in all",
                        _rounds_line(plain))
    assert re.fullmatch(rf"Rounds +{fitted} \(\+ {n_setup} for the column scaling\); "
                        rf"{comm.floats_per_client} floats sent per client in all", _rounds_line(scaled))


@pytest.mark.filterwarnings("ignore::privfedstat.ClippingBiasWarning")
def test_the_clip_search_is_a_setup_stage(ols):
    X, y, clients = ols
    fit = FedIRLS(mu=2.0, family="gaussian", random_state=0).fit(X, y, clients=clients)
    comm = fit.communication_
    assert [stage for stage, _ in comm.setup] == ["the clip search"]
    n_search = comm.setup_rounds
    # the ledger's view: the search's releases (one per client per round; the refine rounds' are "irls-clip-*")
    frame = fit.privacy_.to_frame()
    assert n_search == frame["stage"].isin(["clip-gradient", "clip-hessian"]).sum() / 8 > 0
    assert f"(+ {n_search} for the clip search)" in _rounds_line(fit)
    assert sum(comm.senders) == comm.messages and len(comm.senders) == comm.rounds
