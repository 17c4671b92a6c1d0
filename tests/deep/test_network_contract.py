"""The estimator contract, checked for every network estimator of :mod:`privfedstat.deep.registry`.

The counterpart of ``tests/estimators/test_contract.py``: every test is parametrized over
:func:`~privfedstat.deep.registry.network_methods` with each spec's ``test_params``, on one tiny
classifier (a :class:`~privfedstat.deep.models.HeadModel`: 16 inputs, 4 tanh units, 3 classes, 83
parameters) and 52 rows over 4 clients. A network estimator joins the suite by being listed there.

Checked as for the GLM estimators: fit returns self and refits to the same numbers; the fitted
attributes (``coef_``, ``history_``, ``n_iter_``, ``converged_``, ``clip_``, ``privacy_``,
``communication_``) mean the same in every estimator; ``fit`` changes neither its parameters nor
the model; nothing learned before ``fit``; get_params / set_params / clone; pickling; the same
seed gives the same numbers and another seed other numbers; the ledger spends exactly mu per
client (and mu = inf is reported as not private); the communication counts are exactly the
uploads the server receives; bad input is refused before anything is
released (mu <= 0 or NaN, data that is not a TensorFederatedData, inputs of the wrong shape,
labels without an output, non-finite initial weights, non-finite inputs).

Contract items that do not apply to networks, and why:

* the three families (logistic, Poisson, multinomial): a network takes class labels and a loss,
  not a GLM family;
* inference (``bse_``, ``cov_params``, ``conf_int``, the summary's statsmodels columns,
  ``inference=None``): ``supports_inference`` is False, standard errors of network weights are not
  defined by the paper (``bse_`` and the like raise NotFittedError before the fit, as checked);
* clipping by ``"auto"`` / ``"paper"`` / an AutoClip with pilot rounds and private scaling: refused
  or absent by design (their pilots take GLM steps; ``tests/deep/test_estimators.py`` checks the
  refusal);
* ``mse`` and ``score(X, y)`` against GLM coefficients: ``score`` is accuracy here (checked);
* the non-private baselines (NP-Pooled, NP-LocalFit): there are none for networks.

The checks both suites make live in ``tests/_contract.py``.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # collect nothing without torch: the imports below need it

from _contract import (  # noqa: E402
    assert_same_fit,
    check_clone,
    check_communication,
    check_fit_keeps_parameters,
    check_parameter_tables,
    check_parameters,
    check_pickle_round_trip,
    record_uploads,
)
from torch import nn  # noqa: E402

from privfedstat import FederatedEstimator, NotFittedError, deep  # noqa: E402
from privfedstat.deep import TensorFederatedData  # noqa: E402
from privfedstat.deep.models import HeadModel  # noqa: E402
from privfedstat.deep.registry import network_methods  # noqa: E402
from privfedstat.federation.channel import Communication  # noqa: E402
from privfedstat.privacy.ledger import PrivacyLedger  # noqa: E402

torch.set_num_threads(1)  # small networks on a loaded machine: threads only slow them
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

SPECS = network_methods()
SIZES = (12, 16, 10, 14)
MU = 1.5


class TinyNet(HeadModel):
    """Flatten, Linear(16, 4), tanh, then the Linear head (4 -> 3): FedNewton-NN's head is there."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(16, 4), nn.Tanh())
        self.head = nn.Linear(4, 3)


def tiny_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return TinyNet().double()


def flat(model: nn.Module) -> np.ndarray:
    return nn.utils.parameters_to_vector(model.parameters()).detach().numpy()


def tiny_data(inputs_shape=(1, 4, 4), labels=None) -> TensorFederatedData:
    g = torch.Generator().manual_seed(0)
    n = sum(SIZES)
    X = torch.randn(n, *inputs_shape, generator=g, dtype=torch.float64)
    y = (X.flatten(1)[:, :8].sum(dim=1) > 0).long() + (X.flatten(1)[:, 8:].sum(dim=1) > 1).long()
    return TensorFederatedData.from_pooled(X, y if labels is None else labels, sizes=list(SIZES))


DATA = tiny_data()
P = flat(tiny_model()).size


def ids(specs):
    return [s.name for s in specs]


def make(spec, **params):
    """The spec's estimator on a fresh tiny model, with its test parameters, a fixed seed and ``params``."""
    return spec.cls(**{"model": tiny_model(), **spec.test_params, "mu": MU, "random_state": 0, **params})


def test_every_network_estimator_is_listed():
    """The suite walks every estimator class that :mod:`privfedstat.deep` exports, each under its class name."""
    exported = {getattr(deep, name) for name in deep.__all__}
    estimators = {c for c in exported if isinstance(c, type) and issubclass(c, FederatedEstimator)}
    assert {spec.cls for spec in SPECS} == estimators and len(SPECS) == len(estimators)
    assert all(spec.name == spec.cls.__name__.lower() for spec in SPECS)


def test_every_parameter_has_a_rule_and_every_rule_a_parameter():
    check_parameter_tables([spec.cls for spec in SPECS])


# ---------------------------------------------------------------------------------- fitting
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_fit_returns_self_and_is_idempotent(spec):
    est = make(spec)
    assert est.fit(DATA) is est
    first = pickle.loads(pickle.dumps(est))
    est.fit(DATA)
    assert_same_fit(est, first)


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_fitted_attributes_mean_the_same_in_every_estimator(spec):
    est = make(spec).fit(DATA)
    assert est.coef_.shape == (P,) and np.all(np.isfinite(est.coef_))
    np.testing.assert_array_equal(flat(est.model_), est.coef_)
    assert est.history_.shape[1:] == (P,) and len(est.history_) >= 2
    np.testing.assert_array_equal(est.history_[-1], est.coef_)
    assert isinstance(est.n_iter_, int) and est.n_iter_ >= 1
    assert np.asarray(est.converged_).dtype == bool
    assert est.clip_ > 0 and est.mu_ == MU
    assert (est.n_clients_, est.n_samples_) == (len(SIZES), sum(SIZES))
    assert isinstance(est.privacy_, PrivacyLedger) and est.privacy_.n_clients == len(SIZES)
    assert isinstance(est.communication_, Communication) and est.communication_.rounds >= 1
    assert est.inference_ is None and not est.supports_inference
    assert est.predict(DATA.inputs[:7]).shape == (7,)
    proba = est.predict_proba(DATA.inputs[:7])
    assert proba.shape == (7, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    accuracy = np.mean(est.predict(DATA.inputs) == DATA.targets.numpy())
    assert est.score(DATA) == est.score(DATA.inputs, DATA.targets) == accuracy
    assert "parameters" in est.summary().as_text()


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_fit_changes_neither_its_parameters_nor_the_model(spec):
    est = make(spec)
    check_fit_keeps_parameters(est, DATA)
    np.testing.assert_array_equal(flat(est.model), flat(tiny_model()))


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_no_learned_attributes_before_fit(spec):
    est = make(spec)
    public = [a for a in dir(est) if a.endswith("_") and not a.startswith("_")]
    assert "bse_" in public  # properties: must raise NotFittedError, not return data
    for name in public:
        with pytest.raises(NotFittedError):
            getattr(est, name)
    assert not any(hasattr(est, a) for a in ("coef_", "history_", "model_", "privacy_", "communication_"))
    for call in (lambda: est.predict(DATA.inputs), lambda: est.predict_proba(DATA.inputs), est.summary,
                 lambda: est.score(DATA)):
        with pytest.raises(NotFittedError, match="not fitted"):
            call()


# ---------------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_get_params_set_params_clone(spec):
    model = tiny_model()
    est = spec.cls(model=model, **spec.test_params)
    assert est.get_params()["model"] is model
    check_parameters(est, spec.cls(model=model).get_params(), spec.test_params, lambda: spec.cls(model))
    check_clone(make(spec).fit(DATA), DATA)


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_pickle_round_trip(spec):
    check_pickle_round_trip(make(spec).fit(DATA), DATA.inputs)


# ---------------------------------------------------------------------------------- privacy
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_same_seed_same_numbers_different_seed_different_numbers(spec):
    a = make(spec, random_state=7).fit(DATA)
    assert_same_fit(make(spec, random_state=7).fit(DATA), a)
    b = make(spec, random_state=8).fit(DATA)
    assert np.mean(a.coef_ != b.coef_) > 0.9  # the l1 prox may set the same weights to 0 under both seeds


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_ledger_spends_exactly_mu_per_client(spec):
    led = make(spec).fit(DATA).privacy_
    np.testing.assert_allclose(led.client_mu, MU, rtol=0, atol=1e-12)
    assert led.is_private and led.leaks == []
    assert all(r.kind in ("aggregated", "local") and np.all(np.asarray(r.sigma) > 0) for r in led.releases)
    free = make(spec, mu=math.inf).fit(DATA).privacy_
    assert not free.is_private and np.all(np.isinf(free.client_mu))


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_communication_counts_every_transmission_once(spec, monkeypatch):
    """As for the GLM estimators (:func:`_contract.check_communication`); a message is whole parameter vectors
    (FedCanon: the model and its control variate) or the head's parameters (FedNewton-NN's Newton rounds)."""
    sent = record_uploads(monkeypatch)
    check_communication(make(spec).fit(DATA), sent, len(SIZES))
    head = TinyNet().head
    assert all(n % P == 0 or n == head.weight.numel() + head.bias.numel() for _, n in sent)


# ---------------------------------------------------------------------------------- progress
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_progress_bar_counts_the_rounds_on_stderr_and_is_silent_when_off(spec, capsys, monkeypatch):
    """A bar over the rounds (one per request the clients answer) once the fit has run PROGRESS_DELAY_S seconds:
    none for a short fit at the default delay nor with ``progress=False``; with no delay, one whose count is
    ``communication_.rounds``."""
    make(spec).fit(DATA)
    assert capsys.readouterr() == ("", "")
    monkeypatch.setattr(deep.estimators, "PROGRESS_DELAY_S", 0.0)
    make(spec, progress=False).fit(DATA)
    assert capsys.readouterr() == ("", "")
    est = make(spec).fit(DATA)
    out, err = capsys.readouterr()
    assert out == "" and err.rstrip().split("\r")[-1].startswith(f"{est.method}: {est.communication_.rounds}round ")
    with pytest.raises(TypeError, match="progress must be True or False"):
        make(spec, progress="yes").fit(DATA)


# ---------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_bad_input_is_refused(spec):
    for mu in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="mu must be > 0"):
            make(spec, mu=mu).fit(DATA)
    with pytest.raises(TypeError, match="TensorFederatedData"):
        make(spec).fit(DATA.inputs.numpy(), DATA.targets.numpy())
    with pytest.raises(ValueError, match=r"inputs of shape \(1, 5, 5\) do not fit the model"):
        make(spec).fit(tiny_data(inputs_shape=(1, 5, 5)))
    with pytest.raises(ValueError, match="label 5 has no output"):
        make(spec).fit(tiny_data(labels=torch.arange(sum(SIZES)) % 6))
    model = tiny_model()
    with torch.no_grad():
        model.head.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite"):
        make(spec, model=model).fit(DATA)


def test_non_finite_inputs_are_refused_by_the_data():
    X = DATA.inputs.clone()
    X[3, 0, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite"):
        TensorFederatedData.from_pooled(X, DATA.targets, sizes=list(SIZES))
