"""vecshm's version, in one place: the package metadata reads it from here (pyproject.toml)."""

__version__ = "0.1.0"
