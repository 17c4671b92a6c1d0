"""The Newton maps of FedIRLS's noise recursion reuse each distinct Newton matrix's spectra
(:class:`privfedstat.theory.noise_maps.NewtonMaps`) and skip a floor the matrix already clears
(:func:`~privfedstat.theory.noise_maps.refloored`). Reference: the map ``I - eta N^-1 H`` with the spectrum of
``eta N^-1/2 H N^-1/2`` clamped, computed matrix by matrix with scipy (the square roots by ``sqrtm``)."""

import numpy as np
import scipy.linalg

from privfedstat.theory import noise
from privfedstat.theory.noise import IRLSNoise
from privfedstat.theory.noise_maps import NewtonMaps, floored, newton_map, refloored


def _spd(rng, shape, p):
    A = rng.normal(size=(*shape, p, p))
    return A @ np.swapaxes(A, -1, -2) / p + 0.2 * np.eye(p)


def _direct(N, H, eta, upper):
    """One matrix: ``N^-1/2 U (I - clip(eta mu, 0, upper)) U^T N^1/2`` with ``U mu U^T = N^-1/2 H N^-1/2``."""
    root = np.real(scipy.linalg.sqrtm(N))
    inv_root = np.linalg.inv(root)
    mu, U = scipy.linalg.eigh(inv_root @ H @ inv_root)
    return inv_root @ U @ np.diag(1.0 - np.clip(eta * mu, 0.0, upper)) @ U.T @ root


def test_cached_maps_equal_the_direct_formula_for_repeated_and_scaled_newton_matrices():
    """Stacked H (20 draws, p = 5), N, an equal copy of N, 2 N and 0.5 N with both clamps: each map matches the
    direct formula draw by draw, the copy reuses N's spectra (three entries for four matrices) and gives the same
    numbers as a fresh evaluation; a scaled N (whose S is S / c) is not mistaken for N."""
    rng = np.random.default_rng(0)
    H, N = _spd(rng, (20,), 5), _spd(rng, (), 5)
    maps = NewtonMaps(H, 0.9)
    for M in (N, N.copy(), 2.0 * N, 0.5 * N):
        for upper in (1.0, 2.0):
            got = maps(M, upper)
            assert np.array_equal(got, newton_map(M, H, 0.9, upper))
            want = np.stack([_direct(M, h, 0.9, upper) for h in H])
            assert np.max(np.abs(got - want)) < 1e-10 * np.max(np.abs(want))
    assert len(maps._spectra) == 3
    assert not np.allclose(maps(2.0 * N), maps(N))


def test_refloored_is_the_matrix_itself_where_the_floor_is_inactive_and_floored_otherwise():
    rng = np.random.default_rng(1)
    N, P = _spd(rng, (), 4), np.triu(rng.normal(size=(4, 4))) + 2 * np.eye(4)
    low, high = np.linalg.eigvalsh(N)[[0, -1]]
    assert refloored(N, 0.5 * low) is N
    assert np.array_equal(refloored(N, 0.5 * (low + high)), floored(N, 0.5 * (low + high)))
    P_inv = np.linalg.inv(P)
    M = P_inv.T @ N @ P_inv
    assert refloored(N, 0.5 * np.linalg.eigvalsh(M)[0], P) is N
    floor = np.mean(np.linalg.eigvalsh(M))
    assert np.allclose(refloored(N, floor, P), P.T @ floored(M, floor) @ P, rtol=1e-12, atol=0)
    stack = _spd(rng, (3,), 4)
    assert refloored(stack, 0.5 * np.min(np.linalg.eigvalsh(stack))) is stack


class _Uncached:
    """A fresh :func:`newton_map` at every call (no spectra kept)."""

    def __init__(self, H, step_size):
        self.H, self.step_size = H, step_size

    def __call__(self, N, upper=1.0):
        return newton_map(N, self.H, self.step_size, upper)


def _always_floored(N, floor, basis=None):
    if basis is None:
        return floored(N, floor)
    P_inv = np.linalg.inv(basis)
    return basis.T @ floored(P_inv.T @ N @ P_inv, floor) @ basis


def test_irls_covariance_equals_the_uncached_recursion(monkeypatch):
    """On a stack of 6 Hessians (rounds sharing floors, some inactive, in theta and in a basis, a combination and
    the overshoot): the recursion with shared spectra equals the one with fresh maps and floors at every round, and
    the stack equals the 2-D recursion at each of its Hessians."""
    rng = np.random.default_rng(2)
    p = 4
    last, P = _spd(rng, (), p), np.triu(rng.normal(size=(p, p))) * 0.3 + np.eye(p)
    lam = np.linalg.eigvalsh(last)
    model = IRLSNoise(np.array([0.3, 0.3, 0.1, 0.05, 0.05]), np.array([0.02, 0.02, 0.01, 0.004, 0.004]),
                      np.array([2 * lam[0], 2 * lam[0], 0.5 * lam[0], 2 * lam[0], 0.5 * lam[0]]), 1.0, last,
                      basis=P, basis_from=2, combination=np.array([0.0, 0.0, 0.0, 0.25, 0.75]))
    H = _spd(rng, (6,), p)
    cached = model.covariance(H, 0.05)
    each = np.stack([model.covariance(h, 0.05) for h in H])
    monkeypatch.setattr(noise, "NewtonMaps", _Uncached)
    monkeypatch.setattr(noise, "refloored", _always_floored)
    uncached = model.covariance(H, 0.05)
    assert np.max(np.abs(cached - uncached)) < 1e-12 * np.max(np.abs(uncached))
    assert np.max(np.abs(cached - each)) < 1e-12 * np.max(np.abs(each))
