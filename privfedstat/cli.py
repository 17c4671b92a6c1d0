"""Command line interface: ``privfedstat demo | studies | methods | reproduce | flower-demo`` (also ``python -m privfedstat``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import __version__

__all__ = ["main", "reproduce", "reproduce_coverage"]


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


def reproduce_mnist(*, data_dir: str | None, dataset: str = "mnist", task: str = "binary", splits: int = 3,
                    out: str | Path = "results", mu=(6.0, 2.0), seed: int = 0, progress: bool = True):
    """Section 5.1: client-level AUC (binary) or accuracy (multiclass) of the nine estimators.

    ``dataset="mnist"`` reads the IDX files from ``data_dir`` (train + test pooled, N = 70000,
    80 clients with >= 800 images each); ``dataset="digits"`` runs offline on scikit-learn's
    8x8 digits (1797 images, 8 clients with >= 200 each). Writes CSV and boxplot PNG.
    """
    from .simulations.realdata import plot_realdata, realdata_study

    if dataset == "mnist":
        if data_dir is None:
            raise ValueError("mnist-logistic needs --data-dir with the MNIST IDX files (or use --dataset digits).")
        from .data import load_mnist

        X, y = load_mnist(data_dir, kind="all")
        setup = {"n_clients": 80, "min_size": 800, "step_size": 0.1}
    elif dataset == "digits":
        from .data import load_digits

        X, y = load_digits()
        setup = {"n_clients": 8, "min_size": 200, "step_size": 0.5}
    else:
        raise ValueError(f"dataset must be 'mnist' or 'digits', got {dataset!r}.")
    df = realdata_study(X, y, task=task, n_splits=splits, mus=tuple(mu), random_state=seed, progress=progress, **setup)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"mnist-logistic-{dataset}-{task}"
    df.to_csv(stem.with_suffix(".csv"), index=False)
    plot_realdata(df, title=f"Section 5.1 ({dataset}, {task})").savefig(stem.with_suffix(".png"), dpi=130)
    return df, stem


def reproduce_coverage(*, reps: int = 100, jobs: int = 1, out: str | Path = "results", families=None, mus=None,
                       seed: int = 0, backend: str = "loky", scheduler: str | None = None, progress: bool = True):
    """Run the coverage study of private 95% intervals (issue 10); write CSV, summary CSV and figure.

    Writes ``<out>/coverage.csv`` (one row per replicate, method and coefficient; incremental, so
    rerunning resumes), ``<out>/coverage-summary.csv`` and ``<out>/coverage.png``. ``families`` and
    ``mus`` restrict the grid (None: all of it; see :mod:`privfedstat.simulations.coverage`).
    Returns (results, summary, stem).
    """
    from .simulations import COVERAGE, MonteCarlo, coverage_scenarios, plot_coverage, summarise_coverage
    from .simulations.coverage import FAMILIES, MUS

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / "coverage"
    scenarios = coverage_scenarios(families=tuple(families or FAMILIES), mus=tuple(mus or MUS))
    mc = MonteCarlo(scenarios, n_reps=reps, random_state=seed, n_jobs=jobs, backend=backend, scheduler=scheduler,
                    out=stem.with_suffix(".csv"), progress=progress, measure=COVERAGE)
    df = mc.run()
    table = summarise_coverage(df)
    table.to_csv(out / "coverage-summary.csv", index=False)
    fig = plot_coverage(table, title=f"Coverage of 95% intervals, {int(table['reps'].min())}+ replicates per cell")
    fig.savefig(stem.with_suffix(".png"), dpi=130)
    return df, table, stem


def format_coverage(table) -> str:
    """The coverage summary as text: one line per cell, percentages, ratios and seconds."""
    import pandas as pd

    show = table.assign(mu=table["mu"].map(lambda v: f"{v:g}"),
                        **{c: (100 * table[c]).round(1) for c in ("coverage", "coverage_min", "coverage_max",
                                                                  "mle_coverage", "converged", "failed")})
    cols = ["family", "N", "m", "mu", "method", "reps", "coverage", "coverage_min", "coverage_max", "mle_coverage",
            "width_ratio", "width_ratio_median", "pred_ratio", "pred_ratio_median", "bias_sd", "sd_se", "seconds",
            "converged", "failed", "verdict"]
    short = {"coverage": "cover", "coverage_min": "min", "coverage_max": "max", "mle_coverage": "mle",
             "width_ratio": "width", "width_ratio_median": "width_med", "pred_ratio": "pred",
             "pred_ratio_median": "pred_med", "seconds": "s/fit", "converged": "conv"}
    with pd.option_context("display.float_format", "{:.3g}".format, "display.width", 250, "display.max_rows", 1000):
        return show[cols].rename(columns=short).to_string(index=False)


def format_methods() -> str:
    """The registered methods, one line each: key, display name, privacy, what they take part in, description.

    ``studies``: has the Section 4 simulation settings (:func:`~privfedstat.simulations.make_estimator`);
    ``bound``, ``predictor``: has a theory bound / an MSE predictor (:mod:`privfedstat.theory`).
    """
    from .estimators.registry import methods

    rows = [("key", "name", "privacy", "also in", "description")]
    for spec in methods():
        roles = [role for role, has in (("studies", spec.paper_params), ("bound", spec.bound),
                                        ("predictor", spec.predictor)) if has is not None]
        privacy = f"{spec.cls.privacy_unit}-level" if spec.private else "non-private"
        rows.append((spec.name, spec.display, privacy, ", ".join(roles) or "-", spec.description))
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    return "\n".join(" ".join(f"{c:<{w}}" for c, w in zip(r[:4], widths)) + " " + r[4] for r in rows)


def _print_table(table, by: list[str]) -> None:
    import pandas as pd

    wide = table.pivot_table(index=by, columns="method", values=["mean_mse", "se"], sort=False)
    methods = list(dict.fromkeys(table["method"]))
    cols = pd.MultiIndex.from_tuples([(v, m) for m in methods for v in ("mean_mse", "se")])
    with pd.option_context("display.float_format", "{:.3g}".format, "display.width", 200, "display.max_rows", 500):
        print(wide.reindex(columns=cols).to_string())


def _reproduce_normec(args, parser) -> int:
    """``reproduce normec-digits | normec-cifar`` (Fed-alpha-NormEC, Figs. 1-4, :mod:`privfedstat.deep.normec_study`)."""
    try:
        from .deep.normec_study import reproduce_normec

        if args.threads is not None:
            import torch

            torch.set_num_threads(args.threads)
        df, table, stem = reproduce_normec(
            args.study.removeprefix("normec-"), data_dir=args.data_dir, out=args.out,
            clients=None if args.clients is None else int(args.clients), rounds=args.rounds,
            **{k: None if v is None else v.split(",") for k, v in
               (("betas", args.betas), ("gammas", args.gammas), ("participations", args.participations))},
            seed=args.seed, progress=not args.no_progress)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        parser.error(str(exc))
    print(table.to_string())
    print(f"\nresults: {stem}.csv, figure: {stem}.png")
    return 0


def _reproduce_hifedprox(args, parser) -> int:
    """``reproduce hifedprox`` (HiFedProx's exponent study, Tables II-III, :mod:`privfedstat.deep.hifedprox_study`)."""
    try:
        from .deep.hifedprox_study import reproduce_hifedprox

        if args.threads is not None:
            import torch

            torch.set_num_threads(args.threads)
        lists = {k: None if v is None else tuple(cast(x) for x in v.split(",")) for k, v, cast in
                 (("powers", args.powers, float), ("seeds", args.seeds, int), ("conditions", args.conditions, str))}
        _, report, stem = reproduce_hifedprox(data_dir=args.data_dir, out=args.out, progress=not args.no_progress,
                                              n_rounds=args.rounds,
                                              n_writers=None if args.clients is None else int(args.clients), **lists)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        parser.error(str(exc))
    print(report)
    print(f"\nresults: {stem}-records.csv, {stem}-rounds.csv, tables: {stem}-table2.csv, {stem}-table3.csv, "
          f"{stem}.md, figure: {stem}.png")
    return 0


def _reproduce_fednmap(args, parser) -> int:
    """``reproduce fednmap`` (FedNMap, Figs. 2-5 on the GLM backend, :mod:`privfedstat.simulations.fednmap_study`)."""
    from dataclasses import replace

    from .simulations.fednmap_study import FedNMapStudy, reproduce_fednmap

    try:
        ints = {k: tuple(int(x) for x in v.split(",")) for k, v in
                (("clients_sweep", args.clients), ("steps_sweep", args.local_steps)) if v is not None}
        scale = dict(trials=args.reps, n_rounds=args.rounds, n_samples=args.samples, noise_sd=args.noise_sd)
        study = replace(FedNMapStudy(), **ints, **{k: v for k, v in scale.items() if v is not None})
        _, slopes, stem = reproduce_fednmap(out=args.out, study=study, seed=args.seed, progress=not args.no_progress)
    except ValueError as exc:
        parser.error(str(exc))
    cols = ["figure", "variable", "method", "rule", "slope", "se", "paper", "theory"]
    print(f"slopes of log final stationarity (T = {study.n_rounds}, eta_hat = 1 in Figs. 3-4, noise sd "
          f"{study.noise_sd:g}, {study.trials} trials):\n{slopes[cols].round(3).to_string(index=False)}")
    print(f"\nresults: {stem}.csv, slopes: {stem}-slopes.csv, figures: {stem}-fig{{2,3,4,5}}.png")
    return 0


def _reproduce_fednmap_mobilenet(args, parser) -> int:
    """``reproduce fednmap-mobilenet`` (FedNMap's Fig. 6, :mod:`privfedstat.deep.fednmap_study`)."""
    try:
        from dataclasses import replace

        from .deep.fednmap_study import MobileNetStudy, reproduce_fednmap_mobilenet

        if args.threads is not None:
            import torch

            torch.set_num_threads(args.threads)
        scale = dict(n_clients=None if args.clients is None else int(args.clients), n_rounds=args.rounds,
                     n_local_steps=None if args.local_steps is None else int(args.local_steps),
                     n_images=args.samples)
        study = replace(MobileNetStudy(), **{k: v for k, v in scale.items() if v is not None})
        _, table, stem = reproduce_fednmap_mobilenet(dataset="digits" if args.data_dir is None else "cifar",
                                                     data_dir=args.data_dir, out=args.out, study=study, seed=args.seed,
                                                     progress=not args.no_progress)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        parser.error(str(exc))
    print(f"after {study.n_rounds} rounds:\n{table[['hoyer', 'loss', 'zeros']].round(4).to_string()}")
    print(f"\nresults: {stem}.csv, figure: {stem}.png")
    return 0


def _reproduce_cnn(args, parser) -> int:
    """``reproduce cnn-mnist | cnn-cifar | cnn-digits`` (Section 5.2, :mod:`privfedstat.deep.study`)."""
    try:
        from .deep.study import reproduce_cnn

        if args.threads is not None:
            import torch

            torch.set_num_threads(args.threads)
        ints = {k: None if v is None else [int(x) for x in v.split(",")] for k, v in
                (("sizes", args.sizes), ("clients", args.clients))}
        df, table, stem = reproduce_cnn(
            args.study.removeprefix("cnn-"), data_dir=args.data_dir, out=args.out,
            mus=(2.0, float("inf")) if args.mu is None else (args.mu,), reps=args.reps,
            scenarios=(1, 2) if args.scenario == "both" else (int(args.scenario),), seed=args.seed,
            progress=not args.no_progress, **ints)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        parser.error(str(exc))
    print(f"median test accuracy over repetitions:\n{table.round(4).to_string()}")
    print(f"\n{len(df)} fits; results: {stem}.csv, figure: {stem}.png")
    return 0


def _flower_demo(args, parser) -> int:
    """``privfedstat flower-demo``: see :func:`privfedstat.flower.launch.run_demo`."""
    import json

    params = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes NAME=VALUE, got {item!r}.")
        try:
            params[name] = json.loads(value)
        except ValueError:
            params[name] = value
    from .flower.launch import run_demo

    try:
        run_demo(clients=args.clients, estimator=args.estimator, mu=args.mu, params=params, model=args.model,
                 tls=args.tls, authenticate=args.authenticate)
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="privfedstat", description="Differentially private federated M-estimation.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_demo = sub.add_parser("demo", help="the main job: fig5 (N = 20000 split over more and more clients) at reduced replicates")
    p_demo.add_argument("--reps", type=int, default=10, help="replicates per cell (default 10; the paper uses 100)")
    p_demo.add_argument("--jobs", type=int, default=2, help="parallel workers (default 2)")
    p_demo.add_argument("--out", default="results/demo", help="output folder (default results/demo)")

    sub.add_parser("studies", help="list the paper's simulation studies")
    sub.add_parser("methods", help="list the registered estimators (glm(method=...), the studies, the theory)")

    p_rep = sub.add_parser("reproduce", help="run one of the paper's studies and write CSV, figure and summary")
    p_rep.add_argument("study", help="study name, e.g. fig5 (see `privfedstat studies`)")
    p_rep.add_argument("--family", choices=["logistic", "poisson"], default=None,
                       help="default: the figure's family (coverage: both)")
    p_rep.add_argument("--reps", type=int, default=None,
                       help="replicates per cell (default 100; cnn-*: the preset's repetitions)")
    p_rep.add_argument("--jobs", type=int, default=1)
    p_rep.add_argument("--out", default="results")
    p_rep.add_argument("--mu", type=float, default=None,
                       help="GDP budget per client where the study does not vary it (default 2); coverage: only this mu")
    p_rep.add_argument("--clip", default="auto", help="'auto' (private, default), 'paper' (non-private rule) or a number")
    p_rep.add_argument("--seed", type=int, default=0)
    p_rep.add_argument("--backend", choices=["loky", "dask"], default="loky")
    p_rep.add_argument("--scheduler", default=None, help="dask scheduler address (default: start a LocalCluster)")
    p_rep.add_argument("--no-progress", action="store_true")
    p_rep.add_argument("--data-dir", default=None, help="mnist-logistic: folder with the MNIST IDX files")
    p_rep.add_argument("--dataset", choices=["mnist", "digits"], default="mnist", help="mnist-logistic: data set")
    p_rep.add_argument("--task", choices=["binary", "multiclass"], default="binary", help="mnist-logistic: task")
    p_rep.add_argument("--splits", type=int, default=3, help="mnist-logistic: repeated client splits S")
    p_rep.add_argument("--sizes", default=None, help="cnn-*: Scenario 1's images per client, e.g. 50,100,200")
    p_rep.add_argument("--clients", default=None, help="cnn-*: Scenario 2's numbers of clients, e.g. 100,200; normec-*: M")
    p_rep.add_argument("--scenario", choices=["1", "2", "both"], default="both", help="cnn-*: which scenarios")
    p_rep.add_argument("--threads", type=int, default=None, help="cnn-*, normec-*: torch threads (default: torch's)")
    p_rep.add_argument("--rounds", type=int, default=None,
                       help="normec-*, hifedprox: communication rounds R (default: preset's / 100)")
    p_rep.add_argument("--betas", default=None, help="normec-*: beta grid, e.g. 0.001,0.01,0.1 (default: preset's)")
    p_rep.add_argument("--gammas", default=None, help="normec-*: gamma (step size) grid, e.g. 1,3,10 (default: preset's)")
    p_rep.add_argument("--participations", default=None, help="normec-*: p grid, e.g. 0.25,0.5,1 (default: preset's)")
    p_rep.add_argument("--local-steps", default=None, help="fednmap: Figs. 4-5's numbers of local steps Q, e.g. 5,10,20")
    p_rep.add_argument("--samples", type=int, default=None, help="fednmap: pooled rows (divisible by every n)")
    p_rep.add_argument("--noise-sd", type=float, default=None, help="fednmap: noise sd of every local gradient")
    p_rep.add_argument("--powers", default=None, help="hifedprox: exponents p, e.g. 2,5,8 (default 2..8)")
    p_rep.add_argument("--seeds", default=None, help="hifedprox: paired seeds, e.g. 3001,3002 (default 3001..3005)")
    p_rep.add_argument("--conditions", default=None, help="hifedprox: among clean,moderate,severe (default all)")
    p_fl = sub.add_parser("flower-demo", help="fit an estimator on a Flower SuperLink + SuperNodes on loopback (extra flower)")
    p_fl.add_argument("--clients", type=int, default=3, help="number of SuperNodes (default 3)")
    p_fl.add_argument("--estimator", default="fedsgd",
                      help="registered estimator (default fedsgd); with --model a network one, e.g. DeepFedAvg")
    p_fl.add_argument("--model", default=None,
                      help="a network the nodes train on the digit images, e.g. DigitsCNN (needs torch)")
    p_fl.add_argument("--mu", type=float, default=2.0, help="GDP budget per client (default 2)")
    p_fl.add_argument("--tls", action="store_true",
                      help="every connection over TLS (a throwaway certificate authority), as on several machines")
    p_fl.add_argument("--authenticate", action="store_true",
                      help="SuperNode authentication: only nodes with registered keys may join (implies --tls)")
    p_fl.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                      help="an estimator parameter, e.g. --set n_iter=50 --set clip=1.0 (JSON values)")
    args = parser.parse_args(argv)
    if args.command == "flower-demo":
        return _flower_demo(args, parser)
    if args.command == "reproduce" and args.reps is None and not args.study.startswith(("cnn-", "fednmap")):
        args.reps = 100

    if args.command == "studies":
        from .simulations.studies import STUDIES

        for s in STUDIES.values():
            print(f"{s.name:<6} {s.description}")
        print("mnist-logistic  Section 5.1: client-level AUC/accuracy of nine estimators on MNIST (--data-dir) or digits")
        print("cnn-mnist, cnn-cifar, cnn-digits  Section 5.2: CNN test accuracy of four private methods (--data-dir; "
              "digits offline; needs torch)")
        print("normec-digits, normec-cifar  Fed-alpha-NormEC vs clipped DP-FedAvg, Figs. 1-4 (--clients M, --rounds R, "
              "--betas, --gammas, --participations; "
              "cifar: --data-dir; needs torch)")
        print("fednmap  FedNMap vs Zhang vs FedCanon, Figs. 2-5: stationarity vs rounds, log-log slopes in n and Q "
              "(--clients, --local-steps, --rounds, --reps, --samples, --noise-sd)")
        print("fednmap-mobilenet  Fig. 6: MobileNetV3-Small with l1 on label-sorted clients, Hoyer sparsity and "
              "training loss (digits offline, CIFAR-10 with --data-dir; --clients n, --local-steps Q, --rounds, "
              "--samples images; needs torch)")
        print("coverage  issue 10: coverage and width of private 95% intervals (logistic, Poisson; N, m, mu grid; "
              "methods at their defaults)")
        print("hifedprox  HiFedProx's exponent study, Tables II-III: p in 2..8 under clean / moderate / severe stress "
              "(FEMNIST with --data-dir LEAF_DIR, else an offline digits stand-in; --rounds, --powers, --seeds, "
              "--conditions, --clients writers; needs torch)")
        return 0

    if args.command == "methods":
        print(format_methods())
        return 0

    if args.command == "reproduce" and args.study == "coverage":
        if args.clip != "auto":
            parser.error("the coverage study runs every method with its defaults; --clip does not apply.")
        t0 = time.perf_counter()
        try:
            df, table, stem = reproduce_coverage(
                reps=args.reps, jobs=args.jobs, out=args.out, families=[args.family] if args.family else None,
                mus=None if args.mu is None else [args.mu], seed=args.seed, backend=args.backend,
                scheduler=args.scheduler, progress=not args.no_progress)
        except ValueError as exc:
            parser.error(str(exc))
        print("cover: coverage of nominal 95% intervals in percent (min / max over coefficients; mle: the pooled "
              "MLE's); width: private / non-private width, pred: sqrt(cov / cov_sampling) (means, medians); "
              "bias_sd: max |bias| / sd; sd_se: sd / rms(se); s/fit: seconds per fit; conv, failed: percent of fits "
              "(see summarise_coverage):\n" + format_coverage(table))
        errors = df.loc[df["error"] != "none"].drop_duplicates(["scenario", "method", "rep"])
        if len(errors):
            print(f"\n{len(errors)} fit(s) raised (rows with covered = NaN):")
            for (method, error), n in errors.groupby(["method", "error"]).size().items():
                print(f"  {method}: {n} x {error}")
        print(f"\n{len(df)} rows in {time.perf_counter() - t0:.1f} s; results: {stem}.csv, "
              f"summary: {stem}-summary.csv, figure: {stem}.png")
        return 0

    if args.command == "reproduce" and args.study == "mnist-logistic":
        try:
            df, stem = reproduce_mnist(data_dir=args.data_dir, dataset=args.dataset, task=args.task, splits=args.splits,
                                       out=args.out, seed=args.seed, progress=not args.no_progress)
        except (ValueError, FileNotFoundError) as exc:
            parser.error(str(exc))
        import pandas as pd

        table = df.groupby(["method", "mu"], sort=False)["value"].median().unstack("mu")
        with pd.option_context("display.float_format", "{:.4f}".format):
            print(f"median client-level {df['metric'].iloc[0]} over {df['split'].nunique()} splits x "
                  f"{df['client'].nunique()} clients:\n{table.to_string()}")
        print(f"\nresults: {stem}.csv, figure: {stem}.png")
        return 0

    if args.command == "reproduce" and args.study.startswith("cnn-"):
        return _reproduce_cnn(args, parser)

    if args.command == "reproduce" and args.study.startswith("normec-"):
        return _reproduce_normec(args, parser)

    if args.command == "reproduce" and args.study == "hifedprox":
        return _reproduce_hifedprox(args, parser)

    if args.command == "reproduce" and args.study == "fednmap":
        return _reproduce_fednmap(args, parser)

    if args.command == "reproduce" and args.study == "fednmap-mobilenet":
        return _reproduce_fednmap_mobilenet(args, parser)

    if args.command == "demo":
        args.study, args.family, args.mu, args.clip, args.seed = "fig5", "logistic", 2.0, "auto", 0
        args.backend, args.scheduler, args.no_progress = "loky", None, False
        print("privfedstat demo: logistic GLM, N = 20000 split over m clients (equal / uniform / lognormal sizes),\n"
              f"mu = 2 per client (clipping bound chosen privately), {args.reps} replicates per cell\n")
    elif args.mu is None:
        args.mu = 2.0
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
