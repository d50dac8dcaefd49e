"""graphbatch's test suite. pytest imports this package before ``conftest`` and the test
modules: under pytest-xdist, each worker's thread pools get its share of the cores first
(`tests._threads`), before NumPy or torch is loaded and before any test starts a process."""

from ._threads import share_cores

share_cores()
