"""Checks shared by the two contract suites: the GLM estimators' (``tests/estimators/test_contract.py``)
and the network estimators' (``tests/deep/test_network_contract.py``)."""

import pickle

import numpy as np
import pandas as pd
import pytest

from privfedstat import clone
from privfedstat.federation.channel import Channel


def assert_same_fit(a, b):
    """Same coefficients, path, ledger and communication."""
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.history_, b.history_)
    pd.testing.assert_frame_equal(a.privacy_.to_frame(), b.privacy_.to_frame())
    assert a.privacy_.leaks == b.privacy_.leaks
    assert a.communication_ == b.communication_


def check_parameters(est, defaults: dict, test_params: dict, positional) -> None:
    """Parameters stored as given and settable, the non-default ones in the repr, keyword-only construction.

    ``defaults``: ``get_params()`` of the class's defaults; ``positional``: a call that passes a
    parameter by position (must raise TypeError).
    """
    params = est.get_params()
    for k, v in test_params.items():
        assert params[k] is v
        assert (f"{k}={v!r}" in repr(est)) == (v != defaults[k])  # repr shows the non-default parameters
    for name in params:
        token = object()
        assert est.set_params(**{name: token}) is est and est.get_params()[name] is token
    est.set_params(**params)
    with pytest.raises(ValueError, match="invalid parameter 'nonsense'"):
        est.set_params(nonsense=1)
    with pytest.raises(TypeError):
        positional()


def check_fit_keeps_parameters(est, data) -> None:
    """``fit`` neither rebinds nor mutates a parameter (scikit-learn's contract): each is the same object,
    pickled to the same bytes, afterwards."""
    before = est.get_params()
    frozen = {k: pickle.dumps(v) for k, v in before.items()}
    est.fit(data)
    after = est.get_params()
    assert after.keys() == before.keys()
    for k, v in after.items():
        assert v is before[k], k
        assert pickle.dumps(v) == frozen[k], k


def check_clone(fitted, data) -> None:
    """``clone`` gives an unfitted copy with the same parameters that refits to the same numbers."""
    copy = clone(fitted)
    assert type(copy) is type(fitted) and copy is not fitted and not hasattr(copy, "coef_")
    mine, theirs = copy.get_params(), fitted.get_params()
    assert mine.keys() == theirs.keys()
    for k in mine:
        assert _frozen(mine[k]) == _frozen(theirs[k]), k
    assert_same_fit(copy.fit(data), fitted)


def _frozen(value):
    """A parameter as comparable data: a network's weights and buffers (a deep copy of a torch module pickles to
    other bytes), else its pickle."""
    if hasattr(value, "state_dict"):
        return {k: t.tolist() for k, t in value.state_dict().items()}
    return pickle.dumps(value)


def check_pickle_round_trip(est, inputs) -> None:
    """A pickled fit predicts, reports and summarises as the original."""
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict(inputs), est.predict(inputs))
    assert_same_fit(back, est)
    assert back.summary().as_text() == est.summary().as_text()


def record_uploads(monkeypatch) -> list:
    """Record every upload the server receives (Channel.receive): ``("release" | "send", floats per client)``.

    A reply of aggregated releases (noisy messages) is a "release", one of local releases
    (post-processing of perturbed values sent) a "send"; a reply mixes neither.
    """
    sent = []
    receive = Channel.receive

    def recording_receive(self, reply, **kw):
        if kw.get("sent", True):
            kinds = {r.kind for r in reply.releases} or {"aggregated"}
            assert len(kinds) == 1
            sent.append(("release" if kinds == {"aggregated"} else "send", np.asarray(reply.values)[0].size))
        return receive(self, reply, **kw)

    monkeypatch.setattr(Channel, "receive", recording_receive)
    return sent


def check_communication(est, sent: list, n_clients: int) -> None:
    """The communication counts are exactly the recorded uploads; aggregated releases sit in the "release"
    rounds only and local releases in the "send" rounds only."""
    comm = est.communication_
    assert comm.rounds == len(sent)
    assert comm.floats_per_client == sum(n for _, n in sent)
    assert comm.total_floats == comm.floats_per_client * n_clients
    releases = est.privacy_.releases
    aggregated = [r.round for r in releases if r.kind == "aggregated"]
    assert aggregated == [i for i, (how, _) in enumerate(sent) if how == "release"]
    local = {r.round for r in releases if r.kind == "local"}
    assert local == {i for i, (how, _) in enumerate(sent) if how == "send"}


def check_parameter_tables(classes) -> None:
    """Every parameter of each estimator in ``classes`` has a rule in its table (a ``Free`` rule declares one
    checked where it is resolved), and every table names only parameters: those of the class's own
    ``__init__``, or for a class without one (a base or a mixin) of a subclass that has one."""
    for cls in classes:
        table = cls._parameter_table()
        missing = [name for name in cls._param_names() if name not in table]
        assert not missing, f"{cls.__name__}: no rule for {missing} (declare Free(where) for one checked elsewhere)"
    declaring = {klass for cls in classes for klass in cls.__mro__ if "_parameter_constraints" in vars(klass)}
    for klass in declaring:
        if "__init__" in vars(klass):
            scope = set(klass._param_names())
        else:
            scope = {name for sub in _subclasses(klass) if "__init__" in vars(sub) for name in sub._param_names()}
        unknown = set(vars(klass)["_parameter_constraints"]) - scope
        assert not unknown, f"{klass.__name__}._parameter_constraints names {sorted(unknown)}, not parameters"


def _subclasses(klass: type) -> set[type]:
    """Every class that inherits ``klass``, at any depth."""
    direct = set(klass.__subclasses__())
    return direct.union(*(_subclasses(sub) for sub in direct))
