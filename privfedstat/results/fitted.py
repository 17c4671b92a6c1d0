"""What every fitted estimator reports: ``mse``, ``predict``, ``score``, standard errors, intervals,
Wald tests and the summary (the results half of :class:`~privfedstat.FederatedEstimator`).

All of it is post-processing of the fit's released values (``coef_``, ``inference_``, ``privacy_``):
no privacy cost. The goodness of fit (:meth:`FittedResults.fit_statistics`) reads rows the caller
passes, and only for a non-private fit.
"""

from __future__ import annotations

import functools
import math
import re
import types
from typing import TYPE_CHECKING

import numpy as np

from .. import exceptions
from .._formula_design import apply_design
from ..data.federated import FederatedData
from ..data.inputs import dense_array, sklearn_tags
from ..data.offsets import prediction_offset
from ..families import get_family
from ..inference.results import InferenceResult, NoInferenceError, WaldTestResult
from . import scoring
from .fit_statistics import FitStatistics, fit_statistics
from .labels import classes_of, label
from .plotting import coefficient_frame, plot_coefficients
from .summary import Summary, clip_row, clipped_row, privacy_rows, privacy_share_row, rounds_row

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["FittedResults"]

#: why a private fit shows no goodness of fit
_PRIVATE_FIT_STATISTICS = ("private fit: log-likelihood, deviance, AIC, BIC and pseudo-R^2 are sums over the clients' "
                           "rows, each a release that would cost budget; a summary spends none")


class _classifiers_only:
    """A method that exists only on estimators of a classifier family (scikit-learn's ``available_if``): on the
    others, reading it raises AttributeError."""

    def __init__(self, method) -> None:
        self.method = method
        functools.update_wrapper(self, method)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.method
        if get_family(obj.family).class_labels is None:
            raise AttributeError(f"{self.method.__name__} is for classifiers (logistic, multinomial), not {obj.family!r}.")
        return types.MethodType(self.method, obj)


class FittedResults:
    """Mixin of :class:`~privfedstat.FederatedEstimator`: everything read from a fit's results."""

    # ------------------------------------------------------------------ results
    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise exceptions.NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(data) first.")

    def mse(self, theta_true) -> float:
        """Squared error ``||coef_ - theta_true||^2`` (the paper's per-replicate MSE)."""
        self._check_fitted()
        t = np.asarray(theta_true, dtype=np.float64)
        if t.shape != self.coef_.shape:
            raise ValueError(f"theta_true must have shape {self.coef_.shape}, got {t.shape}.")
        return float(np.sum((self.coef_ - t) ** 2))

    def _formula_rows(self, df: pd.DataFrame, with_y: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """A DataFrame through the stored formula of a ``glm()`` fit (see :func:`apply_design`)."""
        classes = self.levels_.get(self.response_name_)  # a categorical response (multinomial, two-level logistic)
        return apply_design(self.model_spec_, df, levels=self.levels_, response=self.response_name_,
                            classes=classes, with_y=with_y)

    def _check_X(self, X) -> np.ndarray:
        """Rows to predict for: an array of shape (n, n_features_in_), a FederatedData's X, or (for a
        ``glm()`` fit) a DataFrame, transformed by the fit's formula."""
        import pandas as pd
        if isinstance(X, pd.DataFrame) and getattr(self, "model_spec_", None) is not None:
            X = self._formula_rows(X, with_y=False)[0]
        X = X.X if isinstance(X, FederatedData) else dense_array(X).astype(np.float64, copy=False)
        if X.ndim == 1:
            raise ValueError(f"Expected a 2D array of rows, got a 1D array of shape {X.shape}: Reshape your data, "
                             "X.reshape(-1, 1) for one feature or X.reshape(1, -1) for one row.")
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[-1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input: X must have shape (n, {self.n_features_in_}), "
                             f"got {X.shape}.")
        if not np.all(np.isfinite(X)):
            raise ValueError("Input X contains NaN or infinity.")
        return X

    def _linear_predictor(self, X, coef: np.ndarray, offset=None, exposure=None, rows=None) -> np.ndarray:
        """``X coef + o`` for new rows (``rows``: ``X`` already checked), with the offset of :func:`prediction_offset`."""
        A = self._check_X(X) if rows is None else rows
        o = prediction_offset(self, X, A.shape[0], offset, exposure)
        return A @ coef if o is None else A @ coef + o

    def predict(self, X, *, offset=None, exposure=None) -> np.ndarray:
        """Mean response ``E[y | x]`` at the fitted coefficients for rows of ``X`` (or a FederatedData).

        A ``glm()`` fit also takes a DataFrame: its rows go through the fit's formula
        (``model_spec_``: same columns, levels and transforms; values outside the fit's levels raise).

        For classifiers this is the probability of class 1 (logistic; shape (n,)) or of every
        class (multinomial; shape (n, K)), as in statsmodels, not a class label.

        A model fitted with an offset predicts at ``x^T coef + o`` with the new rows' ``offset``
        and/or ``exposure`` (``o = offset + log(exposure)``), or a FederatedData's own offset, or
        (``glm()`` fits with offset columns) the same columns of a DataFrame; without any it raises.
        """
        self._check_fitted()
        return self.family_.mean(self._linear_predictor(X, self.coef_, offset, exposure))

    @_classifiers_only
    def predict_proba(self, X, *, offset=None, exposure=None) -> np.ndarray:
        """Class probabilities for classifiers, columns ordered as ``classes_``: (n, 2) for logistic, (n, K) for
        multinomial.

        Defined for classifier families only: for the others the attribute is missing (``hasattr`` is
        False, as scikit-learn's ``available_if`` makes it), so that tools do not take a regressor for a
        probabilistic classifier.
        """
        self._check_fitted()
        return self.family_.class_probabilities(self._linear_predictor(X, self.coef_, offset, exposure))

    @property
    def classes_(self) -> np.ndarray:
        """Class labels of a classifier, fixed by the family (``[0, 1]``; multinomial ``0, ..., K-1``)."""
        self._check_fitted()
        classes = self.family_.class_labels
        if classes is None:
            raise AttributeError(f"classes_ is defined for classifiers (logistic, multinomial), not {self.family_.name}.")
        return classes

    def score(self, X, y=None, *, metric: str | None = None, offset=None, exposure=None) -> float:
        """Score on held-out data: ``"auc"`` (binary), ``"accuracy"`` (classifiers) or ``"deviance"``.

        Parameters
        ----------
        X : FederatedData, array-like of shape (n_samples, n_features), or DataFrame
            A DataFrame (``glm()`` fits only) goes through the fit's formula, response included.
        y : array-like of shape (n_samples,), optional
            Responses, with an array ``X`` (scikit-learn's ``score(X, y)``).
        metric : str or None
            ``"auc"``, ``"accuracy"``, ``"deviance"`` or ``"neg_deviance"``. Default: AUC for
            logistic, accuracy for multinomial, minus the mean deviance otherwise, so that greater
            is better (as scikit-learn's model selection assumes); see
            :func:`privfedstat.results.scoring.score`.
        offset, exposure : array-like of shape (n_samples,), optional
            The rows' offset of the linear predictor, as in :meth:`predict`.
        """
        self._check_fitted()
        source, X, y = self._observed(X, y)
        return scoring.score(self.family_, self._linear_predictor(source, self.coef_, offset, exposure, rows=X), y,
                             metric)

    def _observed(self, X, y) -> tuple[object, np.ndarray, np.ndarray]:
        """Rows with their responses, as :meth:`score` and :meth:`fit_statistics` take them: the source (for its
        offset), the checked design and the checked responses."""
        import pandas as pd
        source = X
        if isinstance(X, pd.DataFrame) and getattr(self, "model_spec_", None) is not None:
            if y is not None:
                raise TypeError("the formula gives the response from the DataFrame; pass the DataFrame without y.")
            X, y = self._formula_rows(X, with_y=True)
        elif isinstance(X, FederatedData):
            if y is not None:
                raise TypeError("a FederatedData already holds y; pass it without y.")
            y = X.y
        elif y is None:
            raise TypeError("this needs the responses: (X, y), or a FederatedData, which holds them.")
        X = self._check_X(X)
        y = np.asarray(y, dtype=np.float64)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},) (one response per row of X), got {y.shape}.")
        self.family_.check_y(y)
        return source, X, y

    def fit_statistics(self, X, y=None, *, offset=None, exposure=None) -> FitStatistics:
        """Log-likelihood, deviance, AIC, BIC and pseudo-R^2 at ``coef_`` on the rows given (statsmodels' definitions,
        :mod:`privfedstat.results.fit_statistics`).

        Only for a non-private fit (mu = inf): the fit keeps no rows, so the caller, who holds them, passes
        them (as to :meth:`score`), and the values are exact. With finite mu these sums over the
        clients' rows would be releases that cost budget, which this method does not spend: it raises.

        Parameters
        ----------
        X : FederatedData, array-like of shape (n_samples, n_features), or DataFrame (``glm()`` fits)
        y : array-like of shape (n_samples,), optional
            Responses, with an array ``X``.
        offset, exposure : array-like of shape (n_samples,), optional
            The rows' offset of the linear predictor, as in :meth:`predict`.
        """
        self._check_fitted()
        if math.isfinite(self.privacy_.mu):
            raise ValueError(_PRIVATE_FIT_STATISTICS)
        source, A, y = self._observed(X, y)
        o = prediction_offset(self, source, A.shape[0], offset, exposure)
        return fit_statistics(self.family_, y, A @ self.coef_ if o is None else A @ self.coef_ + o, self.coef_.size,
                              offset=o)

    # ------------------------------------------------------------------ named views (statsmodels)
    def _named(self, values: np.ndarray, name: str) -> pd.Series | pd.DataFrame:
        """``values`` (in ``coef_.ravel(order="F")`` order) indexed by term: a Series, or for the multinomial
        family a DataFrame of terms by equations (statsmodels' ``MNLogit.params`` shape)."""
        import pandas as pd
        index, _, classes = self._coef_names()
        if classes is None:
            return pd.Series(values, index=index, name=name)
        d = self.coef_.shape[0]
        return pd.DataFrame(values.reshape(self.coef_.shape, order="F"), index=index.get_level_values("term")[:d],
                            columns=index.get_level_values("equation")[::d])

    @property
    def params(self) -> pd.Series | pd.DataFrame:
        """``coef_`` indexed by term (statsmodels' ``params``): a Series, for the multinomial family a DataFrame of
        terms by equations ``response=level``."""
        self._check_fitted()
        return self._named(self.coef_.ravel(order="F"), "params")

    @property
    def bse(self) -> pd.Series | pd.DataFrame:
        """``bse_`` indexed as :attr:`params`."""
        return self._named(self._inference().bse, "bse")

    @property
    def zvalues(self) -> pd.Series | pd.DataFrame:
        """``zvalues_`` indexed as :attr:`params` (normal statistics: statsmodels' ``tvalues`` of a GLM)."""
        return self._named(self._inference().zvalues, "zvalues")

    @property
    def pvalues(self) -> pd.Series | pd.DataFrame:
        """``pvalues_`` indexed as :attr:`params`."""
        return self._named(self._inference().pvalues, "pvalues")

    def plot_coefficients(self, ax=None, reference=None, alpha: float | None = None):
        """Coefficients with their intervals (:func:`privfedstat.results.plotting.plot_coefficients`).

        Parameters
        ----------
        ax : matplotlib Axes, optional
        reference : fitted estimator, statsmodels results or DataFrame, optional
            Another fit (e.g. the non-private ``PooledMLE`` or statsmodels' GLM on the pooled rows)
            drawn beside this one; a DataFrame has columns ``coef``, ``lower``, ``upper`` indexed by term.
        alpha : float, optional
            Interval level ``1 - alpha`` (default: the fit's ``Inference.alpha``).

        Returns
        -------
        matplotlib.axes.Axes
        """
        self._check_fitted()
        frames = {self.method: coefficient_frame(self, alpha)}
        if reference is not None:
            name = getattr(reference, "method", None) or "reference"
            frames[f"{name} (reference)" if name in frames else name] = coefficient_frame(reference, alpha)
        return plot_coefficients(frames, ax=ax)

    def __sklearn_tags__(self):
        return sklearn_tags(self)

    # ------------------------------------------------------------------ inference
    def _inference(self) -> InferenceResult:
        self._check_fitted()
        if self.inference_ is None and not self.supports_inference:
            why = ("it protects whole clients, and the inference releases are record-level: they cannot carry a "
                   "client-level guarantee" if "client" in self.privacy_.units else
                   "it has no inference (supports_inference is False; for a network, standard errors of the weights "
                   "are not defined)")
            raise NoInferenceError(f"{type(self).__name__} reports no standard errors: {why}.")
        if self.inference_ is None:
            raise NoInferenceError(
                f"this {type(self).__name__} was fitted with inference=None, so it has no standard errors, intervals "
                "or tests; refit with inference='auto' (it spends Inference().budget of mu on them)."
            )
        return self.inference_

    @property
    def bse_(self) -> np.ndarray:
        """Standard errors of ``coef_`` (same shape), sampling and privacy noise together."""
        return self._inference().bse.reshape(self.coef_.shape, order="F")

    @property
    def zvalues_(self) -> np.ndarray:
        """``coef_ / bse_`` (same shape as ``coef_``)."""
        return self._inference().zvalues.reshape(self.coef_.shape, order="F")

    @property
    def pvalues_(self) -> np.ndarray:
        """Two-sided normal p-values of ``coef = 0`` (same shape as ``coef_``)."""
        return self._inference().pvalues.reshape(self.coef_.shape, order="F")

    def cov_params(self) -> pd.DataFrame:
        """Covariance of the estimate (sampling + privacy noise), indexed by the coefficient names.

        Coefficients in ``coef_.ravel(order="F")`` order (one equation after the other for the
        multinomial family, as statsmodels' ``MNLogit``); ``inference_`` holds the two parts.
        """
        import pandas as pd
        cov = self._inference().cov
        names = self._coef_names()[0]
        return pd.DataFrame(cov, index=names, columns=names)

    def conf_int(self, alpha: float | None = None) -> pd.DataFrame:
        """Confidence intervals of level ``1 - alpha`` (default: the fit's ``Inference.alpha``, 0.05).

        Normal intervals ``coef -+ z bse``; with ``inference="bootstrap"`` the basic bootstrap
        intervals. Columns ``["lower", "upper"]``, indexed by the coefficient names.
        """
        import pandas as pd
        ci = self._inference().conf_int(alpha)
        return pd.DataFrame(ci, index=self._coef_names()[0], columns=["lower", "upper"])

    def wald_test(self, R, q=None) -> WaldTestResult:
        """Wald test of ``R coef = q`` on ``cov_params()`` (chi-square, as statsmodels' ``use_f=False``).

        Parameters
        ----------
        R : array-like of shape (r, p) or (p,), or list of coefficient names
            Restrictions on ``coef_.ravel(order="F")``; a list of names tests that those
            coefficients are all 0 (``q`` must then be None or zeros).
        q : array-like of shape (r,), optional
            Right-hand side (zeros by default).
        """
        result = self._inference()
        if isinstance(R, (list, tuple)) and R and all(isinstance(r, (str, tuple)) for r in R):
            names = self._coef_names()[0]
            missing = [r for r in R if r not in names]
            if missing:
                raise ValueError(f"unknown coefficient name(s) {missing}; the names are {list(names)}.")
            R = np.eye(len(names))[[names.get_loc(r) for r in R]]
        return result.wald_test(R, q)

    def summary(self, alpha: float | None = None, delta: float = 1e-5, *, data=None, plan=None) -> Summary:
        """Summary of the fit (statsmodels' layout): what was fitted to what, privacy, goodness of fit, and the
        coefficients with standard errors, t (Student's t where the intervals use it, else z), p-values and
        intervals, to 4 significant digits.

        Parameters
        ----------
        alpha : float, optional
            Intervals of level ``1 - alpha`` (default: the fit's ``Inference.alpha``, 0.05).
        delta : float, default 1e-5
            The delta of the (epsilon, delta) shown for the privacy guarantee.
        data : FederatedData, DataFrame (``glm()`` fits) or tuple (X, y), optional
            The rows the fit was made on, for the goodness of fit (log-likelihood, deviance, AIC,
            BIC, pseudo-R^2, :meth:`fit_statistics`) of a non-private fit (mu = inf). A private fit
            shows them as not available: they are sums over the clients' rows, so each would be a
            release that costs budget, and a summary spends none; the fit keeps no rows either.

        plan : StudyPlan, optional
            The fit's plan (:func:`~privfedstat.planning.power.plan_study`): the header then sets
            the privacy share of the variance the plan predicted next to the fit's own
            (:attr:`~privfedstat.InferenceResult.privacy_share`), to show whether the fit paid the
            planned price.

        The degrees of freedom count the coefficients, less one per equation for a declared
        intercept (``Intercept`` in the names: a formula's, or ``scaling``'s ``intercept``): a
        constant column is recognised by its name, never by looking at the data.
        """
        import pandas as pd
        self._check_fitted()
        led = self.privacy_
        comm = self.communication_
        names, response, classes = self._coef_names()
        n_params = self.coef_.size
        df_model = n_params - int(np.sum(names.get_level_values("term") == "Intercept"))
        header = {
            "Dep. Variable": response,
            "Family": self.family_.name,
            "Link": self.family_.link,
            "Method": self.method,
            "No. Observations": str(self.n_samples_),
            "No. Clients": str(self.n_clients_),
            "Df Model": str(df_model),
            "Df Residuals": str(self.n_samples_ - n_params),
            **rounds_row(comm),
            **privacy_rows(led, delta, getattr(self, "mu_", None)),
            "Clipping bound B": clip_row(self.clip_, getattr(self, "scaler_", None) is not None),
            "Iterations": str(self.n_iter_),
        }
        header.update(self._goodness_of_fit(data))
        header.update(self._site_weights_row())
        if classes is not None:
            header["Reference class"] = f"{response}={classes[0]}"
        levels = getattr(self, "levels_", {}).get(response)
        if classes is None and levels is not None and len(levels) == 2:  # a two-level response of a logistic fit
            header["Modelled level"] = f"{response}={levels[1]} (against {levels[0]}, the first level, as in R)"
        coefs = pd.DataFrame({"coef": self.coef_.ravel(order="F")}, index=names)
        notes = [f"NOT fully private: {leak}" for leak in led.leaks]
        result = self.inference_
        if result is None:
            header["Inference"] = "none (fitted with inference=None)"
        else:
            header["Inference"] = result.method
            if result.clipped_fraction is not None:
                header["Clipped at estimate"] = clipped_row(*result.clipped_fraction)
            if result.dispersion is not None:
                phi, sd = result.dispersion
                if self.family_.has_dispersion:  # the residual variance, on the response's own scale (statsmodels' scale)
                    unit = getattr(getattr(self, "scaler_", None), "response_scale", 1.0) ** 2
                    phi, sd = phi * unit, sd * unit
                key = "Scale" if self.family_.has_dispersion else "Pearson dispersion"
                capped = "" if self.family_.has_dispersion else "; each row's term capped, so a lower bound"
                header[key] = f"{phi:.4g}" + (f" (+- {sd:.2g}, private sum{capped})" if sd > 0 else "")
            a = result.alpha if alpha is None else alpha
            ci = result.conf_int(a)
            stat = "t" if result.df is not None and np.any(np.isfinite(result.df)) else "z"  # Student's t where used
            coefs["std err"], coefs[stat], coefs[f"P>|{stat}|"] = result.bse, result.zvalues, result.pvalues
            coefs[f"[{a / 2:g}"], coefs[f"{1 - a / 2:g}]"] = ci[:, 0], ci[:, 1]
            notes += [_named_note(note, names) for note in result.notes]
        stopped = not np.all(getattr(self, "converged_", True))  # where the path stopped is not an estimate
        if stopped:
            notes.insert(0, "the fit did not converge: the column 'stopped at' is where its path stopped, not an "
                            "estimate (it can lie any distance from the optimum); see its ConvergenceWarning")
        if plan is not None:
            header["Privacy share of variance"] = privacy_share_row(
                None if result is None else result.privacy_share, plan.frame["privacy_share"].to_numpy())
        return Summary(f"{self.method} results", header, coefs, notes, stopped=stopped)

    def _site_weights_row(self) -> dict[str, str]:
        """The summary's "Site weights" row where the estimate does not weigh the sites by size: the range of the
        ratios ``w_i / (n_i / N)`` and the effective numbers of sites ``1 / sum w_i^2`` against ``N^2 / sum n_i^2``."""
        w, sizes = getattr(self, "site_weights_", None), getattr(self, "client_sizes_", None)
        if w is None or sizes is None:
            return {}
        pi = sizes / np.sum(sizes)
        if np.allclose(w, pi, rtol=1e-9, atol=0.0):
            return {}
        ratio = w / pi
        return {"Site weights": f"not by size (weights={self.get_params().get('weights')!r}): w_i / (n_i / N) from "
                                f"{np.min(ratio):.3g} to {np.max(ratio):.3g}, {1.0 / float(np.sum(w ** 2)):.3g} effective "
                                f"sites ({1.0 / float(np.sum(pi ** 2)):.3g} by size; site_weights_)"}

    def _goodness_of_fit(self, data) -> dict[str, str]:
        """The summary's goodness-of-fit lines: the values with ``data`` at mu = inf, else why they are not shown."""
        if not self.family_.likelihood:
            return {"Log-Likelihood": f"n/a ({self.family_.name}: not a likelihood)"}
        if math.isfinite(self.privacy_.mu):
            return {"Log-Likelihood": "n/a (" + _PRIVATE_FIT_STATISTICS + ")"}
        if data is None:
            return {"Log-Likelihood": "n/a (non-private fit: pass summary(data=...) for log-likelihood, deviance, "
                                      "AIC, BIC and pseudo-R^2; the fit keeps no rows)"}
        X, y = data if isinstance(data, tuple) else (data, None)
        st = self.fit_statistics(X, y)
        rows = {"Log-Likelihood": f"{st.llf:.6g}", "Deviance": f"{st.deviance:.6g}", "AIC": f"{st.aic:.6g}",
                "BIC": f"{st.bic:.6g}"}
        if self.coef_.ndim > 1:  # the multinomial: McFadden's, as statsmodels' MNLogit reports it
            rows["Pseudo R-squ. (McFadden)"] = f"{st.mcfadden_rsquared:.4g}"
        return {**rows, "Pseudo R-squ. (CS)": f"{st.pseudo_rsquared:.4g}"}

    def _coef_names(self) -> tuple[pd.Index, str, list | None]:
        """Coefficient names in ``coef_.ravel(order="F")`` order, the response name and the classes.

        Features: ``feature_names_in_`` (a ``glm()`` fit) or ``x0, x1, ...``, with the column that
        the scaling declares as intercept named ``Intercept`` (it is 1 by declaration). Multinomial:
        a (equation, term) MultiIndex, one equation ``response=level`` per non-reference class, as
        statsmodels' ``MNLogit`` summary labels them; classes are ``levels_[response]`` of a
        ``glm()`` fit, else ``0, ..., K-1`` with response ``y``.
        """
        import pandas as pd
        features = list(getattr(self, "feature_names_in_", None) or [f"x{j}" for j in range(self.coef_.shape[0])])
        j = getattr(getattr(self, "scaler_", None), "intercept", None)
        if j is not None and getattr(self, "feature_names_in_", None) is None:
            features[j] = "Intercept"
        if self.coef_.ndim == 1:
            return pd.Index(features, name="term"), getattr(self, "response_name_", "y"), None
        response, classes = classes_of(self, self.coef_.shape[1])
        equations = [f"{response}={c}" for c in classes[1:]]
        index = pd.MultiIndex.from_product([equations, features], names=["equation", "term"])
        return index, response, classes

    def _coef_labels(self) -> list[str]:
        """:meth:`_coef_names` as messages print them (a multinomial's ``y=b age``, the summary's row)."""
        return [label(name) for name in self._coef_names()[0]]


def _named_note(note: str, names: pd.Index) -> str:
    """An inference note that lists coefficients by position (``[2, 3] (original order)``: the inference knows no
    names) with their names as the summary's table shows them."""
    match = re.search(r"\[([\d, ]*)\] \(original order\)", note)
    if match is None:
        return note
    labels = [label(name) for name in names]
    shown = ", ".join(labels[int(k)] for k in match[1].split(","))
    return note[:match.start()] + shown + note[match.end():]
