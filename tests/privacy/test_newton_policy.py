"""FedNewton's policy object, read by the fit and by predict_mse (issue 41)."""

import itertools
import math

import numpy as np
import pytest

from privfedstat import AutoClip, FedNewton
from privfedstat.families import get_family
from privfedstat.fitting.stages import pending_bounds
from privfedstat.privacy.calibration import HESSIAN_SHARE, RESEARCH_SHARE
from privfedstat.privacy.newton_policy import NewtonPolicy, researches

CLIPS = ["auto", "paper", AutoClip(), 1.5, math.inf]
HESSIAN_CLIPS = [None, "auto", AutoClip(), 3.0]


@pytest.mark.parametrize("clip,hessian_clip,mu,noise",
                         [c for c in itertools.product(CLIPS, HESSIAN_CLIPS, [2.0, math.inf], ["private", "paper"])
                          if not (math.isinf(c[2]) is False and c[0] == math.inf)])
def test_researches_is_what_the_fit_decides(clip, hessian_clip, mu, noise):
    """The policy's "search C_H again at theta^(1)" is the fit's "the Hessian bound is chosen privately"."""
    est = FedNewton(clip=clip, hessian_clip=hessian_clip, mu=mu, newton_noise=noise)
    _, todo, how = pending_bounds(est, mu)
    assert researches(clip, hessian_clip, mu, noise) == ("hessian" in todo and how == "search")


def test_budgets_and_floor_follow_the_shares():
    fam = get_family("logistic")
    pol = NewtonPolicy.of(FedNewton(clip=AutoClip()).get_params(), fam, 2.0)
    search, hessian, stage = pol.budgets
    assert pol.research and not pol.paper and pol.floor is None
    assert search**2 + hessian**2 + 2 * stage**2 == pytest.approx(4.0)
    assert (search / 2) ** 2 == pytest.approx(RESEARCH_SHARE) and (hessian / 2) ** 2 == pytest.approx(HESSIAN_SHARE)
    # the floor: an eigenvalue below the release's noise level is raised to it, the others kept
    H, lam = pol.newton_matrix(np.diag([1.0, 0.2, 1e-6]), sd=0.01)
    assert lam == pytest.approx(max((math.sqrt(6) + 3) * 0.01, 0.01 * 0.25))
    assert np.allclose(np.linalg.eigvalsh(H), sorted([1.0, 0.2, lam]))
    paper = NewtonPolicy.of(FedNewton(newton_noise="paper", newton_grad_clip=1.0).get_params(), fam, 2.0)
    assert paper.budgets == (0.0, 0.0, pytest.approx(2.0 / math.sqrt(2))) and math.isinf(paper.grad_clip)
    assert paper.sensitivity(1.0, math.nan, np.array([100.0])) == pytest.approx(8.0 / (paper.tau1 * 100))
