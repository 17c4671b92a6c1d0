"""privfedstat: differentially private federated M-estimation with exact mu-GDP accounting.

This module is the public API (``__all__``): the names a user imports from ``privfedstat``,
re-exported from the subpackages that own them. :class:`FederatedData` holds the clients' data;
the estimators run federated protocols on it: :class:`FedSGD`, :class:`FedHybrid`, :class:`FedAvg`
and :class:`FedNewton` are Algorithms 1-4 of Peng & Paul ("Statistical limits and efficient
algorithms for differentially private federated learning"), next to :class:`FedIRLS`,
:class:`Scaffold`, the composite methods (:class:`FedNMap`, :class:`ZhangComposite`,
:class:`FedCanon`), the client-level methods (:class:`DPFedAvg`, :class:`FedAlphaNormEC`,
:class:`ClippedFedAvg`, :class:`HiFedProx`) and the non-private baselines (:class:`PooledMLE`,
:class:`LocalFit`); :func:`glm` fits one from a formula, and :func:`plan_study` predicts, before any
data are touched, the standard errors and power such a fit will have. The privacy math, the ledger and the
budget live in :mod:`privfedstat.privacy`. The layers and the data flow are described in
``docs/architecture.md``, the privacy model in ``docs/privacy.md``.
"""

import importlib
from typing import TYPE_CHECKING

from ._version import __version__ as __version__  # the one definition (also read by the build)
from .algorithms import (
    ClippedFedAvg,
    DPFedAvg,
    FedAlphaNormEC,
    FedAvg,
    FedCanon,
    FedHybrid,
    FedIRLS,
    FedNewton,
    FedNMap,
    FedSGD,
    HiFedProx,
    LocalFit,
    PooledMLE,
    Scaffold,
    ZhangComposite,
)
from .data import FederatedData
from .exceptions import (
    BudgetExceededError,
    ClientFailureError,
    ClippingBiasWarning,
    ConvergenceWarning,
    DivergenceError,
    IllConditionedWarning,
    NoInterceptWarning,
    OverdispersionWarning,
    PrivacyLeakWarning,
    PrivacyNoiseWarning,
    SingleClientWarning,
    UnsupportedModelError,
)
from .families import get_family
from .fitting import FeatureBounds, FederatedEstimator, PrivateStandardize, clone
from .formula import glm
from .inference import Inference, InferenceResult, NoInferenceError, WaldTestResult
from .privacy import AutoClip, PrivacyBudget, PrivacyLedger

if TYPE_CHECKING:  # the names of _LAZY below, for type checkers and editors
    from . import simulations, theory
    from .exceptions import NotFittedError
    from .planning import StudyPlan, plan_study, predict_mse

__all__ = [
    "DPFedAvg",
    "HiFedProx",
    "FedAlphaNormEC",
    "ClippedFedAvg",
    "FedNMap",
    "ZhangComposite",
    "FedCanon",
    "ClientFailureError",
    "theory",
    "simulations",
    "FederatedData",
    "FedSGD",
    "FedHybrid",
    "FedAvg",
    "FedNewton",
    "FedIRLS",
    "Scaffold",
    "PooledMLE",
    "LocalFit",
    "FederatedEstimator",
    "clone",
    "predict_mse",
    "plan_study",
    "StudyPlan",
    "get_family",
    "glm",
    "Inference",
    "InferenceResult",
    "WaldTestResult",
    "NoInferenceError",
    "FeatureBounds",
    "PrivateStandardize",
    "AutoClip",
    "PrivacyLedger",
    "PrivacyBudget",
    "BudgetExceededError",
    "PrivacyLeakWarning",
    "ConvergenceWarning",
    "PrivacyNoiseWarning",
    "UnsupportedModelError",
    "IllConditionedWarning",
    "ClippingBiasWarning",
    "OverdispersionWarning",
    "SingleClientWarning",
    "NoInterceptWarning",
    "DivergenceError",
    "NotFittedError",
]


#: the names loaded on first access (PEP 562), with the module that owns them (None: the subpackage itself); they
#: import scipy.stats, pandas or scikit-learn, which ``import privfedstat`` does not need
_LAZY = {"simulations": None, "theory": None, "plan_study": "planning", "StudyPlan": "planning",
         "predict_mse": "planning", "NotFittedError": "exceptions"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_LAZY[name] or name}")
    value = globals()[name] = module if _LAZY[name] is None else getattr(module, name)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
