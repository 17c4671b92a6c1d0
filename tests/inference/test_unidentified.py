"""Which coefficients the inference withholds as unidentified (:func:`privfedstat.inference.core.unidentified_coefficients`)
when the protocol's own, more precise Hessian sees every direction."""

import math

import numpy as np

from privfedstat._linalg import floor_eigenvalues, vec_to_sym
from privfedstat.inference.core import FLOOR_NOISE_SDS, UNIDENTIFIED_NOISE_SDS, floored, unidentified_coefficients


def _draws(rng, H, s, n):
    p = H.shape[0]
    return H + vec_to_sym(s * rng.standard_normal((n, p * (p + 1) // 2)), p)


def test_a_well_identified_matrix_withholds_nothing_whatever_its_released_noise_does_to_the_lowest_eigenvalues():
    """RAND HIE's scales (p = 10, curvature 1.2-3.6 after whitening, the inference's Hessian noise sd 0.555, the
    protocol's 0.045): the noisy release's lowest eigenvalues fall below the floor in most draws, but the protocol's
    release sees the same curvature along them. The released eigenvalues sit up to ||Xi||_2 ~ s sqrt(2 p) from the
    curvature along their eigenvectors (checked here), so only a gap beyond that says the curvature changed; the
    comparison within 3 sds alone withheld something in 127 of 200 such draws."""
    rng = np.random.default_rng(0)
    p, s, s_p, n = 10, 0.555, 0.045, 100
    U = np.linalg.qr(rng.standard_normal((p, p)))[0]
    H = U @ np.diag(np.linspace(1.2, 3.6, p)) @ U.T
    released, protocol = _draws(rng, H, s, n), _draws(rng, H, s_p, n)
    vals, vecs = np.linalg.eigh(released)
    gap = np.abs(vals - np.einsum("nik,ij,njk->nk", vecs, H, vecs))
    assert np.quantile(gap.max(axis=1), 0.99) < s * math.sqrt(2 * p) + UNIDENTIFIED_NOISE_SDS * math.hypot(s, s_p)
    assert np.mean(vals[:, 0] < s) > 0.5  # the floor raises some direction in most draws
    withheld = [unidentified_coefficients(r, floor_eigenvalues(r, s), s, np.eye(p), q, s_p).size
                for r, q in zip(released, protocol)]
    assert sum(withheld) == 0
    # the curvature collapsed at the estimate along the lowest direction (the protocol sees 1.2 there, the estimate
    # 0): withheld where the inference's release resolves the fall (s = 0.1: the gap 1.2 exceeds 0.1 sqrt(20) + 3 x
    # 0.11), not at s = 0.555, whose own noise spreads the eigenvalues that far
    collapsed = U @ np.diag([0.0, *np.linspace(1.2, 3.6, p)[1:]]) @ U.T
    at_estimate = collapsed + vec_to_sym(0.1 * rng.standard_normal(p * (p + 1) // 2), p)
    assert unidentified_coefficients(at_estimate, floor_eigenvalues(at_estimate, 0.1), 0.1, U, protocol[0], s_p).size


def test_the_unidentified_warning_names_quasi_separation():
    """monica (DAAG: 1922 of the 1925 patients not hospitalised died): the hospital dummy's coefficient (-7.8) has
    almost no curvature, and the warning named only collinearity and too little data, not the cause."""
    import numpy as np
    import pytest

    from privfedstat import IllConditionedWarning
    from privfedstat.inference.core import floored

    with pytest.warns(IllConditionedWarning, match="quasi-separation") as caught:
        floored(np.diag([1.0, 0.01]), 0.05, "Hessian", [])
    assert "drop or pool a separated level" in str(caught[0].message)


def test_the_floor_note_counts_its_noise_sds_in_words():
    """The summary's note read "were below 1 noise sds (0.0859)" (Dee04, mu = 2)."""
    notes = []
    floored(np.diag([1.0, 0.01]), 0.1 / FLOOR_NOISE_SDS, "middle matrix", notes)
    unit = "sd" if FLOOR_NOISE_SDS == 1 else "sds"
    expected = f"1 of 2 eigenvalues of the released middle matrix were below {FLOOR_NOISE_SDS:g} noise {unit} (0.1)"
    assert notes and expected in notes[0]
