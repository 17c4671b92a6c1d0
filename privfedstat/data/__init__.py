"""Federated data containers."""

from .federated import FederatedData

__all__ = ["FederatedData"]
