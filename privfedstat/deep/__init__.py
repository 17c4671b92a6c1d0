"""Networks on the same seam: torch clients answering the verbs, per-sample clipping, deep estimators.

Needs the ``deep`` extra (``pip install "privfedstat[deep]"``: torch). Importing :mod:`privfedstat`
never imports torch; importing this package without it raises an ImportError saying what to install.

:func:`per_sample_clipped_mean` is the clients' statistic (mean of per-sample gradients clipped to
B: by book-keeping for Linear, convolution, normalisation and Embedding layers,
:mod:`privfedstat.deep.ghost`; from ``torch.func`` for the rest); :class:`TorchClients` answers
the verbs the network estimators send, with :class:`TensorFederatedData` as the clients' data; :class:`DeepFedAvg`,
:class:`DeepFedSGD`, :class:`DeepFedHybrid` and :class:`DeepDPFedAvg` run the server loops of the
GLM estimators on them; :class:`DeepFedNewton` is FedNewton-NN / FedNewton-Iter (Algorithm 5);
:class:`DeepFedAlphaNormEC` and :class:`DeepClippedFedAvg` are Fed-alpha-NormEC and its comparator;
:class:`DeepHiFedProx` is HiFedProx (power-p proximal local steps with Armijo backtracking);
:class:`DeepFedNMap`, :class:`DeepZhang` and :class:`DeepFedCanon` are FedNMap and its composite baselines
(l1 / elastic-net regularised networks; :mod:`privfedstat.deep.mobilenet` has MobileNetV3-Small).
:mod:`privfedstat.deep.registry` lists the network estimators for the contract suite.
:func:`load_femnist` and :func:`femnist_standin` give FEMNIST's writers as clients (:class:`WriterData`).
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without torch
    raise ImportError('privfedstat.deep needs torch: pip install "privfedstat[deep]"') from exc

from .clients import TorchClients, TorchNoise
from .data import FailingTensorData, TensorFederatedData
from .estimators import DeepDPFedAvg, DeepFedAvg, DeepFedHybrid, DeepFedSGD, compute_matched_rounds
from .fednmap import DeepFedCanon, DeepFedNMap, DeepZhang
from .femnist import FEMNIST_CLASSES, WriterData, femnist_standin, load_femnist
from .hifedprox import DeepHiFedProx
from .newton import DeepFedNewton
from .normec import DeepClippedFedAvg, DeepFedAlphaNormEC
from .per_sample import per_sample_clipped_mean

__all__ = ["per_sample_clipped_mean", "TorchClients", "TorchNoise", "TensorFederatedData", "FailingTensorData",
           "DeepFedAvg", "DeepFedSGD", "DeepFedHybrid", "DeepDPFedAvg", "DeepFedNewton", "compute_matched_rounds",
           "DeepFedAlphaNormEC", "DeepClippedFedAvg", "DeepHiFedProx", "DeepFedNMap", "DeepZhang", "DeepFedCanon",
           "WriterData", "load_femnist", "femnist_standin", "FEMNIST_CLASSES"]
