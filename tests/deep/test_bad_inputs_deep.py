"""Bad inputs to the network side (issue 43): TensorFederatedData's constructors and a fitted estimator's score."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privfedstat.deep import DeepFedSGD, TensorFederatedData  # noqa: E402


def _pooled(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, n)


def test_split_iid_length_mismatch_is_named():
    """A length mismatch used to raise a raw IndexError from the permutation."""
    inputs, targets = _pooled()
    with pytest.raises(ValueError, match="inputs have 40 rows but targets have 39"):
        TensorFederatedData.split_iid(inputs, targets[:-1], 2)
    with pytest.raises(ValueError, match="inputs have 40 rows but targets have 39"):
        TensorFederatedData.from_pooled(inputs, targets[:-1], sizes=[20, 20])


@pytest.mark.parametrize("n_per_client", [0, 2.7, "a", True])
def test_split_iid_rows_per_client_must_be_a_positive_integer(n_per_client):
    """2.7 was truncated silently, "a" raised int()'s message and 0 claimed too few rows."""
    inputs, targets = _pooled()
    with pytest.raises(ValueError, match="n_per_client must be an integer >= 1"):
        TensorFederatedData.split_iid(inputs, targets, 2, n_per_client=n_per_client)


def test_empty_tensor_data_says_there_are_no_rows():
    inputs, targets = _pooled()
    with pytest.raises(ValueError, match="no rows"):
        TensorFederatedData(inputs[:0], targets[:0], [0])


def test_score_checks_the_input_shape_and_labels():
    """score() with inputs of the wrong shape used to raise torch's "mat1 and mat2 shapes cannot be multiplied";
    labels of shape (n, 1) broadcast against the predictions into an (n, n) comparison (a wrong accuracy)."""
    torch.manual_seed(0)
    inputs, targets = _pooled()
    data = TensorFederatedData.split_iid(inputs, targets, 2, random_state=0)
    est = DeepFedSGD(model=torch.nn.Linear(4, 2), mu=float("inf"), n_iter=1, step_size=0.1, clip=1.0,
                     progress=False).fit(data)
    with pytest.raises(ValueError, match="4 numbers per input"):
        est.score(np.zeros((5, 3), np.float32), np.zeros(5))
    with pytest.raises(ValueError, match="4 numbers per input"):
        est.predict(inputs[0])
    with pytest.raises(ValueError, match=r"one label per input \(40\)"):
        est.score(inputs, targets[:, None])
    assert est.score(inputs, targets) == pytest.approx(np.mean(est.predict(inputs) == targets))


@pytest.mark.parametrize(("param", "value", "said"), [("clip", 0.0, "clip must be > 0 or an AutoClip, got 0.0."),
                                                      ("step_size", -1.0, "step_size must be > 0, got -1.0.")])
def test_a_bad_number_is_refused_with_what_networks_take(param, value, said):
    """clip=0 said "must be > 0, 'auto', 'paper' or an AutoClip" and step_size=-1 "> 0 or 'auto'": the GLMs' rules,
    whose 'auto' and 'paper' a network then refuses (the GLM curvature bound and raw-data rule do not apply)."""
    torch.manual_seed(0)
    inputs, targets = _pooled()
    data = TensorFederatedData.split_iid(inputs, targets, 2, random_state=0)
    params = {"clip": 1.0, "step_size": 0.1, param: value}
    with pytest.raises(ValueError) as err:
        DeepFedSGD(model=torch.nn.Linear(4, 2), mu=2.0, n_iter=1, progress=False, **params).fit(data)
    assert str(err.value) == said
