"""Fingerprints of every registered estimator: coefficients, standard errors and ledgers at fixed seeds.

Every fit must reproduce its recorded coefficients, standard errors and release noise sds. Every
parameter that matters is explicit (the registry's small ``test_params``, fixed or private
clipping, private scaling, mu finite and infinite), so a change of a default does not hide behind
them. To record them again after an intended change of the numbers: ``python
tests/fingerprints/test_fingerprints.py --record``; to add those of a newly registered estimator
only: ``... --add``.

Tolerance: each recorded vector v (a fit's ``coef_``, its ``bse_``, one release's sigma per client)
is matched as ``max|got - v| <= TOL * max|v|`` with ``TOL = 1e-10``: relative to the vector's
largest entry, so that an entry near zero (a coefficient of 1e-4 next to one of 0.5) may carry the
absolute rounding of its neighbours. An elementwise relative tolerance cannot travel: the same code
on another CPU moves such entries by 1e-12 relative and more. Measured over all 162 fits (the
largest ``max|got - v| / max|v|`` of any coef / bse / sigma vector; for the changed algorithms the
smallest such move among the fits the change touches)::

    perturbation                                         coef      bse       sigma
    same algorithm, another machine (largest move):
      OpenBLAS kernels SkylakeX, Sandybridge, Prescott   2.3e-14   4.1e-14   0
        instead of Haswell (OPENBLAS_CORETYPE)
      numpy SIMD limited to AVX2 / SSE4                  2.3e-14   5.1e-14   2.2e-16
        (NPY_DISABLE_CPU_FEATURES), Prescott BLAS
      1 BLAS thread instead of 2 (threadpoolctl)         0         0         0
      each entry of X moved by 0 or +-1 ulp              2.1e-14   4.1e-14   0
    changed algorithm (smallest move):
      mu times 1 + 1e-6 (a calibration constant)         7.6e-9    1.5e-7    1.0e-6
      "auto" step size times 1 + 1e-6                    6.2e-8    1.1e-9    1.0e-6
      one more round / iteration                         1.6e-4    3.1e-6    (more releases)
      random_state 8 instead of 7                        6.8e-2    2.0e-2    2.5e-1

(The elementwise relative drift of the first rows reaches 3.7e-12, past the 1e-12 a per-entry rule
would allow.) TOL sits about 2000 times above the largest drift between machines and 11-76 times
below the smallest change of an algorithm that was tried, a change of a constant by one part in a
million; sigmas that are zero (mu = inf) must stay zero. The release stages must match exactly.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from privfedstat import DivergenceError, FederatedData, get_family
from privfedstat.algorithms.registry import methods

FILE = Path(__file__).with_name("fingerprints.json")
#: largest move of a recorded vector, relative to its largest entry (see the module docstring)
TOL = 1e-10


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
        try:
            est = spec.cls(**params).fit(_data(family))
        except DivergenceError:  # the verdict: no estimate (a fixed step too large for the uncentred column)
            return {"coef": [], "releases": [], "error": "DivergenceError"}
    out = {"coef": np.asarray(est.coef_, dtype=float).ravel().tolist(),
           "releases": [[r.stage, np.asarray(r.sigma, dtype=float).tolist()] for r in est.privacy_.releases]}
    res = est.inference_
    if res is not None:  # the covariance parts: a fit that did not converge withholds bse_ (NaN) but keeps them
        cov = res.cov if res.cov_sampling is None else res.cov_sampling + res.cov_protocol
        sd = np.sqrt(np.maximum(np.diag(cov), 0.0)).reshape(np.shape(est.coef_), order="F")
        out["bse"] = sd.ravel().tolist()
    return out


CASES = list(_cases())


def assert_close(got, want, what: str) -> None:
    """``max|got - want| <= TOL max|want|`` (same shape): the rule of the module docstring."""
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape, what
    scale = float(np.max(np.abs(want), initial=0.0))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL * scale, err_msg=what)


@pytest.mark.parametrize("name, spec, family, mu, clip", CASES, ids=[c[0] for c in CASES])
def test_fit_reproduces_its_fingerprint(name, spec, family, mu, clip):
    recorded = json.loads(FILE.read_text())
    assert name in recorded, f"no fingerprint for {name}: record them (see the module docstring)."
    got, want = _fit(spec, family, mu, clip), recorded[name]
    assert got.get("error") == want.get("error")
    assert_close(got["coef"], want["coef"], "coef")
    assert [s for s, _ in got["releases"]] == [s for s, _ in want["releases"]]
    for (stage, a), (_, b) in zip(got["releases"], want["releases"]):
        assert_close(a, b, stage)
    assert ("bse" in got) == ("bse" in want)
    if "bse" in want:
        assert_close(got["bse"], want["bse"], "bse")


@pytest.mark.parametrize("name", ["fedsgd-logistic-mu2-fixed", "fedirls-multinomial-mu2-auto",
                                  "hifedprox-poisson-mu2-fixed"])
def test_the_tolerance_catches_a_change_of_one_part_in_a_million(name):
    """mu times 1 + 1e-6 moves the fit past TOL: the guard fails on a changed calibration constant."""
    _, spec, family, mu, clip = next(c for c in CASES if c[0] == name)
    want = json.loads(FILE.read_text())[name]
    got = _fit(spec, family, mu * (1 + 1e-6), clip)
    with pytest.raises(AssertionError):
        assert_close(got["coef"], want["coef"], "coef")


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
