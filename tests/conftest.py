import atexit
import os
import signal
import sys

import numpy as np
import pytest
from hypothesis import settings
from threadpoolctl import threadpool_limits

from privfedstat import FederatedData

# Idle threads must not spin on cores that other test processes need. The numba kernels' OpenMP threads sleep
# between parallel regions (libgomp reads OMP_WAIT_POLICY when numba loads it, at the first parallel kernel call;
# 400 tiny fits on 2 busy cores: 15 s with spinning threads, 2 s without). pytest-xdist's workers share the cores:
# each worker's BLAS gets its share of them (-n auto: one thread; NP-LocalFit on the 585 parameters of 10-class
# digits: 30 s with 2 BLAS threads, 1.2 s with 1). Neither changes a number (tests/fingerprints/test_fingerprints.py
# passes under both).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threadpool_limits(max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])), user_api="blas")


# No Flower process outlives the test session: the federations still open are closed at exit and on SIGTERM (a
# runner's timeout); if this process is killed outright, each federation's watchdog kills its processes
# (privfedstat.flower.launch).
def _close_federations() -> None:
    launch = sys.modules.get("privfedstat.flower.launch")
    if launch is not None:
        launch.close_all()


def _on_sigterm(signum, frame) -> None:
    _close_federations()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_close_federations)
if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _on_sigterm)

# Deterministic property-based tests: the same examples on every run (CI must not be flaky);
# run with HYPOTHESIS_PROFILE=explore to search new examples locally.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def simulate(family: str, sizes, beta, seed: int = 0, sigma_c: float = 1.0):
    """X = [1, C], C ~ N(0, sigma_c^2); y from the family's canonical GLM."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes)
    N = int(sizes.sum())
    beta = np.asarray(beta, dtype=float)
    X = np.column_stack([np.ones(N), sigma_c * rng.standard_normal((N, beta.size - 1))])
    eta = X @ beta
    if family == "logistic":
        y = (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(float)
    elif family == "poisson":
        y = rng.poisson(np.exp(eta)).astype(float)
    else:
        y = eta + rng.standard_normal(N)
    return FederatedData.from_pooled(X, y, sizes=sizes)


@pytest.fixture
def logistic_data():
    return simulate("logistic", [200] * 20, [0.5, -0.5, 0.5, -0.25])


@pytest.fixture
def unequal_logistic_data():
    rng = np.random.default_rng(5)
    return simulate("logistic", rng.integers(40, 160, size=15), [0.3, 0.8, -0.4], seed=3)
