"""The one registry of estimators: a name -> the class, whether it is private, and what it is.

``glm(method=...)``, the contract test suite, the sensitivity fuzzer and the privacy audit all read
this table; a new estimator joins them by being registered here (:func:`register`), not by copying
tests or adding a name switch elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import FederatedEstimator

__all__ = ["MethodSpec", "register", "get_method", "methods", "REGISTRY"]


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
    """

    name: str
    cls: type
    private: bool
    description: str
    test_params: dict = field(default_factory=dict)

    def fixed_clip_params(self, bound: float = 1.0) -> dict:
        """Parameters that fix every clipping bound of the estimator (with ``test_params``) at ``bound``.

        ``clip`` bounds per-sample gradient norms (B); an estimator that also clips another
        per-sample quantity (listed in its ``_norms``, e.g. ``"hessian"``) takes ``<quantity>_clip``.
        """
        norms = self.cls(**self.test_params)._norms
        return {"clip" if norm == "gradient" else f"{norm}_clip": bound for norm in norms}


REGISTRY: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add ``spec`` to the registry (names are unique)."""
    if spec.name in REGISTRY:
        raise ValueError(f"method {spec.name!r} is already registered.")
    if not issubclass(spec.cls, FederatedEstimator):
        raise TypeError(f"{spec.cls.__name__} is not a FederatedEstimator.")
    REGISTRY[spec.name] = spec
    return spec


def get_method(name: str) -> MethodSpec:
    """The registered estimator called ``name`` (case-insensitive); unknown names list the valid ones."""
    key = str(name).lower()
    if key not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose one of {list(REGISTRY)}.")
    return REGISTRY[key]


def methods(*, private: bool | None = None) -> list[MethodSpec]:
    """Registered estimators in registration order (only private or non-private ones if asked)."""
    return [s for s in REGISTRY.values() if private is None or s.private == private]


def _register_builtin() -> None:
    from .baselines import LocalFit, PooledMLE
    from .fedavg import FedAvg
    from .fedhybrid import FedHybrid
    from .fedirls import FedIRLS
    from .fednewton import FedNewton
    from .fedsgd import FedSGD
    from .scaffold import Scaffold

    for spec in (
        MethodSpec("fedsgd", FedSGD, True, "DP-FedSGD (Algorithm 1): server gradient descent on noisy client gradients",
                   {"n_iter": 5}),
        MethodSpec("fedhybrid", FedHybrid, True, "DP-FedHybrid (Algorithm 2): local noisy steps, then FedSGD",
                   {"n_local_steps": 3, "n_server_iter": 3}),
        MethodSpec("fedavg", FedAvg, True, "DP-FedAvg (Algorithm 3): local noisy descent, averaged",
                   {"n_local_steps": 3, "n_rounds": 2}),
        MethodSpec("fednewton", FedNewton, True, "DP-FedNewton (Algorithm 4): local fit, one private Newton correction",
                   {"n_local_steps": 3}),
        MethodSpec("fedirls", FedIRLS, True, "DP-FedIRLS: private Newton on server-aggregated noisy gradients and Hessians",
                   {"n_rounds": 2}),
        MethodSpec("scaffold", Scaffold, True, "DP-SCAFFOLD: local noisy steps with control variates",
                   {"n_rounds": 2, "n_local_steps": 2}),
        MethodSpec("pooled", PooledMLE, False, "NP-Pooled: MLE on the pooled raw data (not private)"),
        MethodSpec("localfit", LocalFit, False, "NP-LocalFit: one MLE per client (not private)"),
    ):
        register(spec)


_register_builtin()
