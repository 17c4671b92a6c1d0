"""Compute kernels: numba (``*_nb.py``) and their numpy twins (``reference``)."""
