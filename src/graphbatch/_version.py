"""The package version (also in ``pyproject.toml``), in a module of its own so that modules of
the package can read it without importing ``graphbatch`` itself."""

__version__ = "0.1.0"
