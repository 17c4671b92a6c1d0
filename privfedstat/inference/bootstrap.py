"""Parametric bootstrap of a private fit (Ferrando, Wang & Sheldon 2022), as post-processing of private releases.

The private estimate theta-hat is biased by clipping and spread by the sampling and privacy
noise; the parametric bootstrap reproduces all three by simulation (Ferrando, Wang & Sheldon
2022, "Parametric bootstrap for differentially private confidence intervals", AISTATS):

1. **Covariate model, released privately.** The simulation needs a distribution of the
   covariates (on the fitting scale, after any rescaling). The clients release, from the
   budget ``mu`` the bootstrap may spend:

   * a row-norm bound ``C_x``: the private ``ROW_SEARCH.quantile`` (99%) of the per-sample row
     norms ``||x_j||``, by the noisy-count bisection of the clipping bound
     (:func:`~privfedstat.federation.queries.search_bounds`, count sensitivity 1) on the public
     grid of :data:`ROW_SEARCH` (``1e-3 .. 1e7``), with share :data:`SEARCH_SHARE` of ``mu^2``;
   * each client's mean of ``x_j x_j^T`` over its rows, each row scaled to norm ``<= C_x``
     (``oracle.design_moments(C_x)``), released as :func:`~privfedstat._linalg.sym_to_vec`
     with sensitivity ``sqrt(2) C_x^2 / n_i`` (:func:`~privfedstat.privacy.calibration.hessian_sensitivity`:
     every per-sample term is PSD with Frobenius norm ``||x_j||^2 <= C_x^2``, so one row replaced
     moves the client's mean by at most ``sqrt(2) C_x^2 / n_i``), with the rest of ``mu^2``
     (Gaussian family: see below). The server averages with the size weights ``n_i / N`` into M
     and floors its eigenvalues (post-processing) at :data:`FLOOR_NOISE_SDS` standard
     deviations ``s`` of a released eigenvalue (``v^T Xi v`` has sd s for a unit v, since
     ``sym_to_vec`` is an isometry) and at :data:`RELATIVE_FLOOR` of its largest eigenvalue
     (keeps M invertible with mu = inf).

   With mu = inf nothing is clipped (``C_x = inf``) and nothing is noised.

   The covariates are then drawn from a Gaussian with second moment M. If the estimator
   declares an intercept column j (the ``intercept`` of its ``scaling``: a
   :class:`~privfedstat.PrivateStandardize`, ``"private"`` (column 0) or a
   :class:`~privfedstat.FeatureBounds`; the rescaling sets that column to 1 on the fitting
   scale, so it is public), ``x_j = 1`` and the other columns are drawn from the Gaussian with
   the mean and covariance M implies: ``E[x_r] = M_rj / M_jj``, ``Cov(x_r) = (M_rr - M_rj M_jr /
   M_jj) / M_jj`` (dividing by ``M_jj = E[c^2]``, the mean squared clipping factor of the rows,
   turns the clipped moments into ``c^2``-weighted moments: inferred, it removes the first-order
   shrinkage of clipping). Declare an intercept without rescaling anything, at no cost, with
   ``scaling=PrivateStandardize(columns=(), intercept=0)``. Without a declared intercept the
   covariates are zero-mean Gaussian with second moment M (a column of ones is then simulated
   as a random column: the notes say so).

2. **Responses** from the family at theta-hat: Bernoulli (logistic), Poisson (means capped at
   :data:`privfedstat.families.MAX_POISSON_MEAN`), categorical (multinomial, class 0 the reference), and Gaussian
   with dispersion ``sigma^2 = tr(M^-1 S) / d``, S the released mean of ``g_j g_j^T`` (the
   per-sample gradients ``(x_j^T theta - y_j) x_j`` at theta-hat, clipped to ``C_g``:
   ``oracle.score_outer``, sensitivity ``sqrt(2) C_g^2 / n_i``, share :data:`SCORE_SHARE` of
   ``mu^2``; ``C_g`` is the private 99% quantile of the gradient norms at theta-hat, found in
   the same search as ``C_x``). Under the model ``E[r^2 x x^T] = sigma^2 E[x x^T]``, so this is
   a moment estimate of sigma^2 (inferred; clipping at the 99% quantiles lowers it slightly).
   The Huber family is refused: its loss is not a likelihood, so there is no model to simulate
   from (use ``cov_type="sandwich"``). Data with an offset are refused too: the offsets are
   private per-row covariates of which nothing is released.

3. **Refits.** Every simulated data set (the public client sizes n_i) is fitted by the refit
   function the estimator hands over (:class:`Refits`; the bootstrap imports no estimator): a clone
   of the estimator with exactly the fit's public settings -- the fitted clipping bound(s) as fixed
   bounds (``clip = setup.clip``, and ``hessian_clip = setup.hessian_clip`` where the estimator
   clips Hessians), the estimation budget ``mu = setup.mu`` (so the simulated noise scales equal the
   real ones), ``scaling=None`` (the simulated covariates are already on the fitting scale),
   ``inference=None``, ``secure_mode=False`` (the simulated data are not private) and a
   ``random_state`` spawned from the session's ``inference_seed``. Refits that fail
   (:class:`~privfedstat.DivergenceError`, a singular system) are counted in the notes and left out.

**Privacy.** Only steps 1-2 touch client data, through the fit's Channel (ledger stages
``inference-clip-row``, ``inference-clip-gradient``, ``inference-moments``,
``inference-dispersion``); their budgets compose in squares to exactly ``mu`` per client.
Everything after is post-processing of released values and public settings.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._linalg import floor_eigenvalues
from ..data.federated import FederatedData
from ..exceptions import DivergenceError
from ..families import FAMILIES
from ..families.base import Family
from ..federation.protocol import Setup
from ..federation.queries import release_psd_mean, search_bounds
from ..federation.session import Session
from ..privacy.clipping import AutoClip
from .config import Inference

__all__ = ["Refits", "SimulationModel", "release_simulation_model", "run_bootstrap", "simulate_response"]

#: the private row-norm (and, Gaussian family, gradient-norm) searches: 99% quantile on a wide grid
ROW_SEARCH = AutoClip(quantile=0.99, lower=1e-3, upper=1e7, n_grid=128)
#: share of the bootstrap's mu^2 spent on the norm searches (inferred). The search leans its target
#: down by ``margin`` sd of the count noise: 3.7% of the rows for m = 10, N = 2000 and a bootstrap
#: mu of 0.5 (the default share of mu = 2), 0.4% for N = 20000
SEARCH_SHARE = 0.2
#: share of mu^2 spent on the score covariance that gives the Gaussian dispersion
SCORE_SHARE = 0.3
#: eigenvalue floor of the released moment matrices, in standard deviations of a released eigenvalue
FLOOR_NOISE_SDS = 2.0
#: and relative to the largest eigenvalue (keeps them invertible when nothing is noised)
RELATIVE_FLOOR = 1e-10
#: a note warns when the searches' lean lowers their target by more than this fraction of the rows
NOISY_SEARCH = 0.05
#: refit failures that are counted (and left out) rather than raised
REFIT_FAILURES = (DivergenceError, np.linalg.LinAlgError)
#: seconds before the progress bar appears (terminals only)
PROGRESS_DELAY_S = 2.0


@dataclass(frozen=True)
class Refits:
    """What the bootstrap needs from the estimator it resamples (built by the estimator, step 3 of the module).

    Attributes
    ----------
    fit : callable
        ``fit(data, seed) -> theta``: a fit of a :class:`~privfedstat.FederatedData` with the fit's
        public settings and noise seeded by ``seed`` (a ``SeedSequence``), returning the estimate
        flat on the fitting scale; it may raise any of :data:`REFIT_FAILURES`.
    method : str
        The estimator's name (for the note).
    intercept : int or None
        The intercept column the estimator's scaling declares (held at 1 in the simulated rows), or None.
    rows : ndarray of shape (d, d) or None, default None
        The public map ``x -> rows^T x`` of the clients' rows while the inference releases (FedIRLS's whitened
        basis, the ``design`` of :attr:`~privfedstat.federation.protocol.Run.basis`): the simulated rows are drawn on the fitting
        columns, the intercept held at 1 there, and mapped by it. None: no map.
    """

    fit: Callable[[FederatedData, np.random.SeedSequence], np.ndarray]
    method: str
    intercept: int | None
    rows: np.ndarray | None = None


@dataclass(frozen=True)
class SimulationModel:
    """The released model of the data that the bootstrap simulates from (fitting scale).

    Attributes
    ----------
    mean : ndarray of shape (d,)
        Mean of the simulated covariate rows (1 at a declared intercept).
    factor : ndarray of shape (d, d)
        ``x = mean + factor @ z`` with ``z ~ N(0, I_d)`` (zero row at a declared intercept).
    row_clip : float
        C_x, the bound the rows were clipped to before their moments were released.
    dispersion : float or None
        sigma^2 of the Gaussian family, else None.
    """

    mean: np.ndarray
    factor: np.ndarray
    row_clip: float
    dispersion: float | None

    def draw_design(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` simulated covariate rows, shape (n, d)."""
        z = rng.standard_normal((n, self.mean.size))
        return self.mean + z @ self.factor.T


def _released_moment(session: Session, verb: str, bound: float, mu: float, stage: str, **request) -> np.ndarray:
    """Size-weighted aggregate of the clients' released means of PSD per-sample terms, eigenvalues floored.

    ``verb`` (``"design_moments"`` or ``"score_outer"``): each client's mean of terms ``v v^T`` with
    ``||v|| <= bound`` (Frobenius norm ``<= bound^2``), released through
    :func:`~privfedstat.federation.queries.release_psd_mean` (sensitivity
    :func:`~privfedstat.privacy.calibration.hessian_sensitivity` of ``bound^2``), stage ``"inference-<stage>"``.
    """
    A, s = release_psd_mean(session, verb, bound * bound, mu, session.size_weights, f"inference-{stage}", **request)
    top = float(np.max(np.abs(np.linalg.eigvalsh(A))))
    return floor_eigenvalues(A, max(FLOOR_NOISE_SDS * s, RELATIVE_FLOOR * top))


def _gaussian_design(M: np.ndarray, intercept: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Mean and factor of the Gaussian with second moment M (positive definite), ``x_intercept = 1``."""
    d = M.shape[0]
    mean = np.zeros(d)
    cov = M.copy()
    if intercept is not None:
        j = intercept
        rest = np.flatnonzero(np.arange(d) != j)
        mjj = M[j, j]
        cross = M[rest, j]
        cov = np.zeros((d, d))
        cov[np.ix_(rest, rest)] = (M[np.ix_(rest, rest)] - np.outer(cross, cross) / mjj) / mjj
        mean[j] = 1.0
        mean[rest] = cross / mjj
    vals, vecs = np.linalg.eigh(cov)
    return mean, vecs * np.sqrt(np.maximum(vals, 0.0))


def release_simulation_model(session: Session, theta: np.ndarray, mu: float,
                             intercept: int | None, rows: np.ndarray | None = None) -> SimulationModel:
    """Release privately, with ``mu``-GDP per client in all, what the simulation needs (steps 1-2 of the module).

    Parameters
    ----------
    session : Session
        The fit's session (clients on the fitting scale, channel, sizes).
    theta : ndarray of shape (p,)
        The estimate theta-hat (fitting scale, oracle order); the Gaussian family's gradient
        norms and score covariance are taken there.
    mu : float
        GDP budget of all these releases together, per client (inf: nothing clipped or noised).
    intercept : int or None
        The declared intercept column (public), or None.
    rows : ndarray of shape (d, d) or None
        The public map ``x -> rows^T x`` the clients' rows are under (:class:`Refits`): the released second
        moment M of the mapped rows is taken back to the fitting columns (``rows^-T M rows^-1``), where the
        intercept is a column of ones, and the Gaussian found there is mapped forward. Without it, a mapped
        intercept would be simulated as a centred covariate: the linear predictor symmetric about 0 instead of
        about its mean, and data with the wrong information (measured in ``benchmarks/RESULTS.md``, "Bootstrap
        inference of a whitened fit").

    Returns
    -------
    SimulationModel
    """
    gaussian = session.clients.family.has_dispersion
    todo = ["row", "gradient"] if gaussian else ["row"]
    if math.isfinite(mu):
        bounds = search_bounds(session, todo, theta, ROW_SEARCH.quantile, ROW_SEARCH, mu * math.sqrt(SEARCH_SHARE),
                               stage="inference-clip")
    else:
        bounds = dict.fromkeys(todo, math.inf)
    mu_moments = mu * math.sqrt(1.0 - SEARCH_SHARE - (SCORE_SHARE if gaussian else 0.0))
    M = _released_moment(session, "design_moments", bounds["row"], mu_moments, "moments", row_clip=bounds["row"])
    dispersion = None
    if gaussian:
        S = _released_moment(session, "score_outer", bounds["gradient"], mu * math.sqrt(SCORE_SHARE), "dispersion",
                             theta=theta, clip=bounds["gradient"])
        dispersion = float(np.trace(np.linalg.solve(M, S))) / M.shape[0]
    if rows is None:
        mean, factor = _gaussian_design(M, intercept)
    else:
        back = np.linalg.inv(rows)
        mean, factor = _gaussian_design(back.T @ M @ back, intercept)
        mean, factor = rows.T @ mean, rows.T @ factor
    return SimulationModel(mean, factor, bounds["row"], dispersion)


def simulate_response(family: Family, theta: np.ndarray, X: np.ndarray, dispersion: float | None,
                      rng: np.random.Generator) -> np.ndarray:
    """Responses drawn from ``family`` at ``theta`` (flat, oracle order) for the rows ``X`` (n, d).

    The family's :meth:`~privfedstat.families.Family.simulate` (logistic: Bernoulli; Poisson: Poisson
    with means capped at :data:`privfedstat.families.MAX_POISSON_MEAN`; Gaussian: normal with
    variance ``dispersion``; multinomial: categorical over classes 0..K-1).
    """
    Z = X @ np.asarray(theta, dtype=np.float64).reshape(X.shape[1], family.n_outputs)
    return family.simulate(Z if family.response_levels else Z[:, 0], rng,
                           scale=None if dispersion is None else math.sqrt(dispersion))


def _check_supported(session: Session) -> None:
    family = session.clients.family
    if not family.likelihood:
        raise ValueError(
            f"inference='bootstrap' simulates data from the fitted model, and the {family.name} family is not a "
            f"likelihood (no model to simulate from); use Inference(cov_type='sandwich'). Bootstrap families: "
            f"{', '.join(n for n, c in FAMILIES.items() if c.likelihood)}."
        )
    if session.clients.has_offset:
        raise ValueError(
            "inference='bootstrap' cannot simulate data with an offset (the offsets are private per-row covariates "
            "and nothing about their distribution is released); use Inference(cov_type='model') or 'sandwich'."
        )


def run_bootstrap(session: Session, setup: Setup, theta: np.ndarray, config: Inference, mu: float,
                  refits: Refits) -> tuple[np.ndarray, list[str]]:
    """Parametric bootstrap of a private fit: ``config.n_boot`` refits on data simulated from it.

    Called by the inference stage (:func:`~privfedstat.inference.core.infer`) after the protocol
    ran; see the module docstring for the releases, the simulation and the refits. In a terminal a
    progress bar appears when the refits take longer than :data:`PROGRESS_DELAY_S` seconds.

    Parameters
    ----------
    session : Session
        The fit's session after the protocol: clients (fitting scale), channel, sizes, and
        ``inference_seed``, the randomness of the simulated data and of the refits' noise (one
        child per refit).
    setup : Setup
        The protocol's clipping bounds and estimation ``mu`` (the refits' settings, for the note).
    theta : ndarray of shape (p,)
        theta-hat on the fitting scale, flat in oracle order (``Theta.ravel()`` for multinomial).
    config : Inference
        ``n_boot`` simulated fits.
    mu : float
        GDP budget per client of the bootstrap's releases, all together (inf with a non-private fit).
    refits : Refits
        The estimator's refit function, name and declared intercept.

    Returns
    -------
    draws : ndarray of shape (n_ok, p)
        The refits' estimates on the fitting scale, flat in oracle order (``n_ok <= n_boot``:
        failed refits are left out).
    notes : list of str
        What was simulated and spent, and any failures.

    Raises
    ------
    ValueError
        For the Huber family, data with an offset, or when every refit failed.
    """
    from tqdm.auto import tqdm

    _check_supported(session)
    theta = np.asarray(theta, dtype=np.float64)
    family = session.clients.family
    intercept = refits.intercept
    model = release_simulation_model(session, theta, mu, intercept, refits.rows)
    offsets = np.concatenate([[0], np.cumsum(session.sizes)])
    n_total = int(offsets[-1])
    draws, failures = [], {}
    children = session.inference_seed.spawn(config.n_boot)
    for child in tqdm(children, desc="bootstrap", unit="fit", disable=None, delay=PROGRESS_DELAY_S):
        data_seed, fit_seed = child.spawn(2)
        rng = np.random.default_rng(data_seed)
        X = model.draw_design(n_total, rng)
        y = simulate_response(family, theta, X, model.dispersion, rng)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                draw = refits.fit(FederatedData(X, y, offsets), fit_seed)
        except REFIT_FAILURES as exc:
            failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
            continue
        draws.append(draw)
    n_failed = sum(failures.values())
    if not draws:
        raise ValueError(
            f"all {config.n_boot} bootstrap refits failed ({failures}); the fit's settings do not converge on data "
            "like these. Use Inference(cov_type='model') or 'sandwich', or a larger mu."
        )
    notes = [_describe(refits, setup, model, mu, config.n_boot)]
    lowered = _search_lean(session, mu)
    if lowered > NOISY_SEARCH:
        notes.append(f"The private row-norm search is noisy at this budget: its count noise lowered the targeted quantile "
                     f"by {lowered:.0%} of the rows, so the simulated covariates may be shrunk; give the inference a "
                     "larger budget share (Inference(budget=...)) or use cov_type='model'.")
    if intercept is None:
        notes.append("No intercept column is declared: every covariate was simulated as a zero-mean Gaussian; if X has "
                     "a column of ones, declare it with scaling=PrivateStandardize(columns=(), intercept=0) (no cost).")
    if n_failed:
        kinds = ", ".join(f"{k} {v}" for k, v in failures.items())
        notes.append(f"{n_failed} of {config.n_boot} bootstrap refits failed ({kinds}) and are left out; the intervals "
                     "may understate the uncertainty.")
    return np.asarray(draws), notes


def _search_lean(session: Session, mu: float) -> float:
    """Fraction of the N rows by which the norm searches' downward lean lowers their target (public)."""
    if math.isinf(mu):
        return 0.0
    n_searches = 2 if session.clients.family.has_dispersion else 1
    mu_query = mu * math.sqrt(SEARCH_SHARE / (n_searches * ROW_SEARCH.n_queries))
    return ROW_SEARCH.margin * math.sqrt(session.clients.n_clients) / mu_query / float(np.sum(session.sizes))


def _describe(refits: Refits, setup: Setup, model: SimulationModel, mu: float, n_boot: int) -> str:
    """The note saying what the bootstrap simulated and spent."""
    bounds = f"B = {setup.clip:.4g}" + ("" if math.isnan(setup.hessian_clip) else f", C_H = {setup.hessian_clip:.4g}")
    design = ("intercept held at 1, other covariates Gaussian" if refits.intercept is not None
              else "zero-mean Gaussian covariates")
    extra = "" if model.dispersion is None else f", dispersion {model.dispersion:.4g}"
    return (f"Parametric bootstrap: {n_boot} {refits.method} refits ({bounds}, mu = {setup.mu:.4g}) on data simulated "
            f"from the fit ({design} from released second moments of rows clipped to C_x = {model.row_clip:.4g}"
            f"{extra}); its releases spent mu = {mu:.4g} per client.")
