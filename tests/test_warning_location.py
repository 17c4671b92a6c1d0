"""Every warning the package raises is reported at the user's line (``privfedstat/_warn.py``), whatever the path.

A fixed ``stacklevel`` used to be right for one call path only: ``glm()`` reported its warnings at
``privfedstat/formula.py`` and the inference's at ``privfedstat/inference/core.py``.
"""

import os
import warnings

import numpy as np
import pandas as pd
import pytest

import privfedstat
from privfedstat import FedIRLS, FedSGD, glm
from privfedstat._warn import warn
from privfedstat.exceptions import ConvergenceWarning

INF = float("inf")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"x": rng.normal(size=n), "site": np.repeat(np.arange(8), n // 8)})
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-df.x))).astype(float)
    return df


def _recorded(fit) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    assert caught, "the case was chosen to warn"
    return caught


def _where(caught) -> list[tuple[str, str]]:
    return [(w.category.__name__, os.path.basename(w.filename)) for w in caught]


def test_glm_warns_at_the_users_line(data):
    caught = _recorded(lambda: glm("y ~ x", data=data, client="site", family="logistic", mu=0.3, random_state=0,
                                   clip="paper"))
    assert {w.category.__name__ for w in caught} >= {"PrivacyLeakWarning", "IllConditionedWarning"}
    assert all(w.filename == __file__ for w in caught), _where(caught)


def test_an_estimators_fit_warns_at_the_users_line(data):
    X = np.column_stack([np.ones(len(data)), data.x])
    caught = _recorded(lambda: FedSGD(mu=0.5, n_iter=3, random_state=0).fit(X, data.y.to_numpy()))
    assert "SingleClientWarning" in {w.category.__name__ for w in caught}
    assert all(w.filename == __file__ for w in caught), _where(caught)


def test_the_in_process_secure_path_warns_at_the_users_line(data):
    X = np.column_stack([np.ones(len(data)), data.x])
    est = FedIRLS(mu=0.3, family="logistic", random_state=0, aggregation="secure")
    caught = _recorded(lambda: est.fit(X, data.y.to_numpy(), clients=data.site.to_numpy()))
    assert all(w.filename == __file__ for w in caught), _where(caught)


def _package_code(source: str, namespace: dict) -> dict:
    """Run ``source`` as if it were a module inside the package (its frames' file is in privfedstat/)."""
    path = os.path.join(os.path.dirname(privfedstat.__file__), "_a_module_for_this_test.py")
    exec(compile(source, path, "exec"), namespace)
    return namespace


def test_a_warning_from_inside_a_library_callback_points_at_the_user():
    """Package code -> scipy's solver -> a package callback that warns: the warning passes over scipy's frames
    (library code between two of the package's frames) to the line that entered the package."""
    ns = _package_code(
        "from scipy.optimize import brentq\n"
        "def objective(t):\n"
        "    warn('noticed inside the callback', ConvergenceWarning)\n"
        "    return t - 0.5\n"
        "def solve():\n"
        "    return brentq(objective, 0.0, 1.0)\n",
        {"warn": warn, "ConvergenceWarning": ConvergenceWarning})
    with pytest.warns(ConvergenceWarning, match="inside the callback") as caught:
        ns["solve"]()
    assert {w.filename for w in caught} == {__file__}


def test_a_warning_from_a_users_callback_points_into_the_callback():
    """User code -> the package -> the user's callback -> the package warns: the first frame outside the package
    is the user's callback, and the warning lands there."""
    ns = _package_code(
        "def call(f):\n"
        "    return f()\n"
        "def check():\n"
        "    warn('noticed in a check the callback ran', ConvergenceWarning)\n",
        {"warn": warn, "ConvergenceWarning": ConvergenceWarning})

    def callback():
        ns["check"]()  # the line the warning must name
        return 1

    line = callback.__code__.co_firstlineno + 1
    with pytest.warns(ConvergenceWarning) as caught:
        ns["call"](callback)
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_category_filters_still_apply(data):
    """``-W error::privfedstat.SingleClientWarning`` (a filter by category) still turns the warning into an error."""
    X = np.column_stack([np.ones(len(data)), data.x])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", privfedstat.SingleClientWarning)
        with pytest.raises(privfedstat.SingleClientWarning, match="single client"):
            FedIRLS(mu=INF).fit(X, data.y.to_numpy())


def test_every_package_warning_goes_through_the_helper():
    """A ``warnings.warn(`` with a fixed stacklevel is right for one call path only (docs/architecture.md, 15)."""
    root = os.path.dirname(privfedstat.__file__)
    helper = os.path.join(root, "_warn.py")
    offenders = [os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
                 if f.endswith(".py") and os.path.join(d, f) != helper
                 and "warnings.warn(" in open(os.path.join(d, f), encoding="utf-8").read()]
    assert offenders == []
