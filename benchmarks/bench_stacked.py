"""Client-level rounds of many torch clients: vectorised across clients (vmap) against the per-client loop.

One round of each client-level verb of :class:`~privfedstat.deep.TorchClients` with M = 1000
clients of :class:`~privfedstat.deep.models.DigitsCNN` (3658 parameters): scikit-learn's 1437
training digits dealt IID (1-2 images per client). Cases: client-level DP-FedAvg
(``clipped_update``) with K = 1 and K = 5 local steps (DeepDPFedAvg's default), Fed-alpha-NormEC
(``normec_round``, T = 1, full batch: the network study's setting) and HiFedProx
(``hifedprox_round``, DeepHiFedProx's defaults: 3 Armijo steps, batch 16). Each timing is a
fresh set of clients with the same seed and one request of every client (noise included), timed
after one untimed request (a fit's steady state: the first allocates the clients' buffers); the
vectorised and the loop strategies (``vectorise=False``) alternate within one process on one
torch thread, ``--reps`` times each; the table gives medians, the ratio, and the largest
difference between the two strategies' replies (same seeds, same noise: float rounding only).
The noise row is the draw of one Gaussian vector per client from its own ``torch.Generator``
(float64), which both strategies pay and the vectorisation does not touch.

    python benchmarks/bench_stacked.py [--reps 5] [--no-write]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import machine_info, update_results  # noqa: E402

from privfedstat.deep import TensorFederatedData, TorchNoise  # noqa: E402
from privfedstat.deep.clients import TorchClients  # noqa: E402
from privfedstat.deep.models import DigitsCNN  # noqa: E402
from privfedstat.deep.study import load_cnn_data, seeded_model  # noqa: E402
from privfedstat.federation.power_prox import Armijo, PowerProx  # noqa: E402

HEADING = "## Many torch clients: one client-level round, vectorised vs per-client loop (benchmarks/bench_stacked.py)"
M = 1000
COMMON = dict(sensitivity=2.0, mu=1.0, stage="round")
CASES = {
    "DP-FedAvg round, K = 1 (clipped_update)": ("clipped_update", dict(step_size=0.1, n_steps=1, update_clip=1.0)),
    "DP-FedAvg round, K = 5 (clipped_update)": ("clipped_update", dict(step_size=0.1, n_steps=5, update_clip=1.0)),
    "Fed-alpha-NormEC round, T = 1 (normec_round)": ("normec_round", dict(alpha=0.01, beta=0.1, step_size=0.1, n_steps=1,
                                                                         incremental=False)),
    "HiFedProx round, 3 Armijo steps (hifedprox_round)": ("hifedprox_round", dict(
        prox=PowerProx(0.03, 1.0, 5.0), armijo=Armijo(), n_steps=np.full(M, 3), step_size=np.full(M, 0.5),
        batch_size=16, batch_seed=np.random.SeedSequence(5), update_clip=1.0)),
}


def one_round(data, model, verb: str, kw: dict, vectorise: bool) -> tuple[float, np.ndarray]:
    """Wall time of one request of ``verb`` in a fit's steady state (fresh clients, seed 1, after one untimed
    request: the first allocates the clients' buffers), and the reply's values."""
    clients = TorchClients(data, model, F.cross_entropy, np.random.SeedSequence(1), vectorise=vectorise)
    assert clients._stacked.vectorised is vectorise
    theta = clients.initial_parameters()
    getattr(clients, verb)(theta, **kw, **COMMON)
    start = time.perf_counter()
    reply = getattr(clients, verb)(theta, **kw, **COMMON)
    return time.perf_counter() - start, reply.values


def noise_draw(n_params: int) -> float:
    noise = TorchNoise.from_seed(np.random.SeedSequence(1), M)
    start = time.perf_counter()
    noise.standard_normal((n_params,))
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="timed rounds per strategy and case (alternating)")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = ap.parse_args()
    torch.set_num_threads(1)
    (X, y), _ = load_cnn_data("digits")
    data = TensorFederatedData.split_iid(torch.as_tensor(X), torch.as_tensor(y), M, random_state=0)
    model = seeded_model(DigitsCNN, 0)
    n_params = sum(p.numel() for p in model.parameters())
    rows = []
    start = time.perf_counter()
    for name, (verb, kw) in CASES.items():
        times = {True: [], False: [], "noise": []}
        diff = 0.0
        for _ in range(args.reps):
            (t_fast, fast), (t_slow, slow) = (one_round(data, model, verb, kw, v) for v in (True, False))
            times[True].append(t_fast)
            times[False].append(t_slow)
            times["noise"].append(noise_draw(n_params))
            diff = max(diff, float(np.max(np.abs(fast - slow))))
        fast, slow = statistics.median(times[True]), statistics.median(times[False])
        rows.append((name, slow, fast, diff, statistics.median(times["noise"])))
        print(f"{name}: loop {slow * 1e3:.0f} ms, vectorised {fast * 1e3:.0f} ms, {slow / fast:.1f}x, "
              f"max |diff| {diff:.1e}", flush=True)
    noise = rows[0][4]  # timed next to the K = 1 rounds
    wall = time.perf_counter() - start
    info = machine_info()
    sizes = np.diff(data.offsets)
    lines = [
        HEADING, "",
        f"- Date: {time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}; machine: {info['model']}, {info['cpus']} "
        f"CPU(s) shared with other agents' jobs (load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}): "
        "absolute times are noisy, the ratios come from one run with the two strategies alternating; "
        f"torch {torch.__version__} on 1 thread; Python {info['python']}",
        f"- Setting: M = {M} clients of DigitsCNN ({n_params} parameters), the 1437 training digits dealt IID "
        f"({sizes.min()}-{sizes.max()} images per client), every client asked, noise on (mu = 1); "
        f"a round is timed after one untimed round of the same clients; "
        f"{args.reps} rounds per strategy and case, medians; wall {wall:.0f} s. Command: "
        "`python benchmarks/bench_stacked.py`",
        "- Vectorised: `TorchClients(..., vectorise=True)` (the default): one `torch.func.vmap` over stacked client "
        "parameters per group of equal batch sizes (`privfedstat/deep/stacked.py`); loop: `vectorise=False`, one "
        "`grad` call per client (the same numbers as the per-client loop it replaces, bit for bit). max |diff|: "
        "largest difference between the two strategies' replies (same seeds and noise streams).",
        "",
        "| round (all 1000 clients) | per-client loop | vectorised | speed-up | max abs diff |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, slow, fast, diff, _ in rows:
        lines.append(f"| {name} | {slow * 1e3:.0f} ms | {fast * 1e3:.0f} ms | {slow / fast:.1f}x | {diff:.1e} |")
    lines += [
        f"| (noise alone: 1000 float64 draws of {n_params} from per-client generators, timed after each K = 1 pair) "
        f"| {noise * 1e3:.0f} ms | {noise * 1e3:.0f} ms | | |",
        "",
        f"Per client and round the loop costs {rows[0][1] / M * 1e3:.2f} ms at K = 1, the vectorised round "
        f"{rows[0][2] / M * 1e3:.3f} ms, of which {noise / M * 1e3:.3f} ms is the per-client noise draw (the same "
        "draws from the same per-client streams in both strategies, left as they are so that no number changes): it "
        f"bounds the K = 1 speed-up at about {rows[0][1] / noise:.0f}x, and the rest of the round is "
        f"{(rows[0][1] - noise) / (rows[0][2] - noise) if rows[0][2] > noise else math.nan:.1f}x faster vectorised.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        update_results(text, HEADING)
    assert all(math.isfinite(d) and d < 1e-4 for _, _, _, d, _ in rows)


if __name__ == "__main__":
    main()
