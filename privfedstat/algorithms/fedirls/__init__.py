"""FedIRLS: private Newton / IRLS with the gradient and the Hessian aggregated on the server.

Every round each client releases its clipped mean gradient and its clipped mean Hessian (one
Gaussian mechanism each, through the Channel); the server averages them, floors the eigenvalues
of the averaged Hessian (post-processing) and takes a Newton step. This is the noisy Newton
method of Avella-Medina, Bradshaw & Loh (2023) in the federated setting, with the budget split
derived for the error of the final iterate rather than spread evenly over the releases.

:mod:`.estimator` holds the estimator, :mod:`.schedule` its policy (one :class:`IRLSSchedule` per fit, read
by the fit and by :func:`~privfedstat.planning.power.plan_study`), :mod:`.rounds` the server's rounds and
:mod:`.whitening` the change of basis of the refine rounds.
"""

from .estimator import FedIRLS
from .schedule import IRLSSchedule

__all__ = ["FedIRLS", "IRLSSchedule"]
