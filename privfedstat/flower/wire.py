"""What travels in a Flower Message: a verb's request, one client's reply, and the checks on both.

A request is the verb's name and its keyword arguments (the server's public inputs: theta, bounds,
step sizes, the sensitivity and budget). A reply is one client's privatized values and its release
records (stage, kind, unit, sensitivity, sigma). Both are flwr ``RecordDict``s holding ONE
``ConfigRecord`` (Flower moves every record, array and array chunk of a Message as a separate
object, each an HTTP request per hop: one record is the fewest): arrays travel in it as numpy
``.npy`` bytes (header checked first, read with ``allow_pickle=False``), everything else as
scalars, and the few typed arguments by their fields, an explicit allow-list: a ``SeedSequence``, a
``Scaler``, an ``ElasticNet`` penalty, and the records the verb table declares (frozen dataclasses of
numbers, e.g. HiFedProx's ``PowerProx`` and ``Armijo``); nothing is ever unpickled.

What a verb's reply must look like and which of its arguments are per client come from the verb
table (:mod:`privfedstat.federation.verbs`), never from a list here: :func:`expected_shape`,
:func:`per_client_args`. :func:`decode_reply` is where the server rejects a malformed client message:
a values array of the wrong shape or dtype for the verb, non-finite values, release records that are
not finite non-negative numbers, or a message over ``max_bytes`` (:class:`MalformedReplyError`).
"""

from __future__ import annotations

import dataclasses
import io
import math
from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from ..federation import verbs
from ..fitting.scaling import Scaler
from ..penalty import ElasticNet
from ..privacy.ledger import Release

__all__ = ["ClientReply", "MalformedReplyError", "MAX_REPLY_BYTES", "OPEN", "encode_request", "decode_request",
           "encode_reply", "decode_reply", "expected_shape", "per_client_args", "reply_bytes"]

#: largest reply the server accepts from one client (values and records together), in bytes
MAX_REPLY_BYTES = 64 * 2**20
#: the request that opens a fit's session on a node (not a clients verb: it creates the clients)
OPEN = "open"


class MalformedReplyError(ValueError):
    """A client's reply that the server refuses: wrong shape or dtype for the verb, non-finite, or too large."""


@dataclass(frozen=True)
class ClientReply:
    """One client's decoded reply.

    Attributes
    ----------
    status : {"ok", "silent", "error"}
        "ok": values were sent; "silent": the client computed (its noise stream and state advanced as
        in-process) but was not among the participants asked to send; "error": it raised.
    values : ndarray or None
        The privatized message (status "ok").
    releases : tuple of Release
        The mechanisms it ran for this request (one entry per client in ``sensitivity`` / ``sigma``).
    leak : str or None
    error : tuple of (str, str) or None
        Exception class name and message (status "error").
    extra : dict
        Other named arrays (the ``exact`` verb's Hessians) and the metadata of an opening reply.
    """

    status: str
    values: np.ndarray | None
    releases: tuple[Release, ...]
    leak: str | None = None
    error: tuple[str, str] | None = None
    extra: dict | None = None


# ---------------------------------------------------------------------- one record per message
def _pack(sections: dict[str, dict]) -> RecordDict:
    """One ConfigRecord holding every section's entries as ``section/name`` (section "arrays": ndarrays, as .npy)."""
    entries = {}
    for section, values in sections.items():
        for name, value in values.items():
            if section == "arrays":
                buf = io.BytesIO()
                np.save(buf, np.ascontiguousarray(value), allow_pickle=False)
                value = buf.getvalue()
            entries[f"{section}/{name}"] = value
    return RecordDict({"message": ConfigRecord(entries)})


def _unpack(content: RecordDict, sections: tuple[str, ...]) -> dict[str, dict]:
    """The sections of a :func:`_pack` ed message (arrays still as .npy bytes); KeyError if it is not one."""
    out: dict[str, dict] = {s: {} for s in sections}
    for key, value in content["message"].items():
        section, _, name = key.partition("/")
        out[section][name] = value
    return out


def _npy(data, what: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and header length of .npy bytes, read from the header alone."""
    if not isinstance(data, bytes):
        raise MalformedReplyError(f"{what}: not an array.")
    buf = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(buf)
        readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in readers:
            raise ValueError(f".npy format version {version}")
        shape, fortran, dtype = readers[version](buf)
    except (ValueError, SyntaxError) as err:
        raise MalformedReplyError(f"{what}: not a valid array ({err}).") from err
    if fortran or dtype.hasobject:
        raise MalformedReplyError(f"{what}: an array of {dtype} (Fortran order {fortran}) is refused.")
    return tuple(shape), dtype, buf.tell()


def _array(data, what: str = "an array") -> np.ndarray:
    """The ndarray of .npy bytes (plain dtypes only, never unpickled)."""
    shape, dtype, start = _npy(data, what)
    if len(data) - start != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise MalformedReplyError(f"{what}: {len(data) - start} bytes for {dtype} of shape {shape}.")
    return np.frombuffer(data, dtype=dtype, offset=start).reshape(shape).copy()


# ---------------------------------------------------------------------- requests
def encode_request(verb: str, session: str, target: int, kwargs: dict) -> RecordDict:
    """The Message content of a request: verb, session and handle (0 the clients, 1 / 2 FedNewton's halves).

    ``verb`` is :data:`OPEN` or a verb of the table (:class:`~privfedstat.federation.verbs.UnknownVerbError`
    otherwise)."""
    if verb != OPEN:
        verbs.get(verb)
    head = {"verb": verb, "session": session, "target": int(target)}
    records = verbs.records()
    types, scalars, arrays = {}, {}, {}
    for name, value in kwargs.items():
        if value is None:
            types[name] = "none"
        elif isinstance(value, (bool, np.bool_)):
            types[name], scalars[name] = "bool", bool(value)
        elif isinstance(value, (int, np.integer)):
            types[name], scalars[name] = "int", int(value)
        elif isinstance(value, (float, np.floating)):
            types[name], scalars[name] = "float", float(value)
        elif isinstance(value, str):
            types[name], scalars[name] = "str", value
        elif isinstance(value, np.random.SeedSequence):
            types[name] = "seedseq"
            scalars[f"{name}.entropy"] = str(value.entropy)
            scalars[f"{name}.spawn_key"] = [int(k) for k in value.spawn_key]
            scalars[f"{name}.pool_size"] = int(value.pool_size)
        elif isinstance(value, Scaler):
            types[name] = "scaler"
            arrays[f"{name}.center"], arrays[f"{name}.scale"] = value.center, value.scale
            scalars[f"{name}.intercept"] = -1 if value.intercept is None else int(value.intercept)
            scalars[f"{name}.response_center"] = value.response_center
            scalars[f"{name}.response_scale"] = value.response_scale
        elif isinstance(value, ElasticNet):
            types[name] = "elasticnet"
            scalars[f"{name}.l1"], scalars[f"{name}.l2"] = float(value.l1), float(value.l2)
            arrays[f"{name}.mask"] = np.asarray(value.mask, dtype=bool)
        elif type(value) in records.values():
            kind = type(value).__name__.lower()
            types[name] = kind
            for f in (f.name for f in dataclasses.fields(value)):
                v = getattr(value, f)
                scalars[f"{name}.{f}"] = int(v) if isinstance(v, (int, np.integer)) else float(v)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (float, int, np.number)) for v in value):
            types[name], scalars[name] = "floats", [float(v) for v in value]
        else:
            arr = np.asarray(value)
            if arr.dtype == object:
                raise TypeError(f"request argument {name!r} of type {type(value).__name__} cannot travel in a Message.")
            types[name], arrays[name] = "array", arr
    return _pack({"head": head, "types": types, "scalars": scalars, "arrays": arrays})


def decode_request(content: RecordDict) -> tuple[str, str, int, dict]:
    """``(verb, session, target, kwargs)`` of a request made by :func:`encode_request`."""
    sections = _unpack(content, ("head", "types", "scalars", "arrays"))
    head, types, scalars = sections["head"], sections["types"], sections["scalars"]
    arrays = {k: _array(v, f"request argument {k!r}") for k, v in sections["arrays"].items()}
    records = verbs.records()
    kwargs = {}
    for name, kind in types.items():
        if kind == "none":
            kwargs[name] = None
        elif kind in ("bool", "int", "float", "str"):
            kwargs[name] = scalars[name]
        elif kind == "floats":
            kwargs[name] = list(scalars[name])
        elif kind == "array":
            kwargs[name] = arrays[name]
        elif kind == "seedseq":
            kwargs[name] = np.random.SeedSequence(int(scalars[f"{name}.entropy"]),
                                                  spawn_key=tuple(scalars[f"{name}.spawn_key"]),
                                                  pool_size=int(scalars[f"{name}.pool_size"]))
        elif kind == "scaler":
            j = int(scalars[f"{name}.intercept"])
            kwargs[name] = Scaler(arrays[f"{name}.center"], arrays[f"{name}.scale"], None if j < 0 else j,
                                  float(scalars[f"{name}.response_center"]), float(scalars[f"{name}.response_scale"]))
        elif kind == "elasticnet":
            kwargs[name] = ElasticNet(scalars[f"{name}.l1"], scalars[f"{name}.l2"], arrays[f"{name}.mask"])
        elif kind in records:  # the constructor checks the values again on the client
            cls = records[kind]
            kwargs[name] = cls(**{f.name: scalars[f"{name}.{f.name}"] for f in dataclasses.fields(cls)})
        else:
            raise ValueError(f"unknown argument type {kind!r} for {name!r} in a request.")
    return str(head["verb"]), str(head["session"]), int(head["target"]), kwargs


# ---------------------------------------------------------------------- replies
#: the text of every error reply: only the exception's class leaves the node; its message may describe the
#: node's rows (a count of invalid labels, a stray value, its file's columns) and stays in the node's log
WITHHELD = "the node's message stays on the node, since it may describe its rows: see the node's log"


def encode_reply(status: str, values: np.ndarray | None = None, releases=(), leak: str | None = None,
                 error: BaseException | None = None, extra: dict | None = None) -> RecordDict:
    """The Message content of one client's reply (its ``releases`` hold one entry each: this client's).

    An ``error`` travels as its class name and :data:`WITHHELD`, never its message."""
    meta: dict = {"status": status, "n_releases": len(releases)}
    if leak is not None:
        meta["leak"] = leak
    if error is not None:
        meta["error_type"], meta["error"] = type(error).__name__, WITHHELD
    for j, r in enumerate(releases):
        meta[f"r{j}.stage"], meta[f"r{j}.kind"], meta[f"r{j}.unit"] = r.stage, r.kind, r.unit
        meta[f"r{j}.sensitivity"] = float(np.asarray(r.sensitivity).reshape(-1)[0])
        meta[f"r{j}.sigma"] = float(np.asarray(r.sigma).reshape(-1)[0])
    arrays = {} if values is None else {"values": np.asarray(values, dtype=np.float64)}
    scalars = {}
    for k, v in (extra or {}).items():
        if isinstance(v, np.ndarray):
            arrays[f"extra.{k}"] = v
        else:
            scalars[k] = v
    return _pack({"meta": meta, "extra": scalars, "arrays": arrays})


def reply_bytes(content: RecordDict) -> int:
    """Bytes of a reply's byte and string entries (arrays as ``.npy``), what :func:`decode_reply` bounds."""
    return sum(len(v) for rec in content.config_records.values() for v in rec.values() if isinstance(v, (bytes, str)))


def per_client_args(verb: str) -> tuple[str, ...]:
    """Names of ``verb``'s arguments that hold one entry per client (the verb table's ``per_client``)."""
    return verbs.get(verb).per_client


def expected_shape(verb: str, n_params: int, n_features: int, kwargs: dict | None = None) -> tuple[int, ...] | None:
    """Shape of one client's values for ``verb`` requested with ``kwargs`` (None: a verb that sends no values).

    The verb table's shape rule; a verb that sends values whose shape the public dimensions do not
    give is not carried by the wire (ValueError)."""
    entry = verbs.get(verb)
    if entry.shape is None:
        if entry.answer in ("reply", "exact"):
            raise ValueError(f"the verb {verb!r} declares no reply shape: the Flower wire cannot check its values and "
                             "does not carry it.")
        return None
    return tuple(entry.shape(n_params, n_features, kwargs or {}))


def decode_reply(content: RecordDict, verb: str, shape: tuple[int, ...] | None, *,
                 max_bytes: int = MAX_REPLY_BYTES) -> ClientReply:
    """Check one client's reply against what ``verb`` must return and decode it.

    Raises
    ------
    MalformedReplyError
        Over ``max_bytes``; missing or extra records; values of another shape or dtype than
        ``shape`` (float64), or not finite; release records that are not finite non-negative
        numbers with known labels.
    """
    size = reply_bytes(content)
    if size > max_bytes:
        raise MalformedReplyError(f"a client's reply to {verb!r} has {size} bytes, over the limit of {max_bytes}.")
    try:
        sections = _unpack(content, ("meta", "extra", "arrays"))
        meta, extra_cfg, arrays = sections["meta"], sections["extra"], sections["arrays"]
        status = str(meta["status"])
        n_rel = int(meta["n_releases"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise MalformedReplyError(f"a client's reply to {verb!r} lacks its records: {err}") from err
    if status not in ("ok", "silent", "error"):
        raise MalformedReplyError(f"a client's reply to {verb!r} has an unknown status {status!r}.")
    if status == "error":
        return ClientReply(status, None, (), error=(str(meta.get("error_type", "Exception")), str(meta.get("error", ""))))
    releases = []
    for j in range(n_rel):
        try:
            stage, kind, unit = (str(meta[f"r{j}.{k}"]) for k in ("stage", "kind", "unit"))
            sens, sigma = float(meta[f"r{j}.sensitivity"]), float(meta[f"r{j}.sigma"])
        except (KeyError, TypeError, ValueError) as err:
            raise MalformedReplyError(f"release record {j} of a client's reply to {verb!r} is incomplete: {err}") from err
        if kind not in ("aggregated", "local") or unit not in ("record", "client"):
            raise MalformedReplyError(f"release record {j} of a reply to {verb!r} has kind {kind!r}, unit {unit!r}.")
        if not (sigma >= 0 and math.isfinite(sigma)) or not sens >= 0:
            raise MalformedReplyError(f"release record {j} of a reply to {verb!r} has sensitivity {sens}, sigma {sigma}.")
        releases.append(Release(stage, -1, kind, np.array([sens]), np.array([sigma]), unit=unit))
    values = None
    if status == "ok" and shape is not None:
        if "values" not in arrays:
            raise MalformedReplyError(f"a client's reply to {verb!r} has no values.")
        values = _checked_array(arrays["values"], shape, f"values of a reply to {verb!r}")
    extra = {k: v for k, v in extra_cfg.items()}
    for k, a in arrays.items():
        if k.startswith("extra."):
            extra[k[6:]] = _array(a, f"{k} of a reply to {verb!r}")
    leak = meta.get("leak")
    return ClientReply(status, values, tuple(releases), None if leak is None else str(leak), None, extra)


def _checked_array(data, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The ndarray of .npy bytes ``data`` after checking its header's shape and dtype, then its content."""
    declared, dtype, _ = _npy(data, what)
    if declared != tuple(shape) or dtype != np.dtype("<f8"):
        raise MalformedReplyError(f"{what}: expected float64 of shape {tuple(shape)}, got {dtype} of shape {declared}.")
    arr = _array(data, what)
    if not np.all(np.isfinite(arr)):
        raise MalformedReplyError(f"{what}: non-finite entries.")
    return arr
