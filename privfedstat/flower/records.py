"""The server's checks of the release records its Flower nodes report, and of the ledger they add up to.

A node privatizes its own messages and reports one release record per mechanism it ran; the
server's ledger is built from those reports. What a request must bring back follows from the
request and the verb table (:mod:`privfedstat.federation.verbs`) alone, so the server checks every
reply against it, whatever the nodes agree on:

* :func:`check_records`: how many records (:func:`~privfedstat.federation.verbs.mechanisms`: one
  per noisy step), of which kind and unit, at which stage, for which sensitivity and with which
  noise (:func:`check_calibration`); a verb that sends values without noise must report its leak;
* :class:`Spending`: each client's GDP spend as the server's own requests determine it (each
  answered request: its mechanisms times ``mu^2``), and :meth:`Spending.check` at the end of the
  fit: every client's ledger mu must equal it, and equal the declared mu for every client that
  answered every releasing request.

A node that omits a record, runs fewer steps than asked, noises for less, or a federation whose
nodes all do so, is refused before the fit returns.
"""

from __future__ import annotations

import math

import numpy as np

from ..federation import verbs
from ..federation.secure import summed_release
from .wire import ClientReply, MalformedReplyError

__all__ = ["check_records", "check_calibration", "Spending"]

#: relative tolerance of the end-of-fit comparison of GDP parameters (each record's ``Delta / sigma`` is one
#: division away from the request's mu: a few ulps)
RTOL = 1e-9


def check_records(replies: dict[int, ClientReply], per_client: list[dict], verb: str) -> None:
    """Refuse any reply whose release records are not exactly those its request asks for.

    Every answering client (silent ones too: they report each mechanism with sensitivity 0) must
    carry :func:`~privfedstat.federation.verbs.mechanisms` records, each of the verb's kind and
    unit and calibrated as :func:`check_calibration` says; a verb that sends values but releases
    nothing (``norm_quantiles``: raw data) must say so in the reply's leak; and a client may sit
    out (answer "silent") only a request whose ``active`` entry leaves it out.
    """
    entry = verbs.get(verb)
    for i, r in sorted(replies.items()):
        if r.status == "error":
            continue
        if r.status == "silent" and per_client[i].get("active") in (None, True):
            raise MalformedReplyError(f"client {i} sat out a request for {verb!r} that asked it to send (a client "
                                      "answers, or fails).")
        want = verbs.mechanisms(entry, per_client[i])
        if len(r.releases) != want:
            raise MalformedReplyError(f"client {i} reports {len(r.releases)} release record(s) for {verb!r}; its request "
                                      f"runs {want} mechanism(s).")
        if r.status == "ok" and entry.release is None and entry.shape is not None and entry.answer == "reply" \
                and r.leak is None:
            raise MalformedReplyError(f"client {i} sends values for {verb!r}, which are not privatized, without "
                                      "reporting the leak.")
    check_calibration(replies, per_client, verb)


def check_calibration(replies: dict[int, ClientReply], per_client: list[dict], verb: str) -> None:
    """Every release a client reports must be of the kind and unit its verb declares and calibrated to what its
    request asked for: the request's stage, a sensitivity at least the requested one (the verb table's
    ``sensitivity``: an argument of the request, or 1 for the count verbs, whose requests carry none) and
    sigma = sensitivity / mu (0 at mu = inf), to the bit, as
    :func:`~privfedstat.federation.clients.privatize` computes it. So the noise is at least the
    requested sensitivity over the requested mu whatever the client reports: a client that noises
    for less (a smaller sensitivity, a larger mu, no noise, another calibration) or records its
    release as another kind or unit is refused, and the ledger, built from the reports, holds. (A
    client may report more than requested: a network's local step on a minibatch of b_i rows noises
    for ``n_i / b_i`` times the full-batch sensitivity.)"""
    entry = verbs.get(verb)
    for i, r in sorted(replies.items()):
        for rec in r.releases:  # a silent client's records too (sensitivity and sigma 0)
            if (rec.kind, rec.unit) != entry.release:
                raise MalformedReplyError(f"client {i} reports a release for {verb!r} of kind {rec.kind!r}, unit "
                                          f"{rec.unit!r}; the verb releases {entry.release or 'nothing'}.")
        kw = per_client[i]
        if r.status != "ok" or kw.get("mu") is None:
            continue
        if entry.sensitivity is None:
            raise ValueError(f"the request for {verb!r} states a budget mu, but the verb table declares no sensitivity "
                             "to check its releases against.")
        mu = float(kw["mu"])
        asked = _asked(entry, kw)
        for rec in r.releases:
            sens, sigma = float(rec.sensitivity[0]), float(rec.sigma[0])
            want = float(np.float64(sens) / mu) if math.isfinite(mu) else 0.0
            if not sens >= asked or sigma != want or ("stage" in kw and rec.stage != kw["stage"]):
                asked_sd = float(np.float64(asked) / mu) if math.isfinite(mu) else 0.0
                raise MalformedReplyError(
                    f"client {i} reports a release for {verb!r} (stage {rec.stage!r}, sensitivity {sens:g}, noise sd "
                    f"{sigma:g}) that its request did not ask for (stage {kw.get('stage')!r}, sensitivity at least "
                    f"{asked:g}, mu {mu:g}: noise sd sensitivity / mu = {asked_sd:g}).")


def _asked(entry: verbs.Verb, request: dict) -> float:
    """The sensitivity the request asks the client's releases to be noised for."""
    return float(request[entry.sensitivity] if isinstance(entry.sensitivity, str) else entry.sensitivity)


class Spending:
    """Each client's GDP spend as the server's requests determine it, and whether it answered every releasing one.

    Parameters
    ----------
    n_clients : int
    """

    def __init__(self, n_clients: int) -> None:
        self.squares = np.zeros(n_clients)  # sum over answered mechanisms of mu^2 (inf: one without noise)
        self.missed = np.zeros(n_clients, dtype=bool)  # sat out (silent) or failed in some releasing request
        self.secure = False  # some request was a secure sum: noised for min_surviving sites, so more survivors spend less

    def add(self, replies: dict[int, ClientReply], per_client: list[dict], verb: str) -> None:
        """Book one checked request: each client that sent spends its mechanisms' ``mu^2``; any other misses it."""
        entry = verbs.get(verb)
        if entry.release is None:
            return
        for i, kw in enumerate(per_client):
            r = replies.get(i)
            if r is None or r.status != "ok":
                self.missed[i] = True
                continue
            mu = float(kw.get("mu", math.inf))
            asked = _asked(entry, kw) if entry.sensitivity is not None else math.inf
            if asked > 0:
                self.squares[i] += verbs.mechanisms(entry, kw) * mu**2

    def add_secure(self, reply, spec) -> None:
        """Book one secure request (SecAgg+): its share record is the server's own, built from the public request
        (:func:`~privfedstat.federation.secure.share_release`), and each summed site spends the ``mu^2`` of the
        sum's release (:func:`~privfedstat.federation.secure.summed_release`); a site left out of the sum misses it."""
        answered = np.asarray(reply.answered, dtype=bool)
        self.squares[answered] += summed_release(reply, spec).client_mu()[answered] ** 2
        self.missed |= ~answered
        self.secure = True

    def check(self, ledger, declared: float) -> None:
        """Refuse a fit whose ledger is not what the server asked for: per client, the ledger's mu must equal the
        requests' (to :data:`RTOL`), and the declared ``mu`` for a client that answered every releasing request (at
        most the declared ``mu`` once a secure sum was booked: its noise is calibrated for ``min_surviving`` sites,
        so a sum over more sites spends less)."""
        actual = np.asarray(ledger.client_mu, dtype=np.float64)
        asked = np.sqrt(self.squares)
        for i, (got, want) in enumerate(zip(actual, asked)):
            if not _same(got, want):
                raise MalformedReplyError(f"client {i}'s ledger shows mu = {got:.6g}, but the server's requests to it "
                                          f"spend {want:.6g}: its nodes' release records do not add up.")
            if self.secure and got > declared * (1 + RTOL):
                raise MalformedReplyError(f"client {i}'s ledger shows mu = {got:.6g}, above the declared "
                                          f"{declared:.6g}.")
            if not self.missed[i] and not self.secure and not _same(got, declared):
                raise MalformedReplyError(f"client {i} answered every request, but its ledger shows mu = {got:.6g}, not "
                                          f"the declared {declared:.6g}.")


def _same(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0)
