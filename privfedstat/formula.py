"""R-style interface: ``glm("y ~ x1 + C(x2)", data=df, client="site", family="poisson", method="fednewton")``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from ._formula_design import build_design
from ._validation import check_mu
from ._warn import warn
from .algorithms.registry import REGISTRY, get_method
from .data.federated import FederatedData
from .data.inputs import warn_single_client
from .data.offsets import combine_offset
from .exceptions import PrivacyLeakWarning
from .families import Family, family_type, get_family
from .fitting.base import FederatedEstimator
from .fitting.scaling import PrivateStandardize

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["glm", "METHODS"]


METHODS = tuple(REGISTRY)

#: the leak recorded when na_action="drop" is used with a finite mu
NA_DROP_LEAK = (
    "na_action='drop': the client sizes n_i after dropping rows with missing values are released "
    "unaccounted (a row's missingness shows in the noise scale, the weights and n_samples_)"
)


def glm(
    formula: str,
    data: pd.DataFrame,
    *,
    client: str,
    family: str | Family = "gaussian",
    method: str | None = None,
    penalty: str | None = None,
    mu: float = 2.0,
    scaling="private",
    levels: Mapping[str, list] | None = None,
    na_action: str = "raise",
    offset=None,
    exposure=None,
    budget=None,
    random_state=None,
    **params,
) -> FederatedEstimator:
    """Fit a private federated GLM from a formula, the way R's ``glm()`` or statsmodels' formula API do.

    Parameters
    ----------
    formula : str
        Wilkinson formula handled by formulaic, e.g. ``"mdvis ~ lncoins + idp + C(region)"``. An
        intercept is included unless the formula removes it (``- 1`` or ``0 +``); categorical terms
        get treatment coding with the first level as reference, as in statsmodels. The formula sees
        the data's columns and formulaic's transforms (``np``, ``log``, ``C``, ...), nothing else.
        With finite ``mu`` the model's structure must be public (see Notes): categorical levels
        declared, no stateful transforms (``scale()``, ``center()``, ``standardize()``, ``poly()``,
        ``bs()``, ``cr()``, ...: use ``scaling=``), and every term computed from its own row only.
    data : pandas.DataFrame
        One row per observation.
    client : str
        Column naming the client that holds each row (not part of the model).
    family : {"gaussian", "logistic", "poisson", "huber", "multinomial"}, Family or statsmodels family
        Also ``"binomial"`` (R's and statsmodels' name of the logistic family) and statsmodels' family
        objects with their canonical link (``sm.families.Binomial()``). For ``"multinomial"`` (a
        family with ``response_levels``) the response's declared levels are the classes (K of them),
        the first being the reference. A logistic response may be a two-level string or categorical
        column, read as R reads a factor: the first level is failure, the second is modelled (the
        summary says which). With finite ``mu`` such a response must be a pandas Categorical or be
        named in ``levels``.
    method : str, optional
        A registered method (``privfedstat.algorithms.REGISTRY``): "fedirls", "fedsgd",
        "fedhybrid", "fedavg", "fednewton", "scaffold", "fednmap", "pooled", "localfit", ... The
        default, FedIRLS (server-aggregated private Newton), is the most accurate measured on bundled real
        data (benchmarks/RESULTS.md, accuracy section): the pooled MLE to ~1e-10 SE at mu = inf in
        a few rounds, and the smallest error at mu = 2 on the logistic and multinomial data sets.
        With a ``penalty`` the default is "fednmap" (:class:`~privfedstat.FedNMap`).
        ``"pooled"`` and ``"localfit"`` are non-private baselines: they need ``mu=float("inf")``.
    penalty : {"l1", "elasticnet"} or None, default None
        Fit a penalised GLM (federated lasso / elastic net): the mean loss plus
        ``alpha (l1_ratio ||b||_1 + (1 - l1_ratio) ||b||^2 / 2)``, scikit-learn's and glmnet's
        scaling; give ``alpha=`` (required) and, for ``"elasticnet"``, ``l1_ratio=``. The intercept is not
        penalised; with the default ``scaling="private"`` the penalty acts on the columns (and a
        Gaussian or Huber response) as the private scaling sets them (centre: a private median; scale: the private 90% quantile of
        ``|x - centre|``, see ``fit.scaler_`` -- not glmnet's standard deviations, so the same alpha
        selects differently from ``standardize=TRUE``); pass public ``FeatureBounds`` as ``scaling``
        to fix the scale yourself. Coefficients are reported on the original scale.
        Only the penalised methods take it ("fednmap", the default; its baselines "zhang" and
        "fedcanon"); they report no standard errors (intervals after selection are not valid).
    mu : float, default 2.0
        GDP budget per client; ``float("inf")`` for non-private fits.
    scaling : "private", None, PrivateStandardize or FeatureBounds, default "private"
        Rescale the covariates before fitting (coefficients are reported on the original scale).
        The default spends 25% of mu on private centres and scales, so raw-scale covariates (ages,
        incomes) work with the default step sizes; it also centres and scales the response of the
        gaussian and huber families (:class:`~privfedstat.PrivateStandardize` ``response``), so a
        response far from 0 is reached in the few private Newton rounds.
    levels : dict of {str: list}, optional
        Declared levels of categorical columns, ``{"region": ["north", "south", "west"]}``, in
        order (the first is the reference level); a named column is treated as categorical even if
        numeric. Also declares a multinomial response's classes. A pandas Categorical column is
        declared by its categories (observed or not); ``levels`` overrides them. A declared level
        that no row has still gets its (all-zero) column, so neighbouring datasets have the same
        design; a row whose value is outside the declared levels raises (the message gives the
        column and the number of such rows, never the values). With finite ``mu`` every categorical
        column must be declared; with ``mu = inf`` undeclared levels are read from the data, and a
        declared class of the response that no row has raises (its coefficients have no finite MLE;
        with finite ``mu`` its count is private and is not checked).
    na_action : {"raise", "drop"}, default "raise"
        Rows with missing values raise an error (the default) or are dropped. **Dropping is leaky
        with finite mu**: the client sizes n_i after dropping are released without accounting (they
        set the noise scale, the weights and ``n_samples_``, so one row's missingness shows). It
        warns with ``PrivacyLeakWarning`` and records the leak in ``privacy_`` (``is_private`` is
        then False). To stay private, impute missing values beforehand or drop incomplete rows
        before the data are assigned to clients.
    offset : str or array-like of shape (len(data),), optional
        Offset ``o`` of the linear predictor, ``x^T theta + o`` (coefficient fixed at 1), as in R's
        and statsmodels' ``offset``: a column of ``data`` or one value per row of ``data``. Every
        family but multinomial.
    exposure : str or array-like of shape (len(data),), optional
        Exposure ``E > 0`` (a column or one value per row), entering as ``log(E)`` (added to any
        ``offset``): a Poisson model of the rate ``E[y] / E = exp(x^T theta)`` (the log link only,
        as in statsmodels). Offsets and
        exposures are private per-row values like the covariates; they move only the residuals,
        so the clipping bounds and sensitivities are unchanged. They must be finite (exposure
        > 0) on the rows fitted (a missing value raises, also with ``na_action="drop"``).
        ``predict(df)`` and ``score(df)`` read the same columns from the new rows; a fit given
        arrays needs ``predict(df, offset=..., exposure=...)``.
    budget : PrivacyBudget, optional
        A privacy budget shared across fits, passed to ``fit(data, budget=budget)``: the fit is
        refused before any noise is drawn if it would exceed what is left.
    random_state : int, Generator, SeedSequence or None
    **params
        Further parameters of the method's estimator (FedIRLS, the default: ``n_rounds``, ``step_size``,
        ``max_step``, ``clip``, ...; FedSGD: ``n_iter``; see each estimator's class), among them
        ``inference`` (default "auto": standard errors, intervals and tests that count the
        privacy noise, from 25% of mu; None to spend all of mu on estimation; see
        :class:`~privfedstat.Inference`). ``summary()`` then shows statsmodels' columns (coef,
        std err, t and P>|t| -- z with mu = inf --, interval) with the formula's names, and ``conf_int()`` /
        ``cov_params()`` are indexed by them.

    Returns
    -------
    FederatedEstimator
        The fitted estimator, with ``feature_names_in_`` (the design columns), ``response_name_``,
        ``levels_`` and ``model_spec_`` set: ``levels_`` maps every categorical column (and a
        multinomial response) to the levels used, in order; with ``mu = inf`` a categorical term
        computed by an expression is keyed by the term. ``model_spec_`` is formulaic's
        ``ModelSpecs`` of the fit: ``predict(df)``, ``predict_proba(df)`` and ``score(df)`` build
        new rows' design with it (same columns, levels and transform state; a value outside a
        column's levels raises with the column and the number of such rows). ``summary()`` shows
        the named coefficients: ``Intercept``, formulaic's term names, and for a multinomial fit
        one equation per non-reference class named ``response=level`` (statsmodels' ``MNLogit``
        convention), the reference class stated in the header.

    Notes
    -----
    Public, as part of the model specification: the formula, the column names, the declared levels,
    the client labels and the client sizes n_i. Everything else about the rows is released only
    through the ledger. Learning the structure from private data would break this: one row with a
    rare level adds a coefficient (a perfect distinguisher), ``scale(x)`` uses the raw mean and
    standard deviation, and ``lag(x)`` or ``x - np.mean(x)`` let one row change others' design rows
    (so the per-row clipping bound no longer bounds one person's influence). For finite mu these
    raise before anything is computed for the fit.
    """
    import pandas as pd
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(data).__name__}.")
    if not isinstance(formula, str) or "~" not in formula or not formula.split("~", 1)[0].strip():
        raise ValueError(f"formula must look like 'y ~ x1 + x2' (a response, '~', the terms), got {formula!r}.")
    if not formula.split("~", 1)[1].strip():
        raise ValueError(f"formula {formula!r} has no terms after '~'; write 'y ~ 1' for an intercept-only model.")
    if data.columns.duplicated().any():
        dups = list(dict.fromkeys(data.columns[data.columns.duplicated()]))
        raise ValueError(f"data has duplicated column name(s) {dups[:10]}: the formula and client= name columns, so "
                         "each needs its own name. Rename them, or drop the copies with "
                         "data.loc[:, ~data.columns.duplicated()].")
    if not isinstance(client, Hashable) or isinstance(client, (pd.Series, pd.Index)):
        raise TypeError(f"client must name the column of data that holds each row's client (client='site'), got "
                        f"a {type(client).__name__}; to use one label per row, add it as a column: "
                        "glm(formula, data.assign(site=labels), client='site').")
    if client not in data.columns:
        raise ValueError(f"client column {client!r} is not in the data; columns are {list(data.columns)}.")
    spec = get_method(method if method is not None else ("fedirls" if penalty is None else "fednmap"))
    if penalty is not None and "penalty" not in inspect.signature(spec.cls.__init__).parameters:
        raise ValueError(f"penalty={penalty!r} needs a penalised method: 'fednmap' (the default with a penalty), "
                         f"'zhang' or 'fedcanon'; method={method!r} fits the unpenalised likelihood.")
    if penalty is not None and "alpha" not in params:
        raise ValueError(f"penalty={penalty!r} needs its strength: pass alpha= (the penalty is alpha ||b||_1, or the "
                         "elastic net's alpha (l1_ratio ||b||_1 + (1 - l1_ratio) ||b||^2 / 2)); there is no "
                         "default, as the right strength depends on the data's scale and N.")
    mu = check_mu(mu)
    private = math.isfinite(mu)
    if private and not spec.private:
        raise ValueError(
            f"method={method!r} is a non-private baseline ({spec.description}); it cannot give a finite mu. "
            "Pass mu=float('inf') to fit it, or choose a private method."
        )
    if na_action not in ("raise", "drop"):
        raise ValueError(f"na_action must be 'raise' or 'drop', got {na_action!r}.")
    if data[client].isna().any():
        raise ValueError(f"client column {client!r} has missing values; every row needs a client (na_action='drop' "
                         "drops rows with missing model columns only: give these rows a client or remove them).")

    fam_type = family_type(family)
    design = build_design(formula, data, client=client, multinomial=fam_type.response_levels, levels=levels,
                          na_action=na_action, private=private, binary=fam_type.name == "logistic")
    intercept = design.names.index("Intercept") if "Intercept" in design.names else None

    cls = spec.cls
    accepted = set(inspect.signature(cls.__init__).parameters)
    kwargs = dict(params)
    kwargs["family"] = _with_classes(family, design.n_classes)
    # non-private baselines (pooled, localfit) take neither a budget nor randomness
    kwargs.update({k: v for k, v in (("mu", mu), ("random_state", random_state)) if k in accepted})
    if "scaling" in accepted:
        if scaling == "private":
            scaling = PrivateStandardize(intercept=intercept)
        kwargs["scaling"] = scaling
    if penalty is not None:
        kwargs["penalty"] = penalty
    if "unpenalized" in accepted:
        kwargs.setdefault("unpenalized", () if intercept is None else (intercept,))
    unknown = set(kwargs) - accepted
    if unknown:
        raise TypeError(f"{cls.__name__} does not take {sorted(unknown)}; its parameters are {sorted(accepted - {'self'})}.")
    est = cls(**kwargs)
    leaky_drop = private and na_action == "drop"
    if leaky_drop:
        warn(
            f"{NA_DROP_LEAK}. The fit is not fully private; to avoid this, impute missing values beforehand or "
            "drop incomplete rows before the data are assigned to clients.",
            PrivacyLeakWarning,
        )
    fit_kwargs = {} if budget is None else {"budget": budget}
    o = combine_offset(*(_per_row(data, v, name)[design.rows] if v is not None else None
                         for name, v in (("offset", offset), ("exposure", exposure))), design.rows.size,
                       fam_type)
    # names first: the fit's warnings (noise-dominated or unconverged coefficients) name the terms
    est.feature_names_in_ = design.names
    est.response_name_ = design.response
    est.levels_ = design.levels
    fed = FederatedData.from_pooled(design.X, design.y, clients=design.clients, offset=o)
    warn_single_client(fed, f"client={client!r}")
    est.fit(fed, **fit_kwargs)
    if leaky_drop:
        est.privacy_.add_leak(NA_DROP_LEAK)
    est.model_spec_ = design.spec
    named = {k: v for k, v in (("offset", offset), ("exposure", exposure)) if v is not None}
    est.offset_columns_ = named if named and all(isinstance(v, str) for v in named.values()) else None
    return est


def _per_row(data: pd.DataFrame, value, name: str) -> np.ndarray:
    """glm()'s ``offset`` / ``exposure``: a numeric column of ``data`` or one value per row, as float64."""
    import pandas as pd
    if isinstance(value, str):
        if value not in data.columns:
            raise ValueError(f"{name} column {value!r} is not in the data; columns are {list(data.columns)}.")
        if not pd.api.types.is_numeric_dtype(data[value]) or pd.api.types.is_bool_dtype(data[value]):
            raise TypeError(f"{name} column {value!r} must be numeric, got dtype {data[value].dtype}.")
        return data[value].to_numpy(dtype=np.float64, na_value=np.nan)
    try:
        values = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a column name or numbers, one per row of data.") from None
    if values.shape != (len(data),):
        raise ValueError(f"{name} must be a column name or one value per row of data ({len(data)}), "
                         f"got shape {values.shape}.")
    return values


def _with_classes(family: str | Family, n_classes: int | None) -> str | Family:
    """The estimator's ``family``: an instance as given (with ``response_levels``, it must have the
    ``n_classes`` declared by the response's levels), a name by the registry's name, or (a family with
    ``response_levels``) built with those ``n_classes``."""
    if isinstance(family, Family):
        if family.response_levels and family.n_classes != n_classes:
            raise ValueError(f"family {family!r} has {family.n_classes} classes, but the response declares "
                             f"{n_classes} levels.")
        return family
    fam_type = family_type(family)  # an alias ("binomial") or a statsmodels family: the registry's name
    return get_family(fam_type.name, n_classes=n_classes) if fam_type.response_levels else fam_type.name
