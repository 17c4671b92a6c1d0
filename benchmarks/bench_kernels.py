"""Benchmark the numba GLM kernels against their numpy twins and against one pass over X.

Run by hand (not part of the test suite)::

    python benchmarks/bench_kernels.py            # or: make bench

Cases (random float64 X, logistic y in {0, 1}, one shared theta of shape (1, d), clip = 1.0):

(a) N = 20000, d = 10,  m = 50 clients  (X is 1.6 MB: stays in cache)
(b) N = 70000, d = 785, m = 80 clients  (X is 440 MB: memory-bandwidth bound)

Client sizes are unequal (lognormal, seeded), as in real federated data. Every timing is the
median over repeats of ``time.perf_counter``; the implementations are interleaved round-robin
within each repeat so that noise from other processes hits all of them alike, with OpenBLAS held
at one thread; multi-threaded OpenBLAS is timed apart at the end (its worker threads busy-wait after
each call and, on a 2-core machine, take a core from numba's threads). Ratios are only meaningful
within one run (the machines are shared and noisy): run it when the load average is low.

Timed per case:

* ``glm_clipped_mean_grad`` (numba) with 1 thread and with the default thread count;
* ``reference.clipped_mean_grad`` (numpy twin);
* "one pass over X" baselines: ``X.sum(axis=0)`` (numpy), ``X @ v`` (OpenBLAS, 1 thread and
  default threads when the OpenBLAS thread count can be set), and a minimal numba ``z = X @ t``
  row-dot pass (1 thread and default threads), i.e. what a streaming numba loop can achieve;
* case (a) only: ``glm_client_hessian`` vs ``reference.client_hessian`` (the reference builds an
  (N, d, d) array, far too big for case (b));
* ``row_norm_bounds`` (the kernels' row norms, computed once per dataset: plain where the sum of
  squares is safe, rescaled elsewhere) against the plain ``sqrt(einsum)``.

The results section "## Kernels (benchmarks/bench_kernels.py)" of ``benchmarks/RESULTS.md`` is
replaced (or appended); other sections are left intact.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange
from scipy.special import expit

from privfedstat.data.federated import row_norm_bounds
from privfedstat.families import Logistic
from privfedstat.kernels import glm_nb, reference

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
HEADING = "## Kernels (benchmarks/bench_kernels.py)"
CLIP = 1.0
NO_OFFSET = np.empty(0)  # the kernels' "no offset of the linear predictor"
SEED = 20240601

CASES = [
    # label, N, d, m, repeats, hessian
    ("a", 20_000, 10, 50, 20, True),
    ("b", 70_000, 785, 80, 7, False),
]

DEFAULT_THREADS = numba.config.NUMBA_NUM_THREADS


# --------------------------------------------------------------------------- baselines
@njit(parallel=True, cache=True, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})
def _nb_matvec_pass(X, t, z):
    """One streaming pass over X: z = X @ t, one row dot per sample (the kernel's first half)."""
    for j in prange(X.shape[0]):
        s = 0.0
        xj = X[j]
        for k in range(X.shape[1]):
            s += xj[k] * t[k]
        z[j] = s


class _OpenBLASThreads:
    """Set the OpenBLAS thread count of numpy's bundled library (no threadpoolctl needed)."""

    def __init__(self) -> None:
        self._set = self._get = None
        try:
            with open("/proc/self/maps") as f:
                paths = {ln.split()[-1] for ln in f if "openblas" in ln.lower() and ln.split()[-1].startswith("/")}
        except OSError:
            paths = set()
        for p in sorted(paths):
            lib = ctypes.CDLL(p)
            for sname, gname in [
                ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                ("openblas_set_num_threads", "openblas_get_num_threads"),
            ]:
                if hasattr(lib, sname) and hasattr(lib, gname):
                    self._set, self._get = getattr(lib, sname), getattr(lib, gname)
                    self._set.argtypes = [ctypes.c_int]
                    self._get.restype = ctypes.c_int
                    self.default = self._get()
                    return

    @property
    def available(self) -> bool:
        return self._set is not None

    def set(self, n: int) -> None:
        if self._set is not None:
            self._set(int(n))


BLAS = _OpenBLASThreads()


# --------------------------------------------------------------------------- helpers
def make_case(N: int, d: int, m: int, rng: np.random.Generator):
    X = rng.standard_normal((N, d))
    beta = rng.normal(scale=1.0 / np.sqrt(d), size=d)
    y = (rng.random(N) < expit(X @ beta)).astype(np.float64)
    w = rng.lognormal(sigma=0.5, size=m)
    sizes = np.maximum(1, np.floor(w / w.sum() * N)).astype(np.int64)
    sizes[-1] += N - sizes.sum()
    assert sizes.min() >= 1 and sizes.sum() == N
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    theta = rng.normal(scale=0.01, size=(1, d))
    row_norm = row_norm_bounds(X)
    return X, y, offsets, theta, row_norm, sizes


def timed_rounds(fns: dict, repeats: int) -> dict:
    """Run every fn once per round (round-robin, order rotated), return median seconds per fn."""
    names = list(fns)
    times = {k: [] for k in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def with_threads(n: int, f):
    def g():
        numba.set_num_threads(n)
        f()

    return g


class ForeignCPU:
    """CPU time used by *other* processes while a block runs (system busy time minus ours).

    Reported as an average number of cores: on a 2-core machine, anything above ~0.05 means the
    timings (above all the multi-threaded ones) were disturbed.
    """

    @staticmethod
    def _busy() -> float | None:
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)  # user nice system irq softirq steal
        return busy / os.sysconf("SC_CLK_TCK")

    def __enter__(self):
        self.b0, self.t0, self.w0 = self._busy(), sum(os.times()[:2]), time.perf_counter()
        return self

    def __exit__(self, *exc):
        b1, t1, w1 = self._busy(), sum(os.times()[:2]), time.perf_counter()
        self.cores = None if b1 is None or self.b0 is None else max(0.0, (b1 - self.b0) - (t1 - self.t0)) / (w1 - self.w0)
        return False


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine_info() -> dict:
    lscpu = sh(["lscpu"])
    model = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    cpus = re.search(r"^CPU\(s\):\s*(\d+)$", lscpu, re.M)
    flags = re.search(r"^Flags:\s*(.+)$", lscpu, re.M)
    isa = [f for f in ("avx2", "avx512f") if flags and f in flags.group(1).split()]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "model": model.group(1).strip() if model else platform.processor() or "unknown",
        "cpus": cpus.group(1) if cpus else str(os.cpu_count()),
        "isa": ", ".join(isa) or "-",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "numba_threads": DEFAULT_THREADS,
        "blas_threads": BLAS.default if BLAS.available else "default (not settable)",
        "date": sh(["date", "-u"]) or _dt.datetime.now(_dt.timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y"),
        "load": "{:.2f} {:.2f} {:.2f}".format(*load),
    }


# --------------------------------------------------------------------------- benchmark
def bench_case(label, N, d, m, repeats, hessian, rng):
    X, y, offsets, theta, row_norm, sizes = make_case(N, d, m, rng)
    fam = Logistic()
    nbytes = X.nbytes
    out = np.empty((m, d))
    z = np.empty(N)
    v = theta[0].copy()
    T = DEFAULT_THREADS

    def k_nb():
        glm_nb.glm_clipped_mean_grad(X, y, NO_OFFSET, row_norm, offsets, theta, CLIP, fam.code, fam.param, out)

    def k_ref():
        reference.clipped_mean_grad(X, y, offsets, theta, CLIP, fam)

    # warm up (compile or load the numba cache) and check agreement
    for n in sorted({1, T}):
        numba.set_num_threads(n)
        k_nb()
        _nb_matvec_pass(X, v, z)
    numba.set_num_threads(T)
    err = float(np.max(np.abs(out - reference.clipped_mean_grad(X, y, offsets, theta, CLIP, fam))))
    X.sum(axis=0)
    X @ v

    rows = []  # (kind, impl, threads-label, key)
    fns = {}
    fns["nb1"] = with_threads(1, k_nb)
    rows.append(("clipped grad", "numba `glm_clipped_mean_grad`", "1", "nb1"))
    if T != 1:
        fns["nbT"] = with_threads(T, k_nb)
        rows.append(("clipped grad", "numba `glm_clipped_mean_grad`", str(T), "nbT"))
    if d <= glm_nb.COLUMN_KERNEL_MAX_D:  # the layout the oracle actually uses for small d
        Xt = np.ascontiguousarray(X.T)
        out_c = np.empty((m, d))

        def k_cols():
            glm_nb.glm_clipped_mean_grad_cols(Xt, y, NO_OFFSET, row_norm, offsets, theta, CLIP, fam.code, fam.param, out_c)

        for n in sorted({1, T}):
            numba.set_num_threads(n)
            k_cols()
        numba.set_num_threads(T)
        err = max(err, float(np.max(np.abs(out_c - out))))
        fns["col1"] = with_threads(1, k_cols)
        rows.append(("clipped grad", "numba `glm_clipped_mean_grad_cols` (column-major; used for d <= 32)", "1", "col1"))
        if T != 1:
            fns["colT"] = with_threads(T, k_cols)
            rows.append(("clipped grad", "numba `glm_clipped_mean_grad_cols` (column-major; used for d <= 32)", str(T), "colT"))
    fns["ref"] = k_ref
    rows.append(("clipped grad", "numpy `reference.clipped_mean_grad`", "1", "ref"))
    fns["sum"] = lambda: X.sum(axis=0)
    rows.append(("one pass", "numpy `X.sum(axis=0)`", "1", "sum"))
    # Multi-threaded OpenBLAS calls are timed apart, after everything else: OpenBLAS worker threads
    # busy-wait after each call and would take the second core from the numba threads (this made
    # 2-thread numba calls 2-10x slower when everything was interleaved).
    late = {}
    if BLAS.available:
        fns["blas1"] = lambda: X @ v
        rows.append(("one pass", "OpenBLAS `X @ v`", "1", "blas1"))
        if BLAS.default != 1:
            late["blasT"] = lambda: X @ v
            rows.append(("one pass", "OpenBLAS `X @ v` (timed apart)", str(BLAS.default), "blasT"))
    else:
        late["blasT"] = lambda: X @ v
        rows.append(("one pass", "OpenBLAS `X @ v` (timed apart)", "default", "blasT"))
    fns["norms"] = lambda: row_norm_bounds(X)
    rows.append(("row norms", "`row_norm_bounds` (once per dataset)", "1", "norms"))
    fns["plain_norms"] = lambda: np.sqrt(np.einsum("ij,ij->i", X, X))
    rows.append(("row norms", "plain `sqrt(einsum)` (underflows/overflows)", "1", "plain_norms"))
    fns["pass1"] = with_threads(1, lambda: _nb_matvec_pass(X, v, z))
    rows.append(("one pass", "numba row-dot pass `z = X @ t`", "1", "pass1"))
    if T != 1:
        fns["passT"] = with_threads(T, lambda: _nb_matvec_pass(X, v, z))
        rows.append(("one pass", "numba row-dot pass `z = X @ t`", str(T), "passT"))

    if hessian:
        hout = np.empty((m, d, d))

        def h_nb():
            glm_nb.glm_client_hessian(X, y, NO_OFFSET, row_norm, offsets, theta, CLIP, fam.code, fam.param, hout)

        for n in sorted({1, T}):
            numba.set_num_threads(n)
            h_nb()
        numba.set_num_threads(T)
        herr = float(np.max(np.abs(hout - reference.client_hessian(X, y, offsets, theta, CLIP, fam))))
        fns["h1"] = with_threads(1, h_nb)
        rows.append(("clipped Hessian", "numba `glm_client_hessian`", "1", "h1"))
        if T != 1:
            fns["hT"] = with_threads(T, h_nb)
            rows.append(("clipped Hessian", "numba `glm_client_hessian`", str(T), "hT"))
        fns["href"] = lambda: reference.client_hessian(X, y, offsets, theta, CLIP, fam)
        rows.append(("clipped Hessian", "numpy `reference.client_hessian`", "1", "href"))
    else:
        herr = None

    BLAS.set(1)  # keep OpenBLAS single-threaded (no spinning workers) while numba runs
    with ForeignCPU() as foreign:
        res = timed_rounds(fns, repeats)
        numba.set_num_threads(T)
        if BLAS.available:
            BLAS.set(BLAS.default)
        for f in late.values():
            f()
        res.update(timed_rounds(late, repeats))

    pass_keys = [r[3] for r in rows if r[0] == "one pass"]
    fastest_pass = min(res[k][0] for k in pass_keys)
    same_pass = {"1": res["pass1"][0], str(T): res["passT"][0] if T != 1 else res["pass1"][0]}
    table = []
    for kind, impl, thr, key in rows:
        med, best = res[key]
        speedup = ""
        if kind == "clipped grad" and key != "ref":
            speedup = f"{res['ref'][0] / med:.1f}x"
        elif kind == "clipped Hessian" and key != "href":
            speedup = f"{res['href'][0] / med:.1f}x"
        vs_same = f"{med / same_pass[thr]:.2f}" if kind == "clipped grad" and thr in same_pass else ""
        vs_fast = f"{med / fastest_pass:.2f}" if kind != "clipped Hessian" else ""
        gbs = nbytes / med / 1e9
        table.append((kind, impl, thr, med * 1e3, best * 1e3, gbs, speedup, vs_same, vs_fast))
    info = {
        "label": label, "N": N, "d": d, "m": m, "repeats": repeats, "mb": nbytes / 1e6,
        "sizes": (int(sizes.min()), int(np.median(sizes)), int(sizes.max())),
        "err": err, "herr": herr, "table": table, "foreign": foreign.cores,
        "clipped_frac": float(np.mean(np.abs(expit(X @ theta[0]) - y) * row_norm > CLIP)),
    }
    return info


def format_section(mi: dict, results: list[dict]) -> str:
    L = [HEADING, ""]
    L.append(f"- Date: {mi['date']}")
    L.append(
        f"- Machine: {mi['model']}, {mi['cpus']} CPU(s) ({mi['isa']}); Python {mi['python']}, "
        f"numpy {mi['numpy']}, numba {mi['numba']}"
    )
    L.append(
        f"- Threads: numba default {mi['numba_threads']} (NUMBA_NUM_THREADS), OpenBLAS default {mi['blas_threads']}; "
        f"load average at start {mi['load']}, at end {mi['load_end']}"
    )
    L.append(
        "- Data: random float64 X ~ N(0, 1), logistic y in {0, 1}, shared theta (1, d) ~ N(0, 0.01^2), clip = 1.0; "
        "unequal client sizes (lognormal, sigma 0.5)."
    )
    L.append(
        "- Columns: median and best of `time.perf_counter` over the repeats "
        "(implementations interleaved round-robin with OpenBLAS held at 1 thread; "
        "multi-threaded OpenBLAS is timed apart afterwards, as its workers busy-wait and steal the second core); "
        "GB/s = bytes of X / median; speedup = numpy twin / this; "
        "x pass (same thr) = this / numba row-dot pass with the same thread count; "
        "x fastest pass = this / fastest one-pass baseline of the case."
    )
    L.append("")
    for r in results:
        smin, smed, smax = r["sizes"]
        L.append(
            f"### ({r['label']}) N={r['N']}, d={r['d']}, m={r['m']} clients "
            f"(X = {r['mb']:.1f} MB; client sizes min/median/max {smin}/{smed}/{smax}; {r['repeats']} repeats)"
        )
        L.append("")
        L.append("| kernel | implementation | threads | median ms | best ms | GB/s (X) | speedup vs numpy "
                 "| x pass (same thr) | x fastest pass |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for kind, impl, thr, med, best, gbs, sp, vs_same, vs_fast in r["table"]:
            L.append(f"| {kind} | {impl} | {thr} | {med:.3f} | {best:.3f} | {gbs:.1f} | {sp} | {vs_same} | {vs_fast} |")
        L.append("")
        notes = f"Max |numba - numpy| clipped gradient: {r['err']:.1e}"
        if r["herr"] is not None:
            notes += f"; Hessian: {r['herr']:.1e}"
        notes += f". Fraction of samples clipped: {r['clipped_frac']:.2f}."
        if r["foreign"] is not None:
            notes += f" Other processes used {r['foreign']:.2f} cores on average while this case was timed."
        L.append(notes)
        L.append("")
    return "\n".join(L).rstrip() + "\n"


def update_results(section: str, heading: str = HEADING) -> None:
    """Replace (or append) the section that starts with ``heading`` in RESULTS.md."""
    if RESULTS.exists():
        text = RESULTS.read_text()
    else:
        text = (
            "# Benchmark results\n\n"
            "Each benchmark script owns one `## ...` section below and replaces only that section when it runs.\n"
            "Numbers come from shared, noisy machines: compare ratios within one section, not across runs.\n"
        )
    pattern = re.compile(r"^" + re.escape(heading) + r"[ \t]*\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip() + "\n\n", text, count=1)
    else:
        text = text.rstrip() + "\n\n" + section
    RESULTS.write_text(text.rstrip() + "\n")


def main() -> None:
    mi = machine_info()
    print(f"{mi['model']} x{mi['cpus']}, python {mi['python']}, numpy {mi['numpy']}, numba {mi['numba']}, "
          f"numba threads {DEFAULT_THREADS}, load {mi['load']}", flush=True)
    if os.getloadavg()[0] > 1.5:
        print("WARNING: load average > 1.5, timings (2-thread ones above all) will be noisy", flush=True)
    rng = np.random.default_rng(SEED)
    results = []
    for case in CASES:
        t0 = time.perf_counter()
        r = bench_case(*case, rng)
        results.append(r)
        print(f"\n({r['label']}) N={r['N']} d={r['d']} m={r['m']}  [{time.perf_counter() - t0:.1f} s]")
        for kind, impl, thr, med, _best, gbs, sp, vs_same, vs_fast in r["table"]:
            print(f"  {kind:15s} {impl:40s} thr={thr:>2s} {med:9.3f} ms  {gbs:6.1f} GB/s  "
                  f"{sp:>7s} {vs_same:>6s} {vs_fast:>6s}")
        print(f"  max abs err grad {r['err']:.1e}" + (f", hessian {r['herr']:.1e}" if r["herr"] is not None else ""))
        if r["foreign"] is not None:
            print(f"  other processes used {r['foreign']:.2f} cores on average during the timing"
                  + ("  <-- NOISY, rerun at a quieter moment" if r["foreign"] > 0.05 else ""))
    mi["load_end"] = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    update_results(format_section(mi, results))
    print(f"\nwrote {RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    sys.exit(main())
