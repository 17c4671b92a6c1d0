"""Per-round overhead of the Flower path against in-process (issue 16), in one run.

Two settings, m = 10 clients each, FedSGD (clip fixed, no inference: one upload round per step):

1. d = 10 (the GLM case);
2. d = 3658, the size of :class:`~privfedstat.deep.models.DigitsCNN`'s parameter vector: every
   round sends a theta of that size to each client and a gradient of that size back, the
   messages of DeepFedSGD / DeepFedAvg on the digits CNN (the Flower backend carries GLM clients;
   the CNN's own in-process round, DeepFedAvg on the digits, is timed for comparison).

For each: the in-process fit's time per round, the Flower fit's (SuperLink + 10 SuperNodes as
processes on 127.0.0.1, timed by the ServerApp from the first request to the last), their ratio,
and the resulting time of a 50-round fit. Usage::

    python benchmarks/bench_flower.py [--rounds 20] [--cnn-rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

import numpy as np


def _in_process(n_features: int, rounds: int) -> float:
    from privfedstat import FedSGD
    from privfedstat.flower.client import demo_dataset

    data = demo_dataset("synthetic-logistic", 10, n_features)
    FedSGD(mu=2.0, n_iter=2, clip=1.0, inference=None, random_state=0).fit(data)  # compile
    t0 = time.perf_counter()
    FedSGD(mu=2.0, n_iter=rounds, clip=1.0, inference=None, random_state=0).fit(data)
    return (time.perf_counter() - t0) / rounds


def _flower(n_features: int, rounds: int) -> float:
    from privfedstat.flower.launch import LocalFederation

    fit = {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": rounds, "clip": 1.0, "inference": None}}
    with LocalFederation(10, n_features=n_features) as fed:
        fed.run([dict(fit, params=dict(fit["params"], n_iter=2))], timeout=900)  # warm: compile on the nodes
        res = fed.run([fit], timeout=900)[0]
        if "error" in res:
            raise RuntimeError(res["error"])
        stamps = (fed.dir / f"result{fed._runs}.pkl.progress").read_text().split()
    return (float(stamps[5]) - float(stamps[2])) / (rounds + 1)  # the opening request counts as one


def _deep_in_process(rounds: int) -> float:
    import torch

    from privfedstat.data import load_digits
    from privfedstat.deep import DeepFedAvg, TensorFederatedData
    from privfedstat.deep.models import DigitsCNN

    X, y = load_digits(images=True)
    data = TensorFederatedData.from_pooled(X[:1000], y[:1000], sizes=[100] * 10)
    torch.manual_seed(0)
    est = DeepFedAvg(model=DigitsCNN(), mu=2.0, n_rounds=rounds, n_local_steps=1, step_size=0.1, clip=1.0,
                     random_state=0)
    t0 = time.perf_counter()
    est.fit(data)
    return (time.perf_counter() - t0) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cnn-rounds", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []
    for label, d, rounds in [("GLM, d = 10", 10, args.rounds), ("DigitsCNN-sized, d = 3658", 3658, args.cnn_rounds)]:
        local, remote = _in_process(d, rounds), _flower(d, rounds)
        rows.append((label, local, remote))
        print(f"{label:28s} in-process {1e3 * local:8.2f} ms/round   Flower {1e3 * remote:8.1f} ms/round   "
              f"ratio {remote / local:7.0f}   overhead {1e3 * (remote - local):8.1f} ms/round   "
              f"50 rounds on Flower: {50 * remote:5.1f} s", flush=True)
    try:
        deep = _deep_in_process(args.cnn_rounds)
    except ImportError:
        return
    overhead = rows[1][2] - rows[1][1]
    print(f"{'DeepFedAvg DigitsCNN (K=1)':28s} in-process {1e3 * deep:8.2f} ms/round   + the Flower overhead of its "
          f"messages: {1e3 * (deep + overhead):8.1f} ms/round (ratio {(deep + overhead) / deep:.1f})")


if __name__ == "__main__":
    main()
