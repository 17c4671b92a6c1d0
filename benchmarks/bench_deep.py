"""One private step on the paper's MNIST CNN and on ResNet20 (GroupNorm): privfedstat against Opacus 1.6's three
modes and a non-private step.

Run by hand (not part of the test suite; Opacus is a benchmark-only dependency)::

    python benchmarks/bench_deep.py [--threads 1] [--repeats 5] [--results]   # ~15 min on 2 loaded cores
    python benchmarks/bench_deep.py --quick                                    # ~1 min smoke run

One step = per-sample gradient norms + clipping to B + Gaussian noise + the SGD update, on
:class:`privfedstat.deep.models.MnistCNN` (421,642 parameters, random 28 x 28 float32 inputs) and
:class:`privfedstat.deep.models.ResNet20` (GroupNorm, 269,722 parameters, random 3 x 32 x 32 inputs),
with random labels (the timing does not depend on the values), at batch sizes 64 / 128 / 256:

* ``privfedstat``: :func:`privfedstat.deep.per_sample_clipped_mean` (``flat=False``; book-keeping
  per-sample gradients, :mod:`privfedstat.deep.ghost`), plus ``N(0, (z B / n)^2)`` noise from a
  ``torch.Generator`` on each parameter's mean (float64, as released), then the model's dtype and
  ``torch.optim.SGD.step``;
* ``opacus-hooks`` / ``opacus-functorch`` / ``opacus-ghost``: ``PrivacyEngine().make_private(...,
  grad_sample_mode="hooks" | "functorch" | "ghost")`` (flat clipping, noise multiplier z, same B;
  ghost clipping, Opacus' "fast gradient clipping", with the ``DPLossFastGradientClipping``
  criterion that make_private returns, whose ``backward`` runs its two backward passes), then
  ``zero_grad; loss.backward(); optimizer.step()`` on the same batch (the Poisson data loader that
  make_private returns is not used: every method steps on the same fixed batch);
* ``non-private``: ``zero_grad; loss.backward(); SGD.step()``.

Every method does the same work: one forward pass, its backward pass(es), the clipping, the noise
and the update; no extra inference. The loss is ``nll_loss`` on the models' log-probabilities
(mean reduction), B = 1, z = 1, learning rate 0.05. Before timing, the clipped mean gradients of
privfedstat and of the three Opacus modes (noise multiplier 0, ``DPOptimizer.pre_step``) are
compared on each benchmark batch at the same parameters (max abs difference printed; the run stops
if they disagree).

Timing: every step function is built in this process and warmed up; then ``--repeats`` rounds
each time one step of every (architecture, batch, method) configuration, interleaved (the method
order rotates from round to round) so that load from other processes hits all alike; the table
gives medians and the ratios of medians of the same run.
torch runs on ``--threads`` intra-op threads (and 1 inter-op thread).

Peak memory: each configuration runs in a fresh process (forked from a multiprocessing
forkserver that has imported the modules and built nothing), which builds the step, reads its
resident set size (``VmRSS`` in ``/proc/self/status``), resets its high-water mark (``5`` written
to ``/proc/self/clear_refs``), runs two steps and reports the high-water mark ``VmHWM`` minus
that RSS: the steps' peak extra resident memory. tracemalloc does not see torch's CPU
allocations, and ``getrusage``'s ``ru_maxrss`` survives ``exec`` (a child would report at least
its parent's peak); where ``clear_refs`` is not writable, ``ru_maxrss`` is used and the figure,
marked ``*``, is an upper bound.

Scaling: one client holding n in {64, 128, 256, 512} rows of the MNIST CNN answers
``TorchClients.local_descent`` (the verb of a DP-FedAvg round: ``K = 2`` full-batch local steps
with per-sample clipping and noise on the parameters), interleaved over n; reported as time per
sample per local step (constant when the cost is linear in n).

Writes the section "## Deep: private step vs Opacus (benchmarks/bench_deep.py)" of
``benchmarks/RESULTS.md`` with ``--results``; other sections are left intact.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from privfedstat.deep.clients import TorchClients
from privfedstat.deep.data import TensorFederatedData
from privfedstat.deep.models import MnistCNN, ResNet20, count_parameters
from privfedstat.deep.per_sample import PerSampleGradients, per_sample_clipped_mean

HERE = Path(__file__).resolve().parent
HEADING = "## Deep: private step vs Opacus (benchmarks/bench_deep.py)"
METHODS = ("privfedstat", "opacus-hooks", "opacus-functorch", "opacus-ghost", "non-private")
OPACUS_MODES = ("hooks", "functorch", "ghost")
#: architecture -> (model class, input shape of one sample)
ARCHS: dict[str, tuple[type[nn.Module], tuple[int, ...]]] = {"MnistCNN": (MnistCNN, (1, 28, 28)),
                                                             "ResNet20": (ResNet20, (3, 32, 32))}
BATCHES = (64, 128, 256)
SIZES = (64, 128, 256, 512)
CLIP = 1.0  # B
NOISE_MULTIPLIER = 1.0  # z: noise sd z B on the sum of clipped gradients, z B / n on their mean
LEARNING_RATE = 0.05
LOCAL_STEPS = 2  # K of the local_descent scaling check
SEED = 20240612
#: what the private step does beyond a non-private one (printed under the targets)
LIMITS = ("What privfedstat's step does beyond the non-private one (whose forward pass and backward pass, without weight "
          "gradients, it shares): it forms every convolution's and normalisation layer's per-sample gradients (the "
          "arithmetic of their weight gradients, as grouped convolutions of 16 samples, slower per operation than one "
          "batched weight gradient), converts them to float64 for the norms and the clipped sum, and takes the "
          "factored Linear layers' norms and clipped sums from their inputs and output gradients. Opacus' ghost "
          "clipping forms the same convolution gradients and runs a second backward pass.")


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


def quiet_warnings() -> None:
    """Opacus' warnings about full backward hooks and its non-secure RNG (expected here)."""
    warnings.filterwarnings("ignore", module="opacus")
    warnings.filterwarnings("ignore", message=".*[Ff]ull backward hook.*")
    warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")


def make_batch(arch: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n random float32 inputs of the architecture's shape and labels in 0..9 (the same for every method)."""
    gen = torch.Generator().manual_seed(SEED + n)
    return torch.randn(n, *ARCHS[arch][1], generator=gen), torch.randint(0, 10, (n,), generator=gen)


def make_model(arch: str) -> nn.Module:
    torch.manual_seed(SEED)
    return ARCHS[arch][0]()


def make_opacus(arch: str, mode: str, x: torch.Tensor, y: torch.Tensor, noise_multiplier: float):
    """The model and SGD made private by Opacus' PrivacyEngine (flat clipping to B) in grad_sample_mode ``mode``,
    and the criterion to call (ghost clipping's ``DPLossFastGradientClipping``; ``NLLLoss`` otherwise)."""
    from opacus import PrivacyEngine

    model = make_model(arch)
    loader = DataLoader(TensorDataset(x, y), batch_size=x.shape[0])  # expected batch size n (sample rate 1)
    extra = {"criterion": nn.NLLLoss()} if mode == "ghost" else {}
    made = PrivacyEngine().make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LEARNING_RATE), data_loader=loader,
        noise_multiplier=noise_multiplier, max_grad_norm=CLIP, grad_sample_mode=mode, **extra)
    if mode == "ghost":
        model, optimizer, criterion, _ = made
        return model, optimizer, criterion
    model, optimizer, _ = made
    return model, optimizer, nn.NLLLoss()


def make_step(arch: str, method: str, n: int) -> Callable[[], None]:
    """A closure that takes one step of ``method`` on the batch of size n (each closure owns its model)."""
    x, y = make_batch(arch, n)
    if method.startswith("opacus-"):
        model, optimizer, criterion = make_opacus(arch, method.removeprefix("opacus-"), x, y, NOISE_MULTIPLIER)

        def opacus_step() -> None:
            optimizer.zero_grad(set_to_none=True)
            criterion(model(x), y).backward()
            optimizer.step()

        return opacus_step
    model = make_model(arch)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    if method == "non-private":

        def plain_step() -> None:
            optimizer.zero_grad(set_to_none=True)
            F.nll_loss(model(x), y).backward()
            optimizer.step()

        return plain_step
    if method != "privfedstat":
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}.")
    gen = torch.Generator().manual_seed(SEED)
    sd = NOISE_MULTIPLIER * CLIP / n

    def private_step() -> None:
        grads = per_sample_clipped_mean(model, F.nll_loss, x, y, CLIP, flat=False)
        for name, p in model.named_parameters():
            g = grads[name]
            g.add_(torch.randn(g.shape, generator=gen, dtype=g.dtype), alpha=sd)
            p.grad = g.to(p.dtype)
        optimizer.step()

    return private_step


# --------------------------------------------------------------------------- agreement
def opacus_clipped_mean(arch: str, mode: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Opacus' mean of the flat-clipped per-sample gradients (noise multiplier 0), flat, at make_model()'s
    parameters."""
    model, optimizer, criterion = make_opacus(arch, mode, x, y, 0.0)
    optimizer.zero_grad(set_to_none=True)
    criterion(model(x), y).backward()
    optimizer.pre_step()  # clip (and accumulate), add_noise (sd 0), scale by 1 / expected batch size
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def check_agreement(archs: tuple[str, ...], batches: tuple[int, ...]) -> list[tuple[str, int, str, float, float, float]]:
    """Rows (arch, n, mode, max abs diff, max |gradient|, fraction of samples clipped); raises if they disagree."""
    rows = []
    for arch in archs:
        for n in batches:
            x, y = make_batch(arch, n)
            model = make_model(arch)
            ours = per_sample_clipped_mean(model, F.nll_loss, x, y, CLIP)
            norms = per_sample_norms(model, x, y)
            for mode in OPACUS_MODES:
                theirs = opacus_clipped_mean(arch, mode, x, y)
                diff = float((ours - theirs).abs().max())
                scale = float(theirs.abs().max())
                rows.append((arch, n, mode, diff, scale, float((norms > CLIP).float().mean())))
                print(f"  {arch} n={n:3d} opacus-{mode:9s} max abs diff {diff:.2e} (max |gradient| {scale:.2e})",
                      flush=True)
                if not diff <= 1e-5 * scale + 1e-7:
                    raise SystemExit(f"privfedstat and Opacus ({mode}) clipped means disagree on {arch} at n={n}: "
                                     f"{diff:.3e}")
    return rows


def per_sample_norms(model, x, y) -> torch.Tensor:
    """Per-sample gradient norms (to report how many samples the clipping bound B affects)."""
    return PerSampleGradients(model, F.nll_loss).norms({k: p.detach() for k, p in model.named_parameters()}, x, y)


# --------------------------------------------------------------------------- timing
Key = tuple[str, str, int]  # (architecture, method, batch size)


def time_steps(archs: tuple[str, ...], batches: tuple[int, ...], repeats: int, warmup: int) -> dict[Key, list[float]]:
    """Seconds per step of every (arch, method, n), interleaved round-robin with a rotating method order."""
    steps = {(a, m, n): make_step(a, m, n) for a in archs for n in batches for m in METHODS}
    for _ in range(warmup):
        for step in steps.values():
            step()
    times: dict[Key, list[float]] = {key: [] for key in steps}
    for r in range(repeats):
        for arch in archs:
            for n in batches:
                for method in METHODS[r % len(METHODS):] + METHODS[:r % len(METHODS)]:
                    t0 = time.perf_counter()
                    steps[arch, method, n]()
                    times[arch, method, n].append(time.perf_counter() - t0)
        print(f"  round {r + 1}/{repeats} done (load {os.getloadavg()[0]:.2f})", flush=True)
    return times


def time_local_descent(sizes: tuple[int, ...], repeats: int) -> dict[int, list[float]]:
    """Seconds of one client's local_descent (K full-batch private local steps) on n rows of the MNIST CNN,
    interleaved over n."""
    model = make_model("MnistCNN")
    clients = {}
    for n in sizes:
        x, y = make_batch("MnistCNN", n)
        clients[n] = TorchClients(TensorFederatedData.from_pooled(x, y, sizes=[n]), model, F.nll_loss,
                                  np.random.SeedSequence(SEED))
    theta0 = clients[sizes[0]].initial_parameters()

    def run(n: int) -> None:
        clients[n].local_descent(theta0, clip=CLIP, step_size=LEARNING_RATE, n_steps=LOCAL_STEPS,
                                 sensitivity=2 * CLIP * LEARNING_RATE / n, mu=2.0, stage="bench")

    for n in sizes:
        run(n)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(repeats):
        for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            t0 = time.perf_counter()
            run(n)
            times[n].append(time.perf_counter() - t0)
    return times


# --------------------------------------------------------------------------- memory (fresh process per configuration)
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(field + ":")).split()[1])


def child_memory(arch: str, method: str, n: int, threads: int) -> dict:
    """Peak resident memory of two steps above the RSS before them (KiB -> MiB); ``exact`` False: an upper bound."""
    set_threads(threads)
    quiet_warnings()
    step = make_step(arch, method, n)
    before = _status_kib("VmRSS")
    try:  # reset this process' high-water mark VmHWM (Linux >= 4.0); ru_maxrss cannot be reset
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        exact = True
    except OSError:
        exact = False
    step()
    step()
    peak = _status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mib": (peak - before) / 1024, "exact": exact}


def measure_memory(archs: tuple[str, ...], batches: tuple[int, ...], threads: int) -> dict[Key, dict]:
    """child_memory of every (arch, method, n), each in a fresh process forked from a server that has only imported
    the modules (multiprocessing's forkserver: saves the ~10 s import of torch, Opacus and privfedstat per process)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", "opacus"])
    out = {}
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for arch in archs:
            for n in batches:
                for method in METHODS:
                    out[arch, method, n] = pool.apply(child_memory, (arch, method, n, threads))
    return out


# --------------------------------------------------------------------------- report
def format_section(mi: dict, args, agree, times, memory, scaling, elapsed: float) -> str:
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = [
        HEADING,
        "",
        f"- Date: {mi['date']}",
        f"- Machine: {mi['model']}, {mi['cpus']} CPU(s) shared with other agents' jobs (absolute times vary with "
        f"their load; the ratios compare medians of the same interleaved run); Python {mi['python']}, torch "
        f"{torch.__version__}, opacus {_opacus_version()}; torch threads {args.threads} (intra-op), 1 inter-op; "
        f"load average at start {mi['load']}, at end {mi['load_end']}",
        "- Setting: " + ", ".join(f"{a} ({count_parameters(make_model(a)):,} parameters, random "
                                  f"{' x '.join(map(str, ARCHS[a][1]))} float32 inputs)" for a in args.archs)
        + f"; nll_loss; B = {CLIP}, noise multiplier z = {NOISE_MULTIPLIER}, SGD lr {LEARNING_RATE}; one step = "
        f"per-sample gradient norms + clipping + noise + SGD update; median of {args.repeats} interleaved rounds "
        f"after {args.warmup} warm-up round(s); whole run {elapsed:.0f} s",
        "- Peak memory: resident high-water mark (`VmHWM`, reset through `/proc/self/clear_refs`) over two steps "
        "minus the RSS just before them, each configuration in a fresh process (tracemalloc does not see torch's "
        "CPU tensors; `ru_maxrss` survives exec)"
        + ("" if all(m["exact"] for m in memory.values()) else "; * `ru_maxrss` instead (an upper bound)"),
    ]
    targets = []
    for arch in args.archs:
        lines += ["", f"{arch}:", "",
                  "| batch | method | ms / step | peak MiB | vs Opacus ghost | vs Opacus fastest | vs non-private |",
                  "|---:|---|---:|---:|---:|---:|---:|"]
        for n in args.batches:
            ghost = med[arch, "opacus-ghost", n]
            fastest = min(med[arch, f"opacus-{mode}", n] for mode in OPACUS_MODES)
            plain = med[arch, "non-private", n]
            for method in METHODS:
                m = memory.get((arch, method, n))
                mem = "-" if m is None else f"{m['peak_mib']:.0f}" + ("" if m["exact"] else "*")
                t = med[arch, method, n]
                lines.append(f"| {n} | {method} | {1000 * t:.1f} | {mem} | {t / ghost:.2f}x | {t / fastest:.2f}x | "
                             f"{t / plain:.2f}x |")
            a, b = med[arch, "privfedstat", n] / ghost, med[arch, "privfedstat", n] / plain
            targets.append(f"{arch} n={n} {a:.2f}x ({'met' if a <= 1.0 else 'MISSED'}), {b:.2f}x"
                           + ("" if n < 128 else f" ({'met' if b <= 1.5 else 'MISSED'})"))
    lines += ["", "Targets (issue 27): privfedstat <= 1.0x Opacus ghost at every batch (aim 0.8x) and <= 1.5x the "
              "non-private step at batch >= 128: " + "; ".join(targets) + "."]
    lines += ["", LIMITS]
    lines += ["", "Agreement of the clipped mean gradients with Opacus' (noise 0, same parameters and batch), max abs "
              "difference: " + "; ".join(
                  f"{arch} n={n} " + ", ".join(f"{mode} {d:.1e}" for a, m, mode, d, _, _ in agree if (a, m) == (arch, n))
                  + f" (max |g| {next(r[4] for r in agree if r[:2] == (arch, n)):.1e}, "
                  f"{100 * next(r[5] for r in agree if r[:2] == (arch, n)):.0f}% of samples clipped)"
                  for arch in args.archs for n in args.batches) + "."]
    if scaling:
        lines += ["", f"Per-client local training (`TorchClients.local_descent`, MnistCNN, one client, K = {LOCAL_STEPS} "
                  f"full-batch private steps), median of {args.repeats} interleaved runs:", "",
                  "| n | ms / call | us / (sample x step) | vs n = " + f"{args.sizes[0]} |", "|---:|---:|---:|---:|"]
        per = {n: statistics.median(v) / (n * LOCAL_STEPS) for n, v in scaling.items()}
        for n in args.sizes:
            lines.append(f"| {n} | {1000 * statistics.median(scaling[n]):.1f} | {1e6 * per[n]:.1f} | "
                         f"{per[n] / per[args.sizes[0]]:.2f} |")
    return "\n".join(lines) + "\n"


def _opacus_version() -> str:
    import opacus

    return opacus.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument("--archs", nargs="+", choices=list(ARCHS), default=list(ARCHS), help="architectures (all)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES), help="batch sizes (64 128 256)")
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 64, sizes 32/64, 2 rounds")
    parser.add_argument("--results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args()
    quiet_warnings()
    set_threads(args.threads)
    args.archs = tuple(args.archs)
    args.batches, args.sizes = (tuple(args.batches), SIZES) if not args.quick else ((64,), (32, 64))
    if args.quick:
        args.repeats, args.warmup = 2, 1
    t_start = time.perf_counter()
    sys.path.insert(0, str(HERE))
    from bench_kernels import machine_info, update_results  # numba: imported here, not in the memory children

    mi = machine_info()
    print(f"{mi['model']} x{mi['cpus']}, torch {torch.__version__} on {args.threads} thread(s), load {mi['load']}",
          flush=True)
    print("agreement of the clipped mean gradients (privfedstat vs Opacus):", flush=True)
    agree = check_agreement(args.archs, args.batches)
    print(f"timing one step [{time.perf_counter() - t_start:.0f} s]:", flush=True)
    times = time_steps(args.archs, args.batches, args.repeats, args.warmup)
    memory = {}
    if not args.no_memory:
        print(f"peak memory (fresh process per configuration) [{time.perf_counter() - t_start:.0f} s]:", flush=True)
        memory = measure_memory(args.archs, args.batches, args.threads)
    scaling = {}
    if "MnistCNN" in args.archs:
        print(f"local_descent scaling in n [{time.perf_counter() - t_start:.0f} s]:", flush=True)
        scaling = time_local_descent(args.sizes, args.repeats)
    mi["load_end"] = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    section = format_section(mi, args, agree, times, memory, scaling, time.perf_counter() - t_start)
    print("\n" + section)
    if args.results:
        update_results(section.rstrip(), HEADING)
        print(f"wrote {(HERE / 'RESULTS.md').relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
