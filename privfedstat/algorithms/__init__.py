"""The federated algorithms (one module per method; a package where a method has a policy of its own), the
non-private baselines and the registry that turns a method's name into its class."""

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
from .registry import REGISTRY, MethodSpec, get_method, methods, register
from .scaffold import Scaffold

__all__ = [
    "FedSGD", "FedHybrid", "FedAvg", "FedNewton", "FedIRLS", "Scaffold", "DPFedAvg", "HiFedProx", "FedAlphaNormEC",
    "ClippedFedAvg", "FedNMap", "ZhangComposite", "FedCanon", "PooledMLE", "LocalFit", "REGISTRY", "MethodSpec",
    "get_method", "methods", "register",
]
