"""Fixtures shared by the theory tests that fit estimators (imported by name; not a conftest, whose
module name would clash with tests/conftest.py under the default import mode)."""

import pytest


@pytest.fixture
def one_numba_thread():
    """Run the kernels on one thread: on a loaded 2-core machine threading slows small fits a lot."""
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(old)
