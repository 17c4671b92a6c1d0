"""Federated data containers and offline data loaders."""

from .federated import FederatedData
from .femnist import FEMNIST_CLASSES, WriterData, femnist_standin, load_femnist
from .loaders import load_cifar10, load_digits, load_mnist, load_randhie, read_idx

__all__ = ["FederatedData", "load_cifar10", "load_digits", "load_mnist", "load_randhie", "read_idx",
           "WriterData", "load_femnist", "femnist_standin", "FEMNIST_CLASSES"]
