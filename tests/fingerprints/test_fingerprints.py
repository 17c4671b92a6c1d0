"""Fingerprints of every registered estimator: coefficients, standard errors and ledgers at fixed seeds.

The guard of the client/server refactor (issue 11): recorded from main before it, every fit must
reproduce them to 1e-12 relative afterwards. Every parameter that matters is explicit (the
registry's small ``test_params``, fixed or private clipping, private scaling, mu finite and
infinite), so a change of a default does not hide behind them. To record them again after an
intended change of the numbers: ``python tests/fingerprints/test_fingerprints.py --record``; to add
those of a newly registered estimator only: ``... --add``.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from privfedstat import FederatedData, get_family
from privfedstat.estimators.registry import methods

FILE = Path(__file__).with_name("fingerprints.json")
RTOL = 1e-12


def _data(family: str) -> FederatedData:
    rng = np.random.default_rng(11)
    sizes = np.array([60, 90, 120, 75])
    N = int(sizes.sum())
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2)) * [1.0, 3.0] + [0.0, 5.0]])
    eta = X @ np.array([0.3, -0.6, 0.2])
    if family == "logistic":
        y = (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(float)
    elif family == "poisson":
        y = rng.poisson(np.exp(np.clip(eta - 1.0, -5, 3))).astype(float)
    else:
        y = rng.integers(0, 3, N).astype(float)
    return FederatedData.from_pooled(X, y, sizes=sizes)


def _cases():
    for spec in methods():
        families = ("logistic", "poisson", "multinomial")
        for family in families:
            mus = (2.0, math.inf) if spec.private else (math.inf,)
            for mu in mus:
                clips = ("fixed", "auto") if spec.private else ("none",)
                for clip in clips:
                    yield f"{spec.name}-{family}-mu{mu:g}-{clip}", spec, family, mu, clip


def _fit(spec, family, mu, clip):
    fam = get_family("multinomial", n_classes=3) if family == "multinomial" else family
    params = dict(spec.test_params, family=fam)
    if spec.private:
        params.update(mu=mu, random_state=7)
        if clip == "fixed":
            params.update(spec.fixed_clip_params(2.0))
        else:
            accepted = spec.cls._param_names()  # client-level estimators have no per-sample bound or row scaling
            params.update({k: v for k, v in (("clip", "auto"), ("scaling", "private")) if k in accepted})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = spec.cls(**params).fit(_data(family))
    out = {"coef": np.asarray(est.coef_, dtype=float).ravel().tolist(),
           "releases": [[r.stage, np.asarray(r.sigma, dtype=float).tolist()] for r in est.privacy_.releases]}
    if est.inference_ is not None:
        out["bse"] = np.asarray(est.bse_, dtype=float).ravel().tolist()
    return out


CASES = list(_cases())


@pytest.mark.parametrize("name, spec, family, mu, clip", CASES, ids=[c[0] for c in CASES])
def test_fit_reproduces_its_fingerprint(name, spec, family, mu, clip):
    recorded = json.loads(FILE.read_text())
    assert name in recorded, f"no fingerprint for {name}: record them (see the module docstring)."
    got, want = _fit(spec, family, mu, clip), recorded[name]
    np.testing.assert_allclose(got["coef"], want["coef"], rtol=RTOL, atol=0)
    assert [s for s, _ in got["releases"]] == [s for s, _ in want["releases"]]
    for (stage, a), (_, b) in zip(got["releases"], want["releases"]):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=0, err_msg=stage)
    if "bse" in want:
        np.testing.assert_allclose(got["bse"], want["bse"], rtol=1e-9, atol=0)  # eigen-decompositions: LAPACK rounding


def test_every_registered_estimator_has_fingerprints():
    recorded = json.loads(FILE.read_text())
    assert {c[0] for c in CASES} <= set(recorded)


if __name__ == "__main__" and "--record" in sys.argv:
    FILE.write_text(json.dumps({name: _fit(spec, f, mu, clip) for name, spec, f, mu, clip in CASES}, indent=0))
    print(f"recorded {len(CASES)} fingerprints in {FILE}")
elif __name__ == "__main__" and "--add" in sys.argv:  # a newly registered estimator: record only what is missing
    recorded = json.loads(FILE.read_text())
    new = {name: _fit(spec, f, mu, clip) for name, spec, f, mu, clip in CASES if name not in recorded}
    FILE.write_text(json.dumps({**recorded, **new}, indent=0))
    print(f"added {len(new)} fingerprints to {FILE}: {sorted(new)}")
