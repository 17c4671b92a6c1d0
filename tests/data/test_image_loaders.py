"""The image layout of the loaders (``images=True``): files in the real formats, written in tmp_path."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from privfedstat.data import load_cifar10, load_digits, load_mnist


def _idx(arr: np.ndarray) -> bytes:
    """IDX encoding of an unsigned-byte array (magic 0x0000 08 <ndim>, big-endian int32 dimensions)."""
    head = ((0x08 << 8) | arr.ndim).to_bytes(4, "big") + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    return head + arr.astype(np.uint8).tobytes()


def test_mnist_images(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=5, dtype=np.uint8)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(_idx(images))
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(_idx(labels))
    X, y = load_mnist(tmp_path, kind="test", images=True)
    assert X.shape == (5, 1, 28, 28) and X.dtype == np.float32
    np.testing.assert_array_equal(X[:, 0], (images / 255.0).astype(np.float32))
    np.testing.assert_array_equal(y, labels)
    flat, _ = load_mnist(tmp_path, kind="test")
    np.testing.assert_array_equal(X.reshape(5, -1), flat.astype(np.float32))


def test_cifar_images_channel_planes(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    data = np.zeros((2, 3072), dtype=np.uint8)
    data[0, :1024], data[0, 1024:2048], data[0, 2048:] = 10, 20, 30  # red, green, blue planes
    data[1, 5] = 255  # red plane, row 0, column 5
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": data, b"labels": [1, 7]}))
    X, y = load_cifar10(tmp_path, kind="test", normalize=False, images=True)
    assert X.shape == (2, 3, 32, 32) and X.dtype == np.float32
    assert (X[0, 0] == 10).all() and (X[0, 1] == 20).all() and (X[0, 2] == 30).all()
    assert X[1, 0, 0, 5] == 255 and X[1].sum() == 255
    np.testing.assert_array_equal(y, [1, 7])


def test_cifar_missing_names_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_batch_1.*test_batch"):
        load_cifar10(tmp_path, images=True)


def test_mnist_missing_names_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        load_mnist(tmp_path, images=True)


def test_digits_images():
    X, y = load_digits(images=True)
    flat, y_flat = load_digits()
    assert X.shape == (1797, 1, 8, 8) and X.dtype == np.float32
    assert X.min() == 0.0 and X.max() == 1.0
    np.testing.assert_array_equal(X.reshape(1797, 64), flat.astype(np.float32))
    np.testing.assert_array_equal(y, y_flat)


def test_images_must_be_bool():
    with pytest.raises(TypeError, match="images must be True or False"):
        load_digits(images="yes")
