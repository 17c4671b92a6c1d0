"""The kernel warm-up of parallel studies compiles the signatures that a study's fits call."""

import warnings

import numpy as np

from privfedstat import AutoClip, FedNewton, FedSGD
from privfedstat.simulations import GLMDesign
from privfedstat.simulations.kernel_warmup import _shares


def test_warm_up_signatures_are_those_a_study_fit_calls():
    """If a kernel's signature changed, the warm-up would compile a useless one and every worker would compile
    the new one again (a cold study twice as slow, no wrong number): the fits below must have called exactly the
    signatures the warm-up compiles."""
    design = GLMDesign("logistic")
    data = design.sample([50] * 20, np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cls in (FedSGD, FedNewton):
            cls(clip=AutoClip(), step_size=0.5, inference=None, random_state=0).fit(data)
    for share in _shares():
        for dispatcher, signature in share:
            assert tuple(signature) in [tuple(s) for s in dispatcher.signatures], dispatcher.py_func.__name__
