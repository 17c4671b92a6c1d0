"""The core paper's simulation studies (Section 4, Appendix B) as named specifications.

Settings the paper states are used as stated (100 replicates; FedSGD K=50, eta=0.5; FedHybrid
K1=30, K2=20; FedAvg K=50, R=2; FedNewton K=50, R=1; the m, n and allocation grids of Sections
4.1-4.5). Settings it leaves out, chosen here and overridable through the functions' arguments:

* mu for Figs. 1-3, 5-6, 11-14, 16: **mu = 2** per client, the smaller of the two budgets of Fig. 4;
* the m grid of Figs. 3/6 ("m from 60 to 140"): {60, 80, 100, 120, 140};
* the m grid of Figs. 5/16 (N = 20000 fixed): {25, 50, 100, 200, 400} (mean n from 800 to 50);
* Figs. 4/15 (K varied): m = 20 clients with n = 100 each (N = 2000), K in
  {10, 25, 50, 100, 150, 200, 300}, mu in {2, 6, inf}: with the paper's N >= 20000 the privacy noise
  is too small at mu = 2 for the rise with K to show within K <= 300;
* the covariate design (p, beta_true, sigma_c): see :mod:`privfedstat.simulations.dgp`;
* the clipping bound: ``clip="auto"`` (private, 10% of mu) by default; ``clip="paper"`` reproduces
  the paper's non-private rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .allocations import Equal, FixedTotal, LogNormal, Uniform
from .dgp import GLMDesign
from .runner import METHODS, Scenario

__all__ = ["Study", "STUDIES", "get_study"]

INF = float("inf")
SET1_M = (20, 30, 40, 50, 60)
SET1_N = (30, 50, 70, 90, 110)
SET1_RANGES = ((10, 90), (20, 80), (30, 70), (60, 160), (80, 140), (100, 120))
SET2_M = (60, 80, 100, 120, 140)
SET2_ALLOC = (Equal(400), Uniform(100, 700), LogNormal(5.5, 1.0))
SET3_K = (10, 25, 50, 100, 150, 200, 300)
SET3_MU = (2.0, 6.0, INF)
SET4_M = (25, 50, 100, 200, 400)


@dataclass(frozen=True)
class Study:
    """A named simulation study.

    Attributes
    ----------
    name : str
        e.g. ``"fig5"``.
    description : str
        One line.
    family : str
        Default family (the paper's figure); ``scenarios(family=...)`` can change it.
    methods : tuple of str
        Methods shown in the figure.
    x, line, panel : str
        Tidy columns for the x axis, the lines and the panels of the figure.
    build : callable
        ``build(family, mu, clip) -> list[Scenario]``.
    """

    name: str
    description: str
    family: str
    methods: tuple[str, ...]
    x: str
    line: str
    panel: str
    build: Callable[..., list[Scenario]]

    def scenarios(self, *, family: str | None = None, mu: float = 2.0, clip: float | str = "auto") -> list[Scenario]:
        """The scenarios of this study for ``family`` (default: the figure's own)."""
        family = family or self.family
        return [
            Scenario(s.design, s.n_clients, s.allocation, s.mu, s.n_iter, s.clip, labels={"study": self.name, **s.labels})
            for s in self.build(GLMDesign(family), mu, clip)
        ]


def _set1_equal(design, mu, clip):
    return [Scenario(design, m, Equal(n), mu, clip=clip, labels={"sizes": f"n={n}"}) for n in SET1_N for m in SET1_M]


def _set1_random(design, mu, clip):
    return [Scenario(design, m, Uniform(a, b), mu, clip=clip, labels={"sizes": f"U[{a},{b}]"})
            for a, b in SET1_RANGES for m in SET1_M]


def _set2(design, mu, clip):
    return [Scenario(design, m, alloc, mu, clip=clip, labels={"sizes": alloc.label}) for alloc in SET2_ALLOC for m in SET2_M]


def _set3(design, mu, clip):
    return [Scenario(design, 20, Equal(100), mu_k, n_iter=K, clip=clip, labels={"sizes": "n=100", "privacy": f"mu={mu_k:g}"})
            for mu_k in SET3_MU for K in SET3_K]


def _set4(design, mu, clip):
    return [Scenario(design, m, FixedTotal(20000, scheme), mu, clip=clip, labels={"sizes": scheme})
            for scheme in ("equal", "uniform", "lognormal") for m in SET4_M]


_SGD_HY, _AVG_NEW = ("FedSGD", "FedHybrid"), ("FedAvg", "FedNewton")

STUDIES: dict[str, Study] = {
    s.name: s
    for s in [
        Study("fig1", "FedSGD & FedHybrid: MSE vs m for equal n in {30..110} (logistic)", "logistic", _SGD_HY, "m", "sizes", "method", _set1_equal),
        Study("fig2", "FedAvg & FedNewton: MSE vs m for equal n in {30..110} (logistic)", "logistic", _AVG_NEW, "m", "sizes", "method", _set1_equal),
        Study("fig11", "FedSGD & FedHybrid: MSE vs m, n_i ~ discrete uniform ranges (logistic)", "logistic", _SGD_HY, "m", "sizes", "method", _set1_random),
        Study("fig12", "FedAvg & FedNewton: MSE vs m, n_i ~ discrete uniform ranges (logistic)", "logistic", _AVG_NEW, "m", "sizes", "method", _set1_random),
        Study("fig13", "all four methods: MSE vs m for equal n (Poisson)", "poisson", METHODS, "m", "sizes", "method", _set1_equal),
        Study("fig14", "all four methods: MSE vs m, n_i ~ discrete uniform ranges (Poisson)", "poisson", METHODS, "m", "sizes", "method", _set1_random),
        Study("fig3", "four methods, mean n ~ 400 under three allocations, m = 60..140 (logistic)", "logistic", METHODS, "m", "method", "sizes", _set2),
        Study("fig6", "four methods, mean n ~ 400 under three allocations, m = 60..140 (Poisson)", "poisson", METHODS, "m", "method", "sizes", _set2),
        Study("fig4", "MSE vs iterations K for mu in {2, 6, inf} (logistic)", "logistic", METHODS, "K", "privacy", "method", _set3),
        Study("fig15", "MSE vs iterations K for mu in {2, 6, inf} (Poisson)", "poisson", METHODS, "K", "privacy", "method", _set3),
        Study("fig5", "N = 20000 fixed, m increasing, three allocations (logistic)", "logistic", METHODS, "m", "method", "sizes", _set4),
        Study("fig16", "N = 20000 fixed, m increasing, three allocations (Poisson)", "poisson", METHODS, "m", "method", "sizes", _set4),
    ]
}


def get_study(name: str) -> Study:
    """Look up a study by name (``"fig1"`` ... ``"fig16"``)."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; choose from {list(STUDIES)}.")
    return STUDIES[name]
