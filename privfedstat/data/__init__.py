"""The clients' data and the offline loaders of the real data sets.

:class:`FederatedData` holds every client's rows in one concatenated array with offsets, the layout
the kernels sweep in one pass; :mod:`.loaders` reads MNIST, CIFAR-10, digits and randhie and
:mod:`.femnist` reads FEMNIST (or builds its offline stand-in), all without network access.
"""

from .federated import FederatedData
from .femnist import FEMNIST_CLASSES, WriterData, femnist_standin, load_femnist
from .loaders import load_cifar10, load_digits, load_mnist, load_randhie, read_idx

__all__ = ["FederatedData", "load_cifar10", "load_digits", "load_mnist", "load_randhie", "read_idx",
           "WriterData", "load_femnist", "femnist_standin", "FEMNIST_CLASSES"]
