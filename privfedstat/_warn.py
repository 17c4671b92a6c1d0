"""The package's one way to warn: at the user's line, not at the line inside privfedstat that noticed.

A fixed ``stacklevel`` is right for one call path only (``glm()`` adds frames that ``Estimator.fit`` does
not); :func:`warn` walks the stack instead, as pandas' ``find_stack_level`` does, and reports the warning at
the first frame outside the package. Library frames (the standard library, site-packages) that sit
between two of the package's frames -- a solver of scipy's calling back into privfedstat -- are passed
over too, so the warning lands where the user's code entered the package.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import warnings

__all__ = ["warn"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = tuple(
    {os.path.abspath(p) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
     if (p := sysconfig.get_paths().get(key))})


def _in_package(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def _in_library(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_LIBRARY_DIRS) and not _in_package(filename)


def _stack_level() -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called by this function's caller, report the first frame
    outside the package (passing over library frames that a package frame further out called)."""
    files = []
    frame = sys._getframe(1)
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    outermost = max((i for i, f in enumerate(files) if _in_package(f)), default=-1)
    for i, f in enumerate(files):
        if not _in_package(f) and not (i < outermost and _in_library(f)):
            return i + 1
    return len(files)


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` reported at the user's line (see :func:`_stack_level`)."""
    warnings.warn(message, category, stacklevel=_stack_level())
