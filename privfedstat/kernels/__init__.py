"""Compute kernels: numba (``*_nb.py``) and their numpy twins (``reference``).

The numba kernels compute every client's mean statistic (clipped gradients, Hessians, second
moments, losses) in one parallel pass over the concatenated rows, without forming per-sample
gradients, and their clipping holds for every finite input; the plain numpy twins are the slow,
obviously correct reference the tests compare them with.
"""
