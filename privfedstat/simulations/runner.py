"""Monte-Carlo runner: scenarios x methods x replicates -> tidy DataFrame.

Each task is one (scenario, replicate): the data are drawn once and every method is fitted on
the same data; a :class:`Measure` says how each method is built and which rows a replicate gives
(:data:`MSE`: the paper's settings and one MSE row per method). Seeds are deterministic per task:
the data of replicate ``rep`` of a scenario use ``SeedSequence(random_state, spawn_key=(scenario_hash,
rep, 0))`` and method ``j`` uses ``spawn_key=(scenario_hash, rep, method_hash)``, so any row can be
rerun alone with :func:`run_replicate` and results do not depend on ``n_jobs``, the backend or the
order of execution. Tasks run in the calling process (``n_jobs=1``), in joblib workers
(``backend="loky"``) or on a ``dask.distributed`` cluster (``backend="dask"``); finished tasks are
appended to a CSV file so that an interrupted study resumes where it stopped.
:class:`MonteCarloConfig` holds these settings for the studies that run on it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..algorithms import registry
from ..data.federated import FederatedData
from ..exceptions import DivergenceError
from ..fitting.base import FederatedEstimator
from ..privacy.clipping import AutoClip
from .allocations import Allocation
from .dgp import GLMDesign
from .study import param, positive_int

__all__ = ["Scenario", "Fit", "Measure", "MSE", "MonteCarlo", "MonteCarloConfig", "run_replicate", "mse_rows",
           "METHODS", "make_estimator", "summarise", "source_digest"]


@dataclass(frozen=True)
class Scenario:
    """One cell of a simulation study.

    Parameters
    ----------
    design : GLMDesign
        Data-generating process (family, beta_true, sigma_c).
    n_clients : int
        Number of clients (m).
    allocation : Allocation
        Client sizes (equal, uniform, lognormal, fixed total).
    mu : float
        GDP budget per client; ``inf`` for non-private runs.
    n_iter : int or None
        Iteration budget K for studies that vary it (Fig. 4); None keeps each method's default.
        How K maps onto each method: see :func:`make_estimator`.
    clip : float or str
        Clipping rule passed to the estimators ("auto", "paper" or a number; ``inf``: no clipping,
        only with ``mu = inf``).
    newton_noise : str or None
        FedNewton's ``newton_noise`` (the other methods ignore it); None keeps its default.
    hessian_floor : float, str or None
        FedNewton's ``hessian_floor`` (the other methods ignore it); None keeps its default.
    labels : dict
        Extra tidy columns (e.g. ``{"study": "fig5"}``); not part of the seed.
    """

    design: GLMDesign
    n_clients: int
    allocation: Allocation
    mu: float = 2.0
    n_iter: int | None = None
    clip: float | str = "auto"
    newton_noise: str | None = None
    hessian_floor: float | str | None = None
    labels: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """Stable text identifier (independent of ``labels``), used for seeds and resuming.

        FedNewton's settings enter only when set, so that the keys (and seeds) of the default
        settings do not change.
        """
        newton = "".join(f"|{name}={value}" for name, value in self.newton_settings().items())
        return (f"{self.design.label}|m={self.n_clients}|{type(self.allocation).__name__}"
                f"{tuple(asdict(self.allocation).values())}|mu={self.mu:g}|K={self.n_iter}|clip={self.clip}{newton}")

    def newton_settings(self) -> dict:
        """FedNewton's settings this scenario overrides (``newton_noise``, ``hessian_floor``), by name."""
        return {name: value for name, value in (("newton_noise", self.newton_noise),
                                                ("hessian_floor", self.hessian_floor)) if value is not None}

    def columns(self) -> dict:
        """Tidy columns describing this scenario."""
        return {
            **dict(self.labels),
            "scenario": self.key,
            "family": self.design.family,
            "m": self.n_clients,
            "allocation": self.allocation.label,
            "mu": self.mu,
            "K": self.n_iter,
        }


def make_estimator(method: str, scenario: Scenario, random_state) -> FederatedEstimator:
    """The estimator ``method`` with the paper's simulation settings (Section 4.1).

    ``method`` is a registered method (key or display name, see
    :func:`~privfedstat.algorithms.get_method`) with simulation settings: its
    ``MethodSpec.paper_params(K)`` with ``K = scenario.n_iter``. For the paper's four: FedSGD
    K=50; FedHybrid K1=30, K2=20; FedAvg K=50, R=2; FedNewton K=50, R=1; eta=0.5. When
    ``scenario.n_iter`` (K) is set: FedSGD ``n_iter=K``; FedHybrid ``K1 = round(0.6 K)``,
    ``K2 = K - K1`` (the default 30/20 split, so both use K gradient evaluations); FedAvg and
    FedNewton ``n_local_steps=K``. These settings are passed explicitly (the estimators'
    defaults are ``"auto"``), ``clip="auto"`` becomes ``AutoClip()`` so that runs with
    mu = inf also clip at the private 90% quantile, as in the paper's studies, and
    ``inference=None``: the whole mu goes to estimation, as in the paper (the default
    ``inference="auto"`` would spend a share of it on standard errors). ``scenario.newton_noise``
    and ``scenario.hessian_floor``, when set, go to the methods that have these parameters (FedNewton).
    """
    spec = registry.get_method(method)
    if spec.paper_params is None:
        raise ValueError(f"method {method!r} has no simulation settings (MethodSpec.paper_params); the studies "
                         f"run {', '.join(METHODS)}.")
    clip = AutoClip() if isinstance(scenario.clip, str) and scenario.clip == "auto" else scenario.clip
    newton = scenario.newton_settings()
    if newton:
        own = inspect.signature(spec.cls).parameters
        newton = {k: v for k, v in newton.items() if k in own}
    return spec.cls(family=scenario.design.family, mu=scenario.mu, clip=clip, random_state=random_state,
                    step_size=PAPER_STEP_SIZE, inference=None, **spec.paper_params(scenario.n_iter), **newton)


#: the methods of the Section 4 studies: the registered ones with simulation settings (the paper's four)
METHODS = tuple(s.display for s in registry.methods() if s.paper_params is not None)
#: eta of the paper's simulations (Section 4.1)
PAPER_STEP_SIZE = 0.5
#: finished replicates are appended to the CSV file at most this often (a write per replicate cost the main process
#: 3.7 ms, 10% of the CPU of a Section 4 study on two workers; benchmarks/RESULTS.md, "Section 4 profile")
APPEND_SECONDS = 2.0


@dataclass
class Fit:
    """One method's fit on one replicate, handed to a :class:`Measure`'s ``record``.

    Attributes
    ----------
    method : str
    estimator : FederatedEstimator or None
        The fitted estimator; None when the fit raised one of the measure's ``tolerate`` errors.
    seconds : float
        Wall time of ``fit``.
    warnings : tuple of str
        Class names of the warnings the fit emitted, distinct, in order of first appearance.
    error : str or None
        ``"ClassName: message"`` of a tolerated error.
    """

    method: str
    estimator: FederatedEstimator | None
    seconds: float
    warnings: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Measure:
    """What every replicate of a Monte-Carlo study fits and what it records.

    Parameters
    ----------
    name : str
    methods : tuple of str
        The default methods of a :class:`MonteCarlo` using it (``make`` may know more).
    make : callable
        ``make(method, scenario, seed) -> estimator`` (unfitted; ``seed`` a SeedSequence); raises
        ValueError for a method it does not know.
    record : callable
        ``record(scenario, rep, data, fits) -> list[dict]``: the tidy rows of one replicate from
        its data (FederatedData) and its fits (list of :class:`Fit`, in method order).
    tolerate : tuple of exception classes, default ()
        Errors of ``fit`` that are recorded in :attr:`Fit.error` instead of stopping the study.

    ``make`` and ``record`` must be module-level functions (workers receive them pickled).
    """

    name: str
    methods: tuple[str, ...]
    make: Callable[[str, Scenario, np.random.SeedSequence], FederatedEstimator]
    record: Callable[[Scenario, int, FederatedData, list[Fit]], list[dict]]
    tolerate: tuple[type[Exception], ...] = ()


def mse_rows(scenario: Scenario, rep: int, data: FederatedData, fits: list[Fit]) -> list[dict]:
    """The rows of the MSE studies: one per method (squared error, communication, privacy, time); a fit that
    diverged (:class:`~privfedstat.DivergenceError`) gives NaN and its ``error``, so summaries count it apart."""
    beta = scenario.design.beta_true
    sizes = data.sizes
    rows = []
    for f in fits:
        est = f.estimator
        rows.append({
            **scenario.columns(),
            "n_mean": float(sizes.mean()),
            "N": int(sizes.sum()),
            "method": f.method,
            "rep": rep,
            "mse": est.mse(beta) if est is not None else math.nan,
            "rounds": est.communication_.rounds if est is not None else math.nan,
            "floats_per_client": est.communication_.floats_per_client if est is not None else math.nan,
            "total_floats": est.communication_.total_floats if est is not None else math.nan,
            "clip": est.clip_ if est is not None else math.nan,
            "client_mu": est.privacy_.mu if est is not None else math.nan,
            "converged": est.converged_ if est is not None else False,
            "private": est.privacy_.is_private if est is not None else math.nan,
            "seconds": f.seconds,
            "error": f.error or "",
        })
    return rows


#: the Section 4 studies: MSE of the paper's settings (:func:`make_estimator`), one row per method
MSE = Measure("mse", METHODS, make_estimator, mse_rows, tolerate=(DivergenceError,))


def _hash(text: str) -> int:
    return zlib.crc32(text.encode())


def _fit(method: str, est: FederatedEstimator, data: FederatedData, tolerate: tuple) -> Fit:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", append=True)  # filters already set (e.g. "error") keep precedence
        t0 = time.perf_counter()
        try:
            est.fit(data)
        except tolerate as exc:
            est, error = None, f"{type(exc).__name__}: {exc}"
        else:
            error = None
        seconds = time.perf_counter() - t0
    names = tuple(dict.fromkeys(w.category.__name__ for w in caught))
    return Fit(method, est, seconds, names, error)


def run_replicate(scenario: Scenario, rep: int, *, methods: Iterable[str] | None = None, random_state: int = 0,
                  numba_threads: int | None = None, measure: Measure = MSE) -> list[dict]:
    """Fit every method on replicate ``rep`` of ``scenario``; the tidy rows ``measure.record`` makes.

    Warnings the fits emit are not shown: their class names go to :attr:`Fit.warnings` (the MSE
    rows record convergence and leaks in their "converged" and "private" columns).
    """
    if numba_threads is not None:
        import numba

        numba.set_num_threads(numba_threads)
    skey = _hash(scenario.key)
    data_rng = np.random.default_rng(np.random.SeedSequence(random_state, spawn_key=(skey, rep, 0)))
    sizes = scenario.allocation.sizes(scenario.n_clients, data_rng)
    data = scenario.design.sample(sizes, data_rng)
    fits = []
    for method in measure.methods if methods is None else methods:
        seed = np.random.SeedSequence(random_state, spawn_key=(skey, rep, _hash(method)))
        fits.append(_fit(method, measure.make(method, scenario, seed), data, measure.tolerate))
    return measure.record(scenario, rep, data, fits)


class MonteCarlo:
    """Run scenarios x methods x replicates and collect a tidy table.

    Parameters
    ----------
    scenarios : list of Scenario
    methods : sequence of str or None, default None
        Names ``measure.make`` accepts (for the MSE studies: any registered method with simulation
        settings, see :func:`make_estimator`); None: ``measure.methods``.
    n_reps : int, default 100
        Replicates per scenario.
    random_state : int, default 0
        Root seed; with it every row is reproducible on its own.
    n_jobs : int, default 1
        Parallel workers (joblib processes or dask workers). Each worker runs numba on one thread.
    backend : {"loky", "dask"}, default "loky"
        ``"dask"`` submits the tasks to a ``dask.distributed`` cluster (needs the ``dask`` extra).
    scheduler : str or None
        Address of a running dask scheduler; None starts a ``LocalCluster`` with ``n_jobs`` workers.
    out : path or None
        CSV file to which finished replicates are appended; if it exists, replicates already in it
        are not run again (resume) and are included in the result. A resume reuses only replicates of
        the same code, ``random_state`` and measure (recorded beside it in ``<out>.run.json``,
        :func:`source_digest`); another run's file raises ValueError instead of being mixed in.
    progress : bool, default True
        Show a tqdm progress bar.
    measure : Measure, default MSE
        What each replicate fits and records (default: the paper's MSE studies).
    """

    def __init__(self, scenarios: list[Scenario], methods: Iterable[str] | None = None, *, n_reps: int = 100,
                 random_state: int = 0, n_jobs: int = 1, backend: str = "loky", scheduler: str | None = None,
                 out: str | os.PathLike | None = None, progress: bool = True, measure: Measure = MSE) -> None:
        self.scenarios = list(scenarios)
        self.measure = measure
        self.methods = measure.methods if methods is None else tuple(methods)
        self.n_reps = n_reps
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.backend = backend
        self.scheduler = scheduler
        self.out = out
        self.progress = progress

    def _validate(self) -> None:
        if not self.scenarios:
            raise ValueError("MonteCarlo needs at least one scenario.")
        for m in self.methods:  # an unknown method raises here, before any fit
            self.measure.make(m, self.scenarios[0], None)
        if not isinstance(self.n_reps, int) or self.n_reps < 1:
            raise ValueError(f"n_reps must be a positive integer, got {self.n_reps!r}.")
        if not isinstance(self.n_jobs, int) or self.n_jobs < 1:
            raise ValueError(f"n_jobs must be a positive integer, got {self.n_jobs!r}.")
        if self.backend not in ("loky", "dask"):
            raise ValueError(f"backend must be 'loky' or 'dask', got {self.backend!r}.")
        if len({s.key for s in self.scenarios}) != len(self.scenarios):
            raise ValueError("scenarios must be distinct.")

    def run(self) -> pd.DataFrame:
        """Run all missing replicates and return the tidy table (sorted by scenario, method, rep; stable)."""
        self._validate()
        done_frames, done = [], set()
        if self.out is not None:
            self._stamp()
        if self.out is not None and os.path.exists(self.out) and os.path.getsize(self.out) > 0:
            prev = pd.read_csv(self.out)
            keys = {s.key for s in self.scenarios}
            prev = prev[prev["scenario"].isin(keys) & prev["method"].isin(self.methods)]
            done = set(zip(prev["scenario"], prev["rep"]))
            done_frames.append(prev)
        tasks = [(s, r) for s in self.scenarios for r in range(self.n_reps) if (s.key, r) not in done]
        new_rows, pending, flushed = [], [], time.monotonic()
        try:
            for rows in self._execute(tasks):
                new_rows.extend(rows)
                pending.extend(rows)
                if self.out is not None and time.monotonic() - flushed >= APPEND_SECONDS:
                    self._append(pending)
                    pending, flushed = [], time.monotonic()
        finally:  # an interrupted run keeps every replicate it finished
            if self.out is not None and pending:
                self._append(pending)
        frames = done_frames + ([pd.DataFrame(new_rows)] if new_rows else [])
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True)
        order = {s.key: i for i, s in enumerate(self.scenarios)}
        df = df.assign(_o=df["scenario"].map(order), _m=df["method"].map({m: i for i, m in enumerate(self.methods)}))
        return df.sort_values(["_o", "_m", "rep"], kind="stable").drop(columns=["_o", "_m"]).reset_index(drop=True)

    def _stamp(self) -> None:
        """Check that ``out`` holds replicates of this run (its code, ``random_state`` and measure) or none, and
        record them beside it: a resume must not mix in rows that another version of the code or another seed
        computed."""
        stamp = {"source": source_digest(), "random_state": self.random_state, "measure": self.measure.name}
        record = Path(f"{self.out}.run.json")
        if os.path.exists(self.out) and os.path.getsize(self.out) > 0:
            held = json.loads(record.read_text()) if record.exists() else None
            if held != stamp:
                why = (f"no record of the run that computed them ({record} is missing)" if held is None else
                       "; ".join(f"{k} {held.get(k)!r} there, {v!r} here" for k, v in stamp.items() if held.get(k) != v))
                raise ValueError(f"{self.out} holds replicates of another run ({why}): a resume reuses only rows of "
                                 "the same code, random_state and measure. Delete it or give the study another out.")
        record.write_text(json.dumps(stamp))

    def _append(self, rows: list[dict]) -> None:
        frame = pd.DataFrame(rows)
        if os.path.exists(self.out) and os.path.getsize(self.out) > 0:
            columns = pd.read_csv(self.out, nrows=0).columns
            extra = set(frame.columns) - set(columns)
            if extra:
                raise ValueError(f"{self.out} holds another table (no column(s) {sorted(extra)}); "
                                 "give the study its own out file.")
            frame.reindex(columns=columns).to_csv(self.out, mode="a", header=False, index=False)
        else:
            frame.to_csv(self.out, mode="a", header=True, index=False)

    def _execute(self, tasks):
        from tqdm.auto import tqdm

        kw = {"methods": self.methods, "random_state": self.random_state, "measure": self.measure}
        bar = tqdm(total=len(tasks), disable=not self.progress, desc="replicates", unit="rep")
        try:
            if self.backend == "dask":
                yield from self._dask(tasks, kw, bar)
            elif self.n_jobs == 1:
                for s, r in tasks:
                    yield run_replicate(s, r, **kw)
                    bar.update()
            else:
                from joblib import Parallel, delayed

                from .kernel_warmup import warm_kernels

                warm_kernels()
                par = Parallel(n_jobs=self.n_jobs, return_as="generator_unordered")
                for rows in par(delayed(run_replicate)(s, r, numba_threads=1, **kw) for s, r in tasks):
                    yield rows
                    bar.update()
        finally:
            bar.close()

    def _dask(self, tasks, kw, bar):
        try:
            from dask.distributed import Client, LocalCluster, as_completed
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("backend='dask' needs dask.distributed: pip install 'privfedstat[dask]'") from exc
        cluster = None
        if self.scheduler is None:
            cluster = LocalCluster(n_workers=self.n_jobs, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(self.scheduler)
        try:
            futures = [client.submit(run_replicate, s, r, numba_threads=1, pure=False, **kw) for s, r in tasks]
            for fut in as_completed(futures):
                yield fut.result()
                bar.update()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


@dataclass(frozen=True, kw_only=True)
class MonteCarloConfig:
    """The settings of a study that runs on :class:`MonteCarlo` (its replicates, seed and workers)."""

    reps: int = param("replicates per cell", 100, parse=positive_int)
    jobs: int = param("parallel workers (joblib processes or dask workers)", 1, parse=positive_int)
    seed: int = param("root seed: every row is reproducible from it alone", 0)
    backend: str = param("where parallel replicates run", "loky", choices=("loky", "dask"))
    scheduler: str | None = param("dask scheduler address (default: start a LocalCluster)", None, parse=str)

    def monte_carlo(self, scenarios: list[Scenario], csv: str | os.PathLike, progress: bool, **kw) -> MonteCarlo:
        """The :class:`MonteCarlo` of ``scenarios`` with these settings, appending to (and resuming from) ``csv``."""
        return MonteCarlo(scenarios, n_reps=self.reps, random_state=self.seed, n_jobs=self.jobs, backend=self.backend,
                          scheduler=self.scheduler, out=csv, progress=progress, **kw)


def summarise(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean MSE and its standard error per cell (``by`` columns + method)."""
    g = df.groupby(by + ["method"], sort=False, dropna=False)["mse"]
    out = g.agg(mean_mse="mean", sd="std", reps="count").reset_index()
    out["se"] = out["sd"] / np.sqrt(out["reps"])
    out["diverged"] = g.size().to_numpy() - out["reps"].to_numpy()  # fits that raised DivergenceError (NaN MSE)
    return out.drop(columns="sd")


@lru_cache(maxsize=1)
def source_digest() -> str:
    """The first 16 hex digits of the SHA-256 of this privfedstat's Python sources (every ``.py`` file of the
    package, by relative path): what a resumed study's replicates must share with the code that continues it."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
