"""Per-round time of FedSGD on Flower with the gradients summed through SecAgg+ against plain (issue 45).

A SuperLink and ``--sites`` SuperNodes as processes on 127.0.0.1 (the embedded synthetic-logistic
data, d = ``--features``). One Flower run fits, after a warm-up fit, FedSGD with ``aggregation="local"``
(each site's noisy gradient travels as one Message per round) and with ``aggregation="secure"`` (each
round is one SecAgg+ round: setup with key generation, key sharing with Shamir shares, masked vectors,
unmasking), alternating ``--repeats`` times. The time per round is the ServerApp's, from a fit's
start to its end over its rounds plus the opening request (its progress stamps).

``--bytes``: instead, the bytes per site and round of both fits, without processes (the in-memory
grid of tests/flower/_secagg_grid.py routes the same Messages to the nodes' ClientApps and counts
their serialized contents, requests and replies; Flower's framing and HTTP headers are not counted).
``--sites`` and ``--features`` take several values: one row per combination (a Flower run each).
Usage::

    python benchmarks/bench_secagg_flower.py [--sites 5 [10 ...]] [--rounds 5] [--features 3 [50 ...]] [--repeats 2]
        [--bytes]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path


def _bytes(sites: int, features: int, base: dict) -> str:
    """Bytes per site and round, down (server to site) and up, of a local and a secure fit (in-memory grid)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "flower"))
    from _secagg_grid import SecAggGrid, server_identity

    from privfedstat import FederatedData, FedSGD
    from privfedstat.flower import fit_on_grid
    from privfedstat.flower.client import ClientNode, demo_dataset

    server_identity()
    data = demo_dataset("synthetic-logistic", sites, features)
    cells = []
    for aggregation in ("local", "secure"):
        nodes = {1000 + i: ClientNode(FederatedData.from_arrays([data.client(i)]), i, 0) for i in range(sites)}
        grid = SecAggGrid(nodes)
        fit_on_grid(FedSGD(**dict(base, aggregation=aggregation)), grid)
        per = sites * (base["n_iter"] + 1)
        cells.append(f"{grid.sent / per:.0f} / {grid.received / per:.0f}")
    return f"| {sites}, {features} | {cells[0]} | {cells[1]} |"


def _timed(sites: int, features: int, rounds: int, repeats: int, base: dict) -> str:
    """Seconds per round of local and secure fits alternating ``repeats`` times in one Flower run (after a warm-up)."""
    from privfedstat.flower.launch import LocalFederation

    fits = [{"estimator": "fedsgd", "params": dict(base, n_iter=2)}]
    for _ in range(repeats):
        fits += [{"estimator": "fedsgd", "params": dict(base, aggregation=a)} for a in ("local", "secure")]
    t0 = time.perf_counter()
    with LocalFederation(sites, n_features=features) as fed:
        results = fed.run(fits, timeout=3600, reply_timeout=300.0)
        stamps = (fed.dir / f"result{fed._runs}.pkl.progress").read_text().split("\n")
    for r in results:
        if "error" in r:
            raise RuntimeError(r["error"])
    when = {}
    for line in filter(None, stamps):
        what, k, t = line.split()
        when[(what, int(k))] = float(t)
    per = {"local": [], "secure": []}
    for k, fit in enumerate(fits[1:], start=1):
        per[fit["params"]["aggregation"]].append((when[("done", k)] - when[("started", k)]) / (rounds + 1))
    local, secure = statistics.median(per["local"]), statistics.median(per["secure"])
    runs = {a: ", ".join(f"{v:.3f}" for v in per[a]) for a in per}
    return (f"| {sites} | {features} | {runs['local']} | {runs['secure']} | {local:.3f} | {secure:.3f} | "
            f"{secure / local:.2f} | {time.perf_counter() - t0:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[5])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--features", type=int, nargs="+", default=[3])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--bytes", action="store_true", help="count bytes per round instead (no processes)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    base = {"mu": 1.0, "clip": 1.0, "n_iter": args.rounds, "step_size": 0.5, "inference": None, "scaling": None,
            "random_state": 0}
    cells = [(m, d) for m in args.sites for d in args.features]
    if args.bytes:
        print(f"{args.rounds} rounds (+ the opening request); bytes per site and round")
        print("| sites, d | local down / up | secure (SecAgg+) down / up |")
        print("|---|---|---|")
        for m, d in cells:
            print(_bytes(m, d, base), flush=True)
        return
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {args.rounds} rounds (+ the opening "
          f"request), {args.repeats} repeats")
    print("| sites | d | local s per round (each repeat) | secure s per round (each repeat) | local median | "
          "secure median | ratio | s in all |")
    print("|---|---|---|---|---|---|---|---|")
    for m, d in cells:
        print(_timed(m, d, args.rounds, args.repeats, base), flush=True)


if __name__ == "__main__":
    main()
