"""FedNewton (issue 41): a numeric clip is a complete setting; Algorithm 4 as printed; the private, released floor."""

import numpy as np
import pytest
from conftest import simulate

from privfedstat import FedNewton


@pytest.fixture(scope="module")
def data():
    return simulate("logistic", [250] * 8, [0.5, -1.0, 1.0], seed=3)


def test_numeric_clip_searches_the_hessian_bound_alone(data):
    """``clip=1.0`` fixes B; the Hessian bound is then searched alone (the pilot clips at the given B)."""
    est = FedNewton(clip=1.0, mu=2.0, inference=None, random_state=0).fit(data)
    assert est.clip_ == 1.0
    assert np.all(np.isfinite(est.coef_))


def test_set_params_numeric_clip_as_a_grid_search_does(data):
    est = FedNewton(mu=2.0, inference=None, random_state=0)
    est.set_params(clip=1.0).fit(data)
    assert est.clip_ == 1.0 and np.all(np.isfinite(est.coef_))
