"""Federated estimators (one file per algorithm) and the non-private baselines."""

from .base import FederatedEstimator, clone
from .baselines import LocalFit, PooledMLE
from .dpfedavg import DPFedAvg
from .fedavg import FedAvg
from .fedhybrid import FedHybrid
from .fedirls import FedIRLS
from .fednewton import FedNewton
from .fednmap import FedCanon, FedNMap, ZhangComposite
from .fednormec import ClippedFedAvg, FedAlphaNormEC
from .fedsgd import FedSGD
from .hifedprox import HiFedProx
from .power import StudyPlan, plan_study
from .prediction import predict_mse
from .registry import REGISTRY, MethodSpec, get_method, methods, register
from .scaffold import Scaffold

__all__ = [
    "FederatedEstimator", "FedSGD", "FedHybrid", "FedAvg", "FedNewton", "FedIRLS", "Scaffold", "DPFedAvg", "HiFedProx",
    "FedAlphaNormEC", "ClippedFedAvg", "FedNMap", "ZhangComposite", "FedCanon", "PooledMLE", "LocalFit", "clone", "REGISTRY",
    "MethodSpec", "get_method", "methods", "register", "predict_mse", "plan_study", "StudyPlan",
]
