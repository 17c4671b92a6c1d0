"""Per-round overhead of the Flower path against in-process (issue 16), in one run.

Three settings, m = 10 clients each (a SuperLink and 10 SuperNodes as processes on 127.0.0.1):

1. FedSGD, d = 10 (the GLM case; clip fixed, no inference: one upload round per step);
2. FedSGD, d = 3658, the size of :class:`~privfedstat.deep.models.DigitsCNN`'s parameter vector:
   the messages of a digits-CNN round (theta out, a vector of that size back) with GLM clients;
3. DeepFedAvg on the digits CNN itself (one local step per round), the nodes holding the digit
   images and the network (``model="DigitsCNN"``).

For each: the in-process fit's time per round, the Flower fit's (timed by the ServerApp from its
first request to its last; the opening request counts as a round), their ratio, and the time of
a 50-round fit on Flower. ``--count-requests`` also counts the HTTP requests the SuperLink serves
per client and round, by endpoint (the SuperLink is then started through a counting wrapper):
on loopback a round waits for the SuperLink, one Python process spending a few milliseconds per
request. Usage::

    python benchmarks/bench_flower.py [--rounds 20] [--cnn-rounds 10] [--count-requests]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import stat
import sys
import tempfile
import time
import warnings
from pathlib import Path

M = 10

_COUNTING_SUPERLINK = """#!{python}
import collections, sys, threading, time
from uvicorn.protocols.http import httptools_impl
counts, on_url = collections.Counter(), httptools_impl.HttpToolsProtocol.on_url
def counted(self, url):
    counts[url.decode()] += 1
    return on_url(self, url)
httptools_impl.HttpToolsProtocol.on_url = counted
def dump():
    while True:
        time.sleep(0.2)
        with open({out!r} + ".tmp", "w") as f:
            f.write(__import__("json").dumps(counts))
        __import__("os").replace({out!r} + ".tmp", {out!r})
threading.Thread(target=dump, daemon=True).start()
from flwr.superlink.cli.flower_superlink import flower_superlink
sys.exit(flower_superlink())
"""


def _glm_in_process(n_features: int, rounds: int) -> float:
    from privfedstat import FedSGD
    from privfedstat.flower.client import demo_dataset

    data = demo_dataset("synthetic-logistic", M, n_features)
    FedSGD(mu=2.0, n_iter=2, clip=1.0, inference=None, random_state=0).fit(data)  # compile
    t0 = time.perf_counter()
    FedSGD(mu=2.0, n_iter=rounds, clip=1.0, inference=None, random_state=0).fit(data)
    return (time.perf_counter() - t0) / rounds


def _cnn_fit(rounds: int) -> dict:
    return {"estimator": "DeepFedAvg", "model": "DigitsCNN", "model_seed": 0,
            "params": {"mu": 2.0, "n_rounds": rounds, "n_local_steps": 1, "step_size": 0.1, "clip": 1.0,
                       "random_state": 0}}


def _cnn_in_process(rounds: int) -> float:
    from privfedstat.flower.app import make_estimator
    from privfedstat.flower.client import demo_dataset

    data = demo_dataset("digits-images", M)
    make_estimator(_cnn_fit(1)).fit(data)  # warm
    est = make_estimator(_cnn_fit(rounds))
    t0 = time.perf_counter()
    est.fit(data)
    return (time.perf_counter() - t0) / rounds


def _on_flower(fed, fit: dict, warm: dict, rounds: int, counts: Path | None) -> tuple[float, dict]:
    """Seconds per round of ``fit`` on the federation (after ``warm``) and the SuperLink's requests per client-round."""
    res = fed.run([warm], timeout=900)[0]
    if "error" in res:
        raise RuntimeError(res["error"])
    time.sleep(0.5)
    before = json.loads(counts.read_text()) if counts else {}
    res = fed.run([fit], timeout=900)[0]
    if "error" in res:
        raise RuntimeError(res["error"])
    time.sleep(0.5)
    after = json.loads(counts.read_text()) if counts else {}
    stamps = (fed.dir / f"result{fed._runs}.pkl.progress").read_text().split()
    per_round = (float(stamps[5]) - float(stamps[2])) / (rounds + 1)  # the opening request counts as one
    requests = {k: (v - before.get(k, 0)) / (rounds + 1) / M for k, v in after.items() if v > before.get(k, 0)}
    return per_round, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cnn-rounds", type=int, default=10)
    parser.add_argument("--count-requests", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from privfedstat.flower import launch

    counts = None
    if args.count_requests:
        tmp = Path(tempfile.mkdtemp(prefix="bench-flower-"))
        counts, wrapper = tmp / "counts.json", tmp / "flower-superlink"
        wrapper.write_text(_COUNTING_SUPERLINK.format(python=sys.executable, out=str(counts)))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        found = launch._bin
        launch._bin = lambda name: str(wrapper) if name == "flower-superlink" else found(name)
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; m = {M}")
    for label, d, rounds in [("FedSGD, d = 10", 10, args.rounds), ("FedSGD, d = 3658 (CNN-sized)", 3658, args.rounds),
                             ("DeepFedAvg, DigitsCNN", None, args.cnn_rounds)]:
        if d is None:
            try:
                local = _cnn_in_process(rounds)
            except ImportError:
                continue
            fed = launch.LocalFederation(M, dataset="digits-images", model="DigitsCNN")
            fit, warm = _cnn_fit(rounds), _cnn_fit(1)
        else:
            local = _glm_in_process(d, rounds)
            fed = launch.LocalFederation(M, n_features=d)
            fit = {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": rounds, "clip": 1.0, "inference": None}}
            warm = dict(fit, params=dict(fit["params"], n_iter=2))  # compiles on the nodes
        with fed:
            remote, requests = _on_flower(fed, fit, warm, rounds, counts)
        print(f"{label:30s} in-process {1e3 * local:8.2f} ms/round   Flower {1e3 * remote:7.1f} ms/round   "
              f"ratio {remote / local:7.1f}   overhead {1e3 * (remote - local):7.1f} ms/round   "
              f"50 rounds on Flower: {50 * remote:5.1f} s", flush=True)
        if requests:
            total = sum(requests.values())
            print(f"{'':30s} SuperLink requests per client and round: {total:.1f} = " + ", ".join(
                f"{k.removeprefix('/v1/')} {v:.2f}" for k, v in sorted(requests.items(), key=lambda kv: -kv[1])
                if v >= 0.05), flush=True)


if __name__ == "__main__":
    main()
