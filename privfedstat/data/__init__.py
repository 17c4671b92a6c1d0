"""The clients' data and the offline loaders of the real data sets.

:class:`FederatedData` holds every client's rows in one concatenated array with offsets, the layout
the kernels sweep in one pass; :mod:`.loaders` reads MNIST, CIFAR-10, digits and randhie, all
without network access. FEMNIST's writers are network data: :mod:`privfedstat.deep.femnist`.
"""

from .federated import FederatedData
from .loaders import load_cifar10, load_digits, load_mnist, load_randhie, read_idx

__all__ = ["FederatedData", "load_cifar10", "load_digits", "load_mnist", "load_randhie", "read_idx"]
