"""The network estimators, listed once: name, class and small settings for the contract suite.

The counterpart of :mod:`privfedstat.algorithms.registry` for :mod:`privfedstat.deep` (kept apart so
that the GLM registry never imports torch). ``tests/deep/test_network_contract.py`` walks
:func:`network_methods`: a network estimator joins that suite by being listed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .estimators import DeepDPFedAvg, DeepFedAvg, DeepFedHybrid, DeepFedSGD
from .fednmap import DeepFedCanon, DeepFedNMap, DeepZhang
from .hifedprox import DeepHiFedProx
from .newton import DeepFedNewton
from .normec import DeepClippedFedAvg, DeepFedAlphaNormEC

__all__ = ["NETWORK_REGISTRY", "NetworkSpec", "network_methods"]


@dataclass(frozen=True)
class NetworkSpec:
    """One network estimator.

    Attributes
    ----------
    name : str
        The class name in lower case (``"deepfedavg"``), as a Flower job names it.
    cls : type
        The estimator class (its ``model`` is given separately).
    test_params : dict
        Few rounds and steps, a step size and clipping bound that suit a classifier of a few dozen
        parameters on a few dozen rows (the contract suite's), never the defaults users get.
    """

    name: str
    cls: type
    test_params: dict = field(default_factory=dict)


NETWORK_REGISTRY: dict[str, NetworkSpec] = {spec.name: spec for spec in (
    NetworkSpec("deepfedavg", DeepFedAvg, {"n_rounds": 2, "n_local_steps": 2, "step_size": 0.3, "clip": 0.5}),
    NetworkSpec("deepfedsgd", DeepFedSGD, {"n_iter": 3, "step_size": 0.3, "clip": 0.5}),
    NetworkSpec("deepfedhybrid", DeepFedHybrid, {"n_local_steps": 2, "n_server_iter": 2, "step_size": 0.3,
                                                 "clip": 0.5}),
    NetworkSpec("deepdpfedavg", DeepDPFedAvg, {"n_rounds": 2, "n_local_steps": 2, "step_size": 0.3,
                                               "update_clip": 0.5}),
    NetworkSpec("deepfednewton", DeepFedNewton, {"n_cycles": 1, "n_rounds": 2, "n_local_steps": 2, "step_size": 0.3,
                                                 "clip": 0.5}),
    NetworkSpec("deepfedalphanormec", DeepFedAlphaNormEC, {"n_rounds": 3, "step_size": 0.3}),
    NetworkSpec("deepclippedfedavg", DeepClippedFedAvg, {"n_rounds": 3, "step_size": 0.3}),
    NetworkSpec("deephifedprox", DeepHiFedProx, {"n_rounds": 2, "n_local_steps": 2, "batch_size": 8,
                                                 "update_clip": 0.5}),
    NetworkSpec("deepfednmap", DeepFedNMap, {"n_rounds": 2, "n_local_steps": 2, "step_size": 0.3, "alpha": 0.01,
                                             "clip": 0.5}),
    NetworkSpec("deepzhang", DeepZhang, {"n_rounds": 2, "n_local_steps": 2, "step_size": 0.3, "alpha": 0.01,
                                         "clip": 0.5}),
    NetworkSpec("deepfedcanon", DeepFedCanon, {"n_rounds": 2, "n_local_steps": 2, "step_size": 0.3, "alpha": 0.01,
                                               "clip": 0.5}),
)}


def network_methods() -> list[NetworkSpec]:
    """The network estimators in listing order."""
    return list(NETWORK_REGISTRY.values())
