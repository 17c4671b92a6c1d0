"""HiFedProx's report: tail statistic, Tables II/III, paired comparisons with Holm's adjustment, figure.

Each is checked against an independent reference.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

pytest.importorskip("torch")

from privfedstat.deep.hifedprox_study import (  # noqa: E402
    STUDY,
    displacement_tail,
    hifedprox_comparisons,
    hifedprox_diagnostics,
    hifedprox_tables,
    plot_hifedprox,
)
from privfedstat.simulations.paired_bootstrap import exhaustive_paired_bootstrap  # noqa: E402

pytestmark = pytest.mark.slow

POWERS = [2, 3, 4, 5, 6, 7, 8]
SEEDS = [3001, 3002, 3003, 3004, 3005]
# the paper's Table II means (clean, moderate, severe loss) and Table III (clean/moderate/severe tail, severe trials)
LOSS = {2: (2.2833, 2.7208, 3.4141), 3: (2.2922, 2.5770, 2.9552), 4: (2.2610, 2.4928, 2.7991),
        5: (2.2690, 2.4188, 2.7059), 6: (2.2640, 2.4218, 2.6235), 7: (2.2634, 2.4095, 2.6772),
        8: (2.2772, 2.4328, 2.6701)}
TAIL = {2: (1.448, 3.070, 4.936, 7835.0), 3: (1.428, 2.561, 3.506, 8472.2), 4: (1.395, 2.210, 2.763, 8810.8),
        5: (1.362, 2.015, 2.437, 9214.6), 6: (1.343, 1.905, 2.284, 9553.6), 7: (1.327, 1.817, 2.172, 9764.6),
        8: (1.302, 1.777, 2.086, 10069.6)}
CONDITIONS = ["clean", "moderate", "severe"]


def _records(rng: np.random.Generator | None = None) -> pd.DataFrame:
    """Five seeds x seven p x three conditions; with rng, random values; without, the paper's means exactly."""
    offsets = np.array([-0.02, -0.01, 0.0, 0.01, 0.02])  # zero-mean seed effects, the same for every p
    rows = []
    for (j, c), p, (s, seed) in itertools.product(enumerate(CONDITIONS), POWERS, enumerate(SEEDS)):
        if rng is None:
            loss, tail, trials = LOSS[p][j] + offsets[s], TAIL[p][j], (TAIL[p][3] if c == "severe" else 5000.0)
        else:
            loss, tail, trials = rng.normal(2.5, 0.2), rng.uniform(1, 5), rng.integers(7000, 11000)
        rows.append(dict(seed=seed, p=p, condition=c, eval_loss=loss, eval_accuracy=0.3 + 0.01 * p + 0.01 * s,
                         mean_tail=tail, stress_ratio=np.nan if c == "clean" else 6.0 / p,
                         armijo_trials=float(trials), writer_p10_accuracy=0.02 * p, line_search_failures=0))
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- tail statistic
def test_tail_statistic_hand_examples():
    assert displacement_tail([5.0, 1.0, 4.0, 2.0, 3.0]) == pytest.approx(5 / 3)  # ceil(4.5)=5, ceil(2.5)=3
    rng = np.random.default_rng(0)
    assert displacement_tail(rng.permutation(np.arange(1.0, 19.0))) == pytest.approx(17 / 9)  # m = 18: r_17 / r_9
    r = np.sort(rng.exponential(size=18))
    assert displacement_tail(rng.permutation(r)) == r[16] / r[8]
    assert displacement_tail(np.arange(1.0, 71.0)) == pytest.approx(63 / 35)  # 0.9 * 70 is 63.000...07 in floats
    assert displacement_tail([0.0, 0.0, 0.0, 1.0]) == pytest.approx(1e12)  # median guarded by 1e-12
    assert displacement_tail([2.0]) == 1.0
    for bad in ([], [1.0, -1.0], [1.0, np.nan]):
        with pytest.raises(ValueError, match="norms"):
            displacement_tail(bad)


def test_paper_tail_and_trial_arithmetic():
    """Table III's 'trial increase' column and the -57.7% severe tail change, from the paper's own numbers."""
    _, table3 = hifedprox_tables(_records())
    assert list(table3.columns) == ["clean_tail", "moderate_tail", "severe_tail", "severe_trials",
                                    "trial_increase_pct"]
    np.testing.assert_allclose(table3["severe_tail"], [TAIL[p][2] for p in POWERS])
    np.testing.assert_array_equal(table3["trial_increase_pct"].round(2),
                                  [0.00, 8.13, 12.45, 17.61, 21.93, 24.63, 28.52])
    diagnostics = hifedprox_diagnostics(_records())
    assert round(diagnostics.loc[8, "severe_tail_change_pct"], 1) == -57.7
    # the calibration-style score: p = 7 lowest (2.3365), p = 5 and 6 close (2.3439, 2.3429)
    np.testing.assert_allclose(diagnostics.loc[[7, 5, 6], "clean_moderate_score"], [2.33645, 2.3439, 2.3429])


def test_paper_gains_over_fedprox():
    comp = hifedprox_comparisons(_records())
    base = comp[comp.kind == "vs_baseline"].set_index(["condition", "p"])
    assert round(base.loc[("moderate", 7), "gain_pct"], 2) == 11.44
    assert round(base.loc[("severe", 6), "gain_pct"], 2) == 23.16
    best = comp[comp.kind == "vs_best"].set_index("condition")
    assert best.loc["moderate", "p"].unique().tolist() == [7] and best.loc["severe", "p"].unique().tolist() == [6]
    severe = best.loc["severe"].set_index("reference")
    assert severe.loc[8, "rank"] == 2 and severe.loc[5, "estimate"] == pytest.approx(2.7059 - 2.6235)


# --------------------------------------------------------------------------- tables and comparisons
def test_tables_means_and_sds_by_numpy():
    records = _records(np.random.default_rng(3))
    table2, table3 = hifedprox_tables(records)
    for c in CONDITIONS:
        for p in POWERS:
            part = records[(records.condition == c) & (records.p == p)]
            assert table2.loc[p, f"{c}_loss"] == pytest.approx(np.mean(part.eval_loss))
            assert table2.loc[p, f"{c}_loss_sd"] == pytest.approx(np.std(part.eval_loss, ddof=1))
            assert table3.loc[p, f"{c}_tail"] == pytest.approx(np.mean(part.mean_tail))
            if c != "clean":
                assert table2.loc[p, f"{c}_acc"] == pytest.approx(100 * np.mean(part.eval_accuracy))
                assert table2.loc[p, f"{c}_acc_sd"] == pytest.approx(100 * np.std(part.eval_accuracy, ddof=1))
    severe = records[records.condition == "severe"].groupby("p").armijo_trials.mean()
    np.testing.assert_allclose(table3.trial_increase_pct, 100 * (severe / severe[2] - 1))
    assert "clean_acc" not in table2.columns


def test_comparisons_are_the_bootstrap_of_seed_differences():
    records = _records(np.random.default_rng(4))
    comp = hifedprox_comparisons(records)
    sev = records[records.condition == "severe"].pivot(index="seed", columns="p", values="eval_loss")
    base = comp[(comp.condition == "severe") & (comp.kind == "vs_baseline")].set_index("p")
    for p in POWERS[1:]:
        boot = exhaustive_paired_bootstrap((sev[2] - sev[p]).to_numpy())
        row = base.loc[p]
        assert (row.estimate, row.low, row.high, row.p_value) == pytest.approx(
            (boot.estimate, boot.low, boot.high, boot.p_value))
        assert row.favouring == boot.favouring and row.gain_pct == pytest.approx(100 * boot.estimate / sev[2].mean())
    reject, adjusted, _, _ = multipletests(base.p_value.to_numpy(), 0.05, method="holm")
    np.testing.assert_allclose(base.p_holm, adjusted)
    np.testing.assert_array_equal(base.reject, reject)
    # an accuracy: higher is better, so the estimate is accuracy(p) - accuracy(reference)
    acc = hifedprox_comparisons(records, metric="eval_accuracy")
    row = acc[(acc.condition == "clean") & (acc.kind == "vs_baseline") & (acc.p == 8)].iloc[0]
    assert row.estimate == pytest.approx(0.06) and row.favouring == 5 and row.p_value == 0
    assert set(acc[acc.kind == "vs_best"].p) == {8}


def test_record_errors():
    records = _records()
    with pytest.raises(ValueError, match="lack column"):
        hifedprox_tables(records.drop(columns="mean_tail"))
    with pytest.raises(ValueError, match="more than one row"):
        hifedprox_tables(pd.concat([records, records.iloc[:1]]))
    with pytest.raises(ValueError, match="same seeds"):
        hifedprox_tables(records.iloc[1:])
    with pytest.raises(ValueError, match="fractions"):
        hifedprox_tables(records.assign(eval_accuracy=45.0))
    with pytest.raises(ValueError, match="conditions"):
        hifedprox_tables(records.assign(condition="mild"))
    with pytest.raises(ValueError, match="metric"):
        hifedprox_comparisons(records, metric="loss")


def test_summary_tables_and_plot():
    tables = STUDY.summarise({"records": _records()}, STUDY.config)
    assert list(tables) == ["table2", "table3", "comparisons", "diagnostics"] and "Table II" in tables["table2"].title
    assert tables["table3"].frame["trial_increase_pct"].round(2).iloc[-1] == 28.52
    records = _records(np.random.default_rng(5))
    rounds = pd.DataFrame([dict(seed=s, p=p, condition=c, round=t, tail=1 + 4 / p + 0.01 * t,
                                mean_displacement_stressed=np.nan if c == "clean" or t == 1 else 3.0 / p,
                                mean_displacement_normal=1.0)
                           for s, p, c, t in itertools.product(SEEDS[:2], POWERS, CONDITIONS, range(4))])
    fig = plot_hifedprox(records[records.seed.isin(SEEDS[:2])], rounds)
    assert len(fig.axes) == 9 and [len(a.lines) for a in fig.axes[3:6]] == [len(POWERS)] * 3  # T_t per p
    with pytest.raises(ValueError, match="rounds lack"):
        plot_hifedprox(records, rounds.drop(columns="tail"))
