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


#: other names of the registry's families, as R's ``glm`` and statsmodels spell them
ALIASES = {"binomial": "logistic", "normal": "gaussian"}
#: statsmodels' family classes with the canonical link each registry family uses
STATSMODELS_FAMILIES = {"Binomial": ("logistic", "Logit"), "Poisson": ("poisson", "Log"),
                        "Gaussian": ("gaussian", "Identity")}


def _statsmodels_family(family) -> str | None:
    """The registry name of a statsmodels family object with its canonical link (None: not one).

    Read from the class names, so statsmodels is not imported; another link raises, since every family
    here uses the canonical one.
    """
    if not type(family).__module__.startswith("statsmodels.genmod.families"):
        return None
    name, link = STATSMODELS_FAMILIES.get(type(family).__name__, (None, None))
    got = type(getattr(family, "link", None)).__name__
    if name is None or got != link:
        raise ValueError(f"statsmodels family {type(family).__name__} with link {got} is not supported: the "
                         f"families here are {', '.join(f'{k}({v[1]})' for k, v in STATSMODELS_FAMILIES.items())}.")
    return name


def family_type(family) -> type[Family]:
    """The :class:`Family` subclass that ``family`` (a registry name, an alias, a statsmodels family or an
    instance) names.

    Its class attributes (``likelihood``, ``has_dispersion``, ``response_levels``, ...) are known
    before the family's parameters are, e.g. the number of multinomial classes that ``glm()`` reads
    from the declared levels of the response.
    """
    if isinstance(family, Family):
        return type(family)
    family = _statsmodels_family(family) or family
    if not isinstance(family, str):
        raise TypeError(f"family must be a name or a Family instance, got {type(family).__name__}.")
    key = ALIASES.get(family.lower(), family.lower())
    if key not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILIES)} (or {sorted(ALIASES)}).")
    return FAMILIES[key]


def get_family(family: str | Family, **params) -> Family:
    """Return a :class:`Family` instance.

    Parameters
    ----------
    family : str, Family or statsmodels family
        One of ``"logistic"`` (also ``"binomial"``, as R and statsmodels name it), ``"poisson"``,
        ``"gaussian"``, ``"huber"``, ``"multinomial"``; a statsmodels family object with its canonical
        link (``sm.families.Binomial()``, ``Poisson()``, ``Gaussian()``); or a ``Family`` instance
        (returned unchanged).
    **params
        Family parameters, e.g. ``get_family("huber", c=2.0)``, ``get_family("multinomial", n_classes=10)``.
    """
    if isinstance(family, Family):
        if params:
            raise TypeError("family parameters can only be given with a family name, not an instance.")
        return family
    return family_type(family)(**params)
