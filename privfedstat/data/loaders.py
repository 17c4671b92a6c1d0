"""Offline loaders for the real data sets used in the paper's Section 5 and in the examples.

Nothing here touches the network. MNIST and CIFAR-10 are read from files the user has downloaded
once (a missing file raises :class:`FileNotFoundError` naming the file and the URL to get it from);
``digits`` and ``randhie`` ship inside scikit-learn and statsmodels.

Functions
---------
load_mnist     MNIST from the standard IDX files (gzipped or not).
load_cifar10   CIFAR-10 from the standard python pickle batches (or the .tar.gz holding them).
load_digits    scikit-learn's bundled 8x8 handwritten digits (optional dependency).
load_randhie   statsmodels' bundled RAND Health Insurance Experiment data (Poisson counts).
read_idx       Any IDX file as a numpy array (the format MNIST is distributed in).

The three image sets come as flat float64 rows (the GLM studies) or, with ``images=True``, as
float32 arrays of shape (n, channels, height, width), the layout the networks of
:mod:`privfedstat.deep` take. FEMNIST (network data) is read by :mod:`privfedstat.deep.femnist`.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np

__all__ = ["load_mnist", "load_cifar10", "load_digits", "load_randhie", "read_idx", "as_dir"]

MNIST_URLS = ("https://yann.lecun.com/exdb/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/")
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"

_KINDS = ("all", "train", "test")

# IDX type codes (third byte of the magic number) -> big-endian numpy dtype.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_MNIST_IMAGE_MAGIC, _MNIST_LABEL_MAGIC = 2051, 2049

_CIFAR_DIR = "cifar-10-batches-py"
_CIFAR_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}
_CIFAR_TAR = "cifar-10-python.tar.gz"


def _layout(X: np.ndarray, images: bool, shape: tuple[int, int, int]) -> np.ndarray:
    """Flat float64 rows as they are, or (``images``) float32 of shape (n, *shape) (channels first)."""
    if not isinstance(images, (bool, np.bool_)):
        raise TypeError(f"images must be True or False, got {images!r}.")
    return X.reshape(X.shape[0], *shape).astype(np.float32) if images else X


def _check_kind(kind: str) -> tuple[str, ...]:
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {list(_KINDS)}, got {kind!r}.")
    return ("train", "test") if kind == "all" else (kind,)


def as_dir(data_dir) -> Path:
    """``data_dir`` (a path-like, ``~`` expanded) as a Path; FileNotFoundError unless it is a directory."""
    path = Path(os.fspath(data_dir)).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {str(path)!r} does not exist or is not a directory.")
    return path


# --------------------------------------------------------------------------- IDX / MNIST
def _read_bytes(path: Path) -> bytes:
    """Whole file contents, decompressed when the file is gzip (detected from its first bytes)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: corrupt gzip file ({exc}); download it again.") from None
    return raw


def read_idx(path, *, expected_magic: int | None = None) -> np.ndarray:
    """Read one IDX file (gzipped or not) into a numpy array.

    The IDX format (used for MNIST) is a 4-byte magic number ``0x00 0x00 <type> <ndim>``, then
    ``ndim`` big-endian int32 dimensions, then the values in big-endian C order.

    Parameters
    ----------
    path : str or path-like
        The file; gzip compression is detected from the content, not the name.
    expected_magic : int, optional
        Required magic number (e.g. 2051 for MNIST images, 2049 for MNIST labels).

    Returns
    -------
    ndarray of shape given by the header, in native byte order.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the magic number, type code, header or file length is not valid IDX.
    """
    path = Path(os.fspath(path))
    buf = _read_bytes(path)
    if len(buf) < 4:
        raise ValueError(f"{path}: {len(buf)} bytes is too short for an IDX file (corrupt or truncated).")
    magic = int.from_bytes(buf[:4], "big")
    if expected_magic is not None and magic != expected_magic:
        raise ValueError(
            f"{path}: bad magic number {magic} (0x{magic:08x}), expected {expected_magic} "
            f"(0x{expected_magic:08x}); the file is corrupt or is not the file its name says."
        )
    if buf[0] != 0 or buf[1] != 0 or buf[2] not in _IDX_DTYPES or buf[3] == 0:
        raise ValueError(f"{path}: bad magic number 0x{magic:08x}; this is not an IDX file.")
    dtype, ndim = np.dtype(_IDX_DTYPES[buf[2]]), buf[3]
    header = 4 + 4 * ndim
    if len(buf) < header:
        raise ValueError(f"{path}: truncated header ({len(buf)} bytes for {ndim} dimensions).")
    shape = tuple(int.from_bytes(buf[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(buf) != expected:
        raise ValueError(
            f"{path}: header says shape {shape} ({expected} bytes in all) but the file has {len(buf)} bytes "
            "(truncated or corrupt; download it again)."
        )
    return np.frombuffer(buf, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find_mnist_file(dirs: list[Path], stem: str) -> Path | None:
    # The standard name, the variant with a dot (train-images.idx3-ubyte) and their .gz forms.
    variants = [stem, stem.replace("-idx", ".idx")]
    for d in dirs:
        for v in variants:
            for name in (v, v + ".gz"):
                if (d / name).is_file():
                    return d / name
    return None


def load_mnist(data_dir, *, kind: str = "all", normalize: bool = True,
               images: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST from the standard IDX files in ``data_dir``.

    Parameters
    ----------
    data_dir : str or path-like
        Folder holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``, each gzipped (``.gz``) or not.
        torchvision's layout (``data_dir/MNIST/raw/``) is also searched.
    kind : {"all", "train", "test"}, default "all"
        ``"all"`` pools the 60000 training and 10000 test images (N = 70000), as Section 5.1 of
        Peng & Paul does before splitting the images across clients.
    normalize : bool, default True
        Divide the pixel values (0..255) by 255.
    images : bool, default False
        Return X as float32 of shape (n_images, 1, 28, 28) (the input of
        :class:`~privfedstat.deep.models.MnistCNN`) instead of flat rows.

    Returns
    -------
    X : ndarray of shape (n_images, 784), float64, or (n_images, 1, 28, 28), float32
        One row per image, pixels in row-major 28 x 28 order.
    y : ndarray of shape (n_images,), int64
        Digit labels 0..9.

    Raises
    ------
    FileNotFoundError
        If a file is missing; the message names it and the URLs to download it from.
    ValueError
        If a file is corrupt (bad magic number, wrong dimensions, truncated, labels out of range).

    References
    ----------
    LeCun, Y., Cortes, C. and Burges, C. J. C. The MNIST database of handwritten digits.
    Peng & Paul, Section 5.1 (the MNIST logistic-regression study).
    """
    parts = _check_kind(kind)
    root = as_dir(data_dir)
    dirs = [root, root / "MNIST" / "raw"]
    paths, missing = {}, []
    for part in parts:
        for stem in _MNIST_FILES[part]:
            found = _find_mnist_file(dirs, stem)
            if found is None:
                missing.append(stem)
            paths[stem] = found
    if missing:
        names = ", ".join(f"{m} (or {m}.gz)" for m in missing)
        raise FileNotFoundError(
            f"MNIST file(s) not found in {str(root)!r}: {names}. Download them from {MNIST_URLS[0]} "
            f"or the mirror {MNIST_URLS[1]} (e.g. {MNIST_URLS[1]}{missing[0]}.gz) into that folder; "
            "gzipped files can stay gzipped."
        )
    Xs, ys = [], []
    for part in parts:
        img_stem, lab_stem = _MNIST_FILES[part]
        pixels = read_idx(paths[img_stem], expected_magic=_MNIST_IMAGE_MAGIC)
        labels = read_idx(paths[lab_stem], expected_magic=_MNIST_LABEL_MAGIC)
        if pixels.ndim != 3 or pixels.shape[1:] != (28, 28):
            raise ValueError(f"{paths[img_stem]}: images have shape {pixels.shape}, expected (n, 28, 28).")
        if labels.ndim != 1 or labels.shape[0] != pixels.shape[0]:
            raise ValueError(
                f"{paths[lab_stem]}: {labels.shape} labels for {pixels.shape[0]} images in {paths[img_stem].name}; "
                "the two files do not belong together."
            )
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise ValueError(f"{paths[lab_stem]}: labels outside 0..9 (corrupt file).")
        Xs.append(pixels.reshape(pixels.shape[0], -1))
        ys.append(labels)
    X = np.concatenate(Xs).astype(np.float64)
    if normalize:
        X /= 255.0
    return _layout(X, images, (1, 28, 28)), np.concatenate(ys).astype(np.int64)


# --------------------------------------------------------------------------- CIFAR-10
class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds numpy arrays: a crafted pickle cannot run arbitrary code."""

    _ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),
    }

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays are allowed")
        return super().find_class(module, name)


def _read_cifar_batch(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a corrupt file
        raise ValueError(f"{where}: not a readable CIFAR-10 pickle batch ({exc}); download it again.") from None
    if not isinstance(batch, dict):
        raise ValueError(f"{where}: expected a dict with 'data' and 'labels', got {type(batch).__name__}.")
    batch = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise ValueError(f"{where}: missing 'data' or 'labels' entry (keys: {sorted(map(str, batch))}).")
    data, labels = np.asarray(batch["data"]), np.asarray(batch["labels"])
    if data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{where}: 'data' has shape {data.shape}, expected (n, 3072).")
    if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
        raise ValueError(f"{where}: {labels.shape} labels for {data.shape[0]} images.")
    if labels.size and (not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{where}: labels must be integers in 0..9.")
    if data.size and (data.min() < 0 or data.max() > 255):
        raise ValueError(f"{where}: pixel values outside 0..255.")
    return data, labels


def load_cifar10(data_dir, *, kind: str = "all", normalize: bool = True,
                 images: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Load CIFAR-10 from the standard python pickle batches.

    Parameters
    ----------
    data_dir : str or path-like
        Either the ``cifar-10-batches-py`` folder (holding ``data_batch_1`` .. ``data_batch_5`` and
        ``test_batch``) or its parent. If neither holds the batches but the parent holds the
        unextracted ``cifar-10-python.tar.gz``, the batches are read from inside the archive.
    kind : {"all", "train", "test"}, default "all"
        ``"train"``: the 50000 training images; ``"test"``: the 10000 test images; ``"all"``: both
        pooled (N = 60000).
    normalize : bool, default True
        Divide the pixel values (0..255) by 255.
    images : bool, default False
        Return X as float32 of shape (n_images, 3, 32, 32) (channels red, green, blue; the input
        of :class:`~privfedstat.deep.models.CifarCNN`) instead of flat rows.

    Returns
    -------
    X : ndarray of shape (n_images, 3072), float64, or (n_images, 3, 32, 32), float32
        One row per 32 x 32 colour image in the files' layout: the 1024 red values, then green,
        then blue, each plane row-major.
    y : ndarray of shape (n_images,), int64
        Class labels 0..9.

    Raises
    ------
    FileNotFoundError
        If batches are missing; the message names them and the download URL.
    ValueError
        If a batch is corrupt or not in the CIFAR-10 format.

    Notes
    -----
    The batches are pickles; they are read with an unpickler that only rebuilds numpy arrays, so a
    tampered file cannot execute code.

    References
    ----------
    Krizhevsky, A. (2009). Learning multiple layers of features from tiny images.
    """
    parts = _check_kind(kind)
    root = as_dir(data_dir)
    names = [n for part in parts for n in _CIFAR_FILES[part]]
    folder = root if root.name == _CIFAR_DIR or not (root / _CIFAR_DIR).is_dir() else root / _CIFAR_DIR
    present = [n for n in names if (folder / n).is_file()]
    blobs: dict[str, tuple[bytes, str]] = {n: ((folder / n).read_bytes(), str(folder / n)) for n in present}
    missing = [n for n in names if n not in blobs]
    tar_path = root / _CIFAR_TAR
    if missing and not present and tar_path.is_file():
        blobs = _read_cifar_tar(tar_path, names)
        missing = [n for n in names if n not in blobs]
    if missing:
        raise FileNotFoundError(
            f"CIFAR-10 batch file(s) not found in {str(folder)!r}: {', '.join(missing)}. Download "
            f"{CIFAR10_URL} and extract it (it creates the folder {_CIFAR_DIR}/); pass that folder "
            "or its parent as data_dir."
        )
    Xs, ys = [], []
    for n in names:
        data, labels = _read_cifar_batch(*blobs[n])
        Xs.append(data)
        ys.append(labels)
    X = np.concatenate(Xs).astype(np.float64)
    if normalize:
        X /= 255.0
    return _layout(X, images, (3, 32, 32)), np.concatenate(ys).astype(np.int64)


def _read_cifar_tar(tar_path: Path, names: list[str]) -> dict[str, tuple[bytes, str]]:
    out = {}
    try:
        with tarfile.open(tar_path, "r:*") as tar:
            for member in tar.getmembers():
                base = member.name.rsplit("/", 1)[-1]
                if member.isfile() and base in names:
                    out[base] = (tar.extractfile(member).read(), f"{tar_path}:{member.name}")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{tar_path}: corrupt archive ({exc}); download it again from {CIFAR10_URL}.") from None
    return out


# --------------------------------------------------------------------------- bundled data sets
def load_digits(*, images: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, offline).

    Parameters
    ----------
    images : bool, default False
        Return X as float32 of shape (1797, 1, 8, 8) (the input of
        :class:`~privfedstat.deep.models.DigitsCNN`) instead of flat rows.

    Returns
    -------
    X : ndarray of shape (1797, 64), float64, or (1797, 1, 8, 8), float32
        Pixel intensities (0..16 in the source) divided by 16, so in [0, 1].
    y : ndarray of shape (1797,), int64
        Digit labels 0..9.

    Raises
    ------
    ImportError
        If scikit-learn is not installed (it is an optional dependency: ``pip install scikit-learn``).

    References
    ----------
    Alpaydin, E. and Kaynak, C. (1998). Optical recognition of handwritten digits. UCI ML Repository.
    """
    try:
        from sklearn.datasets import load_digits as _sk_load_digits
    except ImportError as exc:
        raise ImportError(
            "load_digits needs scikit-learn, an optional dependency: pip install scikit-learn "
            "(or pip install 'privfedstat[test]')."
        ) from exc
    bunch = _sk_load_digits()
    X = np.asarray(bunch.data, dtype=np.float64) / 16.0
    return _layout(X, images, (1, 8, 8)), np.asarray(bunch.target, dtype=np.int64)


def load_randhie():
    """statsmodels' bundled RAND Health Insurance Experiment data (20190 person-years, offline).

    Returns
    -------
    pandas.DataFrame of shape (20190, 10)
        ``mdvis`` (response: number of outpatient visits to a doctor, a count) and the covariates
        ``lncoins`` (ln(coinsurance + 1), coinsurance in 0..100), ``idp`` (1 if individual
        deductible plan), ``lpi`` (ln(max(1, annual participation incentive payment))), ``fmde``
        (0 if idp = 1, else ln(max(1, MDE / (0.01 coinsurance)))), ``physlm`` (physical
        limitation), ``disea`` (number of chronic diseases), ``hlthg``, ``hlthf``, ``hlthp``
        (self-rated health good / fair / poor; excellent is the omitted category).

    References
    ----------
    Deb, P. and Trivedi, P. K. (2002). The structure of demand for health care: latent class versus
    two-part models. Journal of Health Economics 21, 601-625. ``statsmodels.datasets.randhie``.
    """
    from statsmodels.datasets import randhie

    return randhie.load_pandas().data.copy()
