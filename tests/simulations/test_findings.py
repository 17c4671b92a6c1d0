"""The core paper's qualitative findings (Section 4), at reduced replicates with fixed seeds.

Each test runs a slice of the named study with the package's defaults (private clip, mu = 2).
Where the paper's finding does not reproduce with these faithful implementations, the test
asserts what is observed and the issue note reports the numbers (see the docstrings).
"""

import pytest

from privfedstat import AutoClip
from privfedstat.simulations import MonteCarlo, get_grid, summarise

pytestmark = pytest.mark.slow


def _run(study, keep, reps, methods=None, seed=0):
    scen = [s for s in get_grid(study).scenarios() if keep(s)]
    df = MonteCarlo(scen, methods or get_grid(study).methods, n_reps=reps, random_state=seed, n_jobs=2,
                    progress=False).run()
    return df


def test_fig1_fig2_mse_decreases_with_m_for_every_method():
    df = _run("fig1", lambda s: s.allocation.n == 70 and s.n_clients in (20, 60), 30,
              methods=["FedSGD", "FedHybrid", "FedAvg", "FedNewton"])
    mean = df.groupby(["method", "m"])["mse"].mean().unstack()
    assert (mean[60] < 0.8 * mean[20]).all(), mean


def test_fig5_fedavg_degrades_fastest_at_fixed_total():
    """N = 20000 split over 25 vs 400 equal clients. FedAvg's MSE grows by an order of magnitude;
    FedSGD and FedHybrid barely move. (FedNewton: see test_fig5_fednewton_with_paper_calibration_beats_fedavg_at_largest_m
    and issue 41.)"""
    df = _run("fig5", lambda s: s.allocation.scheme == "equal" and s.n_clients in (25, 400), 10)
    mean = df.groupby(["method", "m"])["mse"].mean().unstack()
    growth = mean[400] / mean[25]
    assert growth["FedAvg"] > 5
    assert growth["FedAvg"] > 3 * max(growth["FedSGD"], growth["FedHybrid"])


#: the pilot clipping rule this finding was measured with (issue 9; the default's quantile is now 0.999)
PILOT_99 = AutoClip(pilot_rounds=5, pilot_quantile=0.99)


def test_fig5_fednewton_with_paper_calibration_beats_fedavg_at_largest_m():
    import warnings

    import numpy as np

    from privfedstat import FedAvg, FedNewton
    from privfedstat.simulations import FixedTotal, GLMDesign
    from privfedstat.theory import problem_constants

    design = GLMDesign("logistic")
    tau1 = problem_constants(design=design).tau1  # Algorithm 4's calibration uses the true tau_1 (~0.13)
    avg, newton = [], []
    for rep in range(10):
        rng = np.random.default_rng(rep)
        data = design.sample(FixedTotal(20000).sizes(400, rng), rng)
        paper = {"step_size": 0.5, "inference": None, "random_state": rep}  # Section 4's settings, all of mu on estimation
        avg.append(FedAvg(n_rounds=2, clip=PILOT_99, **paper).fit(data).mse(design.beta_true))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            newton.append(FedNewton(newton_noise="paper", tau1=tau1, clip=PILOT_99, **paper).fit(data)
                          .mse(design.beta_true))
    assert np.mean(newton) < np.mean(avg)


def test_fig3_ordering():
    """FedNewton <= FedAvg holds clearly. FedHybrid ~ FedSGD: with B at the 90th percentile at
    theta = 0 both converge to the same clipped-objective minimiser and the clipping bias
    dominates the privacy noise, so FedHybrid's smaller noise does not show (within 5%)."""
    df = _run("fig3", lambda s: s.allocation.label == "equal n=400" and s.n_clients in (60, 140), 10)
    mean = df.groupby("method")["mse"].mean()
    assert mean["FedNewton"] <= mean["FedAvg"]
    assert mean["FedHybrid"] <= 1.05 * mean["FedSGD"]


def test_fig4_fedsgd_mse_first_falls_then_rises_at_mu_2():
    df = _run("fig4", lambda s: s.mu == 2.0 and s.n_iter in (10, 50, 300), 30, methods=["FedSGD"])
    mean = summarise(df, ["K"]).set_index("K")["mean_mse"]
    assert mean[50] < 0.5 * mean[10]
    assert mean[300] > 1.5 * mean[50]
