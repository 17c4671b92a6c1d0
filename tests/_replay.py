"""Replay harness for neighbouring-dataset audits (used by the sensitivity fuzzer and the privacy audit).

Every value a client sends is privatized on the client by
:func:`privfedstat.federation.clients.privatize` (an aggregated Gaussian mechanism, or a local one
whose result is later sent as post-processing), or by :func:`privfedstat.federation.secure.privatize_integer`
in a secure round (its pre-noise value is the message rounded to the quantum, whose stated sensitivity
includes the rounding slack), and reaches the server through
:meth:`Channel.receive`. :func:`record` runs a fit on a dataset D and taps every mechanism: the
values before noise ``v_t(D)``, the noisy outputs ``y_t``, and the stated sensitivity, sigma and
server weights of each client (read from the ledger record the channel just wrote). :func:`replay`
runs the same estimator with the same seed on a neighbouring dataset D' while *forcing* every
mechanism to return D's outputs ``y_t``: the algorithm at step t is then evaluated on D' given the
same history, which is exactly what adaptive composition needs, and the tap records ``v_t(D')``.

Everything the server computes is post-processing of the outputs, so a replay must reproduce D's
run bit for bit apart from the pre-noise values: the same releases (stage, kind, shape), the same
stated sensitivities and sigmas (they are public), the same values sent with ``Channel.send``, the
same error (if D's run failed) and the same coefficients. :func:`sensitivity_violations` checks all
of that and ``||v_t,i(D) - v_t,i(D')|| <= Delta_t,i`` for every release t and client i.
:func:`log_likelihood_ratios` turns a recorded/replayed pair into the exact privacy loss
``log p_D(transcript) / p_D'(transcript)`` seen by the server or by a third party.

The Channel is patched only inside :func:`tap_channel` (the package is never modified).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numba
import numpy as np
import pytest

from privfedstat.federation import clients, secure
from privfedstat.federation.channel import Channel

#: Relative slack on a stated sensitivity. Sensitivities are exact in real arithmetic; evaluating a
#: client statistic in floating point adds (a) summation error: a mean of n_i terms of total norm
#: <= B is off by at most (n_i - 1) u B, i.e. n_i^2 u / 2 relative to 2B/n_i (< 1e-13 for n_i <= 40;
#: u = 1.1e-16), and (b) for FedNewton a linear solve with condition number <= C_H / lambda (< 1e5
#: for the bounds met here), i.e. < 1e-10 relative. 1e-9 covers both; it changes a release's mu by
#: a factor 1 + 1e-9 at most, far below any statistical effect, while a genuine error of a stated
#: sensitivity (a missing factor 2, the 1e+129 norm underflow) is many orders of magnitude larger.
REL_TOL = 1e-9
#: Absolute slack in units of the statistic's own size: a released value ``theta - eta g`` (local
#: step) or ``theta - H^{-1} g`` (Newton) is rounded to a few ulps of its magnitude, independent of
#: its sensitivity; 16 ulps of ``||v(D)|| + ||v(D')||`` cover that rounding (error <= u ||v|| each).
ULPS = 16 * np.finfo(np.float64).eps


@pytest.fixture
def one_numba_thread():
    """Run the kernels on one thread: the audits fit tiny data thousands of times, where waking
    the parallel workers costs more than the work (measured 13x slower with 2 threads on 2 shared,
    busy cores). Import it into a test module and mark the module ``usefixtures``."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


@dataclass
class Message:
    """One Gaussian mechanism run by all clients, as seen by the tap."""

    kind: str  # "aggregated" (sent as released) or "local" (stays on the client, sent after post-processing)
    stage: str
    values: np.ndarray  # pre-noise statistic, shape (n_clients, ...)
    noisy: np.ndarray  # what the mechanism returned
    sensitivity: np.ndarray  # (n_clients,) stated L2 sensitivity
    sigma: np.ndarray  # (n_clients,) noise sd used
    weights: np.ndarray | None  # server aggregation weights (aggregated releases)


@dataclass
class Transcript:
    """Everything one fit sent through the channel, and how it ended."""

    messages: list[Message] = field(default_factory=list)
    sends: list[np.ndarray] = field(default_factory=list)
    estimator: object | None = None  # the fitted estimator (None if the fit raised)
    error: BaseException | None = None


class _Tap:
    """State of the patched seam: record, or replay a reference transcript."""

    def __init__(self) -> None:
        self.current: Transcript | None = None
        self.forced: Transcript | None = None

    def message(self, kind: str, stage: str, values, noisy: np.ndarray, record) -> np.ndarray:
        tr = self.current
        values = np.array(values, dtype=np.float64)
        if self.forced is None:
            out = noisy
        else:
            k = len(tr.messages)
            if k >= len(self.forced.messages):
                raise ReplayMismatch(f"at the same history the neighbour's run makes release {k} ({stage!r}) but the "
                                     f"reference run stopped after {k} releases with {self.forced.error!r}")
            ref = self.forced.messages[k]
            if (ref.kind, ref.stage, ref.noisy.shape) != (kind, stage, values.shape):
                raise ReplayMismatch(
                    f"release {k}: reference {(ref.kind, ref.stage, ref.noisy.shape)}, neighbour {(kind, stage, values.shape)}"
                )
            out = ref.noisy.copy()
        tr.messages.append(Message(kind, stage, values, np.array(out), record.sensitivity.copy(), record.sigma.copy(), None))
        return out

    def received(self, reply, weights) -> None:
        """The server took ``reply``: attach its weights to the reply's aggregated releases; a reply of local
        releases is a send of post-processed values."""
        tr = self.current
        n = len(reply.releases)
        for msg in tr.messages[len(tr.messages) - n:]:
            if msg.kind == "aggregated" and weights is not None:
                msg.weights = np.array(weights, dtype=np.float64)
        if n and all(r.kind == "local" for r in reply.releases):
            tr.sends.append(np.array(reply.values, dtype=np.float64))


class ReplayMismatch(AssertionError):
    """The neighbour's run asked for a different release than the reference run at the same history."""


_TAP = _Tap()


@contextlib.contextmanager
def tap_channel() -> Iterator[_Tap]:
    """Patch the seam so that every mechanism a client runs (:func:`privatize`) and every reply the server
    takes (:meth:`Channel.receive`) goes through the tap.

    Only for tests; the originals are restored on exit. The original mechanism still runs (the
    noise streams advance as usual); in replay mode its output is then replaced by the reference
    output.
    """
    privatize, receive, integer = clients.privatize, Channel.receive, secure.privatize_integer

    def tapped_privatize(values, noise, sensitivity, mu, stage, kind, **kw):
        noisy, record = privatize(values, noise, sensitivity, mu, stage, kind, **kw)
        return _TAP.message(kind, stage, values, noisy, record), record

    def tapped_integer(values, noise, spec, sensitivity, stage):
        """A secure round: the pre-noise value is the rounded message (its sensitivity covers the rounding), the output
        the residues, forced in a replay."""
        residues, rounded, record = integer(values, noise, spec, sensitivity, stage)
        return _TAP.message("aggregated", stage, rounded, residues, record), rounded, record

    def tapped_receive(self, reply, **kw):
        _TAP.received(reply, kw.get("weights"))
        return receive(self, reply, **kw)

    clients.privatize, Channel.receive, secure.privatize_integer = tapped_privatize, tapped_receive, tapped_integer
    try:
        yield _TAP
    finally:
        clients.privatize, Channel.receive, secure.privatize_integer = privatize, receive, integer
        _TAP.current = _TAP.forced = None


def _run(make_estimator: Callable[[], object], data, forced: Transcript | None) -> Transcript:
    if clients.privatize.__name__ != "tapped_privatize":
        raise RuntimeError("record/replay must run inside `with tap_channel():`.")
    tr = Transcript()
    _TAP.current, _TAP.forced = tr, forced
    try:
        tr.estimator = make_estimator().fit(data)
    except ReplayMismatch:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed fit is part of the transcript
        tr.error = exc
    finally:
        _TAP.current = _TAP.forced = None
    return tr


def record(make_estimator: Callable[[], object], data) -> Transcript:
    """Fit a fresh estimator on ``data`` and record every mechanism (inside :func:`tap_channel`)."""
    return _run(make_estimator, data, None)


def replay(make_estimator: Callable[[], object], data, reference: Transcript) -> Transcript:
    """Fit a fresh estimator on ``data`` with every mechanism forced to return ``reference``'s outputs."""
    return _run(make_estimator, data, reference)


def _norms(a: np.ndarray) -> np.ndarray:
    """Per-client L2 norms of rows of ``a`` (n_clients, ...) without under/overflow."""
    flat = a.reshape(a.shape[0], -1)
    with np.errstate(over="ignore", invalid="ignore"):
        scale = np.max(np.abs(flat), axis=1)
        safe = np.where((scale > 0) & np.isfinite(scale), scale, 1.0)
        return np.where(np.isfinite(scale), safe * np.sqrt(np.sum((flat / safe[:, None]) ** 2, axis=1)), np.inf)


def sensitivity_violations(ref: Transcript, nb: Transcript, changed: np.ndarray | None = None) -> list[str]:
    """Every way the replayed neighbour ``nb`` breaks the reference run ``ref``'s stated privacy.

    Checks: the releases have the same structure and the same (public) sensitivities and sigmas;
    every pre-noise value and output is finite; every client's statistic moved by at most its
    stated sensitivity (with the slack :data:`REL_TOL` and :data:`ULPS` explained above), and the
    statistics of clients whose data did not change (``changed[i]`` False) did not move at all; the
    values sent as post-processing and the fitted path are identical; both runs fail the same way
    or both succeed. Returns human-readable descriptions (empty: no violation).
    """
    problems = []
    if len(nb.messages) != len(ref.messages):
        problems.append(f"{len(ref.messages)} releases on D but {len(nb.messages)} on D'")
    for k, (a, b) in enumerate(zip(ref.messages, nb.messages)):
        where = f"release {k} ({a.stage})"
        if not (np.array_equal(a.sensitivity, b.sensitivity) and np.array_equal(a.sigma, b.sigma)):
            problems.append(f"{where}: stated sensitivity/sigma differ between D and D' (they must be public)")
        for name, arr in (("pre-noise value on D", a.values), ("pre-noise value on D'", b.values), ("output", a.noisy)):
            if not np.all(np.isfinite(arr)):
                problems.append(f"{where}: non-finite {name}")
        with np.errstate(over="ignore", invalid="ignore"):
            moved = _norms(a.values - b.values) if a.values.shape == b.values.shape else np.full(len(a.sensitivity), np.inf)
        allowed = a.sensitivity * (1 + REL_TOL) + ULPS * (_norms(a.values) + _norms(b.values))
        bad = ~(moved <= allowed)
        if changed is not None:
            bad |= ~changed & (moved != 0)
        for i in np.flatnonzero(bad):
            problems.append(
                f"{where}: client {i}{'' if changed is None or changed[i] else ' (data unchanged)'} moved by "
                f"{moved[i]:.6g} > stated sensitivity {a.sensitivity[i]:.6g} (ratio {moved[i] / a.sensitivity[i]:.3g})"
            )
    if len(nb.sends) != len(ref.sends) or any(not np.array_equal(s, t) for s, t in zip(ref.sends, nb.sends)):
        problems.append("values sent as post-processing differ at the same history (raw data reached the server)")
    if (ref.error is None) != (nb.error is None) or (ref.error is not None and type(ref.error) is not type(nb.error)):
        problems.append(f"the fit on D ended with {ref.error!r} but the replay on D' with {nb.error!r}")
    elif ref.error is None and not np.array_equal(ref.estimator.history_, nb.estimator.history_):
        problems.append("the fitted path differs at the same transcript (the server used something not released)")
    return problems


def check_neighbours(make_estimator: Callable[[], object], data, neighbour) -> Transcript:
    """Record on ``data``, replay on ``neighbour`` (and the other way round); raise on any violation.

    Returns the transcript recorded on ``data``.
    """
    o = data.offsets
    changed = np.array([not (np.array_equal(data.X[a:b], neighbour.X[a:b]) and np.array_equal(data.y[a:b], neighbour.y[a:b]))
                        for a, b in zip(o[:-1], o[1:])])
    problems, transcripts = [], []
    for d1, d2, label in ((data, neighbour, "D -> D'"), (neighbour, data, "D' -> D")):
        ref = record(make_estimator, d1)
        transcripts.append(ref)
        problems += [f"[{label}] {p}" for p in sensitivity_violations(ref, replay(make_estimator, d2, ref), changed)]
    if problems:
        raise AssertionError("privacy violations:\n  " + "\n  ".join(problems[:20]))
    return transcripts[0]


# ---------------------------------------------------------------------- privacy loss
def _client_terms(m: Message, v_p: np.ndarray, v_q: np.ndarray) -> float:
    """log N(noisy; v_p, sigma^2) - log N(noisy; v_q, sigma^2), summed over clients with noise."""
    shift = (v_p - v_q).reshape(v_p.shape[0], -1)
    mid = (2 * m.noisy - v_p - v_q).reshape(v_p.shape[0], -1)
    noisy = m.sigma > 0
    return float(np.sum(np.sum(shift * mid, axis=1)[noisy] / (2 * m.sigma[noisy] ** 2)))


def _aggregate_terms(m: Message, v_p: np.ndarray, v_q: np.ndarray) -> float:
    """The same for the published aggregate ``sum_i w_i noisy_i ~ N(sum_i w_i v_i, sum_i w_i^2 sigma_i^2)``."""
    w = m.weights
    var = float(np.sum((w * m.sigma) ** 2))
    agg = np.tensordot(w, m.noisy, axes=1)
    mp, mq = np.tensordot(w, v_p, axes=1), np.tensordot(w, v_q, axes=1)
    return float(np.sum((mp - mq) * (2 * agg - mp - mq)) / (2 * var))


def log_likelihood_ratios(observed: Transcript, replayed: Transcript, *, observed_is_p: bool,
                          view: str = "client", stages: Callable[[str], bool] | None = None) -> float:
    """Exact privacy loss ``log p_D(transcript) / p_D'(transcript)`` of one recorded run.

    Parameters
    ----------
    observed : Transcript
        The run that produced the transcript (on D if ``observed_is_p``, else on D').
    replayed : Transcript
        The other dataset replayed at the same history (:func:`replay`).
    view : {"client", "third-party"}
        ``"client"``: the server's view, every client's message of every release. ``"third-party"``:
        aggregated releases only through ``sum_i w_i message_i`` (weights from the ledger); local
        releases, whose noise reaches the published model through non-linear steps, are counted
        with the client's full message, as the ledger does (a stronger observer).
    stages : callable, optional
        Keep only the releases whose stage satisfies it (e.g. the clip search alone).
    """
    total = 0.0
    for a, b in zip(observed.messages, replayed.messages):
        if stages is not None and not stages(a.stage):
            continue
        v_p, v_q = (a.values, b.values) if observed_is_p else (b.values, a.values)
        if view == "third-party" and a.kind == "aggregated":
            total += _aggregate_terms(a, v_p, v_q)
        else:
            total += _client_terms(a, v_p, v_q)
    return total


def realized_mu(observed: Transcript, replayed: Transcript, client: int, *, view: str = "client",
                stages: Callable[[str], bool] | None = None) -> float:
    """``sqrt(sum_t ||mean shift_t||^2 / sd_t^2)``: the GDP parameter this neighbour pair attains on this path."""
    total = 0.0
    for a, b in zip(observed.messages, replayed.messages):
        if stages is not None and not stages(a.stage):
            continue
        if view == "third-party" and a.kind == "aggregated":
            shift = np.tensordot(a.weights, a.values - b.values, axes=1)
            total += float(np.sum(shift**2)) / float(np.sum((a.weights * a.sigma) ** 2))
        elif a.sigma[client] > 0:
            total += float(np.sum((a.values[client] - b.values[client]) ** 2)) / a.sigma[client] ** 2
    return math.sqrt(total)
