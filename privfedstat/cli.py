"""Command line interface: ``privfedstat demo | studies | methods | reproduce | flower-demo`` (also ``python -m privfedstat``).

``privfedstat reproduce NAME [flags]`` runs any study of :data:`STUDY_MODULES` with
:func:`~privfedstat.simulations.study.run_study`; its flags are the settings its config declares.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path

from ._version import __version__
from .simulations.study import Study, add_flags, run_study

__all__ = ["main", "STUDY_MODULES", "find_study", "study_parser", "format_methods"]

#: the modules holding the studies (a ``STUDY`` or ``STUDIES``), in the order ``privfedstat studies`` lists
#: them; the torch ones are imported only when a study is looked up there
STUDY_MODULES = ("privfedstat.simulations.mse_study", "privfedstat.simulations.coverage",
                 "privfedstat.simulations.realdata", "privfedstat.simulations.fednmap_study",
                 "privfedstat.deep.cnn_study", "privfedstat.deep.normec_study", "privfedstat.deep.fednmap_study",
                 "privfedstat.deep.hifedprox_study")
#: the studies of the torch modules (name, help), which ``privfedstat studies`` lists without importing torch
#: (importing it takes longer than the rest of the listing; tests/cli checks these against the modules)
TORCH_STUDIES = {
    "privfedstat.deep.cnn_study": (
        ("cnn-mnist", "Section 5.2: CNN test accuracy of four private methods on MNIST (--data-dir)"),
        ("cnn-cifar", "Section 5.2: CNN test accuracy of four private methods on CIFAR-10 (--data-dir)"),
        ("cnn-digits", "Section 5.2: CNN test accuracy of four private methods on scikit-learn's digits (offline)")),
    "privfedstat.deep.normec_study": (
        ("normec-digits", "Fed-alpha-NormEC vs clipped DP-FedAvg, Figs. 1-4, on scikit-learn's digits (offline, GLM "
                          "backend)"),
        ("normec-digits-cnn", "Fed-alpha-NormEC vs clipped DP-FedAvg, Figs. 1-4, on scikit-learn's digits (offline, "
                              "DigitsCNN)"),
        ("normec-cifar", "Fed-alpha-NormEC vs clipped DP-FedAvg, Figs. 1-4, on CIFAR-10 (--data-dir; ResNet20)")),
    "privfedstat.deep.fednmap_study": (
        ("fednmap-mobilenet", "FedNMap's Fig. 6: MobileNetV3-Small with l1 on label-sorted clients, Hoyer sparsity and "
                              "training loss (digits offline, CIFAR-10 with --data-dir)"),),
    "privfedstat.deep.hifedprox_study": (
        ("hifedprox", "HiFedProx's exponent study, Tables II-III: p in 2..8 under clean / moderate / severe stress "
                      "(FEMNIST with --data-dir, else an offline digits stand-in)"),),
}


def _studies(module: str) -> tuple[Study, ...]:
    mod = importlib.import_module(module)
    return getattr(mod, "STUDIES", None) or (mod.STUDY,)


def _list_studies() -> None:
    """Print every study's name and help; those of the torch modules from :data:`TORCH_STUDIES`."""
    torch = importlib.util.find_spec("torch") is not None
    for module in STUDY_MODULES:
        if module in TORCH_STUDIES:
            for name, text in TORCH_STUDIES[module]:
                print(f"{name:<18} {text}" + ("" if torch else ' (needs torch: pip install "privfedstat[deep]")'))
            continue
        try:
            for study in _studies(module):
                print(f"{study.name:<18} {study.help}")
        except ImportError as exc:
            print(f"{module}: {exc}")


def find_study(name: str) -> Study:
    """The study called ``name``, importing the study modules in order until one has it."""
    known, missing = [], []
    for module in STUDY_MODULES:
        try:
            studies = _studies(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
            continue
        for study in studies:
            if study.name == name:
                return study
        known += [study.name for study in studies]
    raise ValueError(f"unknown study {name!r}; choose from {known}" + (f"; not importable: {missing}" if missing else "")
                     + ".")


def format_methods() -> str:
    """The registered methods, one line each: key, display name, privacy, what they take part in, description.

    ``studies``: has the Section 4 simulation settings (:func:`~privfedstat.simulations.make_estimator`);
    ``bound``, ``predictor``: has a theory bound / an MSE predictor (:mod:`privfedstat.theory`).
    """
    from .algorithms.registry import methods

    rows = [("key", "name", "privacy", "also in", "description")]
    for spec in methods():
        roles = [role for role, has in (("studies", spec.paper_params), ("bound", spec.bound),
                                        ("predictor", spec.predictor)) if has is not None]
        privacy = f"{spec.cls.privacy_unit}-level" if spec.private else "non-private"
        rows.append((spec.name, spec.display, privacy, ", ".join(roles) or "-", spec.description))
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    return "\n".join(" ".join(f"{c:<{w}}" for c, w in zip(r[:4], widths)) + " " + r[4] for r in rows)


def study_parser(study: Study) -> argparse.ArgumentParser:
    """The parser of ``privfedstat reproduce NAME``: ``--out``, ``--no-progress`` and the study's settings."""
    parser = argparse.ArgumentParser(prog=f"privfedstat reproduce {study.name}", description=study.help)
    parser.add_argument("--out", default="results", help="output folder (default results)")
    parser.add_argument("--no-progress", action="store_true", help="show no progress while the study runs")
    add_flags(parser, study.config)
    return parser


def _reproduce(name: str, argv: list[str], parser: argparse.ArgumentParser) -> int:
    """``privfedstat reproduce NAME [flags]``: run the study, print its tables and the files written."""
    try:
        study = find_study(name)
    except ValueError as exc:
        parser.error(str(exc))
    p_study = study_parser(study)
    settings = vars(p_study.parse_args(argv))
    out, progress = settings.pop("out"), not settings.pop("no_progress")
    t0 = time.perf_counter()
    try:
        result = run_study(study, out, progress=progress, **settings)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        p_study.error(str(exc))
    print(result.text())
    print(f"\n{time.perf_counter() - t0:.1f} s; wrote {', '.join(str(f) for f in result.files)}")
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

    p_demo = sub.add_parser("demo", help="the main job: fig5 (N = 20000 over m clients), reduced, read against the paper")
    p_demo.add_argument("--reps", type=int, default=10, help="replicates per cell (default 10; the paper uses 100)")
    p_demo.add_argument("--jobs", type=int, default=2, help="parallel workers (default 2)")
    p_demo.add_argument("--out", default="results/demo", help="output folder (default results/demo)")
    p_demo.add_argument("--no-progress", action="store_true", help="show no progress while the study runs")

    sub.add_parser("studies", help="list the studies `reproduce` runs")
    sub.add_parser("methods", help="list the registered estimators (glm(method=...), the studies, the theory)")

    p_rep = sub.add_parser("reproduce", help="run a study and write its CSV, figures and summary")
    p_rep.add_argument("study", help="study name, e.g. fig5 (see `privfedstat studies`)")
    p_rep.add_argument("settings", nargs=argparse.REMAINDER,
                       help="the study's flags (see `privfedstat reproduce NAME --help`)")
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
    if args.command == "methods":
        print(format_methods())
        return 0
    if args.command == "studies":
        _list_studies()
        return 0
    if args.command == "demo":
        return _demo(args)
    return _reproduce(args.study, args.settings, parser)


#: the numbers of clients the demo runs (of fig5's 25, 50, 100, 200, 400), equal sizes only
DEMO_M = (25, 100, 400)


def _clear_stale_demo(out: Path) -> None:
    """Remove the demo's replicates that another version of the code computed (a study's resume refuses to mix them
    in; the demo's folder holds only the demo's own files, so it starts again instead of raising)."""
    from .simulations.runner import source_digest

    current = source_digest()
    for record in out.glob("fig5-*.csv.run.json"):
        if json.loads(record.read_text()).get("source") != current:
            print(f"({record.with_suffix('').with_suffix('')} holds an earlier version's replicates: computed again)")
            record.with_suffix("").with_suffix("").unlink(missing_ok=True)
            record.unlink()


def _demo(args) -> int:
    """``privfedstat demo``: fig5 at reduced replicates, its theory column and two sentences that read it."""
    from .simulations.mse_study import demo_sentences, summary_long

    m = ",".join(map(str, DEMO_M))
    print("privfedstat demo: the core paper's Fig. 5 -- logistic GLM, N = 20000 split equally over m clients,\n"
          "mu = 2 per client, clipping bound chosen privately (clip='auto'), the package's default FedNewton.\n"
          f"Reduced so that it stays fast: m in {{{m}}} of the paper's 25..400, equal sizes only (the paper adds\n"
          f"uniform and lognormal), {args.reps} replicates per cell of the paper's 100; the full study is\n"
          "`privfedstat reproduce fig5`.\n")
    t0 = time.perf_counter()
    _clear_stale_demo(Path(args.out))
    result = run_study(find_study("fig5"), args.out, progress=not args.no_progress, family="logistic",
                       reps=args.reps, jobs=args.jobs, sizes=("equal",), m=DEMO_M)
    print(result.text())
    summary = result.tables["summary"].frame
    print("\n" + "\n".join(demo_sentences(result.frames[""], summary_long(summary, result.config.grid))))
    print(f"\n{time.perf_counter() - t0:.1f} s; wrote {', '.join(str(f) for f in result.files)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
