"""The one safe Euclidean norm (privfedstat._linalg, its numba and torch twins) and a scan that keeps raw norms
off every privacy-critical path."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from privfedstat._linalg import clip_rows, row_norm_bounds, row_norms, safe_norm
from privfedstat.kernels.norm_nb import norm_bound

PACKAGE = Path(__file__).resolve().parents[1] / "privfedstat"
#: packages whose code clips gradients, Hessians or updates, or calibrates and accounts noise
CRITICAL = ("federation", "kernels", "privacy", "deep", "flower")
#: numpy twins of the kernels, used by the tests only (their mantissa/exponent split is scale-safe by construction)
NOT_RELEASED = {"kernels/reference.py"}
#: the safe norm itself and its twins: the only functions allowed to square-sum-root or call a library norm
SAFE = {("_linalg.py", "row_norms"), ("kernels/norm_nb.py", "norm_bound"), ("deep/per_sample.py", "sample_norms"),
        ("deep/per_sample.py", "_row_squares"), ("deep/per_sample.py", "_rescaled_norms"),
        ("deep/per_sample.py", "_vector_norms"), ("deep/per_sample.py", "_segment_norms"),
        ("deep/per_sample.py", "_joint_norms")}
NORM_CALLS = {"norm", "vector_norm", "matrix_norm", "hypot"}
SUMS = {"sum", "einsum", "dot", "inner", "vdot", "square", "tensordot"}

EXTREME = np.array([[1e-300, -1e-300], [1e-170, 1e-171], [1e300, -1e300], [1.5e308, 1.5e308], [0.0, 0.0],
                    [3.0, -4.0], [5e-324, 0.0], [1.0, 1e-320]])


def _exact(row) -> float:
    """||row|| to about 1e-16 relative by exact scaling with a power of two (reference)."""
    row = np.asarray(row, dtype=np.float64)
    m = np.max(np.abs(row))
    if m == 0:
        return 0.0
    e = math.frexp(m)[1]
    root = math.sqrt(math.fsum(float(v) ** 2 for v in np.ldexp(row, -e)))
    return math.inf if e > 1023 - math.frexp(root)[1] else math.ldexp(root, e)


def _name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _raw_norms(path: Path) -> list[str]:
    """Calls of a library norm, and square roots of sums, outside the :data:`SAFE` functions of ``path``."""
    rel = path.relative_to(PACKAGE).as_posix()
    found = []

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.ImportFrom) and "linalg" in (node.module or "") and \
                {a.name for a in node.names} & NORM_CALLS:
            found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
        if isinstance(node, ast.Call) and (rel, func) not in SAFE:
            name = _name(node.func)
            library = isinstance(node.func, ast.Attribute) or name != "norm"  # a bare norm(...) is caught at its import
            inner = [_name(n.func) for a in node.args for n in ast.walk(a) if isinstance(n, ast.Call)]
            ops = {type(n.op) for a in node.args for n in ast.walk(a) if isinstance(n, ast.BinOp)}
            sum_of_squares = bool(set(inner) & SUMS) or (ast.Pow in ops and ast.Sub not in ops)
            if (name in NORM_CALLS and library) or (name == "sqrt" and sum_of_squares):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(ast.parse(path.read_text()), "")
    return found


def test_no_raw_norm_on_privacy_critical_paths():
    """A norm in the clipping, calibration or accounting code must be the safe one: ``np.linalg.norm``,
    ``torch.linalg.vector_norm`` or ``sqrt(sum(x**2))`` underflow to 0 below ~1e-162 and overflow above ~1e154."""
    files = [PACKAGE / "_linalg.py"] + [p for pkg in CRITICAL for p in sorted((PACKAGE / pkg).rglob("*.py"))]
    found = [hit for p in files if p.relative_to(PACKAGE).as_posix() not in NOT_RELEASED for hit in _raw_norms(p)]
    assert not found, "raw norms (use privfedstat._linalg.row_norms / row_norm_bounds / clip_rows):\n" + "\n".join(found)


def test_scan_catches_raw_norms(tmp_path):
    """The scan flags each raw form (guards the guard)."""
    for code in ("np.linalg.norm(g, axis=1)", "torch.linalg.vector_norm(v)", "np.sqrt(np.sum(g ** 2, axis=1))",
                 "math.sqrt(s ** 2 + t ** 2)", "np.sqrt(np.einsum('ij,ij->i', g, g))", "v.norm()",
                 "norm(g)\nfrom numpy.linalg import norm"):
        path = PACKAGE / "federation" / "_scan_probe.py"
        try:
            path.write_text(f"def f(g, v, s, t):\n    return {code}\n")
            assert _raw_norms(path), code
        finally:
            path.unlink()


def test_row_norms_extreme_rows():
    n = row_norms(EXTREME)
    for row, v in zip(EXTREME, n):
        assert v == pytest.approx(_exact(row), rel=1e-15, abs=0)
    ordinary = np.random.default_rng(0).standard_normal((50, 7))
    np.testing.assert_array_equal(row_norms(ordinary), np.sqrt(np.einsum("ij,ij->i", ordinary, ordinary)))  # fast path


def test_row_norm_bounds_exceed_norms():
    b = row_norm_bounds(EXTREME[np.arange(len(EXTREME)) != 3])
    exact = np.array([_exact(r) for r in EXTREME if abs(r[0]) != 1.5e308])
    assert np.all(b >= exact) and np.all(b[exact > 1e-300] <= exact[exact > 1e-300] * (1 + 1e-14))
    assert row_norm_bounds(EXTREME[3:4])[0] == np.inf and safe_norm(1e-200 * np.ones((3, 3))) == pytest.approx(3e-200)


@njit
def _numba_bounds(X, out):
    for i in range(X.shape[0]):
        out[i] = norm_bound(X[i], X.shape[1])


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e-160, 1.0, 1e150, 1e200, 1e300])
def test_numba_norm_bound_is_the_numpy_twin(scale):
    X = scale * np.random.default_rng(1).standard_normal((40, 6))
    X[0] = 0.0
    out = np.empty(X.shape[0])
    _numba_bounds(X, out)
    np.testing.assert_allclose(out, row_norm_bounds(X), rtol=4e-16 * 8)
    exact = np.array([_exact(r) for r in X])
    assert np.all(out >= exact)


@pytest.mark.parametrize("bound", [1e-300, 1e-280, 1e-170, 0.5, 1e150, 1e300])
def test_clip_rows_bounds_every_row_and_zeroes_non_finite_ones(bound):
    delta = np.vstack([EXTREME, [[np.inf, 1.0], [np.nan, 0.0]]])
    out = clip_rows(delta, bound)
    assert all(_exact(r) <= bound for r in out)
    assert np.all(out[3] == 0) and np.all(out[-2:] == 0)  # norm past the largest double, non-finite
    if bound == 0.5:
        np.testing.assert_allclose(out[5], [0.3, -0.4], rtol=1e-11)
        assert out[6, 0] == 5e-324 and out[7, 0] == 1.0 * 0.5 / _exact(EXTREME[7]) or out[7, 0] <= 0.5
    np.testing.assert_array_equal(clip_rows(delta[:3], math.inf), delta[:3])
