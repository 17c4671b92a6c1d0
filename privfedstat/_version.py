"""The package version: one definition, read by ``privfedstat.__version__``, the CLI and the build (pyproject.toml)."""

__version__ = "0.1.0"
