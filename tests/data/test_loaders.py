"""Tests for privfedstat.data.loaders: synthetic IDX / CIFAR files round-trip; bundled data sets."""

from __future__ import annotations

import gzip
import pickle
import sys
import tarfile

import numpy as np
import pytest

from privfedstat.data import load_cifar10, load_digits, load_mnist, load_randhie, read_idx
from privfedstat.data.loaders import CIFAR10_URL, MNIST_URLS


# --------------------------------------------------------------------------- helpers
def _idx_bytes(arr: np.ndarray, magic: int | None = None) -> bytes:
    """Encode ``arr`` in the IDX format (unsigned bytes unless the dtype says otherwise)."""
    codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(np.int16): 0x0B,
             np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D, np.dtype(np.float64): 0x0E}
    if magic is None:
        magic = (codes[arr.dtype] << 8) | arr.ndim
    head = magic.to_bytes(4, "big") + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def _write(path, payload: bytes, gz: bool) -> None:
    if gz:
        path = path.with_name(path.name + ".gz")
        payload = gzip.compress(payload)
    path.write_bytes(payload)


def _write_mnist(folder, n_train=7, n_test=3, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for part, n, prefix in (("train", n_train, "train"), ("test", n_test, "t10k")):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        _write(folder / f"{prefix}-images-idx3-ubyte", _idx_bytes(images), gz)
        _write(folder / f"{prefix}-labels-idx1-ubyte", _idx_bytes(labels), gz)
        out[part] = (images, labels)
    return out


def _cifar_batch(n, rng):
    return {b"batch_label": b"synthetic", b"labels": rng.integers(0, 10, size=n).tolist(),
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * n}


def _write_cifar(folder, sizes=(4, 3, 2, 5, 1), n_test=6, seed=0, protocol=2):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    batches = {}
    for i, n in enumerate(sizes, start=1):
        batches[f"data_batch_{i}"] = _cifar_batch(n, rng)
    batches["test_batch"] = _cifar_batch(n_test, rng)
    for name, b in batches.items():
        (folder / name).write_bytes(pickle.dumps(b, protocol=protocol))
    return batches


def _expected_cifar(batches, names):
    X = np.concatenate([batches[n][b"data"] for n in names]).astype(np.float64)
    y = np.concatenate([batches[n][b"labels"] for n in names]).astype(np.int64)
    return X, y


TRAIN = [f"data_batch_{i}" for i in range(1, 6)]


# --------------------------------------------------------------------------- IDX
class TestReadIdx:
    @pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
    @pytest.mark.parametrize("gz", [False, True])
    def test_round_trip_every_type(self, tmp_path, dtype, gz):
        arr = (np.arange(2 * 3 * 4) - 5).reshape(2, 3, 4).astype(dtype)
        _write(tmp_path / "a.idx", _idx_bytes(arr), gz)
        out = read_idx(tmp_path / ("a.idx.gz" if gz else "a.idx"))
        assert out.dtype == np.dtype(dtype) and out.shape == (2, 3, 4)
        np.testing.assert_array_equal(out, arr)

    def test_truncated(self, tmp_path):
        (tmp_path / "a").write_bytes(_idx_bytes(np.zeros((3, 4), np.uint8))[:-1])
        with pytest.raises(ValueError, match="truncated"):
            read_idx(tmp_path / "a")

    def test_not_idx(self, tmp_path):
        (tmp_path / "a").write_bytes(b"hello world")
        with pytest.raises(ValueError, match="not an IDX file"):
            read_idx(tmp_path / "a")

    def test_corrupt_gzip(self, tmp_path):
        (tmp_path / "a.gz").write_bytes(gzip.compress(b"0" * 100)[:20])
        with pytest.raises(ValueError, match="corrupt gzip"):
            read_idx(tmp_path / "a.gz")


# --------------------------------------------------------------------------- MNIST
class TestMnist:
    @pytest.mark.parametrize("gz", [False, True])
    def test_round_trip(self, tmp_path, gz):
        src = _write_mnist(tmp_path, gz=gz)
        X, y = load_mnist(tmp_path)
        assert X.shape == (10, 784) and X.dtype == np.float64 and y.dtype == np.int64
        images = np.concatenate([src["train"][0], src["test"][0]])
        np.testing.assert_array_equal(X, images.reshape(10, 784) / 255.0)
        np.testing.assert_array_equal(y, np.concatenate([src["train"][1], src["test"][1]]))
        assert X.min() >= 0 and X.max() <= 1

    def test_kinds_and_raw_scale(self, tmp_path):
        src = _write_mnist(tmp_path, gz=True)
        Xtr, ytr = load_mnist(tmp_path, kind="train", normalize=False)
        Xte, yte = load_mnist(tmp_path, kind="test", normalize=False)
        np.testing.assert_array_equal(Xtr, src["train"][0].reshape(7, 784).astype(np.float64))
        np.testing.assert_array_equal(Xte, src["test"][0].reshape(3, 784).astype(np.float64))
        np.testing.assert_array_equal(ytr, src["train"][1])
        np.testing.assert_array_equal(yte, src["test"][1])
        assert Xtr.dtype == np.float64

    def test_only_needed_files_for_kind(self, tmp_path):
        _write_mnist(tmp_path)
        for f in tmp_path.glob("t10k-*"):
            f.unlink()
        assert load_mnist(tmp_path, kind="train")[0].shape == (7, 784)
        with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte"):
            load_mnist(tmp_path, kind="all")

    def test_torchvision_layout_and_dot_names(self, tmp_path):
        raw = tmp_path / "MNIST" / "raw"
        raw.mkdir(parents=True)
        src = _write_mnist(raw)
        (raw / "train-images-idx3-ubyte").rename(raw / "train-images.idx3-ubyte")
        X, _ = load_mnist(tmp_path, kind="train", normalize=False)
        np.testing.assert_array_equal(X, src["train"][0].reshape(7, 784))

    def test_missing_files_message(self, tmp_path):
        with pytest.raises(FileNotFoundError) as info:
            load_mnist(tmp_path)
        msg = str(info.value)
        for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                     "t10k-labels-idx1-ubyte"):
            assert name in msg
        assert MNIST_URLS[0] in msg and MNIST_URLS[1] in msg
        assert "yann.lecun.com/exdb/mnist" in msg

    def test_missing_directory(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="does not exist"):
            load_mnist(tmp_path / "nope")

    def test_bad_magic(self, tmp_path):
        _write_mnist(tmp_path)
        labels = np.zeros(7, np.uint8)
        # A labels file where the images file should be: magic 2049 instead of 2051.
        (tmp_path / "train-images-idx3-ubyte").write_bytes(_idx_bytes(labels))
        with pytest.raises(ValueError, match="bad magic number 2049.*expected 2051"):
            load_mnist(tmp_path)

    def test_wrong_image_size(self, tmp_path):
        _write_mnist(tmp_path)
        (tmp_path / "t10k-images-idx3-ubyte").write_bytes(_idx_bytes(np.zeros((3, 27, 28), np.uint8)))
        with pytest.raises(ValueError, match=r"expected \(n, 28, 28\)"):
            load_mnist(tmp_path)

    def test_label_count_mismatch(self, tmp_path):
        _write_mnist(tmp_path)
        (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(4, np.uint8)))
        with pytest.raises(ValueError, match="do not belong together"):
            load_mnist(tmp_path)

    def test_labels_out_of_range(self, tmp_path):
        _write_mnist(tmp_path)
        (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(_idx_bytes(np.full(3, 12, np.uint8)))
        with pytest.raises(ValueError, match="outside 0..9"):
            load_mnist(tmp_path)

    def test_bad_kind(self, tmp_path):
        with pytest.raises(ValueError, match="kind must be one of"):
            load_mnist(tmp_path, kind="validation")


# --------------------------------------------------------------------------- CIFAR-10
class TestCifar10:
    @pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
    def test_round_trip_folder_and_parent(self, tmp_path, protocol):
        batches = _write_cifar(tmp_path / "cifar-10-batches-py", protocol=protocol)
        Xe, ye = _expected_cifar(batches, TRAIN + ["test_batch"])
        for where in (tmp_path, tmp_path / "cifar-10-batches-py"):
            X, y = load_cifar10(where)
            assert X.shape == (21, 3072) and X.dtype == np.float64 and y.dtype == np.int64
            np.testing.assert_array_equal(X, Xe / 255.0)
            np.testing.assert_array_equal(y, ye)

    def test_kinds(self, tmp_path):
        batches = _write_cifar(tmp_path / "cifar-10-batches-py")
        X, y = load_cifar10(tmp_path, kind="train", normalize=False)
        Xe, ye = _expected_cifar(batches, TRAIN)
        np.testing.assert_array_equal(X, Xe)
        np.testing.assert_array_equal(y, ye)
        X, y = load_cifar10(tmp_path, kind="test", normalize=False)
        Xe, ye = _expected_cifar(batches, ["test_batch"])
        np.testing.assert_array_equal(X, Xe)
        np.testing.assert_array_equal(y, ye)

    def test_str_keys_accepted(self, tmp_path):
        rng = np.random.default_rng(1)
        folder = tmp_path / "cifar-10-batches-py"
        folder.mkdir()
        b = {"data": rng.integers(0, 256, size=(2, 3072), dtype=np.uint8), "labels": [3, 9]}
        (folder / "test_batch").write_bytes(pickle.dumps(b))
        X, y = load_cifar10(folder, kind="test", normalize=False)
        np.testing.assert_array_equal(X, b["data"])
        np.testing.assert_array_equal(y, [3, 9])

    def test_from_tar_gz(self, tmp_path):
        src = tmp_path / "src"
        batches = _write_cifar(src / "cifar-10-batches-py")
        dest = tmp_path / "dl"
        dest.mkdir()
        with tarfile.open(dest / "cifar-10-python.tar.gz", "w:gz") as tar:
            tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
        X, y = load_cifar10(dest)
        Xe, ye = _expected_cifar(batches, TRAIN + ["test_batch"])
        np.testing.assert_array_equal(X, Xe / 255.0)
        np.testing.assert_array_equal(y, ye)

    def test_missing_files_message(self, tmp_path):
        with pytest.raises(FileNotFoundError) as info:
            load_cifar10(tmp_path)
        msg = str(info.value)
        assert CIFAR10_URL in msg and "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in msg
        assert "data_batch_1" in msg and "test_batch" in msg

    def test_one_missing_batch_named(self, tmp_path):
        folder = tmp_path / "cifar-10-batches-py"
        _write_cifar(folder)
        (folder / "data_batch_3").unlink()
        with pytest.raises(FileNotFoundError) as info:
            load_cifar10(tmp_path)
        assert "data_batch_3" in str(info.value) and "data_batch_2" not in str(info.value)
        assert load_cifar10(tmp_path, kind="test")[0].shape == (6, 3072)

    def test_corrupt_pickle(self, tmp_path):
        folder = tmp_path / "cifar-10-batches-py"
        _write_cifar(folder)
        (folder / "test_batch").write_bytes(b"\x80\x02garbage")
        with pytest.raises(ValueError, match="not a readable CIFAR-10 pickle"):
            load_cifar10(folder, kind="test")

    def test_wrong_shape(self, tmp_path):
        folder = tmp_path / "cifar-10-batches-py"
        folder.mkdir()
        (folder / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}))
        with pytest.raises(ValueError, match=r"expected \(n, 3072\)"):
            load_cifar10(folder, kind="test")

    def test_refuses_code_in_pickle(self, tmp_path):
        folder = tmp_path / "cifar-10-batches-py"
        folder.mkdir()

        class Evil:
            def __reduce__(self):
                return (print, ("pwned",))

        (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
        with pytest.raises(ValueError, match="refusing to load builtins.print"):
            load_cifar10(folder, kind="test")


# --------------------------------------------------------------------------- bundled
class TestBundled:
    def test_digits(self):
        X, y = load_digits()
        assert X.shape == (1797, 64) and y.shape == (1797,)
        assert X.dtype == np.float64 and y.dtype == np.int64
        assert X.min() == 0.0 and X.max() == 1.0
        np.testing.assert_array_equal(np.unique(y), np.arange(10))
        np.testing.assert_array_equal(X * 16, np.round(X * 16))  # integer intensities 0..16 in the source

    def test_digits_without_sklearn(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
        with pytest.raises(ImportError, match="pip install scikit-learn"):
            load_digits()

    def test_randhie(self):
        df = load_randhie()
        cols = ["mdvis", "lncoins", "idp", "lpi", "fmde", "physlm", "disea", "hlthg", "hlthf", "hlthp"]
        assert df.shape == (20190, 10)
        assert list(df.columns) == cols
        y = df["mdvis"].to_numpy()
        assert np.all(y >= 0) and np.all(y == np.round(y))
        assert np.isfinite(df.to_numpy(dtype=float)).all()
        np.testing.assert_allclose(df["lncoins"].max(), np.log(101), rtol=1e-6)   # 0 <= coinsurance <= 100
        for c in ("idp", "hlthg", "hlthf", "hlthp"):
            assert set(np.unique(df[c])) <= {0, 1}
        df.loc[0, "mdvis"] = -1  # a copy: the next call is unaffected
        assert load_randhie().loc[0, "mdvis"] >= 0
