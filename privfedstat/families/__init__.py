"""Loss families (the loss rho of the core paper) and the registry ``get_family``."""

from __future__ import annotations

from .base import Family
from .glm import MAX_POISSON_MEAN, POISSON_MAX_ETA, Gaussian, Huber, Logistic, Poisson
from .multinomial import Multinomial

__all__ = ["Family", "Logistic", "Poisson", "Gaussian", "Huber", "Multinomial", "get_family", "family_type",
           "FAMILIES", "POISSON_MAX_ETA", "MAX_POISSON_MEAN"]

FAMILIES: dict[str, type[Family]] = {
    "logistic": Logistic,
    "poisson": Poisson,
    "gaussian": Gaussian,
    "huber": Huber,
    "multinomial": Multinomial,
}


def family_type(family: str | Family) -> type[Family]:
    """The :class:`Family` subclass that ``family`` (a registry name or an instance) names.

    Its class attributes (``likelihood``, ``has_dispersion``, ``response_levels``, ...) are known
    before the family's parameters are, e.g. the number of multinomial classes that ``glm()`` reads
    from the declared levels of the response.
    """
    if isinstance(family, Family):
        return type(family)
    if not isinstance(family, str):
        raise TypeError(f"family must be a name or a Family instance, got {type(family).__name__}.")
    key = family.lower()
    if key not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILIES)}.")
    return FAMILIES[key]


def get_family(family: str | Family, **params) -> Family:
    """Return a :class:`Family` instance.

    Parameters
    ----------
    family : str or Family
        One of ``"logistic"``, ``"poisson"``, ``"gaussian"``, ``"huber"``, ``"multinomial"``, or a
        ``Family`` instance (returned unchanged).
    **params
        Family parameters, e.g. ``get_family("huber", c=2.0)``, ``get_family("multinomial", n_classes=10)``.
    """
    if isinstance(family, Family):
        if params:
            raise TypeError("family parameters can only be given with a family name, not an instance.")
        return family
    return family_type(family)(**params)
