"""FEMNIST writers as federated clients (the HiFedProx study's data) and an offline stand-in.

:func:`load_femnist` reads LEAF's FEMNIST JSON files from a directory the user prepared once;
:func:`femnist_standin` builds writer-like non-IID clients from scikit-learn's bundled 8 x 8
digits, so the study runs offline. Both return a :class:`WriterData`: per writer a training part
(one client per writer, the federated training data) and held-out calibration and evaluation
examples from the same writers (the paper evaluates on new examples of known writers).

Inferred from the paper (ALGORITHMS.md 3.3) [I]: its 60-writer cache has 8064 / 995 / 1021
training / calibration / evaluation examples; 8064 is exactly 80% of the 10,080, so every writer's
examples are split about 80 / 10 / 10 (here: ``round(0.1 n_i)`` calibration and evaluation
examples per writer, the rest for training). LEAF's own train/test split is not used: a writer's
examples in ``train/`` and ``test/`` files are pooled before the split. The training part is a
:class:`~privfedstat.deep.data.TensorFederatedData` (torch, the ``deep`` extra).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._rng import RandomState, as_seed_sequence, spawn_generators
from ..data.loaders import as_dir, load_digits
from .data import TensorFederatedData

__all__ = ["WriterData", "load_femnist", "femnist_standin", "FEMNIST_CLASSES"]

FEMNIST_CLASSES = 62  # LEAF's labels: 0-9 digits, 10-35 upper case, 36-61 lower case
_SIDE = 14  # the study's images are 14 x 14 (LEAF's 28 x 28 averaged over 2 x 2 blocks)
_LEAF_DIRS = ("all_data", "train", "test")
# FEMNIST writers hold 226.8 +- 88.9 examples in LEAF (coefficient of variation 0.39): the
# stand-in's writer sizes are lognormal with this sigma
_SIZE_SIGMA = 0.4


@dataclass(frozen=True)
class WriterData:
    """Writers as clients: federated training data and held-out examples of the same writers.

    Attributes
    ----------
    train : TensorFederatedData
        One client per writer (client ``k`` is ``writers[k]``): inputs float32 of shape
        (n, 1, 14, 14) in [0, 1], int64 labels.
    calibration_X, calibration_y : ndarray
        Held-out examples (float32 (n_cal, 1, 14, 14), int64 (n_cal,)) for tuning.
    eval_X, eval_y : ndarray
        Held-out evaluation examples (float32 (n_eval, 1, 14, 14), int64 (n_eval,)).
    eval_writer : ndarray of int64, shape (n_eval,)
        The index (into ``writers``, the client index) of each evaluation example's writer, for
        writer-level accuracy.
    n_classes : int
        Number of classes (62 for FEMNIST, 10 for the stand-in).
    writers : tuple of str
        Writer ids, in client order.
    source : str
        Where the data came from (``"leaf-femnist"`` or ``"digits-standin"``).
    """

    train: TensorFederatedData
    calibration_X: np.ndarray
    calibration_y: np.ndarray
    eval_X: np.ndarray
    eval_y: np.ndarray
    eval_writer: np.ndarray
    n_classes: int
    writers: tuple[str, ...]
    source: str


def _check_fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 0.5:
        raise ValueError(f"{name} must be a number in (0, 0.5), got {value!r}.")
    return float(value)


def _check_count(name: str, value: int, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
    return int(value)


def _split_writers(images: list[np.ndarray], labels: list[np.ndarray], writers: list[str], *, n_classes: int,
                   source: str, calibration_fraction: float, eval_fraction: float,
                   rngs: list[np.random.Generator]) -> WriterData:
    """Shuffle each writer's examples and deal ``round(f n_i)`` to calibration and evaluation, the rest to training."""
    parts: dict[str, list] = {"train": [], "cal": [], "eval": [], "train_y": [], "cal_y": [], "eval_y": [], "who": []}
    for k, (X, y, rng) in enumerate(zip(images, labels, rngs)):
        n = len(y)
        n_cal, n_eval = math.floor(calibration_fraction * n + 0.5), math.floor(eval_fraction * n + 0.5)
        if n_cal < 1 or n_eval < 1 or n - n_cal - n_eval < 1:
            raise ValueError(f"writer {writers[k]!r} has {n} examples: too few for a training, a calibration and an "
                             "evaluation part.")
        order = rng.permutation(n)
        cal, ev, tr = order[:n_cal], order[n_cal:n_cal + n_eval], order[n_cal + n_eval:]
        for key, rows in (("train", tr), ("cal", cal), ("eval", ev)):
            parts[key].append(X[rows])
            parts[key + "_y"].append(y[rows])
        parts["who"].append(np.full(n_eval, k, dtype=np.int64))
    train = TensorFederatedData.from_pooled(np.concatenate(parts["train"]), np.concatenate(parts["train_y"]),
                                            sizes=[len(t) for t in parts["train_y"]])
    return WriterData(train=train, calibration_X=np.concatenate(parts["cal"]),
                      calibration_y=np.concatenate(parts["cal_y"]), eval_X=np.concatenate(parts["eval"]),
                      eval_y=np.concatenate(parts["eval_y"]), eval_writer=np.concatenate(parts["who"]),
                      n_classes=n_classes, writers=tuple(writers), source=source)


# --------------------------------------------------------------------------- LEAF FEMNIST
def _leaf_files(data_dir) -> list[Path]:
    """The LEAF JSON files under ``data_dir``: ``all_data/*.json``, else ``train/`` and ``test/``, else ``*.json``."""
    root = as_dir(data_dir)
    for base in (root, root / "data"):
        if (base / "all_data").is_dir() and any((base / "all_data").glob("*.json")):
            return sorted((base / "all_data").glob("*.json"))
        split = sorted(p for sub in ("train", "test") if (base / sub).is_dir() for p in (base / sub).glob("*.json"))
        if split:
            return split
    if any(root.glob("*.json")):
        return sorted(root.glob("*.json"))
    raise FileNotFoundError(
        f"no LEAF FEMNIST JSON files under {str(root)!r}: expected all_data/*.json, or train/*.json and "
        "test/*.json (LEAF's data/femnist/data after ./preprocess.sh; each file "
        '{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 values]], "y": [...]}}}).')


def _read_leaf_file(path: Path) -> dict[str, tuple[list, list]]:
    """One LEAF file as {writer: (x rows, labels)}, with its structure checked."""
    try:
        with open(path, encoding="utf-8") as fh:
            content = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}).") from None
    if not isinstance(content, dict) or not isinstance(content.get("users"), list) \
            or not isinstance(content.get("user_data"), dict):
        raise ValueError(f"{path}: not a LEAF file (expected an object with a 'users' list and a 'user_data' "
                         "object).")
    counts = content.get("num_samples", [None] * len(content["users"]))
    out = {}
    for user, count in zip(content["users"], counts):
        entry = content["user_data"].get(user)
        if not isinstance(entry, dict) or not isinstance(entry.get("x"), list) or not isinstance(entry.get("y"), list):
            raise ValueError(f"{path}: user {user!r} lacks user_data entries 'x' and 'y'.")
        if len(entry["x"]) != len(entry["y"]) or (count is not None and count != len(entry["y"])):
            raise ValueError(f"{path}: user {user!r} has {len(entry['x'])} images, {len(entry['y'])} labels and "
                             f"num_samples {count}; they must agree.")
        out[str(user)] = (entry["x"], entry["y"])
    return out


def _leaf_images(x: list, y: list, where: str, invert: bool) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's flat 28 x 28 rows as float32 (n, 1, 14, 14) (2 x 2 block means) and int64 labels in 0..61."""
    try:
        pixels = np.asarray(x, dtype=np.float64)
        labels = np.asarray(y)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: 'x' must be lists of 784 numbers and 'y' a list of integers.") from None
    if pixels.ndim != 2 or pixels.shape[1] != 784:
        raise ValueError(f"{where}: images have shape {pixels.shape}, expected (n, 784) (28 x 28, flattened).")
    if not np.all(np.isfinite(pixels)) or pixels.min() < 0.0 or pixels.max() > 1.0:
        raise ValueError(f"{where}: pixel values outside [0, 1].")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) \
            or labels.min() < 0 or labels.max() >= FEMNIST_CLASSES:
        raise ValueError(f"{where}: labels must be integers in 0..{FEMNIST_CLASSES - 1}.")
    if invert:
        pixels = 1.0 - pixels
    small = pixels.reshape(-1, _SIDE, 2, _SIDE, 2).mean(axis=(2, 4))
    return small[:, None].astype(np.float32), labels.astype(np.int64)


def load_femnist(data_dir, n_writers: int = 60, random_state: RandomState = 0, *, min_samples: int = 10,
                 calibration_fraction: float = 0.1, eval_fraction: float = 0.1, invert: bool = True) -> WriterData:
    """FEMNIST from LEAF's JSON files: ``n_writers`` writers chosen at random, one client each.

    Parameters
    ----------
    data_dir : str or path
        LEAF's ``data/femnist/data`` folder (or its parent): ``all_data/*.json`` (used when
        present) or ``train/*.json`` and ``test/*.json`` (a writer's examples in both are pooled),
        or a folder of such files. Each file is
        ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 values]], "y": [...]}}}``.
    n_writers : int, default 60
        Writers (clients) to keep, chosen uniformly at random among those with at least
        ``min_samples`` examples; clients are in sorted writer-id order.
    random_state : int, SeedSequence, Generator or None, default 0
        Seeds the choice of writers and the per-writer splits.
    min_samples : int, default 10
        Writers with fewer examples are not eligible (each part needs at least one).
    calibration_fraction, eval_fraction : float, default 0.1
        Per writer, ``round(f n_i)`` examples go to calibration and to evaluation, the rest to
        training (about 80 / 10 / 10, the paper's 8064 / 995 / 1021 [I]).
    invert : bool, default True
        LEAF stores the scanned grey level divided by 255 (``data_to_json.py``), so the
        background of the scans is 1 and ink near 0; True returns ``1 - x`` (ink bright, background 0, as
        MNIST and the stand-in). The paper does not say which it used [I].

    Returns
    -------
    WriterData
        Images float32 (n, 1, 14, 14) in [0, 1]: LEAF's 28 x 28 images averaged over 2 x 2 blocks;
        62 classes; ``source="leaf-femnist"``.

    Raises
    ------
    FileNotFoundError
        If the directory or the JSON files are missing (the message lists the expected layout).
    ValueError
        Malformed JSON or LEAF structure, images that are not 784 values in [0, 1], labels outside
        0..61, or fewer eligible writers than ``n_writers``.

    Notes
    -----
    Every file is parsed twice (the first pass counts each writer's examples, the second keeps the
    chosen writers' images), so memory holds one file and the chosen writers, not the data set.

    References
    ----------
    Caldas, S. et al. (2018). LEAF: a benchmark for federated settings. arXiv:1812.01097.
    """
    n_writers = _check_count("n_writers", n_writers, 2)
    min_samples = _check_count("min_samples", min_samples, 3)
    calibration_fraction = _check_fraction("calibration_fraction", calibration_fraction)
    eval_fraction = _check_fraction("eval_fraction", eval_fraction)
    if not isinstance(invert, (bool, np.bool_)):
        raise TypeError(f"invert must be True or False, got {invert!r}.")
    files = _leaf_files(data_dir)
    counts: dict[str, int] = {}
    for path in files:  # first pass: who is there and with how many examples
        for user, (_, y) in _read_leaf_file(path).items():
            counts[user] = counts.get(user, 0) + len(y)
    eligible = sorted(u for u, n in counts.items() if n >= min_samples)
    if len(eligible) < n_writers:
        raise ValueError(f"{len(eligible)} writers have at least {min_samples} examples in {len(files)} file(s); "
                         f"{n_writers} were asked for.")
    choose, split = as_seed_sequence(random_state).spawn(2)
    picked = sorted(eligible[i] for i in np.random.default_rng(choose).choice(len(eligible), n_writers,
                                                                              replace=False))
    rows: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {u: [] for u in picked}
    for path in files:  # second pass: the chosen writers' images
        for user, (x, y) in _read_leaf_file(path).items():
            if user in rows and y:
                rows[user].append(_leaf_images(x, y, f"{path}: user {user!r}", invert))
    images = [np.concatenate([r[0] for r in rows[u]]) for u in picked]
    labels = [np.concatenate([r[1] for r in rows[u]]) for u in picked]
    return _split_writers(images, labels, picked, n_classes=FEMNIST_CLASSES, source="leaf-femnist",
                          calibration_fraction=calibration_fraction, eval_fraction=eval_fraction,
                          rngs=spawn_generators(split, n_writers))


# --------------------------------------------------------------------------- offline stand-in
def _writer_sizes(n_total: int, n_writers: int, min_size: int, rng: np.random.Generator) -> np.ndarray:
    """Writer sizes ``min_size + share of the rest``, shares lognormal(0, 0.4) (FEMNIST's spread), summing to n_total."""
    weights = np.exp(_SIZE_SIGMA * rng.standard_normal(n_writers))
    extra = (n_total - n_writers * min_size) * weights / weights.sum()
    sizes = np.floor(extra).astype(np.int64)
    sizes[np.argsort(sizes - extra)[: n_total - n_writers * min_size - sizes.sum()]] += 1  # largest remainders
    return sizes + min_size


def _deal_labels(y: np.ndarray, sizes: np.ndarray, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Deal the rows to writers, one row per writer in turn, each drawing its class from its own Dirichlet(alpha) mix.

    Classes that have run out are dropped from every writer's mix (renormalised), so all rows are
    used and the sizes are exact.
    """
    n_classes = int(y.max()) + 1
    pools = [list(rng.permutation(np.flatnonzero(y == c))) for c in range(n_classes)]
    mixes = rng.dirichlet(np.full(n_classes, alpha), size=sizes.size)
    dealt: list[list[int]] = [[] for _ in sizes]
    while True:
        open_writers = [k for k in range(sizes.size) if len(dealt[k]) < sizes[k]]
        if not open_writers:
            return [np.asarray(rows, dtype=np.int64) for rows in dealt]
        for k in open_writers:
            left = np.array([len(p) > 0 for p in pools])
            p = mixes[k] * left
            p = p / p.sum() if p.sum() > 0 else left / left.sum()
            dealt[k].append(pools[rng.choice(n_classes, p=p)].pop())


def _writer_style(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One writer's fixed style: stroke thickening, contrast (a power of the intensity) and a shift of up to 1 pixel."""
    from scipy.ndimage import maximum_filter

    thick = rng.uniform(0.0, 0.6)
    X = (1.0 - thick) * X + thick * maximum_filter(X, size=(1, 3, 3), mode="constant")
    X = X ** np.exp(rng.uniform(-0.5, 0.5))
    dy, dx = rng.integers(-1, 2, size=2)
    out = np.zeros_like(X)
    out[:, max(dy, 0):_SIDE + min(dy, 0), max(dx, 0):_SIDE + min(dx, 0)] = \
        X[:, max(-dy, 0):_SIDE + min(-dy, 0), max(-dx, 0):_SIDE + min(-dx, 0)]
    return out


def femnist_standin(n_writers: int = 60, random_state: RandomState = 0, *, alpha: float = 0.5, min_size: int = 10,
                    calibration_fraction: float = 0.1, eval_fraction: float = 0.1) -> WriterData:
    """An offline stand-in for FEMNIST: scikit-learn's 8 x 8 digits as 14 x 14 images of non-IID "writers".

    Not FEMNIST: 10 classes (use ``FemnistCNN(n_classes=10)``), 1797 images in all, so writers hold
    about 30 examples at 60 writers (FEMNIST's hold 227 on average). What it imitates is the
    federated structure: every image goes to one writer; writer sizes spread like FEMNIST's
    (``min_size`` plus a lognormal(0, 0.4) share of the rest); each writer draws its labels from
    its own Dirichlet(``alpha``) class mix (label skew); each writer has a fixed style (stroke
    thickening by a 3 x 3 maximum filter, weight in U(0, 0.6); intensity raised to a power
    exp(U(-0.5, 0.5)); a shift of -1, 0 or 1 pixel in each direction). The 8 x 8 images
    (intensities / 16) are upsampled to 14 x 14 by bilinear interpolation (corners aligned), so
    values stay in [0, 1].

    Parameters
    ----------
    n_writers : int, default 60
        Writers (clients), 2 to ``1797 // min_size``.
    random_state : int, SeedSequence, Generator or None, default 0
    alpha : float, default 0.5
        Dirichlet concentration of the writers' class mixes (smaller: more skew).
    min_size : int, default 10
        Fewest examples per writer (before its split).
    calibration_fraction, eval_fraction : float, default 0.1
        As in :func:`load_femnist`.

    Returns
    -------
    WriterData
        ``source="digits-standin"``, ``n_classes=10``, writer ids ``"standin-00"``, ...
    """
    from scipy.ndimage import zoom

    min_size = _check_count("min_size", min_size, 3)
    X, y = load_digits(images=True)
    n_writers = _check_count("n_writers", n_writers, 2)
    if n_writers * min_size > len(y):
        raise ValueError(f"{n_writers} writers of at least {min_size} examples need more than the {len(y)} digits; "
                         f"use at most {len(y) // min_size} writers.")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0 or not math.isfinite(alpha):
        raise ValueError(f"alpha must be a positive number, got {alpha!r}.")
    calibration_fraction = _check_fraction("calibration_fraction", calibration_fraction)
    eval_fraction = _check_fraction("eval_fraction", eval_fraction)
    deal, style, split = as_seed_sequence(random_state).spawn(3)
    rng = np.random.default_rng(deal)
    rows = _deal_labels(y, _writer_sizes(len(y), n_writers, min_size, rng), float(alpha), rng)
    big = np.clip(zoom(X[:, 0].astype(np.float64), (1, _SIDE / 8, _SIDE / 8), order=1, grid_mode=False), 0.0, 1.0)
    styles = spawn_generators(style, n_writers)
    images = [_writer_style(big[r], g)[:, None].astype(np.float32) for r, g in zip(rows, styles)]
    return _split_writers(images, [y[r] for r in rows], [f"standin-{k:02d}" for k in range(n_writers)],
                          n_classes=10, source="digits-standin", calibration_fraction=calibration_fraction,
                          eval_fraction=eval_fraction, rngs=spawn_generators(split, n_writers))
