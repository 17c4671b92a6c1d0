"""Command line interface: ``privfedstat demo | studies | reproduce`` (also ``python -m privfedstat``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["main", "reproduce"]


def reproduce(name: str, *, family: str | None = None, reps: int = 100, jobs: int = 1, out: str | Path = "results",
              mu: float = 2.0, clip: str = "auto", seed: int = 0, backend: str = "loky", scheduler: str | None = None,
              progress: bool = True):
    """Run a named study, write ``<out>/<name>-<family>.csv`` and ``.png``; return (results, summary table).

    The CSV is written incrementally: rerunning the same command resumes an interrupted study.
    """
    from .simulations import MonteCarlo, get_study, plot_study, summarise

    study = get_study(name)
    family = family or study.family
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{name}-{family}"
    clip_value: float | str = clip if clip in ("auto", "paper") else float(clip)
    mc = MonteCarlo(study.scenarios(family=family, mu=mu, clip=clip_value), study.methods, n_reps=reps,
                    random_state=seed, n_jobs=jobs, backend=backend, scheduler=scheduler,
                    out=stem.with_suffix(".csv"), progress=progress)
    df = mc.run()
    cells = [c for c in dict.fromkeys([study.panel, study.line, study.x]) if c != "method"]
    table = summarise(df, cells)
    fig = plot_study(df, study)
    fig.savefig(stem.with_suffix(".png"), dpi=130)
    return df, table, stem


def _print_table(table, by: list[str]) -> None:
    import pandas as pd

    wide = table.pivot_table(index=by, columns="method", values=["mean_mse", "se"], sort=False)
    methods = list(dict.fromkeys(table["method"]))
    cols = pd.MultiIndex.from_tuples([(v, m) for m in methods for v in ("mean_mse", "se")])
    with pd.option_context("display.float_format", "{:.3g}".format, "display.width", 200, "display.max_rows", 500):
        print(wide.reindex(columns=cols).to_string())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="privfedstat", description="Differentially private federated M-estimation.")
    sub = parser.add_subparsers(dest="command", required=True)

    p_demo = sub.add_parser("demo", help="the main job: fig5 (N = 20000 split over more and more clients) at reduced replicates")
    p_demo.add_argument("--reps", type=int, default=10, help="replicates per cell (default 10; the paper uses 100)")
    p_demo.add_argument("--jobs", type=int, default=2, help="parallel workers (default 2)")
    p_demo.add_argument("--out", default="results/demo", help="output folder (default results/demo)")

    sub.add_parser("studies", help="list the paper's simulation studies")

    p_rep = sub.add_parser("reproduce", help="run one of the paper's studies and write CSV, figure and summary")
    p_rep.add_argument("study", help="study name, e.g. fig5 (see `privfedstat studies`)")
    p_rep.add_argument("--family", choices=["logistic", "poisson"], default=None, help="default: the figure's family")
    p_rep.add_argument("--reps", type=int, default=100)
    p_rep.add_argument("--jobs", type=int, default=1)
    p_rep.add_argument("--out", default="results")
    p_rep.add_argument("--mu", type=float, default=2.0, help="GDP budget per client where the study does not vary it")
    p_rep.add_argument("--clip", default="auto", help="'auto' (private, default), 'paper' (non-private rule) or a number")
    p_rep.add_argument("--seed", type=int, default=0)
    p_rep.add_argument("--backend", choices=["loky", "dask"], default="loky")
    p_rep.add_argument("--scheduler", default=None, help="dask scheduler address (default: start a LocalCluster)")
    p_rep.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "studies":
        from .simulations.studies import STUDIES

        for s in STUDIES.values():
            print(f"{s.name:<6} {s.description}")
        return 0

    if args.command == "demo":
        args.study, args.family, args.mu, args.clip, args.seed = "fig5", "logistic", 2.0, "auto", 0
        args.backend, args.scheduler, args.no_progress = "loky", None, False
        print("privfedstat demo: logistic GLM, N = 20000 split over m clients (equal / uniform / lognormal sizes),\n"
              f"mu = 2 per client (clipping bound chosen privately), {args.reps} replicates per cell\n")
    t0 = time.perf_counter()
    try:
        df, table, stem = reproduce(args.study, family=args.family, reps=args.reps, jobs=args.jobs, out=args.out,
                                    mu=args.mu, clip=args.clip, seed=args.seed, backend=args.backend,
                                    scheduler=args.scheduler, progress=not args.no_progress)
    except ValueError as exc:
        parser.error(str(exc))
    from .simulations import get_study

    study = get_study(args.study)
    _print_table(table, [c for c in dict.fromkeys([study.panel, study.line, study.x]) if c != "method"])
    print(f"\n{len(df)} fits in {time.perf_counter() - t0:.1f} s; results: {stem}.csv, figure: {stem}.png")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
