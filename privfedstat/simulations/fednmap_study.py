"""FedNMap's Section 5.1 studies (Figs. 2-5) on the GLM backend: stationarity against rounds, and its final value
against the number of clients n and of local steps Q with fitted log-log slopes.

Protocol (the paper's, at a configurable scale): a sparse logistic problem (an intercept and ``n_features``
Gaussian covariates of which ``n_nonzero`` have non-zero slopes), its ``n_samples`` rows **sorted by label** and
split without overlap into n equal consecutive blocks (heterogeneous clients: most see one label only); full
participation, the same rounds T and the same initial point x_0 = 0 for every method; phi the elastic net
``alpha (l1_ratio ||x||_1 + (1 - l1_ratio) ||x||^2 / 2)`` (intercept unpenalised); ``trials`` independent runs.
Methods: :class:`~privfedstat.FedNMap`, :class:`~privfedstat.ZhangComposite` and :class:`~privfedstat.FedCanon`.
Metric: ``||F_nat^gamma(x_t)||^2`` with the full gradient (:func:`~privfedstat.simulations.composite_metrics.stationarity`,
``gamma = metric_gamma``), averaged over the trials.

* Fig. 2: every method on the grid ``clients x local_steps``, ``eta_a = 1 / Q`` (so ``eta_hat = eta_s eta_a Q = 1``).
* Fig. 3: Q = ``fixed_local_steps``, n over ``clients_sweep``, ``eta_a = 1 / Q``; slope of log final stationarity
  on log n (paper: -1.436; theory: -0.5).
* Fig. 4: n = ``fixed_clients``, Q over ``steps_sweep``, ``eta_a = 1 / Q``; slope on log Q (paper: -1.181).
* Fig. 5: FedNMap, n = ``fixed_clients``, eta_s = 1, Q over ``steps_sweep``, ``eta_a`` in {1/Q, 1/sqrt(Q), 0.05}.

**What is held fixed, and why the slope depends on it [I].** The theory's speed-up comes from averaging the
stochastic-gradient noise over n clients and Q local steps (bounded variance ``sigma^2`` per stochastic
gradient). Full-batch GLM gradients have no such noise, so each local gradient here carries Gaussian noise of a
fixed sd ``noise_sd`` per coordinate, whatever n and Q (the theory's assumption; drawn by the clients' own
Gaussian mechanism: per-sample clipping at a bound B above every row norm, so clipping never binds, and the
budget per client set to ``mu = 2 B sqrt(T Q) / (noise_sd n_i)``; ``n_i = n_samples / n`` must be a whole
number). Held fixed across a sweep: the pooled data, phi, T, ``eta_hat = 1`` (Figs. 2-4), ``eta_s = 1``,
``gamma = eta_hat`` (FedNMap's default) and ``noise_sd``. The server's aggregate then carries noise of variance
``noise_sd^2 / (n Q)`` per coordinate, so once the runs reach their noise floor (constant steps) the final
stationarity scales as ``eta_hat noise_sd^2 / (n Q)``: slope -1 in n and in Q (measured a little steeper, as the
paper's: the l1 prox zeroes the noise below its threshold on the null coordinates). Before the floor the
deterministic transient, the same for every n and Q at a fixed ``eta_hat``, dominates and the slope tends to
0. The theory's -0.5 is the rate ``1 / sqrt(n Q T)`` of a bound whose steps shrink with T, a different quantity
again. The measured slope therefore depends on ``eta_hat``, T and ``noise_sd``, all reported with it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from ..algorithms.fednmap import FedCanon, FedNMap, ZhangComposite
from ..data.federated import FederatedData
from .composite_metrics import stationarity
from .study import Study, Table, param

__all__ = ["FedNMapConfig", "FEDNMAP_METHODS", "STEP_RULES", "PAPER_SLOPES", "loglog_slope", "sorted_logistic_clients",
           "fednmap_study", "summarise_fednmap", "fednmap_slopes", "plot_fednmap_study", "STUDY"]

#: the methods, in the paper's legend order
FEDNMAP_METHODS = {"FedNMap": FedNMap, "Zhang": ZhangComposite, "FedCanon": FedCanon}
#: Fig. 5's local step rules eta_a(Q) (the middle one garbled in the text: 1 / sqrt(Q) inferred)
STEP_RULES = {"1/Q": lambda Q: 1.0 / Q, "1/sqrt(Q)": lambda Q: 1.0 / math.sqrt(Q), "0.05": lambda Q: 0.05}
#: slopes of log final stationarity reported by the paper (FedNMap) and by its theory
PAPER_SLOPES = {"n_clients": -1.436, "n_local_steps": -1.181}
THEORY_SLOPE = -0.5


@dataclass(frozen=True)
class FedNMapConfig:
    """Scale and settings of the Figs. 2-5 studies (defaults: minutes on one core)."""

    n_samples: int = param("pooled rows (divisible by every n)", 6000, flag="samples")
    n_features: int = param("covariates", 20)
    n_nonzero: int = param("non-zero slopes of the sparse truth", 5)
    n_rounds: int = param("rounds T, every method", 100, flag="rounds")
    trials: int = param("independent runs (noise streams) per configuration; the data are drawn once", 10,
                        flag="reps")
    noise_sd: float = param("sd per coordinate of the noise on every local gradient", 0.5)
    alpha: float = param("elastic net strength (nu1 = alpha l1_ratio, nu2 = alpha (1 - l1_ratio) / 2)", 0.02)
    l1_ratio: float = param("elastic net mixing", 0.9)
    metric_gamma: float = param("gamma of the stationarity measure", 1.0)
    clients: tuple[int, ...] = param("Fig. 2's numbers of clients n", (20, 50, 100), flag="fig2-clients")
    local_steps: tuple[int, ...] = param("Fig. 2's numbers of local steps Q", (10, 20), flag="fig2-local-steps")
    clients_sweep: tuple[int, ...] = param("Fig. 3's numbers of clients n", (10, 20, 30, 50, 100), flag="clients")
    steps_sweep: tuple[int, ...] = param("Figs. 4-5's numbers of local steps Q", (5, 10, 20, 40), flag="local-steps")
    fixed_local_steps: int = param("Q of Fig. 3", 10)
    fixed_clients: int = param("n of Figs. 4-5", 30)
    seed: int = param("seed of the data and of every run", 0)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "seed":
                continue
            values = value if isinstance(value, tuple) else (value,)
            if not values or any(isinstance(v, bool) or not v > 0 or not math.isfinite(v) for v in values):
                raise ValueError(f"{f.name} must be positive and finite, got {value!r}.")
        if not 0 < self.n_nonzero <= self.n_features:
            raise ValueError(f"n_nonzero must lie in 1..n_features ({self.n_features}), got {self.n_nonzero}.")
        for n in {*self.clients, *self.clients_sweep, self.fixed_clients}:
            if self.n_samples % n:
                raise ValueError(f"n_samples ({self.n_samples}) must be divisible by every number of clients (the "
                                 f"clients are equal blocks, so every local gradient has the same noise); {n} is not a "
                                 "divisor.")


def loglog_slope(x, y) -> tuple[float, float, float]:
    """Least-squares fit ``log y = a + b log x``: the slope b, the intercept a and b's standard error (NaN for 2 points).

    Parameters
    ----------
    x, y : array-like of positive numbers, at least 2 distinct x
    """
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape or np.unique(x).size < 2:
        raise ValueError(f"need x and y of the same length with at least 2 distinct x, got {x.size} and {y.size}.")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(x > 0) and np.all(y > 0)):
        raise ValueError("log-log fit needs positive finite x and y.")
    lx, ly = np.log(x), np.log(y)
    (b, a), res, *_ = np.polyfit(lx, ly, 1, full=True)
    dof = x.size - 2
    se = math.sqrt(float(res[0]) / dof / np.sum((lx - lx.mean()) ** 2)) if dof > 0 and res.size else math.nan
    return float(b), float(a), se


def sorted_logistic_clients(study: FedNMapConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pooled sparse logistic data, rows sorted by label: (X with an intercept column, y, the true coefficients)."""
    rng = np.random.default_rng(study.seed)
    beta = np.zeros(study.n_features + 1)
    k = study.n_nonzero
    beta[1:k + 1] = rng.choice([-1.0, 1.0], k) * rng.uniform(0.5, 1.5, k)
    X = np.column_stack([np.ones(study.n_samples), rng.standard_normal((study.n_samples, study.n_features))])
    y = (rng.random(study.n_samples) < 1.0 / (1.0 + np.exp(-X @ beta))).astype(np.float64)
    order = np.argsort(y, kind="stable")
    return X[order], y[order], beta


def _fit(study: FedNMapConfig, X, y, method: str, n: int, Q: int, eta_a: float, trial: int) -> np.ndarray:
    """One fit; the stationarity of x_0, ..., x_T."""
    data = FederatedData.from_pooled(X, y, sizes=[study.n_samples // n] * n)
    clip = float(np.max(np.linalg.norm(X, axis=1))) * 1.01  # above every per-sample gradient norm: never binds
    mu = 2.0 * clip * math.sqrt(study.n_rounds * Q) / (study.noise_sd * study.n_samples / n)
    est = FEDNMAP_METHODS[method](
        family="logistic", mu=mu, n_rounds=study.n_rounds, n_local_steps=Q, step_size=eta_a, server_step_size=1.0,
        penalty="elasticnet", alpha=study.alpha, l1_ratio=study.l1_ratio, clip=clip,
        random_state=np.random.SeedSequence([study.seed, trial]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence advice: a noisy run does not settle by design
        est.fit(data)
    return np.array([stationarity(x, data, "logistic", est.penalty_, study.metric_gamma) for x in est.history_])


def _configurations(study: FedNMapConfig) -> list[tuple[str, str, str, int, int]]:
    """(figure, method, rule, n, Q) of every curve."""
    out = [("2", m, "1/Q", n, Q) for Q in study.local_steps for n in study.clients for m in FEDNMAP_METHODS]
    out += [("3", m, "1/Q", n, study.fixed_local_steps) for n in study.clients_sweep for m in FEDNMAP_METHODS]
    out += [("4", m, "1/Q", study.fixed_clients, Q) for Q in study.steps_sweep for m in FEDNMAP_METHODS]
    out += [("5", "FedNMap", r, study.fixed_clients, Q) for r in STEP_RULES for Q in study.steps_sweep]
    return out


def fednmap_study(study: FedNMapConfig = FedNMapConfig(), progress: bool = False) -> pd.DataFrame:
    """Run Figs. 2-5; a tidy table, one row per (figure, method, rule, n, Q, trial, round).

    Columns: figure, method, rule, eta_a, eta_hat (``eta_a Q``, eta_s = 1), n_clients, n_local_steps, trial,
    round (0..T), stationarity. A configuration shared by several figures is run once.
    """
    X, y, _ = sorted_logistic_clients(study)
    cache: dict[tuple, list[np.ndarray]] = {}
    rows = []
    configs = _configurations(study)
    for j, (figure, method, rule, n, Q) in enumerate(configs):
        eta_a = STEP_RULES[rule](Q)
        key = (method, n, Q, eta_a)
        if key not in cache:
            cache[key] = [_fit(study, X, y, method, n, Q, eta_a, t) for t in range(study.trials)]
        for t, path in enumerate(cache[key]):
            rows.append(pd.DataFrame(dict(figure=figure, method=method, rule=rule, eta_a=eta_a, eta_hat=eta_a * Q,
                                          n_clients=n, n_local_steps=Q, trial=t, round=np.arange(path.size),
                                          stationarity=path)))
        if progress:
            final = np.mean([p[-1] for p in cache[key]])
            print(f"[{j + 1}/{len(configs)}] Fig. {figure} {method} eta_a={rule} n={n} Q={Q}: final {final:.3g}",
                  flush=True)
    return pd.concat(rows, ignore_index=True)


def summarise_fednmap(df: pd.DataFrame) -> pd.DataFrame:
    """Final stationarity (round T) per curve: mean over the trials and its standard error."""
    final = df[df["round"] == df["round"].max()]
    keys = ["figure", "method", "rule", "eta_hat", "n_clients", "n_local_steps"]
    g = final.groupby(keys, sort=False)["stationarity"]
    return g.agg(final="mean", se=lambda s: s.std(ddof=1) / math.sqrt(s.size) if s.size > 1 else math.nan
                 ).reset_index()


def fednmap_slopes(df: pd.DataFrame) -> pd.DataFrame:
    """Slopes of log final stationarity on log n (Fig. 3) and log Q (Figs. 4, 5), per method and step rule,
    next to the paper's (FedNMap) and the theory's."""
    summary = summarise_fednmap(df)
    rows = []
    for figure, var in (("3", "n_clients"), ("4", "n_local_steps"), ("5", "n_local_steps")):
        for (method, rule), grp in summary[summary.figure == figure].groupby(["method", "rule"], sort=False):
            if grp[var].nunique() < 2:
                continue
            b, _, se = loglog_slope(grp[var], grp["final"])
            paper = PAPER_SLOPES[var] if method == "FedNMap" and figure in ("3", "4") else math.nan
            rows.append(dict(figure=figure, variable=var, method=method, rule=rule, slope=b, se=se,
                             points=len(grp), paper=paper, theory=THEORY_SLOPE))
    return pd.DataFrame(rows)


def plot_fednmap_study(df: pd.DataFrame):
    """One figure per paper figure: {"2": Fig. 2 (Q rows x n columns), "3"/"4": curves and the log-log fit,
    "5": one panel per step rule}. Returns a dict of matplotlib figures."""
    from matplotlib.figure import Figure

    mean = df.groupby(["figure", "method", "rule", "n_clients", "n_local_steps", "round"], sort=False
                      )["stationarity"].mean().reset_index()
    summary, slopes = summarise_fednmap(df), fednmap_slopes(df)
    figs = {}
    f2 = mean[mean.figure == "2"]
    if len(f2):
        Qs, ns = sorted(f2.n_local_steps.unique()), sorted(f2.n_clients.unique())
        fig = Figure(figsize=(4 * len(ns), 3 * len(Qs)))
        axes = fig.subplots(len(Qs), len(ns), squeeze=False, sharey=True)
        for (a, Q), (b, n) in ((qa, nb) for qa in enumerate(Qs) for nb in enumerate(ns)):
            for method, run in f2[(f2.n_local_steps == Q) & (f2.n_clients == n)].groupby("method", sort=False):
                axes[a, b].semilogy(run["round"], run.stationarity, label=method)
            axes[a, b].set(title=f"n={n}, Q={Q}", xlabel="round t", ylabel="||F_nat(x_t)||^2")
        axes[0, 0].legend(fontsize=7)
        figs["2"] = fig
    for figure, var, label in (("3", "n_clients", "n"), ("4", "n_local_steps", "Q")):
        sub = mean[(mean.figure == figure) & (mean.method == "FedNMap")]
        if not len(sub):
            continue
        fig = Figure(figsize=(10, 3.5))
        ax0, ax1 = fig.subplots(1, 2)
        for v, run in sub.groupby(var):
            ax0.semilogy(run["round"], run.stationarity, label=f"{label}={v}")
        ax0.set(xlabel="round t", ylabel="||F_nat(x_t)||^2", title=f"FedNMap, Fig. {figure}a")
        ax0.legend(fontsize=7)
        for method, grp in summary[summary.figure == figure].groupby("method", sort=False):
            ax1.loglog(grp[var], grp["final"], "o-", label=method)
        s = slopes[(slopes.figure == figure) & (slopes.method == "FedNMap")]
        if len(s):
            ax1.set_title(f"Fig. {figure}b: FedNMap slope {s.slope.iloc[0]:.3f} (paper {PAPER_SLOPES[var]})")
        ax1.set(xlabel=label, ylabel="final stationarity")
        ax1.legend(fontsize=7)
        figs[figure] = fig
    f5 = mean[mean.figure == "5"]
    if len(f5):
        rules = list(dict.fromkeys(f5.rule))
        fig = Figure(figsize=(4 * len(rules), 3.5))
        axes = fig.subplots(1, len(rules), sharey=True, squeeze=False)
        for ax, rule in zip(axes[0], rules):
            for Q, run in f5[f5.rule == rule].groupby("n_local_steps"):
                ax.semilogy(run["round"], run.stationarity, label=f"Q={Q}")
            ax.set(title=f"eta_a = {rule}", xlabel="round t", ylabel="||F_nat(x_t)||^2")
            ax.legend(fontsize=7)
        figs["5"] = fig
    for fig in figs.values():
        fig.tight_layout()
    return figs


def _summarise(frames, config: FedNMapConfig) -> dict[str, Table]:
    slopes = fednmap_slopes(frames[""]).assign(eta_hat_fixed=1.0, n_rounds=config.n_rounds, noise_sd=config.noise_sd,
                                               trials=config.trials)
    return {"slopes": Table(slopes, f"slopes of log final stationarity (T = {config.n_rounds}, eta_hat = 1 in Figs. "
                                    f"3-4, noise sd {config.noise_sd:g}, {config.trials} trials)")}


STUDY = Study("fednmap", "FedNMap vs Zhang vs FedCanon, Figs. 2-5: stationarity vs rounds, log-log slopes in n and Q",
              FedNMapConfig(), lambda config, stem, progress: {"": fednmap_study(config, progress)}, _summarise,
              lambda frames, tables, config: {f"fig{k}": f for k, f in plot_fednmap_study(frames[""]).items()})
