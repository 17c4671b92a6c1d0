"""Upper bounds of Section 3: hand-computed values, limits, monotonicity, vectorisation, errors.

Hand values use sizes (100, 200) (N = 300, m = 2), d = 2, so d v log N = log 300 = 5.70378,
log rho = log(3 tau2 / (3 tau2 - tau1)) = log 1.2 = 0.18232 for tau1 = 0.5, tau2 = 1.
"""

import math

import numpy as np
import pytest

from privfedstat.theory import fedavg_bound, fedhybrid_bound, fednewton_bound, fednewton_max_clients, fedsgd_bound

SIZES = [100, 200]
DL = math.log(300)  # d v log N with d = 2
LR = math.log(1.2)  # log(3 tau2 / (3 tau2 - tau1)), tau1 = 0.5, tau2 = 1


# ---------------------------------------------------------------- hand-computed values (one+ per theorem)
def test_fedsgd_eq2_hand_value():
    # K = 2 log(dN)/log rho = 2 log 600 / log 1.2 = 70.172; per-client 2/n + 2 * DL * K / n^2
    K = 2 * math.log(600) / LR
    per = [2 / 100 + 2 * DL * K / 100**2, 2 / 200 + 2 * DL * K / 200**2]  # 0.10005, 0.030012
    expected = 17 / 0.25 / (1 / per[0] + 1 / per[1])
    assert expected == pytest.approx(1.56990, rel=1e-5)
    got = fedsgd_bound(sizes=SIZES, mu=1, d=2, tau1=0.5, tau2=1, trace_sigma=2)
    assert got == pytest.approx(expected, rel=1e-12)


def test_fedsgd_eq1_hand_value():
    # gamma1 = 1 - 0.5 * 0.5 + 0.1 sqrt(DL / 100); w = (1/3, 2/3)
    g1 = 1 - 0.25 + 0.1 * math.sqrt(DL / 100)
    s1 = (1 / 9) / 100 + (4 / 9) / 200
    s2 = (1 / 9) / 100**2 + (4 / 9) / 200**2
    expected = 3 * (1 - 0.5 / 3) ** 20 * 1.0 + 3 / (1 - g1) ** 2 * 0.25 * (2 * s1 + 4 * 10 * 2 * DL / 2**2 * s2)
    assert expected == pytest.approx(0.213229, rel=1e-5)
    got = fedsgd_bound(form="eq1", sizes=SIZES, mu=2, d=2, n_iter=10, step_size=0.5, init_error=1.0,
                       trace_sigma=2, tau1=0.5, tau2=1, C=0.1)
    assert got == pytest.approx(expected, rel=1e-12)


def test_fedsgd_remarks_hand_values():
    # Remark 3.1: C d / sum min(n, n^2 mu^2 / (DL log N)), mu = 0.2
    eff = [min(n, n**2 * 0.04 / (DL * math.log(300))) for n in SIZES]  # 12.30, 49.19
    assert fedsgd_bound(form="rate", sizes=SIZES, mu=0.2, d=2) == pytest.approx(2 / sum(eff), rel=1e-12)
    assert 2 / sum(eff) == pytest.approx(0.032533, rel=1e-4)
    # Remark 3.2: C/tau1^2 (tr/N + C_B^2 m d (d v log N) log(dN)/(mu^2 N^2)), N = 1000, m = 10, d = 3
    expected = 2 / 0.25 * (3 / 1000 + 2.25 * 10 * 3 * math.log(1000) * math.log(3000) / 1000**2)
    assert expected == pytest.approx(0.0538653, rel=1e-5)
    got = fedsgd_bound(form="comparable", n_samples=1000, n_clients=10, mu=1, d=3, tau1=0.5, C=2, C_B=1.5)
    assert got == pytest.approx(expected, rel=1e-12)


def test_fedhybrid_thm35_hand_value():
    K2 = 2 * math.log(2) / LR  # 7.6035
    per = [2 / 100 + 2 * DL * K2 / 100**2, 2 / 200 + 2 * DL * K2 / 200**2]  # 0.0286738, 0.0121685
    expected = 68 / (1 / per[0] + 1 / per[1])
    assert expected == pytest.approx(0.580925, rel=1e-5)
    assert fedhybrid_bound(sizes=SIZES, mu=1, d=2, tau1=0.5, tau2=1, trace_sigma=2) == pytest.approx(expected, rel=1e-12)
    # Remark 3.6 with N = 1000, m = 10, d = 3, tau1 = 1: (3/N + 10 * 3 * log(1000) * log(10) / N^2)
    expected = 3 / 1000 + 10 * 3 * math.log(1000) * math.log(10) / 1000**2
    assert fedhybrid_bound(form="comparable", n_samples=1000, n_clients=10, mu=1, d=3) == pytest.approx(expected, rel=1e-12)


def test_fedavg_thm33_thm37_hand_values():
    # R = 2, K = 10: variance 64 (2/300 + 2*2*2*10*2*DL/300^2), drift 2*2 + sum 2*10*2*DL/n_i
    var = 64 * (2 / 300 + 2 * 2 * 2 * 10 * 2 * DL / 300**2)
    drift = 4 + 2 * 10 * 2 * DL / 100 + 2 * 10 * 2 * DL / 200
    expected = var + drift**2 / 300**2
    assert expected == pytest.approx(1.07624, rel=1e-5)
    got = fedavg_bound(sizes=SIZES, mu=1, d=2, n_local_steps=10, n_rounds=2, tau1=0.5, trace_sigma=2)
    assert got == pytest.approx(expected, rel=1e-12)
    # Theorem 3.3 (R = 1) with per-client K_1i = (10, 30): K_max = 30 in the variance
    var = 64 * (2 / 300 + 2 * 2 * 30 * 2 * DL / 300**2)
    drift = 4 + 10 * 2 * DL / 100 + 30 * 2 * DL / 200
    got = fedavg_bound(sizes=SIZES, mu=1, d=2, n_local_steps=1, client_local_steps=[10, 30], tau1=0.5, trace_sigma=2)
    assert got == pytest.approx(var + drift**2 / 300**2, rel=1e-12)
    # Table 1: d/N + m^2 d^2/N^2 + m d^2 R K/(mu^2 N^2)
    t1 = fedavg_bound(form="table1", sizes=SIZES, mu=1, d=2, n_local_steps=10, n_rounds=2)
    assert t1 == pytest.approx(2 / 300 + 16 / 300**2 + 2 * 4 * 20 / 300**2, rel=1e-12)


def test_fednewton_thm39_hand_values():
    expected6 = 2 / (0.25 * 300) + 2 * 2 * DL / 300**2  # 0.0266667 + 0.0002535
    assert expected6 == pytest.approx(0.0269202, rel=1e-5)
    assert fednewton_bound(sizes=SIZES, mu=1, d=2, tau1=0.5, trace_sigma=2) == pytest.approx(expected6, rel=1e-12)
    per = [2 / 100 + 2 * 2 * DL / (100**2 * LR), 2 / 200 + 2 * 2 * DL / (200**2 * LR)]
    expected7 = 4 / (1 / per[0] + 1 / per[1])
    assert expected7 == pytest.approx(0.0374087, rel=1e-5)
    got = fednewton_bound(form="eq7", sizes=SIZES, mu=1, d=2, tau1=0.5, tau2=1, trace_sigma=2)
    assert got == pytest.approx(expected7, rel=1e-12)


def test_fednewton_client_condition_hand_value_and_consistency():
    # N = 1e6, mu = 1, d = 5, K = 50, n_min = 1000: d v log N = log(1e6) = 13.8155
    L = math.log(1e6)
    cons = [(1e6 / 5) ** (2 / 3), (1e6 * 1e6 / (L**3 * 2500)) ** (2 / 3), (1e6 * 1e6 / (L**2 * 2500)) ** 0.5]
    res = fednewton_max_clients(n_samples=1e6, mu=1, d=5, n_local_steps=50, n_min=1000, n_clients=[1000, 2000])
    assert res.constraints == pytest.approx(cons, rel=1e-12)
    assert res.max_clients == pytest.approx(min(cons)) and int(res.binding) == 2
    assert list(res.holds) == [True, False]
    # Remark 3.8 is the theorem with n_min = N/m solved for m: at m* = max_clients(comparable), the
    # privacy constraints of the theorem (evaluated with n_min = N/m*) are >= m*, with equality when binding
    for N, mu, K in [(1e5, 0.5, 20), (1e7, 2.0, 100), (5e4, 8.0, 5)]:
        comp = fednewton_max_clients(n_samples=N, mu=mu, d=50, n_local_steps=K, form="comparable")
        m = float(comp.max_clients)
        thm = fednewton_max_clients(n_samples=N, mu=mu, d=50, n_local_steps=K, n_min=N / m)
        dl = max(50, math.log(N))
        # the first constraints differ only in d vs d v log N (equal here since d = 50 > log N)
        assert thm.constraints[0] == pytest.approx(comp.constraints[0])
        for j in (1, 2):
            if int(comp.binding) == j:
                assert thm.constraints[j] == pytest.approx(m, rel=1e-9)
            else:
                assert thm.constraints[j] >= m * (1 - 1e-9)
        assert dl == 50


# ---------------------------------------------------------------- limits and monotonicity
BOUNDS = [
    lambda mu, n, K: fedsgd_bound(sizes=[n] * 5, mu=mu, d=3, n_iter=K),
    lambda mu, n, K: fedsgd_bound(form="comparable", n_samples=5 * n, n_clients=5, mu=mu, d=3, n_iter=K),
    lambda mu, n, K: fedsgd_bound(form="eq1", sizes=[n] * 5, mu=mu, d=3, n_iter=K, step_size=0.6, init_error=0.0,
                                  C=0.01),
    lambda mu, n, K: fedhybrid_bound(sizes=[n] * 5, mu=mu, d=3, n_server_iter=K),
    lambda mu, n, K: fedhybrid_bound(form="comparable", n_samples=5 * n, n_clients=5, mu=mu, d=3, n_server_iter=K),
    lambda mu, n, K: fedavg_bound(sizes=[n] * 5, mu=mu, d=3, n_local_steps=K, n_rounds=2),
    lambda mu, n, K: fedavg_bound(form="table1", sizes=[n] * 5, mu=mu, d=3, n_local_steps=K, n_rounds=2),
]


@pytest.mark.parametrize("bound", BOUNDS)
def test_privacy_terms_vanish_as_mu_grows(bound):
    nonpriv = bound(math.inf, 200, 20)
    vals = [bound(mu, 200, 20) for mu in (0.5, 2.0, 1e3, 1e8)]
    assert all(a > b for a, b in zip(vals, vals[1:]))
    assert vals[-1] == pytest.approx(nonpriv, rel=1e-9)
    assert vals[0] > 2 * nonpriv  # the privacy term is not negligible at small mu


@pytest.mark.parametrize("bound", BOUNDS)
def test_bounds_decrease_in_N_and_privacy_term_increases_in_K(bound):
    vals = [bound(1.0, n, 20) for n in (50, 100, 400, 2000)]
    assert all(a > b for a, b in zip(vals, vals[1:]))
    byK = [bound(1.0, 200, K) for K in (5, 20, 80)]
    assert all(a < b for a, b in zip(byK, byK[1:]))


def test_fednewton_bounds_decrease_in_N_and_vanish_privacy():
    for form in ("eq6", "eq7"):
        vals = [fednewton_bound(form=form, sizes=[n] * 5, mu=1.0, d=3) for n in (50, 200, 1000)]
        assert vals[0] > vals[1] > vals[2]
        assert fednewton_bound(form=form, sizes=[100] * 5, mu=1e9, d=3) == pytest.approx(
            fednewton_bound(form=form, sizes=[100] * 5, mu=math.inf, d=3))


def test_fedsgd_eq1_is_vacuous_when_gamma1_reaches_one():
    assert fedsgd_bound(form="eq1", sizes=[10, 10], mu=1, d=2, n_iter=5, step_size=0.5, C=10.0) == math.inf


# ---------------------------------------------------------------- vectorisation
def test_vectorised_calls_equal_scalar_loops():
    mus = np.array([0.3, 1.0, 4.0])[:, None]
    ns = np.array([50.0, 400.0])
    sizes = np.stack([np.full(6, n) for n in ns])  # (2, 6): two settings of 6 clients
    Ks = np.array([10.0, 40.0])
    got = {
        "sgd": fedsgd_bound(sizes=sizes, mu=mus, d=4, n_iter=Ks),
        "hyb": fedhybrid_bound(sizes=sizes, mu=mus, d=4, n_server_iter=Ks),
        "avg": fedavg_bound(sizes=sizes, mu=mus, d=4, n_local_steps=Ks, n_rounds=2),
        "new": fednewton_bound(sizes=sizes, mu=mus, d=4),
        "eq1": fedsgd_bound(form="eq1", sizes=sizes, mu=mus, d=4, n_iter=Ks, step_size=0.6, C=0.01),
    }
    for arr in got.values():
        assert arr.shape == (3, 2)
    for i, mu in enumerate(mus[:, 0]):
        for j, n in enumerate(ns):
            s, K = [n] * 6, Ks[j]
            assert got["sgd"][i, j] == pytest.approx(fedsgd_bound(sizes=s, mu=mu, d=4, n_iter=K), rel=1e-13)
            assert got["hyb"][i, j] == pytest.approx(fedhybrid_bound(sizes=s, mu=mu, d=4, n_server_iter=K), rel=1e-13)
            assert got["avg"][i, j] == pytest.approx(fedavg_bound(sizes=s, mu=mu, d=4, n_local_steps=K, n_rounds=2),
                                                     rel=1e-13)
            assert got["new"][i, j] == pytest.approx(fednewton_bound(sizes=s, mu=mu, d=4), rel=1e-13)
            assert got["eq1"][i, j] == pytest.approx(
                fedsgd_bound(form="eq1", sizes=s, mu=mu, d=4, n_iter=K, step_size=0.6, C=0.01), rel=1e-13)


def test_nan_padding_and_equal_size_shortcut():
    padded = np.array([[100, 100, np.nan], [50, 50, 50]])
    got = fedsgd_bound(sizes=padded, mu=1.0, d=2)
    assert got[0] == pytest.approx(fedsgd_bound(sizes=[100, 100], mu=1.0, d=2))
    assert got[1] == pytest.approx(fedsgd_bound(sizes=[50, 50, 50], mu=1.0, d=2))
    # m equal clients given as (N, m) equal the explicit sizes
    assert fedavg_bound(n_samples=600, n_clients=3, mu=1, d=2, n_local_steps=7) == pytest.approx(
        fedavg_bound(sizes=[200] * 3, mu=1, d=2, n_local_steps=7))


# ---------------------------------------------------------------- errors
def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="tau1"):
        fedsgd_bound(sizes=SIZES, mu=1, d=2, tau1=2.0, tau2=1.0)
    with pytest.raises(ValueError, match="mu"):
        fedsgd_bound(sizes=SIZES, mu=0.0, d=2)
    with pytest.raises(ValueError, match="form"):
        fedsgd_bound(sizes=SIZES, mu=1, d=2, form="nope")
    with pytest.raises(TypeError, match="n_iter"):
        fedsgd_bound(form="eq1", sizes=SIZES, mu=1, d=2)
    with pytest.raises(ValueError, match="sizes"):
        fedhybrid_bound(sizes=[100, -1], mu=1, d=2)
    with pytest.raises(TypeError):
        fedavg_bound(mu=1, d=2, n_local_steps=3)
    with pytest.raises(TypeError, match="n_min"):
        fednewton_max_clients(n_samples=1e4, mu=1, d=2, n_local_steps=3)
    with pytest.raises(ValueError, match="sum to 1"):
        fedsgd_bound(form="eq1", sizes=SIZES, mu=1, d=2, n_iter=3, step_size=0.5, weights=[0.5, 0.6])
