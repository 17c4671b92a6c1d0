"""Private federated estimators (one file per algorithm)."""

from .base import FederatedEstimator, clone
from .fedavg import FedAvg
from .fedhybrid import FedHybrid
from .fednewton import FedNewton
from .fedsgd import FedSGD

__all__ = ["FederatedEstimator", "FedSGD", "FedHybrid", "FedAvg", "FedNewton", "clone"]
