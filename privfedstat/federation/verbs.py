"""The verb table: every request a clients backend answers, described once.

A :class:`Verb` says what the wire, the nodes and the server's checks need to know of one request:
what a client sends back (its values' shape, computed from the public dimensions and the request),
which arguments hold one entry per client, which typed records travel with it, and what it
releases (the kind and unit of its release records, the argument holding the sensitivity the
server asked for, and how many mechanisms one reply runs: :func:`mechanisms`). So the release
records a request must bring back follow from the request alone. The Flower wire
(:mod:`privfedstat.flower.wire`), the Flower nodes and the server's checks of every release record
(:mod:`privfedstat.flower.records`) read this table; nothing else lists verbs.

The shared verbs are declared here; a verb that one algorithm alone sends is declared next to its
server loop and registered when its module is imported (:func:`register`, with its in-process
implementation; ``privfedstat.algorithms`` imports every algorithm, so every process that answers
verbs has them). A backend answers a verb with a method of its own (the shared verbs of
:class:`~privfedstat.federation.clients.InProcessClients`) or with the implementation registered
for it and for that backend (:func:`implementation`; e.g. ``"in_process"``, ``"torch"``). An
implementation privatizes through ``federation.clients.privatize``, looked up on the module as the
torch clients do, so that one tap sees every release.

=====================  ========================================================================
``gradients``          mean of per-sample gradients clipped to B (Algorithm 1's message)
``local_descent``      K noisy local GD steps from theta, the final iterate sent (FedAvg, FedHybrid, FedNewton)
``clipped_update``     K local steps, the model update clipped to S (DP-FedAvg, ClippedFedAvg)
``hessians``           ``sym_to_vec`` of the mean of per-sample Hessians clipped to C_H
``score_outer``        ``sym_to_vec`` of the mean of ``g g^T`` (clipped scores), for the sandwich
``design_moments``     ``sym_to_vec`` of the mean of ``x x^T`` (rows clipped), for the bootstrap
``count_at_most``      number of rows whose gradient / Hessian / row norm is <= a threshold
``count_clipped``      number of rows whose gradient is clipped at B
``clipped_excess``     mean of ``clip_{B'}(g) - clip_B(g)``: what clipping at B removes from the score, up to B'
``pearson_sum``        sum of the squared Pearson residuals, each capped (a count model's dispersion)
``column_count``       number of rows with ``x_j <= t`` (or ``|x_j - c| <= t``), for private scaling
``losses``             mean loss (mu = inf only: sent without noise, recorded as non-private)
``norm_quantiles``     the non-private clip rule of the paper (``clip="paper"``): a recorded leak
``exact``              exact gradient and Hessian for diagnostics of non-private fits (mu = inf)
``split_halves``       each client splits its rows into two halves, answering later requests on either
``rescale``            each client rescales its columns with public, released centres and scales
``change_basis``       each client maps its rows by a public matrix (and may change the reference class)
=====================  ========================================================================

and the algorithms' own: ``scaffold_round`` (:mod:`~privfedstat.algorithms.scaffold`),
``composite_round`` (:mod:`~privfedstat.algorithms.fednmap`), ``normec_round``
(:mod:`~privfedstat.algorithms.fednormec`), ``hifedprox_round``
(:mod:`~privfedstat.algorithms.hifedprox`), ``newton_steps`` (:mod:`~privfedstat.algorithms.fednewton`)
and ``head_newton_steps`` (:mod:`privfedstat.deep.newton`, networks only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Verb", "UnknownVerbError", "ANSWERS", "BACKENDS", "register", "implement", "get", "names", "implementation",
           "records", "mechanisms", "one_value", "parameters", "parameter_moments", "design_moments"]

#: what a verb returns: a privatized Reply; the exact (gradients, Hessians) of a non-private fit's diagnostics;
#: two handles on the clients' halves; nothing (a public map of the clients' rows)
ANSWERS = ("reply", "exact", "handles", "nothing")
#: the backends a verb may be implemented for besides a backend's own methods
BACKENDS = ("in_process", "torch")

#: a reply's shape rule: (n_params, n_features, request) -> the shape of one client's values
Shape = Callable[[int, int, Mapping], tuple[int, ...]]


class UnknownVerbError(ValueError):
    """A request names a verb that is not in the table (not declared, or its algorithm's module not imported)."""


def one_value(n_params: int, n_features: int, request: Mapping) -> tuple[int, ...]:
    """One float per client (a count, a sum, a loss, a quantile)."""
    return (1,)


def parameters(n_params: int, n_features: int, request: Mapping) -> tuple[int, ...]:
    """One flat parameter vector per client (p floats)."""
    return (n_params,)


def parameter_moments(n_params: int, n_features: int, request: Mapping) -> tuple[int, ...]:
    """``sym_to_vec`` of a (p, p) symmetric matrix per client."""
    return (n_params * (n_params + 1) // 2,)


def design_moments(n_params: int, n_features: int, request: Mapping) -> tuple[int, ...]:
    """``sym_to_vec`` of a (d, d) symmetric matrix of the columns per client."""
    return (n_features * (n_features + 1) // 2,)


@dataclass(frozen=True)
class Verb:
    """What the wire, the nodes and the server's checks know of one verb.

    Attributes
    ----------
    name : str
    answer : {"reply", "exact", "handles", "nothing"}
        What the clients return (:data:`ANSWERS`).
    shape : callable or None
        ``shape(n_params, n_features, request)``: the shape of one client's values; None for a verb
        that sends no values, or whose values' shape the public dimensions do not give (such a
        ``"reply"`` verb is not carried by the Flower wire).
    per_client : tuple of str
        Arguments that hold one entry per client (arrays of shape (n_clients,)): each client is
        sent its own.
    release : (str, str) or None
        The ``(kind, unit)`` of every release record of a reply (kind "aggregated" or "local",
        unit "record" or "client"); None: the verb releases nothing.
    sensitivity : str, float or None
        Where the server's check finds the sensitivity it asked for: the argument's name, a fixed
        value (1 for a count), or None (no calibrated release: nothing to check).
    records : tuple of (str, type)
        Typed arguments that travel by their fields, by argument name: frozen dataclasses of
        numbers (rebuilt on the client by their constructor, which checks the values again).
    steps : str or None
        The argument giving the number of mechanisms (release records) one reply carries: an
        integer (``n_steps``: one noisy local step each) or a sequence (``prox_steps``: one per
        entry); None: one mechanism, or none for a verb that releases nothing (:func:`mechanisms`).
    """

    name: str
    answer: str = "reply"
    shape: Shape | None = None
    per_client: tuple[str, ...] = ()
    release: tuple[str, str] | None = ("aggregated", "record")
    sensitivity: str | float | None = "sensitivity"
    records: tuple[tuple[str, type], ...] = ()
    steps: str | None = None

    def __post_init__(self) -> None:
        if self.answer not in ANSWERS:
            raise ValueError(f"verb {self.name!r}: answer must be one of {ANSWERS}, got {self.answer!r}.")
        if self.release is not None and (self.release[0] not in ("aggregated", "local")
                                         or self.release[1] not in ("record", "client")):
            raise ValueError(f"verb {self.name!r}: release (kind, unit) {self.release!r} is not known.")
        for arg, cls in self.records:
            if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
                raise TypeError(f"verb {self.name!r}: record {arg!r} must be a frozen dataclass, got {cls!r}.")

    def _key(self) -> tuple:
        return (self.name, self.answer, getattr(self.shape, "__qualname__", None), self.per_client, self.release,
                self.sensitivity, self.records, self.steps)


_TABLE: dict[str, Verb] = {}
_IMPLEMENTATIONS: dict[tuple[str, str], Callable] = {}


def register(verb: Verb, *, in_process: Callable | None = None) -> Verb:
    """Put ``verb`` in the table, with its in-process implementation ``in_process(clients, ...) -> Reply``
    (``clients`` the :class:`~privfedstat.federation.clients.InProcessClients`, then the verb's arguments).

    Registering the same declaration again (a module imported twice) changes nothing; a different
    declaration under a name already taken is refused.
    """
    old = _TABLE.get(verb.name)
    if old is not None and old._key() != verb._key():
        raise ValueError(f"verb {verb.name!r} is already registered with another declaration: {old!r}.")
    _TABLE[verb.name] = verb
    if in_process is not None:
        implement(verb.name, "in_process")(in_process)
    return verb


def implement(name: str, backend: str) -> Callable[[Callable], Callable]:
    """Decorator: register a function as ``backend``'s implementation of the registered verb ``name``."""
    get(name)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")

    def store(fn: Callable) -> Callable:
        _IMPLEMENTATIONS[(backend, name)] = fn
        return fn

    return store


def get(name: str) -> Verb:
    """The table's entry for ``name``; :class:`UnknownVerbError` if there is none."""
    verb = _TABLE.get(name)
    if verb is None:
        raise UnknownVerbError(f"unknown verb {name!r}: the clients answer {names()} (an algorithm's own verb is "
                               "registered when its module is imported; import privfedstat.algorithms).")
    return verb


def names() -> tuple[str, ...]:
    """Every registered verb, in the order of registration."""
    return tuple(_TABLE)


def implementation(name: str, backend: str) -> Callable | None:
    """The function registered for ``backend`` to answer ``name``, or None."""
    return _IMPLEMENTATIONS.get((backend, name))


def records() -> dict[str, type]:
    """Every record type some verb carries, by its wire name (the class name in lower case)."""
    return {cls.__name__.lower(): cls for verb in _TABLE.values() for _, cls in verb.records}


def mechanisms(verb: Verb, request: Mapping) -> int:
    """How many release records every client's reply to ``request`` must carry (silent clients' included, with
    sensitivity 0): 0 for a verb that releases nothing, the request's ``verb.steps`` (a count, or a sequence's
    length) for a verb of several noisy steps, else 1."""
    if verb.release is None:
        return 0
    if verb.steps is None:
        return 1
    steps = request[verb.steps]
    return len(steps) if isinstance(steps, (list, tuple)) or getattr(steps, "ndim", 0) else int(steps)


_RELEASE = ("sensitivity", "active")
for _verb in (
        Verb("gradients", shape=parameters, per_client=_RELEASE),
        Verb("local_descent", shape=parameters, per_client=_RELEASE, release=("local", "record"), steps="n_steps"),
        Verb("clipped_update", shape=parameters, per_client=_RELEASE, release=("aggregated", "client")),
        Verb("hessians", shape=parameter_moments, per_client=_RELEASE),
        Verb("score_outer", shape=parameter_moments, per_client=_RELEASE),
        Verb("design_moments", shape=design_moments, per_client=_RELEASE),
        Verb("count_at_most", shape=one_value, per_client=("active",), sensitivity=1.0),
        Verb("count_clipped", shape=one_value, sensitivity=1.0),
        Verb("clipped_excess", shape=parameters, per_client=_RELEASE),
        Verb("pearson_sum", shape=one_value, sensitivity="bound"),
        Verb("column_count", shape=one_value, sensitivity=1.0),
        Verb("losses", shape=one_value, sensitivity=None),
        Verb("norm_quantiles", shape=one_value, release=None, sensitivity=None),
        Verb("exact", answer="exact", shape=parameters, release=None, sensitivity=None),
        Verb("split_halves", answer="handles", release=None, sensitivity=None),
        Verb("rescale", answer="nothing", release=None, sensitivity=None),
        Verb("change_basis", answer="nothing", release=None, sensitivity=None)):
    register(_verb)
del _verb
