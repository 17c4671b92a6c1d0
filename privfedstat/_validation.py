"""Input checks shared by every public entry point.

Each check raises ``ValueError`` or ``TypeError`` with a message that says what to change.

An estimator's parameters are checked from one declarative table (scikit-learn's
``_parameter_constraints``): a dict from parameter name to the list of rules a value may satisfy
(:class:`Interval`, :class:`Options`, :class:`InstanceOf`, :class:`Free`; a bare string or None
stands for that one value). :func:`validate_parameters` checks every entry. A value that no rule
accepts is refused by the first rule that takes its type (a number out of range, a string not among
the options: ``ValueError``), else by the first rule (``TypeError`` from a number or type rule,
``ValueError`` from options); the message names the parameter, what is allowed and the value got.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from .exceptions import DivergenceError

__all__ = [
    "Interval",
    "Options",
    "InstanceOf",
    "Free",
    "BOOL",
    "validate_parameters",
    "ITERATIONS",
    "MAX_ITERATIONS",
    "MU_MAX",
    "MU_MIN",
    "BOUND_PER_MU",
    "LEAST_BOUND_PER_MU",
    "check_finite_bounds",
    "check_positive_int",
    "check_positive_float",
    "check_mu",
    "check_fraction",
    "check_matrix",
    "check_finite_array",
    "check_iterate",
    "iterate_error",
    "DIVERGENCE_NORM",
    "every",
    "some",
]


def check_positive_int(value, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as ``int`` if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}.")
    return int(value)


def check_positive_float(value, name: str, *, allow_inf: bool = False) -> float:
    """Return ``value`` as ``float`` if it is a real number > 0 (and finite unless ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a positive number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}.")
    if math.isinf(value) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {value}.")
    return value


#: The largest finite GDP budget accepted: ``2 / eps`` (eps the float64 machine epsilon), about 9.0e15. The
#: Gaussian mechanism adds noise of sd ``sensitivity / mu``; every statistic the package releases is a mean of n
#: per-sample terms bounded by B with sensitivity ``2 B / n``, so a release given all of a larger mu carries noise
#: below ``2 B / mu < eps B``: less than one rounding unit of the statistic at its bound, i.e. no noise at all
#: (and mu-GDP for mu above about 40 already promises nothing a test could detect). Such a fit is non-private in
#: all but name, and mu^2 overflows from 1.3e154 (the budget splits compose in squares): use ``float('inf')``.
MU_MAX = 2.0 / float(np.finfo(np.float64).eps)
#: The smallest GDP budget accepted: ``2 eps / 2^53`` = 2^-104, about 4.9e-32. A release of a client with n rows
#: has signal at most B and noise sd ``2 B / (n mu)``: below this mu the signal is under one rounding unit of the
#: noise for every client size up to 2^53 (the largest count float64 holds exactly), so the fit would return noise.
MU_MIN = 2.0 * float(np.finfo(np.float64).eps) / 2.0**53


#: The largest finite clipping bound per unit of mu: a release of sensitivity at most ``2 B`` given a share of
#: mu^2 as small as eps (the float64 machine epsilon; FedIRLS's derived split stops there, and a count of at most
#: MAX_ITERATIONS gives every loop's release a share of at least 1e-5) has noise sd up to
#: ``2 B / (mu sqrt(eps))``, whose square must stay below the largest double: ``B <= mu sqrt(eps * DBL_MAX) / 2``,
#: about ``1e146 mu`` (a bound for data on any sensible scale is many orders of magnitude smaller).
BOUND_PER_MU = math.sqrt(float(np.finfo(np.float64).eps) * float(np.finfo(np.float64).max)) / 2.0
#: The smallest clipping bound per unit of mu: a release of sensitivity at least ``2 B / n_i`` from a client of at
#: most 2^53 rows (the largest count float64 holds exactly) given all of mu^2 has noise sd at least
#: ``2 B / (2^53 mu)``, whose square must stay a normal double (the inference squares it):
#: ``B >= mu 2^52 sqrt(DBL_MIN)``, about ``7e-139 mu`` (below it the noise variances underflow to 0 and the
#: score test and the standard errors would read 0 noise).
LEAST_BOUND_PER_MU = 2.0**52 * math.sqrt(float(np.finfo(np.float64).tiny))


def check_mu(mu) -> float:
    """Validate a GDP budget ``mu``: a number in [:data:`MU_MIN`, :data:`MU_MAX`]; ``float('inf')`` means no privacy."""
    if isinstance(mu, bool) or not isinstance(mu, Real):
        raise TypeError(f"mu must be a positive number (use float('inf') for no privacy), got {mu!r} "
                        f"({type(mu).__name__}).")
    mu = float(mu)
    if math.isnan(mu) or mu <= 0:
        raise ValueError(
            f"mu must be > 0 (smaller mu = stronger privacy; float('inf') = non-private), got {mu}."
        )
    if mu < MU_MIN:
        raise ValueError(f"mu={mu:g} is below {MU_MIN:.3g}, where the privacy noise swamps every release below "
                         "float64 rounding (the fit would return noise, not estimates). Strong privacy needs no such "
                         "mu: 0.1 to 1 is already strict.")
    if math.isfinite(mu) and mu > MU_MAX:
        raise ValueError(f"mu={mu:g} is above {MU_MAX:.3g}, where the privacy noise (sd sensitivity / mu) falls below "
                         "the float64 rounding of the statistics it protects: the fit would be non-private in all but "
                         "name. Use mu=float('inf') for a non-private fit, or a mu that means privacy (0.1 to 10).")
    return mu


def check_fraction(value, name: str, *, open_low: bool = True, open_high: bool = True) -> float:
    """Return ``value`` as float if it lies in the interval (0, 1) (ends as requested)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number in (0, 1), got {value!r}.")
    value = float(value)
    low_ok = value > 0 if open_low else value >= 0
    high_ok = value < 1 if open_high else value <= 1
    if not (low_ok and high_ok):
        lo, hi = "(" if open_low else "[", ")" if open_high else "]"
        raise ValueError(f"{name} must lie in {lo}0, 1{hi}, got {value}.")
    return value


def check_finite_array(a, name: str, *, ndim: int | tuple[int, ...]) -> np.ndarray:
    """Convert ``a`` to a float64 array of the given dimension(s), rejecting NaN/inf."""
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric array-like: {exc}") from None
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if arr.ndim not in ndims:
        column = " (a column vector: pass it flattened, e.g. y.ravel())" if ndims == (1,) and arr.shape[1:] == (1,) else ""
        raise ValueError(f"{name} must have {' or '.join(map(str, ndims))} dimension(s), got shape {arr.shape}{column}.")
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int(finite.size - np.count_nonzero(finite))
        where = ""
        if arr.ndim == 2:
            cols = np.flatnonzero(~finite.all(axis=0)).tolist()
            where = f" in column(s) {cols[:10]}{' ...' if len(cols) > 10 else ''}"
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s){where}; remove or impute them before fitting.")
    return arr


def check_matrix(X, name: str = "X") -> np.ndarray:
    """A finite 2-D float64 array (a 1-D input is rejected with a hint)."""
    arr = np.asarray(X) if not isinstance(X, np.ndarray) else X
    if getattr(arr, "ndim", None) == 1:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features); got 1-D. Use X.reshape(-1, 1) for one feature.")
    return check_finite_array(arr, name, ndim=2)


def every(mask: np.ndarray) -> bool:
    """Whether every entry of the array ``mask`` is true (non-zero; NaN counts as true): ``mask.all()``.

    ``np.count_nonzero`` skips the Python wrapper of numpy's reductions (a few times faster on the small
    per-client masks that every round checks several times).
    """
    return int(np.count_nonzero(mask)) == mask.size


def some(mask: np.ndarray) -> bool:
    """Whether some entry of the array ``mask`` is true (non-zero; NaN counts as true): ``mask.any()``, as :func:`every`."""
    return int(np.count_nonzero(mask)) > 0


#: An iterate with a larger Euclidean norm (or a non-finite entry) is reported as divergence.
DIVERGENCE_NORM = 1e10


def iterate_error(theta: np.ndarray, where: str, step_size: float) -> DivergenceError | None:
    """The ``DivergenceError`` to raise if ``theta`` is non-finite or exploded, else None.

    For a client, which hands the error to the server with the releases that ran before it
    (:class:`~privfedstat.federation.clients.Reply`) instead of raising it.
    """
    if float(np.abs(theta).max(initial=0.0)) <= DIVERGENCE_NORM:  # a NaN maximum fails the test too
        return None
    return DivergenceError(
        f"iterates diverged during {where} (non-finite or |theta| > {DIVERGENCE_NORM:g}). "
        f"Reduce step_size (now {step_size:g}), standardise the covariates, or use a finite clip."
    )


def check_iterate(theta: np.ndarray, where: str, step_size: float) -> None:
    """Raise ``DivergenceError`` if ``theta`` is non-finite or exploded."""
    error = iterate_error(theta, where, step_size)
    if error is not None:
        raise error


# ---------------------------------------------------------------------------------------- parameter tables
class Rule:
    """One rule a parameter's value may satisfy; ``hint`` (why, or what to do) ends the error message, with
    ``{estimator}`` replaced by the estimator's class name."""

    hint: str = ""

    def accepts(self, value) -> bool:
        """Whether ``value`` satisfies the rule."""
        raise NotImplementedError

    def takes_type(self, value) -> bool:
        """Whether the rule allows values of ``value``'s type (then refusing ``value`` is a ``ValueError``)."""
        return self.accepts(value)

    def describe(self) -> str:
        """What the rule allows, as the end of "``name`` must be ...", e.g. ``"an integer >= 1"``."""
        raise NotImplementedError

    def error(self, value) -> tuple[type[Exception], str, str]:
        """(exception type, what is allowed, the value as reported) for a ``value`` the rule refuses."""
        return ValueError, self.describe(), repr(value)

    def hint_for(self, value) -> str:
        """The hint that ends the message refusing ``value``: :attr:`hint`."""
        return self.hint


class Interval(Rule):
    """A number of ``kind`` (``Integral`` or ``Real``; never a bool) in the interval from ``low`` to ``high``.

    ``closed`` says which ends belong to it (``"left"``, ``"right"``, ``"both"``, ``"neither"``); None
    leaves an end open to infinity. An infinite value (above any finite bound) is refused unless
    ``finite=False``. ``above`` is the hint of a value of the right type above ``high`` (why the bound).
    """

    def __init__(self, kind: type, low: float | None = None, high: float | None = None, *, closed: str = "both",
                 finite: bool = True, hint: str = "", above: str = "") -> None:
        if kind not in (Integral, Real) or closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"Interval takes kind Integral or Real and closed 'left', 'right', 'both' or 'neither', "
                             f"got {kind!r} and {closed!r}.")
        self.kind, self.low, self.high, self.closed, self.finite, self.hint = kind, low, high, closed, finite, hint
        self.above = above

    def hint_for(self, value) -> str:
        if self.above and self._type_ok(value) and self.high is not None and float(value) > self.high:
            return self.above
        return self.hint

    def _type_ok(self, value) -> bool:
        return not isinstance(value, bool) and isinstance(value, self.kind)

    def _in_range(self, x: float) -> bool:
        left, right = self.closed in ("left", "both"), self.closed in ("right", "both")
        low_ok = self.low is None or (x >= self.low if left else x > self.low)
        high_ok = self.high is None or (x <= self.high if right else x < self.high)
        return low_ok and high_ok

    def takes_type(self, value) -> bool:
        return self._type_ok(value)

    def accepts(self, value) -> bool:
        if not self._type_ok(value):
            return False
        x = float(value)
        return not math.isnan(x) and self._in_range(x) and not (self.finite and math.isinf(x))

    def _range(self) -> str:
        left, right = self.closed in ("left", "both"), self.closed in ("right", "both")
        if self.low is not None and self.high is not None:
            return f"in {'[' if left else '('}{self.low:g}, {self.high:g}{']' if right else ')'}"
        if self.low is not None:
            return f"{'>=' if left else '>'} {self.low:g}"
        if self.high is not None:
            return f"{'<=' if right else '<'} {self.high:g}"
        return "finite" if self.finite else "any number"

    def describe(self) -> str:
        inf = "" if self.finite or self.high is not None else " (inf allowed)"
        return f"{'an integer' if self.kind is Integral else 'a number'} {self._range()}{inf}"

    def error(self, value) -> tuple[type[Exception], str, str]:
        if not self._type_ok(value):
            return TypeError, self.describe(), f"{value!r} ({type(value).__name__})"
        if self.kind is Integral:
            return ValueError, self.describe(), repr(int(value))
        x = float(value)
        if self.finite and math.isinf(x) and self._in_range(x):
            return ValueError, "finite", repr(x)
        return ValueError, self._range(), repr(x)


class Options(Rule):
    """One of the given values (strings, None, booleans): compared by type and equality, never by truthiness."""

    def __init__(self, values, *, hint: str = "") -> None:
        self.values, self.hint = tuple(values), hint

    def accepts(self, value) -> bool:
        return any(value is v or (v is not None and type(value) is type(v) and value == v) for v in self.values)

    def takes_type(self, value) -> bool:
        return any(type(value) is type(v) for v in self.values)

    def describe(self) -> str:
        return repr(self.values[0]) if len(self.values) == 1 else f"one of {self.values!r}"


class InstanceOf(Rule):
    """An instance of ``types``, described to the user as ``description`` (e.g. "True or False")."""

    def __init__(self, types: type | tuple[type, ...], description: str, *, hint: str = "") -> None:
        self.types, self.description, self.hint = types, description, hint

    def accepts(self, value) -> bool:
        return isinstance(value, self.types)

    def describe(self) -> str:
        return self.description

    def error(self, value) -> tuple[type[Exception], str, str]:
        return TypeError, self.description, repr(value)


class Free(Rule):
    """Any value: the parameter is checked where it is resolved, which ``where`` names (e.g. ``get_family``)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def accepts(self, value) -> bool:
        return True

    def describe(self) -> str:
        return f"anything (checked by {self.where})"


#: The largest iteration count of any estimator (rounds, server steps, local steps): a work bound. Each count is
#: a pass over every client's rows per unit, and with finite mu the K releases of a loop share mu in squares
#: (``mu / sqrt(K)`` each, noise sd ``sqrt(K)`` times a single release's): at 10^5 a release's noise is 316 times
#: a single release's and 45 times that of the paper's K = 50, and the loop is 20 times the non-private
#: ``"auto"`` cap (:data:`~privfedstat.fitting.steps.MAX_ITER_NONPRIVATE`, 5000 steps, which settles a
#: design of condition number up to ~360 at tolerance 1e-6). At the 2.5 ms per FedSGD round the audit of issue 43
#: measured (10^7 rounds in 7 hours) it is about 4 minutes; a larger count is a typo or a problem
#: that needs Newton rounds (FedIRLS), not more steps.
MAX_ITERATIONS = 100_000

#: The rule of every iteration-count parameter (``n_iter``, ``n_rounds``, ``n_local_steps``, ...): 1 to
#: :data:`MAX_ITERATIONS`
ITERATIONS = Interval(Integral, 1, MAX_ITERATIONS, above=(
    "Every iteration count is bounded by privfedstat._validation.MAX_ITERATIONS, a work bound: each unit is a pass "
    "over every client's rows, and with finite mu the releases share mu (mu / sqrt(K) each), so more steps add noise "
    "once the path has settled. Use 'auto' where {estimator} offers it, a larger step_size, or Newton rounds "
    "(FedIRLS)."))

#: BOOL: True or False (numpy's bool included)
BOOL = InstanceOf((bool, np.bool_), "True or False")


def _rules(entry) -> list[Rule]:
    """The rules of a table entry: a Rule, or a list of Rules, strings and None (a value of its own)."""
    items = entry if isinstance(entry, list) else [entry]
    return [r if isinstance(r, Rule) else Options((r,)) for r in items]


def validate_parameters(estimator, table: dict) -> None:
    """Check ``getattr(estimator, name)`` against each entry of ``table`` (see the module docstring).

    Raises ``ValueError`` or ``TypeError`` (see the module docstring) naming the parameter, what is allowed
    (the refusing rule's requirement first) and the value got, e.g. ``"n_rounds must be an integer >= 1 or
    'auto', got 0."``.
    """
    for name, entry in table.items():
        value = getattr(estimator, name)
        rules = _rules(entry)
        if any(rule.accepts(value) for rule in rules):
            continue
        principal = next((rule for rule in rules if rule.takes_type(value)), rules[0])
        error, allowed, got = principal.error(value)
        allowed = [allowed] + [rule.describe() for rule in rules if rule is not principal]
        allowed = allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"
        hint = principal.hint_for(value)
        hint = " " + hint.replace("{estimator}", type(estimator).__name__) if hint else ""
        raise error(f"{name} must be {allowed}, got {got}.{hint}")


def check_finite_bounds(estimator, names: tuple[str, ...], mu: float, what: str) -> None:
    """Refuse an infinite bound (no clipping) among the parameters ``names`` when ``mu`` is finite: it gives ``what``
    (e.g. "the Newton step") infinite sensitivity; and a finite bound above :data:`BOUND_PER_MU` times ``mu``, whose
    noise variance overflows, or below :data:`LEAST_BOUND_PER_MU` times ``mu``, whose noise variance underflows. The rules
    that tie a bound to the budget."""
    if math.isinf(mu):
        return
    for name in names:
        value = getattr(estimator, name)
        if isinstance(value, Real) and math.isinf(value):
            raise ValueError(f"{name}=inf (no clipping) gives {what} infinite sensitivity, so it is only allowed with "
                             f"mu=float('inf'); set a finite {name}.")
        if isinstance(value, Real) and not isinstance(value, bool) and 0 < value < LEAST_BOUND_PER_MU * mu:
            raise ValueError(f"{name}={value:g} with mu={mu:g} gives {what} noise whose variance underflows float64 "
                             f"(sd down to 2 {name} / (2^53 mu)): use at least {LEAST_BOUND_PER_MU * mu:.3g}, or "
                             "rescale the data so that a bound near 1 fits.")
        if isinstance(value, Real) and not isinstance(value, bool) and value > BOUND_PER_MU * mu:
            raise ValueError(f"{name}={value:g} with mu={mu:g} gives {what} noise whose variance overflows float64 "
                             f"(sd up to 2 {name} / (mu sqrt(eps)) for a release given a share eps of mu^2): use at "
                             f"most {BOUND_PER_MU * mu:.3g}, or rescale the data so that a bound near 1 fits.")
