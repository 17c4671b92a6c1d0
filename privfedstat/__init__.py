"""privfedstat: differentially private federated M-estimation with exact mu-GDP accounting.

Estimators :class:`FedSGD`, :class:`FedHybrid`, :class:`FedAvg` and :class:`FedNewton` implement
Algorithms 1-4 of Peng & Paul ("Statistical limits and efficient algorithms for differentially
private federated learning"); :class:`FederatedData` holds the clients' data; the privacy math and
the ledger live in :mod:`privfedstat.privacy`.
"""

from .data import FederatedData
from .estimators import ClippedFedAvg, DPFedAvg, FedAlphaNormEC, FedAvg, FedCanon, FederatedEstimator, FedHybrid, FedIRLS, FedNewton, FedNMap, FedSGD, HiFedProx, LocalFit, PooledMLE, Scaffold, ZhangComposite, clone
from .exceptions import (BudgetExceededError, ClientFailureError, ClippingBiasWarning, ConvergenceWarning, DivergenceError, IllConditionedWarning, NotFittedError,
                         NoInterceptWarning, PrivacyLeakWarning, PrivacyNoiseWarning, SingleClientWarning)
from .families import get_family
from .formula import glm
from .inference import Inference, InferenceResult, NoInferenceError, WaldTestResult
from .estimators.scaling import FeatureBounds, PrivateStandardize
from .privacy import AutoClip, PrivacyBudget, PrivacyLedger
from . import simulations, theory

__version__ = "0.1.0"

__all__ = ["DPFedAvg", "HiFedProx", "FedAlphaNormEC", "ClippedFedAvg", "FedNMap", "ZhangComposite", "FedCanon", "ClientFailureError", 
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
    "IllConditionedWarning",
    "ClippingBiasWarning",
    "SingleClientWarning",
    "NoInterceptWarning",
    "DivergenceError",
    "NotFittedError",
]
