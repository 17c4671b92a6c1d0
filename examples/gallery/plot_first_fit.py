"""
A private logistic regression next to the MLE
=============================================

statsmodels' bundled ``fair`` data (6366 women; did she have an affair?) split at random over 10 sites,
each private at mu = 2. The response is a yes/no column, read as R reads a two-level factor (``no`` is
failure, ``yes`` is modelled). The private fit's intervals include the privacy noise; the pooled,
non-private fit (``mu=float("inf")``, equal to statsmodels' ``Logit``) is drawn beside it.
"""

import matplotlib.pyplot as plt
import numpy as np
import statsmodels.api as sm

import privfedstat as pfs

df = sm.datasets.fair.load_pandas().data
df["affair"] = np.where(df["affairs"] > 0, "yes", "no")
df["site"] = np.random.default_rng(0).integers(0, 10, len(df))
formula = "affair ~ rate_marriage + age + yrs_married + religious + educ"
levels = {"affair": ["no", "yes"]}

private = pfs.glm(formula, df, client="site", family="binomial", levels=levels, mu=2, random_state=0)
pooled = pfs.glm(formula, df, client="site", family="binomial", levels=levels, mu=float("inf"))
print(private.summary())

# %%
# The price of privacy: the private standard errors over the non-private ones, and the distance of the
# private estimates from the MLE in units of the MLE's standard error.
print((private.bse / pooled.bse).round(2))
print(((private.params - pooled.params) / pooled.bse).round(2))

# %%
# The coefficients with their 95% intervals (the private fit's are wider by the factors above):
ax = private.plot_coefficients(reference=pooled)
ax.set_title("mu = 2 per site (FedIRLS) and the pooled MLE")
plt.tight_layout()
