"""R-style interface: ``glm("y ~ x1 + C(x2)", data=df, client="site", family="poisson", method="fednewton")``."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd

from .data.federated import FederatedData
from .estimators.base import FederatedEstimator
from .estimators.registry import REGISTRY, get_method
from .estimators.scaling import PrivateStandardize

__all__ = ["glm", "METHODS"]


METHODS = tuple(REGISTRY)


def glm(
    formula: str,
    data: pd.DataFrame,
    *,
    client: str,
    family: str = "gaussian",
    method: str = "fedsgd",
    mu: float = 2.0,
    scaling="private",
    na_action: str = "raise",
    random_state=None,
    **params,
) -> FederatedEstimator:
    """Fit a private federated GLM from a formula, the way R's ``glm()`` or statsmodels' formula API do.

    Parameters
    ----------
    formula : str
        Wilkinson formula handled by formulaic, e.g. ``"mdvis ~ lncoins + idp + C(region)"``. An
        intercept is included unless the formula removes it (``- 1`` or ``0 +``); string and
        ``C(...)`` terms get treatment coding with the first level as reference, as in statsmodels.
    data : pandas.DataFrame
        One row per observation.
    client : str
        Column naming the client that holds each row (not part of the model).
    family : {"gaussian", "logistic", "poisson", "huber", "multinomial"}
        For ``"multinomial"`` the response must be categorical (or have a known, public set of
        labels); its categories define the classes, the first being the reference.
    method : {"fedsgd", "fedhybrid", "fedavg", "fednewton", "scaffold", "pooled", "localfit"}
    mu : float, default 2.0
        GDP budget per client; ``float("inf")`` for non-private fits.
    scaling : "private", None, PrivateStandardize or FeatureBounds, default "private"
        Rescale the covariates before fitting (coefficients are reported on the original scale).
        The default spends 10% of mu on private centres and scales, so raw-scale covariates (ages,
        incomes) work with the default step sizes.
    na_action : {"raise", "drop"}, default "raise"
        Rows with missing values raise an error (the default) or are dropped.
    random_state : int, Generator, SeedSequence or None
    **params
        Further estimator parameters (``n_iter``, ``step_size``, ``clip``, ...).

    Returns
    -------
    FederatedEstimator
        The fitted estimator, with ``feature_names_in_`` (the design columns) and
        ``response_name_`` set; ``summary()`` shows the named coefficients.

    Notes
    -----
    The set of categorical levels, the column names and the client labels are treated as public
    (the model specification); no data values are released outside the ledger.
    """
    try:
        from formulaic import model_matrix
    except ImportError as exc:  # pragma: no cover - formulaic is a dependency
        raise ImportError("glm() needs formulaic: pip install formulaic") from exc

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(data).__name__}.")
    if not isinstance(formula, str) or "~" not in formula:
        raise ValueError(f"formula must look like 'y ~ x1 + x2', got {formula!r}.")
    if client not in data.columns:
        raise ValueError(f"client column {client!r} is not in the data; columns are {list(data.columns)}.")
    spec = get_method(method)
    if na_action not in ("raise", "drop"):
        raise ValueError(f"na_action must be 'raise' or 'drop', got {na_action!r}.")
    if data[client].isna().any():
        raise ValueError(f"client column {client!r} has missing values; every row needs a client.")

    lhs_name = formula.split("~", 1)[0].strip()
    response = data[lhs_name] if lhs_name in data.columns else None
    fam_params = {}
    work = data
    if family == "multinomial":
        if response is None:
            raise ValueError(f"response column {lhs_name!r} is not in the data.")
        cat = response.astype("category")
        fam_params["n_classes"] = len(cat.cat.categories)
        work = data.assign(**{lhs_name: cat.cat.codes.where(cat.notna()).astype(float)})

    try:
        mm = model_matrix(formula, work, na_action=na_action)
    except Exception as exc:  # formulaic raises several error types; report them uniformly
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "missing" in msg.lower() or "null" in msg.lower() or "nan" in msg.lower():
            raise ValueError(f"{msg}. The data has missing values in the model's columns; "
                             "remove or impute them, or pass na_action='drop'.") from None
        raise ValueError(f"could not build the model from {formula!r}: {msg}. "
                         f"Available columns: {list(data.columns)}.") from None
    y_frame, X_frame = mm.lhs, mm.rhs
    if y_frame.shape[1] != 1:
        raise ValueError(f"the formula must have one numeric response; got columns {list(y_frame.columns)}.")
    X = np.asarray(X_frame, dtype=np.float64)
    y = np.asarray(y_frame, dtype=np.float64).ravel()
    labels = data.loc[X_frame.index, client].to_numpy()
    names = list(X_frame.columns)
    intercept = names.index("Intercept") if "Intercept" in names else None

    cls = spec.cls
    accepted = set(inspect.signature(cls.__init__).parameters)
    kwargs = dict(params)
    kwargs["family"] = family if not fam_params else _family(family, fam_params)
    # non-private baselines (pooled, localfit) take neither a budget nor randomness
    kwargs.update({k: v for k, v in (("mu", mu), ("random_state", random_state)) if k in accepted})
    if "scaling" in accepted:
        if scaling == "private":
            scaling = PrivateStandardize(intercept=intercept)
        kwargs["scaling"] = scaling
    unknown = set(kwargs) - accepted
    if unknown:
        raise TypeError(f"{cls.__name__} does not take {sorted(unknown)}; its parameters are {sorted(accepted - {'self'})}.")
    est = cls(**kwargs).fit(FederatedData.from_pooled(X, y, clients=labels))
    est.feature_names_in_ = names
    est.response_name_ = lhs_name
    return est


def _family(name: str, params: dict):
    from .families import get_family

    return get_family(name, **params)
