"""Fixtures shared by the deep tests (imported by name; not a conftest, whose module name would clash with
tests/conftest.py under the default import mode)."""

import pytest


@pytest.fixture
def one_torch_thread():
    """Run torch on one thread: on a loaded 2-core machine threading slows small networks a lot."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
