"""The MSE predictor of an estimator: its registered method's linearised recursion at its parameters."""

from __future__ import annotations

from ..algorithms.registry import method_of, methods
from ..inference.config import resolve_inference
from ..theory.predictor import MSEPrediction, Problem, predict_mse_from_params

__all__ = ["predict_mse"]


def predict_mse(estimator, problem: Problem, *, clip=None, hessian_clip=None, linearise: str = "path",
                n_mc: int = 2**15, random_state=0) -> MSEPrediction:
    """Predict E||theta_hat - theta_0||^2 of an (unfitted) private federated estimator.

    The estimator's registered method (:func:`~privfedstat.algorithms.registry.method_of`) gives the
    recursion (``MethodSpec.predictor``), the name and the ``"auto"`` iteration counts; its
    ``get_params()`` give the settings and its ``inference`` the share of mu that ``fit`` spends on
    inference (``Inference().budget`` for the default "auto", none for ``inference=None``), taken
    off in squares as ``fit`` does. The prediction itself is
    :func:`~privfedstat.theory.predict_mse_from_params` (formulas, assumptions and where it breaks
    down are documented there).

    Parameters
    ----------
    estimator : FedSGD, FedAvg, FedHybrid or FedNewton
        An estimator of a registered method with a predictor. Only its parameters are read. A
        numeric ``clip`` is used as is; with ``clip="auto"`` (or an :class:`~privfedstat.AutoClip`)
        pass the bound B it will choose as ``clip=``.
    problem : Problem
        The data-generating process and the client sizes (:class:`privfedstat.theory.Problem`).
    clip : float, optional
        B, when the estimator chooses it from the data.
    hessian_clip : float, optional
        FedNewton's per-sample Hessian bound C_H at theta = 0, when the estimator chooses it from the data
        (default: the population's noise-free search there).
    linearise : {"path", "target"}, default "path"
        Propagate along the noise-free population path, or with the Jacobian at the target.
    n_mc : int, default 32768
        Monte-Carlo covariate draws for the population expectations (y | x is integrated exactly).
    random_state : int or SeedSequence, default 0
        Seed of those draws (and of FedNewton's projection Monte Carlo).

    Returns
    -------
    MSEPrediction

    References
    ----------
    Core paper, Algorithms 1-4; Theorems 3.2, 3.3, 3.5, 3.7, 3.9 (whose constants this replaces).
    """
    try:
        method = method_of(estimator)
    except TypeError:
        method = None
    if method is None or method.predictor is None or not hasattr(estimator, "get_params"):
        known = ", ".join(s.display for s in methods() if s.predictor is not None)
        raise TypeError(f"predict_mse needs an estimator of a method with a predictor ({known}), got {estimator!r}.")
    params = estimator.get_params()
    config = resolve_inference(params.get("inference"))
    share = 0.0 if config is None else config.budget
    return predict_mse_from_params(method.predictor, params, problem, method=method.display,
                                   auto_counts=method.auto_counts, inference_budget=share, clip=clip,
                                   hessian_clip=hessian_clip, linearise=linearise, n_mc=n_mc, random_state=random_state)
