"""
Choosing mu with a plan
=======================

Before any data are touched, :func:`privfedstat.plan_study` predicts the standard error and the power
that the default private fit will have at a given mu, from public design information: the site sizes, a
sample of plausible design rows and a guess of the coefficients. Here the design rows and the guess are
those of statsmodels' ``fair`` data (as a pilot study would give them); the plan is for 10 sites of 637
rows.
"""

import matplotlib.pyplot as plt
import statsmodels.api as sm
import statsmodels.formula.api as smf

import privfedstat as pfs

df = sm.datasets.fair.load_pandas().data
df["affair"] = (df["affairs"] > 0).astype(float)
pilot = smf.logit("affair ~ rate_marriage + age + yrs_married + religious + educ", df).fit(disp=0)
X = pilot.model.exog  # the design rows, intercept first
plan = pfs.plan_study(X, pilot.params.to_numpy(), family="logistic", sizes=[637] * 10, mu=2,
                      names=list(pilot.params.index))
print(plan)

# %%
# Interval width over the non-private one, against mu: the knee is between mu = 1 and 2, and above
# mu = 4 the intervals are within 5% of the non-private ones (the 25% of mu spent on the standard
# errors themselves sets that floor).
curve = plan.curve([0.5, 1, 2, 4, 8])
print(curve.pivot(index="mu", columns="term", values="width_ratio").round(2))

# %%
# The power of the test of ``age`` (a small effect) against mu, with the non-private line:
fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
plan.plot("age", "power", ax=axes[0])
plan.plot("age", "half_width", ax=axes[1])
plt.tight_layout()
