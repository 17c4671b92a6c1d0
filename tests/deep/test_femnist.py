"""FEMNIST from LEAF's JSON layout (tiny files written in tmp_path) and the offline digits stand-in."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from privfedstat.deep.femnist import WriterData, femnist_standin, load_femnist  # noqa: E402
from privfedstat.deep.models import FemnistCNN, count_parameters  # noqa: E402

# writer -> examples in LEAF's train/ and test/ files; every writer has its own label
WRITERS = {"f0001_00": (14, 3), "f0002_11": (20, 4), "f0003_22": (9, 2), "f0004_33": (25, 5), "f0005_44": (4, 1)}


def _image(uid: int) -> list[float]:
    """A 28 x 28 LEAF row (grey / 255, background 1) whose 2 x 2 blocks all equal 1 - uid / 1000 (a fingerprint)."""
    return [1.0 - uid / 1000.0] * 784


def _leaf_dir(root, layout: str = "split") -> dict[str, list[int]]:
    """Write the WRITERS in LEAF's layout; return each writer's example fingerprints."""
    uids, files = {}, {"train": {}, "test": {}}
    uid = 1
    for k, (user, sizes) in enumerate(WRITERS.items()):
        uids[user] = []
        for part, n in zip(("train", "test"), sizes):
            files[part][user] = {"x": [_image(uid + j) for j in range(n)], "y": [10 * k] * n}
            uids[user] += list(range(uid, uid + n))
            uid += n
    if layout == "split":
        for part in ("train", "test"):
            (root / part).mkdir()
            users = list(files[part])
            for half, chunk in enumerate((users[:2], users[2:])):  # two files per folder, like LEAF's shards
                body = {"users": chunk, "num_samples": [len(files[part][u]["y"]) for u in chunk],
                        "user_data": {u: files[part][u] for u in chunk}}
                (root / part / f"all_data_{half}_niid_0_keep_0_{part}_9.json").write_text(json.dumps(body))
    else:
        (root / "all_data").mkdir()
        merged = {u: {key: files["train"][u][key] + files["test"][u][key] for key in ("x", "y")} for u in WRITERS}
        body = {"users": list(merged), "num_samples": [len(v["y"]) for v in merged.values()], "user_data": merged}
        (root / "all_data" / "all_data_0.json").write_text(json.dumps(body))
    return uids


def _fingerprints(X: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(X)[:, 0, 0, 0].astype(np.float64) * 1000).astype(int)


@pytest.mark.parametrize("layout", ["split", "all_data"])
def test_leaf_writers_pooled_split_and_downsampled(tmp_path, layout):
    uids = _leaf_dir(tmp_path, layout)
    data = load_femnist(tmp_path, n_writers=3, random_state=1)
    assert isinstance(data, WriterData) and data.source == "leaf-femnist" and data.n_classes == 62
    assert len(data.writers) == 3 and list(data.writers) == sorted(data.writers)
    assert "f0005_44" not in data.writers  # 5 examples < min_samples = 10: not eligible
    assert data.train.n_clients == 3 and data.train.input_shape == (1, 14, 14)
    assert data.train.inputs.dtype == torch.float32 and data.eval_X.dtype == np.float32
    assert data.eval_y.dtype == np.int64 and data.eval_writer.dtype == np.int64
    # inverted (1 - LEAF value) and 2 x 2 averaged: a constant image stays constant
    X, _ = data.train.to_numpy()
    assert np.allclose(X, X[:, :, :1, :1], atol=1e-7)
    for k, user in enumerate(data.writers):
        n = sum(WRITERS[user])
        n_out = round(0.1 * n + 1e-9)
        Xk, yk = data.train.client(k)
        cal = data.calibration_y == 10 * list(WRITERS).index(user)
        ev = data.eval_writer == k
        assert ev.sum() == n_out and cal.sum() == n_out and len(yk) == n - 2 * n_out  # train and test pooled
        assert (yk.numpy() == 10 * list(WRITERS).index(user)).all() and (data.eval_y[ev] == yk[0].item()).all()
        seen = np.concatenate([_fingerprints(Xk.numpy()), _fingerprints(data.calibration_X[cal]),
                               _fingerprints(data.eval_X[ev])])
        assert sorted(seen) == uids[user]  # every example exactly once, in one part


def test_leaf_reproducible_and_seeded(tmp_path):
    _leaf_dir(tmp_path)
    a, b = load_femnist(tmp_path, n_writers=3, random_state=7), load_femnist(tmp_path, n_writers=3, random_state=7)
    assert a.writers == b.writers and torch.equal(a.train.inputs, b.train.inputs)
    np.testing.assert_array_equal(a.eval_X, b.eval_X)
    assert len({load_femnist(tmp_path, n_writers=3, random_state=s).writers for s in range(8)}) > 1
    raw = load_femnist(tmp_path, n_writers=4, random_state=0, invert=False)  # LEAF's values, same split
    np.testing.assert_allclose(raw.eval_X, 1 - load_femnist(tmp_path, n_writers=4, random_state=0).eval_X, atol=1e-6)


def test_leaf_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_femnist(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"all_data/\*\.json.*train/\*\.json"):
        load_femnist(tmp_path)
    _leaf_dir(tmp_path)
    with pytest.raises(ValueError, match="4 writers have at least 10 examples.*5 were asked"):
        load_femnist(tmp_path, n_writers=5)
    bad = tmp_path / "bad"
    (bad / "all_data").mkdir(parents=True)
    (bad / "all_data" / "x.json").write_text('{"users": ["a"], ')
    with pytest.raises(ValueError, match="not valid JSON"):
        load_femnist(bad)
    (bad / "all_data" / "x.json").write_text('{"users": ["a"]}')
    with pytest.raises(ValueError, match="not a LEAF file"):
        load_femnist(bad)
    for x, y, message in (([_image(1)] * 12, [62] * 12, r"labels must be integers in 0\.\.61"),
                          ([_image(1)] * 12, [-1] * 12, r"labels must be integers in 0\.\.61"),
                          ([[0.5] * 100] * 12, [1] * 12, r"expected \(n, 784\)"),
                          ([[2.0] * 784] * 12, [1] * 12, r"outside \[0, 1\]"),
                          ([_image(1)] * 12, [1] * 11, "must agree")):
        body = {"users": ["a", "b"], "user_data": {u: {"x": x, "y": y} for u in "ab"}}
        (bad / "all_data" / "x.json").write_text(json.dumps(body))
        with pytest.raises(ValueError, match=message):
            load_femnist(bad, n_writers=2)
    with pytest.raises(ValueError, match="n_writers"):
        load_femnist(tmp_path, n_writers=1)
    with pytest.raises(ValueError, match="eval_fraction"):
        load_femnist(tmp_path, n_writers=2, eval_fraction=0.6)


@pytest.fixture(scope="module")
def standin() -> WriterData:
    return femnist_standin(random_state=0)


def test_standin_shapes_ranges_and_cnn(standin):
    d = standin
    assert d.source == "digits-standin" and d.n_classes == 10 and len(d.writers) == 60 == d.train.n_clients
    assert d.train.input_shape == (1, 14, 14) and d.train.inputs.dtype == torch.float32
    assert d.calibration_X.shape[1:] == d.eval_X.shape[1:] == (1, 14, 14)
    for X in (d.train.inputs.numpy(), d.calibration_X, d.eval_X):
        assert X.min() >= 0.0 and X.max() <= 1.0 and X.max() > 0.9
    assert d.train.n_samples + len(d.calibration_y) + len(d.eval_y) == 1797  # every digit used once
    assert set(np.unique(d.eval_writer)) == set(range(60)) and np.all(np.diff(d.eval_writer) >= 0)
    assert d.train.sizes.min() >= 10 - 2 and d.train.sizes.max() > 2 * d.train.sizes.min()  # FEMNIST-like spread
    model = FemnistCNN(n_classes=d.n_classes)
    assert count_parameters(model) == 27_326 - 65 * 62 + 65 * 10 and count_parameters(FemnistCNN()) == 27_326
    assert model(d.train.inputs[:5]).shape == (5, 10)
    with pytest.raises(ValueError, match="n_classes"):
        FemnistCNN(n_classes=1)


def test_standin_reproducible(standin):
    again = femnist_standin(random_state=0)
    assert torch.equal(again.train.inputs, standin.train.inputs) and torch.equal(again.train.targets,
                                                                                standin.train.targets)
    np.testing.assert_array_equal(again.eval_X, standin.eval_X)
    other = femnist_standin(n_writers=20, random_state=1)
    assert other.train.n_clients == 20 and not np.array_equal(other.train.sizes[:20], standin.train.sizes[:20])


def test_standin_is_non_iid(standin):
    """Label skew: writers' label distributions are far further from the pooled one than an IID deal's."""
    from scipy.stats import chi2_contingency

    d = standin
    counts = np.array([np.bincount(d.train.client(k)[1].numpy(), minlength=10) for k in range(60)])

    def mean_tv(c):
        return 0.5 * np.abs(c / c.sum(1, keepdims=True) - c.sum(0) / c.sum()).sum(1).mean()

    y = d.train.targets.numpy()
    rng = np.random.default_rng(0)
    iid = [mean_tv(np.array([np.bincount(part, minlength=10) for part in np.split(rng.permutation(y),
                                                                               d.train.offsets[1:-1])]))
           for _ in range(20)]
    assert mean_tv(counts) > 1.5 * max(iid)
    assert chi2_contingency(counts).pvalue < 1e-20
    with pytest.raises(ValueError, match="at most 179 writers"):
        femnist_standin(n_writers=180)
    with pytest.raises(ValueError, match="alpha"):
        femnist_standin(alpha=0.0)
