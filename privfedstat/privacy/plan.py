"""``BudgetPlan``: how one fit splits each client's mu over its stages, in squares.

A fit releases in up to four stages: the private feature scaling, the private clip search, the
protocol (estimation) and the inference at the estimate. Under mu-GDP the stages compose in
squares (Dong, Roth & Su 2022, Corollary 3.3), so a client is mu-GDP in all when
``mu_scaling^2 + mu_clip^2 + mu_estimation^2 + mu_inference^2 = mu^2``. The plan fixes, before any
release, what every stage may spend: each optional stage gets a declared share of mu (``share *
mu``), and the estimation keeps what is left; a stage that spends nothing (scaling skipped, a
fixed clip, no inference) gets 0 and takes nothing from the rest. Every stage draws its budget from
the plan, so the ledger's total per client is exactly mu (checked by
:meth:`~privfedstat.privacy.budget.FitCharge.settle` when the fit is charged to a budget).

The remainder is taken one stage at a time, ``sqrt(left^2 - mu_stage^2)`` in the order scaling,
clip search, inference; with mu = inf every stage that runs has mu = inf (nothing is noised).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BudgetPlan"]


@dataclass(frozen=True)
class BudgetPlan:
    """Per-client GDP budgets of a fit's stages; they compose in squares to ``mu``.

    Attributes
    ----------
    mu : float
        The fit's declared per-client budget.
    scaling : float
        Budget of the private feature scaling (0: none).
    clip : float
        Budget of the private clip search, pilot rounds included (0: none).
    inference : float
        Budget of the inference releases at the estimate (0: none).
    estimation : float
        Budget of the protocol: ``sqrt(mu^2 - scaling^2 - clip^2 - inference^2)``.
    """

    mu: float
    scaling: float
    clip: float
    inference: float
    estimation: float

    @classmethod
    def split(cls, mu: float, *, scaling: float = 0.0, clip: float = 0.0, inference: float = 0.0) -> BudgetPlan:
        """The plan that gives each stage its share of ``mu`` (0: the stage spends nothing) and estimation the rest.

        Raises
        ------
        ValueError
            When the shares leave nothing for estimation; the message names the stage that used it up.
        """
        finite = math.isfinite(mu)

        def stage(share: float) -> float:
            return 0.0 if share == 0 else (share * mu if finite else math.inf)

        mu_scaling, mu_clip, mu_inference = stage(scaling), stage(clip), stage(inference)
        left = _rest(mu, mu, mu_scaling, "the scaling budget leaves nothing for estimation; lower its share.")
        left = _rest(mu, left, mu_clip, "the clipping and scaling budgets leave nothing for estimation; lower their shares.")
        left = _rest(mu, left, mu_inference,
                     f"the inference budget ({inference:g} of mu = {mu:.4g}) leaves nothing for estimation after the "
                     "clipping and scaling budgets; lower Inference(budget=...) or those shares, or fit with "
                     "inference=None.")
        return cls(mu, mu_scaling, mu_clip, mu_inference, left)


def _rest(mu: float, left: float, spent: float, message: str) -> float:
    """``sqrt(left^2 - spent^2)`` (GDP composition in squares); ``left`` when the stage spends nothing, inf with mu = inf."""
    if spent == 0:
        return left
    if math.isinf(mu):
        return math.inf
    rest = left * left - spent * spent
    if rest <= 0:
        raise ValueError(message)
    return math.sqrt(rest)
