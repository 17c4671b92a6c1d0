"""The declarative parameter tables (:mod:`privfedstat._validation`): the rules, the messages, and every registered
estimator's table against its ``__init__`` (the network estimators': ``tests/deep/test_network_contract.py``)."""

import math
from numbers import Integral, Real
from types import SimpleNamespace

import numpy as np
import pytest
from _contract import check_parameter_tables

from privfedstat._validation import BOOL, Free, InstanceOf, Interval, Options, validate_parameters
from privfedstat.algorithms.registry import methods

CLASSES = [spec.cls for spec in methods()]


def test_every_parameter_has_a_rule_and_every_rule_a_parameter():
    check_parameter_tables(CLASSES)


TABLE = {
    "n": [Interval(Integral, 1), "auto"],
    "rate": Interval(Real, 0, 1, closed="neither", hint="It is the rate r."),
    "bound": [Interval(Real, 0, None, closed="neither", finite=False), None],
    "scale": Interval(Real, 0, None, closed="neither"),
    "how": Options(("gd", "ig")),
    "flag": BOOL,
    "obj": [InstanceOf(dict, "a dict"), None],
    "anything": Free("somewhere else"),
}
GOOD = dict(n=3, rate=0.5, bound=math.inf, scale=np.float64(2.0), how="ig", flag=np.bool_(True), obj=None,
            anything=object())


def test_good_values_pass():
    validate_parameters(SimpleNamespace(**GOOD), TABLE)
    validate_parameters(SimpleNamespace(**{**GOOD, "n": "auto", "bound": None, "obj": {}}), TABLE)


@pytest.mark.parametrize("bad, error, message", [
    ({"n": 0}, ValueError, "n must be an integer >= 1 or 'auto', got 0."),
    ({"n": 2.5}, TypeError, "n must be an integer >= 1 or 'auto', got 2.5 (float)."),
    ({"n": True}, TypeError, "n must be an integer >= 1 or 'auto', got True (bool)."),
    ({"n": "many"}, ValueError, "n must be 'auto' or an integer >= 1, got 'many'."),
    ({"rate": 1.0}, ValueError, "rate must be in (0, 1), got 1.0. It is the rate r."),
    ({"rate": float("nan")}, ValueError, "rate must be in (0, 1), got nan."),
    ({"bound": 0}, ValueError, "bound must be > 0 or None, got 0.0."),
    ({"scale": math.inf}, ValueError, "scale must be finite, got inf."),
    ({"scale": "big"}, TypeError, "scale must be a number > 0, got 'big' (str)."),
    ({"how": "sgd"}, ValueError, "how must be one of ('gd', 'ig'), got 'sgd'."),
    ({"flag": "yes"}, TypeError, "flag must be True or False, got 'yes'."),
    ({"obj": []}, TypeError, "obj must be a dict or None, got []."),
])
def test_a_refusal_names_the_parameter_what_is_allowed_and_the_value(bad, error, message):
    with pytest.raises(error) as info:
        validate_parameters(SimpleNamespace(**{**GOOD, **bad}), TABLE)
    assert str(info.value).startswith(message)
