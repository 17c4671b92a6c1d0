"""The one registry of estimators: every per-method fact the rest of the package needs.

``glm(method=...)``, the contract test suite, the sensitivity fuzzer, the privacy audit, the
simulations (:func:`~privfedstat.simulations.make_estimator`, the coverage and real-data studies),
the theory comparison (:func:`~privfedstat.simulations.compare_to_theory`), the MSE predictor
(:func:`~privfedstat.planning.prediction.predict_mse`) and the command line (``privfedstat methods``) all read
this table; a new estimator joins them by being registered here (:func:`register`), not by adding
a name switch elsewhere. A method is found by its key (``"fedsgd"``) or its display name
(``"FedSGD"``), case-insensitively (:func:`get_method`), or from an estimator (:func:`method_of`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..fitting.base import FederatedEstimator
from ..theory._method_moments import fedavg_moments, fedhybrid_moments, fednewton_moments, fedsgd_moments
from ..theory.bounds import fedavg_bound, fedhybrid_bound, fedsgd_bound
from ..theory.newton import fednewton_bound

__all__ = ["MethodSpec", "TheoryBound", "register", "unregister", "get_method", "method_of", "methods", "REGISTRY"]


@dataclass(frozen=True)
class TheoryBound:
    """A method's upper bound on the MSE in the core paper, evaluated at an estimator's settings.

    Attributes
    ----------
    name : str
        The theorem and form, for tables and legends (e.g. ``"Thm 3.2 eq. (2), K explicit"``).
    function : callable
        The bound in :mod:`privfedstat.theory` (e.g. :func:`~privfedstat.theory.fedsgd_bound`).
    params : tuple of str
        Estimator parameters passed to ``function`` under the same name (e.g. ``("n_iter",)``).
    options : mapping
        Fixed keyword arguments of ``function`` (e.g. ``{"form": "optimal"}``).
    """

    name: str
    function: Callable[..., float]
    params: tuple[str, ...] = ()
    options: Mapping[str, object] = field(default_factory=dict)

    def __call__(self, params: Mapping[str, object], **constants) -> float:
        """The bound at the estimator parameters ``params`` and the problem ``constants``.

        ``constants`` (mu, d, n_samples, n_clients, trace_sigma, tau1, tau2, C, C_B) that
        ``function`` does not take are left out (FedAvg's bounds have no tau2).
        """
        accepted = inspect.signature(self.function).parameters
        return float(self.function(**self.options, **{k: params[k] for k in self.params},
                                   **{k: v for k, v in constants.items() if k in accepted}))


@dataclass(frozen=True)
class MethodSpec:
    """One registered estimator.

    Attributes
    ----------
    name : str
        Lower-case key (``glm(method=name)``).
    cls : type
        The estimator class.
    private : bool
        Whether the estimator can give a finite-mu guarantee (False for the non-private baselines,
        which then refuse a finite ``mu``).
    description : str
        One line for listings and error messages.
    test_params : dict
        Small, fast settings used by the contract suite, the fuzzer and the audit (never the
        defaults users get).
    display : str
        The paper's name, used in result tables (``"FedSGD"``); default: the class's ``method``.
    paper_params : callable or None
        ``paper_params(K) -> dict``: the settings of the core paper's simulations (Section 4.1)
        for an iteration budget K (None: the paper's own), used by
        :func:`~privfedstat.simulations.make_estimator` and the real-data study; None: the method
        is not part of those studies.
    auto_counts : mapping of str to int
        Iteration counts whose ``"auto"`` value the estimator resolves, at finite mu, to the given
        number (with mu = inf ``"auto"`` runs until convergence); read by the MSE predictor.
    bound : TheoryBound or None
        The matching upper bound of the core paper (:func:`~privfedstat.simulations.compare_to_theory`).
    predictor : callable or None
        ``predictor(setup) -> (moments, diagnostics, caveats)``: the linearised recursion of the
        algorithm that :func:`~privfedstat.planning.prediction.predict_mse` sums (see
        :mod:`privfedstat.theory._method_moments`); None: no MSE prediction.
    per_client : bool
        Whether the fit holds one model per client, so that ``predict(X, client)`` needs the client.
    """

    name: str
    cls: type
    private: bool
    description: str
    test_params: dict = field(default_factory=dict)
    display: str = ""
    paper_params: Callable[[int | None], dict] | None = None
    auto_counts: Mapping[str, int] = field(default_factory=dict)
    bound: TheoryBound | None = None
    predictor: Callable | None = None
    per_client: bool = False

    def __post_init__(self) -> None:
        if not self.display:
            object.__setattr__(self, "display", getattr(self.cls, "method", "") or self.name)
        object.__setattr__(self, "auto_counts", MappingProxyType(dict(self.auto_counts)))

    def fixed_clip_params(self, bound: float = 1.0) -> dict:
        """Parameters that fix every clipping bound of the estimator (with ``test_params``) at ``bound``.

        ``clip`` bounds per-sample gradient norms (B); an estimator that also clips another
        per-sample quantity (listed in its ``_norms``, e.g. ``"hessian"``) takes ``<quantity>_clip``.
        """
        norms = self.cls(**self.test_params)._norms
        return {"clip" if norm == "gradient" else f"{norm}_clip": bound for norm in norms}


REGISTRY: dict[str, MethodSpec] = {}


def _names(spec: MethodSpec) -> set[str]:
    return {spec.name, spec.display.lower()}


def register(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the registry (keys and display names are unique, case-insensitively)."""
    if spec.name != spec.name.lower():
        raise ValueError(f"method keys are lower-case, got {spec.name!r}.")
    if not (isinstance(spec.cls, type) and issubclass(spec.cls, FederatedEstimator)):
        raise TypeError(f"{spec.cls!r} is not a FederatedEstimator class.")
    for other in REGISTRY.values():
        if _names(spec) & _names(other):
            raise ValueError(f"method {spec.name!r} ({spec.display}) clashes with the registered "
                             f"{other.name!r} ({other.display}).")
    REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> MethodSpec:
    """Remove the method called ``name`` (key or display name) from the registry and return its spec."""
    return REGISTRY.pop(get_method(name).name)


def _valid() -> str:
    return ", ".join(f"{s.name!r} ({s.display})" for s in REGISTRY.values())


def get_method(name: str) -> MethodSpec:
    """The registered estimator called ``name``: its key or display name, case-insensitive.

    Unknown names raise a ValueError listing the valid ones.
    """
    key = str(name).lower()
    for spec in REGISTRY.values():
        if key in _names(spec):
            return spec
    raise ValueError(f"unknown method {name!r}; choose one of {_valid()}.")


def method_of(estimator) -> MethodSpec:
    """The registered method of ``estimator`` (an instance or class): its own class's, else its nearest registered base's."""
    cls = estimator if isinstance(estimator, type) else type(estimator)
    by_class = {spec.cls: spec for spec in REGISTRY.values()}
    for base in cls.__mro__:
        if base in by_class:
            return by_class[base]
    raise TypeError(f"{estimator!r} is not an estimator of a registered method ({_valid()}).")


def methods(*, private: bool | None = None) -> list[MethodSpec]:
    """Registered estimators in registration order (only private or non-private ones if asked)."""
    return [s for s in REGISTRY.values() if private is None or s.private == private]


def _fedsgd_paper(K: int | None) -> dict:
    return {"n_iter": 50 if K is None else K}


def _fedhybrid_paper(K: int | None) -> dict:
    if K is None:
        return {"n_local_steps": 30, "n_server_iter": 20}
    k1 = max(1, min(K - 1, round(0.6 * K)))  # the 30/20 split of K = 50: both stages use K gradient evaluations
    return {"n_local_steps": k1, "n_server_iter": K - k1}


def _fedavg_paper(K: int | None) -> dict:
    return {"n_rounds": 2, "n_local_steps": 50 if K is None else K}


def _fednewton_paper(K: int | None) -> dict:
    return {"n_rounds": 1, "n_local_steps": 50 if K is None else K}


def _register_builtin() -> None:
    from .baselines import LocalFit, PooledMLE
    from .dpfedavg import DPFedAvg
    from .fedavg import PAPER_N_ROUNDS, FedAvg
    from .fedhybrid import PAPER_N_SERVER_ITER, FedHybrid
    from .fedirls import FedIRLS
    from .fednewton import FedNewton
    from .fednmap import FedCanon, FedNMap, ZhangComposite
    from .fednormec import ClippedFedAvg, FedAlphaNormEC
    from .fedsgd import PAPER_N_ITER, FedSGD
    from .hifedprox import HiFedProx
    from .scaffold import Scaffold

    for spec in (
        MethodSpec("fedsgd", FedSGD, True, "DP-FedSGD (Algorithm 1): server gradient descent on noisy client gradients",
                   {"n_iter": 5}, paper_params=_fedsgd_paper, auto_counts={"n_iter": PAPER_N_ITER},
                   bound=TheoryBound("Thm 3.2 eq. (2), K explicit", fedsgd_bound, ("n_iter",), {"form": "optimal"}),
                   predictor=fedsgd_moments),
        MethodSpec("fedhybrid", FedHybrid, True, "DP-FedHybrid (Algorithm 2): local noisy steps, then FedSGD",
                   {"n_local_steps": 3, "n_server_iter": 3}, paper_params=_fedhybrid_paper,
                   auto_counts={"n_server_iter": PAPER_N_SERVER_ITER},
                   bound=TheoryBound("Thm 3.5, K2 explicit", fedhybrid_bound, ("n_server_iter",), {"form": "theorem"}),
                   predictor=fedhybrid_moments),
        MethodSpec("fedavg", FedAvg, True, "DP-FedAvg (Algorithm 3): local noisy descent, averaged",
                   {"n_local_steps": 3, "n_rounds": 2}, paper_params=_fedavg_paper,
                   auto_counts={"n_rounds": PAPER_N_ROUNDS},
                   bound=TheoryBound("Thm 3.3/3.7", fedavg_bound, ("n_local_steps", "n_rounds")),
                   predictor=fedavg_moments),
        MethodSpec("fednewton", FedNewton, True, "DP-FedNewton (Algorithm 4): local fit, one private Newton correction",
                   {"n_local_steps": 3}, paper_params=_fednewton_paper,
                   bound=TheoryBound("Thm 3.9 eq. (6)", fednewton_bound, options={"form": "eq6"}),
                   predictor=fednewton_moments),
        MethodSpec("fedirls", FedIRLS, True, "DP-FedIRLS: private Newton on server-aggregated noisy gradients and Hessians",
                   {"n_rounds": 2}),
        MethodSpec("scaffold", Scaffold, True, "DP-SCAFFOLD: local noisy steps with control variates",
                   {"n_rounds": 2, "n_local_steps": 2}),
        MethodSpec("dpfedavg", DPFedAvg, True, "DP-FedAvg, client-level (McMahan et al. 2018): clipped model updates, "
                   "Poisson participation, amplified PLD accounting", {"n_rounds": 3, "n_local_steps": 2}),
        MethodSpec("fednormec", FedAlphaNormEC, True, "Fed-alpha-NormEC (Shulgin et al. 2025): smoothed normalisation with "
                   "error compensation, client-level, Poisson participation, amplified PLD accounting", {"n_rounds": 3}),
        MethodSpec("clippedfedavg", ClippedFedAvg, True, "DP-FedAvg with clipped pseudo-gradients, Fed-alpha-NormEC's "
                   "comparator (App. A.1), client-level", {"n_rounds": 3}),
        MethodSpec("fednmap", FedNMap, True, "FedNMap (Huang, Pu & Johansson): normal-map local steps with corrections; "
                   "private federated lasso / elastic net", {"n_rounds": 3, "n_local_steps": 2, "alpha": 0.01}),
        MethodSpec("zhang", ZhangComposite, True, "Zhang et al. (2024a): local proximal steps with corrections, FedNMap's "
                   "baseline (reconstructed)", {"n_rounds": 3, "n_local_steps": 2, "alpha": 0.01}),
        MethodSpec("fedcanon", FedCanon, True, "FedCanon (Zhou et al. 2025, reconstructed): SCAFFOLD with a server "
                   "proximal step, FedNMap's baseline", {"n_rounds": 2, "n_local_steps": 2, "alpha": 0.01}),
        MethodSpec("hifedprox", HiFedProx, True, "HiFedProx (Kabgani & Ahookhosh): power-p proximal local objectives "
                   "with Armijo minibatch steps; client-level DP as DP-FedAvg", {"n_rounds": 3, "n_local_steps": 2,
                                                                                  "batch_size": 16}),
        MethodSpec("pooled", PooledMLE, False, "NP-Pooled: MLE on the pooled raw data (not private)"),
        MethodSpec("localfit", LocalFit, False, "NP-LocalFit: one MLE per client (not private)", per_client=True),
    ):
        register(spec)


_register_builtin()
